"""Two hosts on one machine: network namespaces joined by a veth pair.

The GPU host (192.0.2.1, a documentation address that exists only inside these namespaces)
serves over TLS with a bearer token; the controller host (192.0.2.2) connects to it. A wrong
token, a missing token, a client trusting another CA and a plain-text client are each refused.
The server and every client are real processes: `python -m servicekit.probe serve|check`.

A run goes through too: `kforge serve sandbox` on the GPU host under mutual TLS and the token,
`kforge optimize --sandbox` on the controller host (its forge, capture and agent embedded); its
candidate is evaluated by that sandbox, and a wrong token or a missing CA fails the run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from forge_service.store import DB_FILE
from servicekit.devcerts import DevCertificates, make_certificates

GPU_ADDRESS = "192.0.2.1"
CONTROLLER_ADDRESS = "192.0.2.2"
PORT = 50053
SANDBOX_PORT = 50054
ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "forge_service" / "models" / "tiny_mlp.py"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@dataclass(frozen=True)
class Hosts:
    gpu: str
    controller: str


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    tag = f"kf{os.getpid()}"
    gpu, controller = f"{tag}-gpu", f"{tag}-ctl"
    probe = _ip("netns", "add", gpu)
    if probe.returncode != 0:
        pytest.skip(f"network namespaces are not permitted here: {probe.stderr.strip()}")
    try:
        steps = [
            ("netns", "add", controller),
            ("link", "add", f"{tag}a", "type", "veth", "peer", "name", f"{tag}b"),
            ("link", "set", f"{tag}a", "netns", gpu),
            ("link", "set", f"{tag}b", "netns", controller),
            ("-n", gpu, "addr", "add", f"{GPU_ADDRESS}/24", "dev", f"{tag}a"),
            ("-n", controller, "addr", "add", f"{CONTROLLER_ADDRESS}/24", "dev", f"{tag}b"),
            ("-n", gpu, "link", "set", f"{tag}a", "up"),
            ("-n", controller, "link", "set", f"{tag}b", "up"),
            ("-n", gpu, "link", "set", "lo", "up"),
            ("-n", controller, "link", "set", "lo", "up"),
        ]
        for step in steps:
            result = _ip(*step)
            assert result.returncode == 0, f"ip {' '.join(step)}: {result.stderr}"
        yield Hosts(gpu, controller)
    finally:
        for ns in (gpu, controller):
            _ip("netns", "del", ns)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return make_certificates(tmp_path_factory.mktemp("gpu-host"), hosts=["sandbox.test"], ips=[GPU_ADDRESS])


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> DevCertificates:
    return make_certificates(tmp_path_factory.mktemp("elsewhere"))


def _in(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, sys.executable, "-m", "servicekit.probe", *args]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KFORGE_TOKEN"}


@pytest.fixture(scope="module")
def gpu_server(hosts: Hosts, certs: DevCertificates) -> Iterator[str]:
    command = _in(
        hosts.gpu, "serve", f"{GPU_ADDRESS}:{PORT}", "--tls-cert", str(certs.server_cert),
        "--tls-key", str(certs.server_key), "--token-file", str(certs.token_file),
    )  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_clean_env())
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line, server.stderr.read() if server.stderr else "server exited"
        assert json.loads(line)["address"] == f"{GPU_ADDRESS}:{PORT}"
        yield f"{GPU_ADDRESS}:{PORT}"
    finally:
        server.terminate()  # SIGTERM: the graceful path
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _check(hosts: Hosts, address: str, *options: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    result = subprocess.run(
        _in(hosts.controller, "check", address, "--timeout", "30", *options),  # generous: CI may be loaded
        capture_output=True, text=True, timeout=60, env=env or _clean_env(),
    )  # fmt: skip
    report = json.loads(result.stdout) if result.stdout.strip() else {"stderr": result.stderr}
    return result.returncode, report


def test_controller_reaches_the_gpu_host_with_tls_and_token(hosts, gpu_server, certs):
    code, report = _check(hosts, gpu_server, "--tls-ca", str(certs.ca_cert), "--token-file", str(certs.token_file))
    assert code == 0, report
    assert report["health"] == "SERVING"
    assert "grpc.health.v1.Health" in report["services"]


def test_token_from_the_environment_works_too(hosts, gpu_server, certs):
    env = {**_clean_env(), "KFORGE_TOKEN": certs.token_file.read_text().strip()}
    code, report = _check(hosts, gpu_server, "--tls-ca", str(certs.ca_cert), env=env)
    assert code == 0, report


def test_wrong_token_is_refused(hosts, gpu_server, certs, tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token\n")
    wrong.chmod(0o600)
    code, report = _check(hosts, gpu_server, "--tls-ca", str(certs.ca_cert), "--token-file", str(wrong))
    assert (code, report["stage"], report["code"]) == (1, "reflection", "UNAUTHENTICATED"), report
    assert report["services"] == []


def test_missing_token_is_refused(hosts, gpu_server, certs):
    code, report = _check(hosts, gpu_server, "--tls-ca", str(certs.ca_cert))
    assert (code, report["stage"], report["code"]) == (1, "reflection", "UNAUTHENTICATED"), report


def test_client_trusting_another_ca_is_refused(hosts, gpu_server, certs, other_certs):
    foreign_ca = str(other_certs.ca_cert)
    code, report = _check(hosts, gpu_server, "--tls-ca", foreign_ca, "--token-file", str(certs.token_file))
    assert (code, report["stage"], report["code"]) == (1, "health", "UNAVAILABLE"), report


def test_plain_text_client_is_refused(hosts, gpu_server, certs):
    # The client itself refuses to send a token in the clear to another host ...
    code, report = _check(hosts, gpu_server, "--token-file", str(certs.token_file))
    assert code == 2 and "refusing a plain-text connection" in report["stderr"]
    # ... and when told to anyway, the TLS server refuses the plain-text connection.
    code, report = _check(hosts, gpu_server, "--insecure", "--token-file", str(certs.token_file))
    assert (code, report["stage"], report["code"]) == (1, "health", "UNAVAILABLE"), report


def test_gpu_host_refuses_to_listen_without_tls_and_token(hosts, certs):
    result = subprocess.run(
        _in(hosts.gpu, "serve", f"{GPU_ADDRESS}:0", "--token-file", str(certs.token_file)),
        capture_output=True, text=True, timeout=60, env=_clean_env(),
    )  # fmt: skip
    assert result.returncode == 2
    assert "refusing to listen on non-loopback address 192.0.2.1:0 without TLS" in result.stderr


# -- a run through the GPU host's sandbox -------------------------------------------------------
@dataclass(frozen=True)
class RemoteSandbox:
    address: str
    work_dir: Path


def _kforge_in(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, sys.executable, "-m", "forge_service.cli", *args]


def _wait_for_listening(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> str:
    """The address a `kforge serve` process reports once it listens; fails with its log if it dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if match := re.search(r"listening on (\S+:\d+)", log.read_text()):
            return match.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"the sandbox service did not start:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def gpu_sandbox(
    hosts: Hosts, certs: DevCertificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RemoteSandbox]:
    """`kforge serve sandbox` on the GPU host: mutual TLS (it requires client certificates) and the token."""
    work = tmp_path_factory.mktemp("gpu-sandbox")
    log = work / "serve.log"
    command = _kforge_in(
        hosts.gpu, "serve", "sandbox", "--address", f"{GPU_ADDRESS}:{SANDBOX_PORT}", "--backend", "cpu",
        "--work-dir", str(work / "state"), "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
        "--tls-ca", str(certs.ca_cert), "--token-file", str(certs.token_file),
    )  # fmt: skip
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env=_clean_env(), start_new_session=True
        )
    try:
        address = _wait_for_listening(proc, log, timeout_s=60)
        assert address == f"{GPU_ADDRESS}:{SANDBOX_PORT}"
        yield RemoteSandbox(address, work / "state")
    finally:
        proc.terminate()  # SIGTERM: the graceful path
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _client_options(certs: DevCertificates, token_file: Path) -> list[str]:
    return ["--tls-ca", str(certs.ca_cert), "--tls-cert", str(certs.client_cert), "--tls-key",
            str(certs.client_key), "--token-file", str(token_file)]  # fmt: skip


