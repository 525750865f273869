"""Two hosts on one machine: network namespaces joined by a veth pair.

The GPU host (192.0.2.1, a documentation address that exists only inside these namespaces)
serves over TLS with a bearer token; the controller host (192.0.2.2) connects to it. A wrong
token, a missing token, a client trusting another CA and a plain-text client are each refused.
The server and every client are real processes: `python -m servicekit.probe serve|check`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from servicekit.devcerts import DevCertificates, make_certificates

GPU_ADDRESS = "192.0.2.1"
CONTROLLER_ADDRESS = "192.0.2.2"
PORT = 50053


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
