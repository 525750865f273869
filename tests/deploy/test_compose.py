"""The compose file is valid Compose (strict compose-spec parser) and wires the services safely."""

import argparse
from pathlib import Path

import pytest
from compose_spec import PyOptions

from forge_service.cli import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERVICES = {"capture": 50051, "agent": 50052, "sandbox": 50053, "forge": 50050}


def _load(text: str) -> dict:
    compose = PyOptions(apply_merge=True).from_yaml(text)
    compose.validate()
    return compose.to_dict()


@pytest.fixture(scope="module")
def compose() -> dict:
    return _load((DEPLOY / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def kforge() -> argparse.ArgumentParser:
    return build_parser()


def _volume_targets(service: dict) -> dict[str, str]:
    """Volume name (or host path) -> where the service sees it, in either Compose syntax."""
    targets = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            targets[volume["source"]] = volume["target"]
        else:
            source, target = str(volume).split(":")[:2]
            targets[source] = target
    return targets


def test_the_parser_rejects_invalid_compose():
    with pytest.raises(ValueError, match="imagee"):
        _load("services:\n  forge:\n    imagee: kernel-forge\n")
    with pytest.raises(ValueError, match="duration `often`"):
        _load("services:\n  forge:\n    image: x\n    healthcheck:\n      interval: often\n")


def test_four_services_built_from_the_one_dockerfile(compose):
    assert set(compose["services"]) == set(SERVICES)
    for service in compose["services"].values():
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert (DEPLOY.parent / service["build"]["dockerfile"]).is_file()


@pytest.mark.parametrize(("name", "port"), SERVICES.items())
def test_each_service_serves_with_tls_and_a_token(compose, name, port):
    service = compose["services"][name]
    command = service["command"]
    assert command[:3] == ["serve", name, f"--address=0.0.0.0:{port}"]
    options = dict(c.removeprefix("--").split("=", 1) for c in command[2:])
    secrets = set(service["secrets"])
    for option, secret in (
        ("tls-cert", "kforge_tls_cert"), ("tls-key", "kforge_tls_key"),
        ("tls-ca", "kforge_ca"), ("token-file", "kforge_token"),
    ):  # fmt: skip
        assert options[option] == f"/run/secrets/{secret}" and secret in secrets
    assert "insecure" not in options
    assert f"localhost:{port}" in service["healthcheck"]["test"]


def test_run_store_is_a_volume_and_only_forge_is_published_on_loopback(compose):
    forge = compose["services"]["forge"]
    assert any(str(v).startswith("runs:") or (isinstance(v, dict) and v.get("source") == "runs")
               for v in forge["volumes"])
    assert "runs" in compose["volumes"]
    assert "--runs-dir=/var/lib/kforge/runs" in forge["command"]
    published = {name: s.get("ports") for name, s in compose["services"].items() if s.get("ports")}
    assert list(published) == ["forge"]
    assert all(str(p).startswith("127.0.0.1:") or (isinstance(p, dict) and p.get("host_ip") == "127.0.0.1")
               for p in published["forge"])


def test_sandbox_reserves_the_gpus(compose):
    (device,) = compose["services"]["sandbox"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and device["driver"] == "nvidia"


def test_dockerfile_runs_kforge_as_an_unprivileged_user():
    lines = [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines()]
    assert 'ENTRYPOINT ["kforge"]' in lines
    assert "USER kforge" in lines
    assert "STOPSIGNAL SIGTERM" in lines
    assert (DEPLOY / "Dockerfile.dockerignore").read_text().count(".venv") == 1


@pytest.mark.parametrize("name", SERVICES)
def test_each_command_is_one_kforge_accepts(compose, kforge, name):
    args = kforge.parse_args(compose["services"][name]["command"])
    assert (args.command, args.service) == ("serve", name)


def test_captures_are_kept_on_their_volume(compose, kforge):
    """The root file system is read-only: the capture service must write where its volume is."""
    capture = compose["services"]["capture"]
    args = kforge.parse_args(capture["command"])
    assert str(args.work_dir) == _volume_targets(capture)["captures"] == "/var/lib/kforge/captures"
    assert "captures" in compose["volumes"]