def _optimize(hosts: Hosts, sandbox: RemoteSandbox, runs_dir: Path, *options: str) -> tuple[int, dict, str]:
    """`kforge optimize` of the tiny model on the controller host against the GPU host's sandbox."""
    result = subprocess.run(
        _kforge_in(hosts.controller, "optimize", str(MODEL), "--backend", "cpu", "--budget", "1", "--max-cards", "1",
                   "--sandbox", sandbox.address, *options, "--json", "--runs-dir", str(runs_dir)),
        cwd=ROOT, capture_output=True, text=True, timeout=150, env=_clean_env(),
    )  # fmt: skip
    outcome = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, outcome, result.stderr


def _sandbox_ids_of_results(runs_dir: Path) -> list[str]:
    (db,) = runs_dir.glob(f"*/{DB_FILE}")
    con = sqlite3.connect(db)
    try:
        return [json.loads(r)["sandboxId"] for (r,) in con.execute("SELECT result_json FROM results")]
    finally:
        con.close()


def _sample_blobs(card_json: str) -> set[str]:
    samples = json.loads(card_json)["samples"]
    return {s[key] for s in samples for key in ("inputs_blob", "outputs_blob")}


def test_a_run_on_the_controller_evaluates_on_the_gpu_hosts_sandbox(hosts, gpu_sandbox, certs, tmp_path):
    runs_dir = tmp_path / "runs"
    code, outcome, stderr = _optimize(hosts, gpu_sandbox, runs_dir, *_client_options(certs, certs.token_file))
    assert code == 0, stderr[-3000:]
    run = outcome["run"]
    assert run["status"] == "done", run
    searched = [c for c in outcome["cards"] if c["status"] != "skipped"]
    assert searched and all(c.get("evaluations", 0) == 1 for c in searched), searched
    assert run["evaluations_done"] == len(searched)

    # Every result names the GPU host's sandbox, asked for its identity over the same TLS and token ...
    identity = subprocess.run(
        ["ip", "netns", "exec", hosts.controller, sys.executable, "-m", "tests.deploy.sandbox_device",
         gpu_sandbox.address, *_client_options(certs, certs.token_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env=_clean_env(),
    )  # fmt: skip
    assert identity.returncode == 0, identity.stderr[-2000:]
    sandbox_id = json.loads(identity.stdout)["sandbox_id"]
    assert _sandbox_ids_of_results(runs_dir) == [sandbox_id] * len(searched)
    # ... it holds the reference samples the controller uploaded, and no local sandbox was started.
    held = {p.name for p in (gpu_sandbox.work_dir / "blobs").iterdir()}
    for card in searched:
        assert _sample_blobs(card["card"]["card_json"]) <= held
    assert not (runs_dir / ".sandbox").exists()


def test_a_run_with_a_wrong_token_fails_unauthenticated(hosts, gpu_sandbox, certs, tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token\n")
    wrong.chmod(0o600)
    code, outcome, stderr = _optimize(hosts, gpu_sandbox, tmp_path / "runs", *_client_options(certs, wrong))
    assert code == 1, stderr[-3000:]
    run = outcome["run"]
    assert run["status"] == "failed" and run.get("evaluations_done", 0) == 0, run
    assert "UNAUTHENTICATED" in run["error"], run["error"]


def test_a_run_without_the_ca_refuses_to_send_its_token_in_the_clear(hosts, gpu_sandbox, certs, tmp_path):
    code, outcome, stderr = _optimize(hosts, gpu_sandbox, tmp_path / "runs", "--token-file", str(certs.token_file))
    assert code == 1, stderr[-3000:]
    run = outcome["run"]
    assert run["status"] == "failed" and run.get("evaluations_done", 0) == 0, run
    assert f"refusing a plain-text connection to non-loopback address {gpu_sandbox.address}" in run["error"]
