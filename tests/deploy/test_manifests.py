"""Every Kubernetes manifest parses and matches the Kubernetes schema (strict: no unknown fields)."""

import argparse
import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from forge_service.cli import build_parser

K8S_DIR = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"
CREDENTIAL_KEYS = {"token", "ca.crt", "tls.crt", "tls.key"}
OPTION_KEYS = (("tls-cert", "tls.crt"), ("tls-key", "tls.key"), ("tls-ca", "ca.crt"), ("token-file", "token"))


def _documents() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return docs


DOCUMENTS = _documents()
RESOURCES = [(name, doc) for name, doc in DOCUMENTS if doc["kind"] != "Kustomization"]


def _by_kind(kind: str, name: str) -> dict:
    return next(doc for _, doc in RESOURCES if doc["kind"] == kind and doc["metadata"]["name"] == name)


def _container(workload: dict) -> dict:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


WORKLOADS = [doc for _, doc in RESOURCES if doc["kind"] in ("DaemonSet", "StatefulSet", "Deployment")]


@pytest.fixture(scope="module")
def kforge() -> argparse.ArgumentParser:
    return build_parser()


@pytest.mark.parametrize(("file", "doc"), RESOURCES, ids=[f"{f}:{d['kind']}" for f, d in RESOURCES])
def test_resource_matches_the_kubernetes_schema(file, doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_catches_mistakes():
    broken = copy.deepcopy(_by_kind("DaemonSet", "kforge-sandbox"))
    _container(broken)["resource"] = _container(broken).pop("resources")  # a typo kubectl would reject
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest():
    (kustomization,) = [doc for _, doc in DOCUMENTS if doc["kind"] == "Kustomization"]
    manifests = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


def test_sandbox_is_a_daemonset_on_gpu_nodes_requesting_a_gpu():
    sandbox = _by_kind("DaemonSet", "kforge-sandbox")
    assert _container(sandbox)["resources"]["limits"]["nvidia.com/gpu"] >= 1
    pod = sandbox["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])


def test_forge_is_a_statefulset_with_its_run_store_on_a_volume():
    forge = _by_kind("StatefulSet", "kforge-forge")
    (claim,) = forge["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in _container(forge)["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/var/lib/kforge/runs"
    assert "--runs-dir=/var/lib/kforge/runs" in _container(forge)["args"]


@pytest.mark.parametrize("workload", WORKLOADS, ids=[w["metadata"]["name"] for w in WORKLOADS])
def test_each_container_runs_a_command_kforge_accepts(kforge, workload):
    args = kforge.parse_args(_container(workload)["args"])
    assert args.command == "serve" and workload["metadata"]["name"] == f"kforge-{args.service}"


def test_captures_are_kept_on_their_volume(kforge):
    """The root file system is read-only: the capture service must write where its volume is."""
    capture = _container(_by_kind("Deployment", "kforge-capture"))
    mounts = {m["name"]: m["mountPath"] for m in capture["volumeMounts"]}
    assert str(kforge.parse_args(capture["args"]).work_dir) == mounts["captures"] == "/var/lib/kforge/captures"


def test_agent_and_capture_are_deployments():
    assert _by_kind("Deployment", "kforge-agent") and _by_kind("Deployment", "kforge-capture")


@pytest.mark.parametrize("kind", ["DaemonSet", "StatefulSet", "Deployment"])
def test_every_service_listens_with_tls_and_a_token_from_the_secret(kind):
    secret = _by_kind("Secret", "kforge-credentials")
    assert set(secret["stringData"]) == CREDENTIAL_KEYS
    for _, doc in RESOURCES:
        if doc["kind"] != kind:
            continue
        container = _container(doc)
        args = container["args"]
        assert args[0] == "serve" and args[2].startswith("--address=0.0.0.0:")
        options = dict(a.removeprefix("--").split("=", 1) for a in args[2:])
        credentials = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["credentials"]
        for option, key in OPTION_KEYS:
            assert options[option] == f"{credentials}/{key}"
        assert "insecure" not in options
        volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
        assert volumes["credentials"]["secret"]["secretName"] == "kforge-credentials"
        port = int(options["address"].rsplit(":", 1)[1])
        service = _by_kind("Service", doc["metadata"]["name"])
        assert service["spec"]["ports"][0]["port"] == port
        assert service["spec"]["selector"] == doc["spec"]["selector"]["matchLabels"]
        assert container["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_forge_reaches_the_other_services_by_their_service_names():
    forge = _container(_by_kind("StatefulSet", "kforge-forge"))
    args = dict(a.removeprefix("--").split("=", 1) for a in forge["args"][2:])
    for option, name in (("capture", "kforge-capture"), ("agent", "kforge-agent"), ("sandbox", "kforge-sandbox")):
        host, port = args[option].rsplit(":", 1)
        assert host == f"{name}.kforge.svc"
        assert _by_kind("Service", name)["spec"]["ports"][0]["port"] == int(port)


def test_empty_secret_fails_closed(tmp_path):
    """The shipped Secret is empty on purpose: a server given it refuses to start."""
    from servicekit.cli_options import read_token_file
    from servicekit.errors import ConfigurationError

    token = tmp_path / "token"
    token.write_text(_by_kind("Secret", "kforge-credentials")["stringData"]["token"])
    with pytest.raises(ConfigurationError, match="is empty"):
        read_token_file(token)
