"""The layering of docs/architecture.md, checked on the source.

``kforge_domain`` is the shared domain: it imports no gRPC, no protobuf, no generated
``kernel_forge`` code and no service, and all of it but the card imports the standard library
alone. Every service takes the card from ``kforge_domain.card``; ``capture_service.cards`` is a
re-export kept only for the modules listed in ``CARD_SHIM_USERS`` until they move. The packager
imports no service, not even inside a function: it reads a run bundle, not the forge's store.
``kforge_torch`` holds what capture and the sandbox must do alike with torch (how a call is
timed): it imports torch, the standard library and ``kforge_domain`` alone, and the domain does
not import it. Capture and the sandbox import no other service, so what they share lives in
one of these homes.
The forge's store, queries and search take and give domain types and import no generated proto code
(nor gRPC, nor the converters); within the forge only its gRPC edges convert (``FORGE_EDGES``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOMAIN = ROOT / "kforge_domain"
SHARED_TORCH = ROOT / "kforge_torch"
SERVICES = {"capture_service", "agent_service", "gpu_sandbox_service", "forge_service", "ui"}
FORBIDDEN_IN_DOMAIN = {"grpc", "google", "kernel_forge", "servicekit", "capture_service", "agent_service",
                       "gpu_sandbox_service", "forge_service", "search_core", "packager", "ui", "torch", "kforge_torch"}
NEEDS_PYDANTIC = {"card.py"}
SERVICE_TREES = ("servicekit", "capture_service", "agent_service", "gpu_sandbox_service", "forge_service",
                 "packager", "ui", "bench", "tests", "examples", "scripts")
CARD_SHIM = "capture_service.cards"
CARD_SHIM_USERS = {"agent_service/offline/rowwise.py", "agent_service/offline/catalog.py"}
CARD_SHIM_USER_DIRS = ("agent_service/offline/rowwise/",)
PROTO_FREE_FORGE = ("forge_service/store.py", "forge_service/stored_result.py", "forge_service/queries.py",
                    "forge_service/card_search.py", "forge_service/scheduler.py", "forge_service/tree_log.py",
                    "forge_service/kernel_cache.py")
WIRE = {"grpc", "google", "kernel_forge"}
CONVERTERS = "servicekit.convert"
#: The forge's modules that convert: the servicer and the clients (which take the agent's and the
#: sandbox's requests as domain types).
FORGE_EDGES = {"forge_service/servicer.py", "forge_service/clients.py"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute names (relative imports resolved within its package)."""
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(path.relative_to(ROOT).parent.parts)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_the_domain_imports_no_grpc_proto_or_service() -> None:
    for path in sorted(DOMAIN.glob("*.py")):
        tops = {name.split(".")[0] for name in _imports(path)}
        assert not tops & FORBIDDEN_IN_DOMAIN, f"{path.name} imports {sorted(tops & FORBIDDEN_IN_DOMAIN)}"
        allowed = {"kforge_domain", "__future__", *sys.stdlib_module_names}
        if path.name in NEEDS_PYDANTIC:
            allowed.add("pydantic")
        assert tops <= allowed, f"{path.name} imports {sorted(tops - allowed)}"


def _loaded_by(modules: list[str], watched: set[str]) -> set[str]:
    """Which of the top-level packages ``watched`` a fresh interpreter loads to import ``modules``."""
    code = f"import sys, {', '.join(modules)}; print(sorted({{m.split('.')[0] for m in sys.modules}}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(ast.literal_eval(out.stdout.strip())) & watched


def test_importing_the_domain_loads_no_grpc_proto_or_torch() -> None:
    domain = [f"kforge_domain.{p.stem}" for p in sorted(DOMAIN.glob("*.py")) if p.stem != "__init__"]
    assert not _loaded_by(domain, {"grpc", "google", "kernel_forge", "torch"})


def test_importing_the_domain_but_the_card_loads_no_pydantic() -> None:
    """A module that names the card in its types imports it for type checking only."""
    domain = [f"kforge_domain.{p.stem}" for p in sorted(DOMAIN.glob("*.py"))
              if p.stem != "__init__" and p.name not in NEEDS_PYDANTIC]
    assert not _loaded_by(domain, {"pydantic"})


def test_the_shared_torch_code_imports_torch_the_domain_and_the_standard_library_alone() -> None:
    allowed = {"kforge_torch", "kforge_domain", "torch", "__future__", *sys.stdlib_module_names}
    for path in sorted(SHARED_TORCH.glob("*.py")):
        tops = {name.split(".")[0] for name in _imports(path)}
        assert tops <= allowed, f"kforge_torch/{path.name} imports {sorted(tops - allowed)}"


def test_importing_the_shared_torch_code_loads_no_grpc_proto_pydantic_or_service() -> None:
    shared = [f"kforge_torch.{p.stem}" for p in sorted(SHARED_TORCH.glob("*.py")) if p.stem != "__init__"]
    assert shared
    assert not _loaded_by(shared, {"grpc", "google", "kernel_forge", "pydantic", "servicekit", "packager", *SERVICES})


def test_capture_and_the_sandbox_import_no_other_service() -> None:
    offenders = {}
    for service in ("capture_service", "gpu_sandbox_service"):
        for path in sorted((ROOT / service).rglob("*.py")):
            tops = {name.split(".")[0] for name in _imports(path)} & (SERVICES - {service})
            if tops:
                offenders[path.relative_to(ROOT).as_posix()] = sorted(tops)
    assert not offenders, f"share through kforge_domain or kforge_torch, not another service: {offenders}"


def test_the_packager_runtime_stays_torch_and_standard_library() -> None:
    watched = {"pydantic", "grpc", "google", "kernel_forge", "servicekit", "capture_service", "forge_service",
               "safetensors"}
    assert not _loaded_by(["packager.runtime"], watched)


def test_the_packager_imports_no_service() -> None:
    offenders = {}
    for path in sorted((ROOT / "packager").rglob("*.py")):
        tops = {name.split(".")[0] for name in _imports(path)} & SERVICES
        if tops:
            offenders[path.relative_to(ROOT).as_posix()] = sorted(tops)
    assert not offenders, f"the packager imports services: {offenders}"


def test_services_take_the_card_from_the_domain() -> None:
    offenders = []
    for tree in SERVICE_TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "capture_service/cards.py" or rel in CARD_SHIM_USERS or rel.startswith(CARD_SHIM_USER_DIRS):
                continue
            if any(name == CARD_SHIM or name.startswith(CARD_SHIM + ".") for name in _imports(path)):
                offenders.append(rel)
    assert not offenders, f"import the card from kforge_domain.card: {offenders}"


def test_only_the_domain_defines_the_card() -> None:
    for tree in SERVICE_TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            classes = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)}
            assert not classes & {"OperatorCard", "CardSet"}, f"{path.relative_to(ROOT)} defines a card class"


def test_forge_s_store_queries_and_search_import_no_proto_code() -> None:
    for rel in PROTO_FREE_FORGE:
        names = _imports(ROOT / rel)
        tops = {name.split(".")[0] for name in names}
        assert not tops & WIRE, f"{rel} imports {sorted(tops & WIRE)}"
        assert not any(n == CONVERTERS or n.startswith(CONVERTERS + ".") for n in names), f"{rel} converts"


def test_importing_forge_s_store_loads_no_grpc_or_proto() -> None:
    assert not _loaded_by(["forge_service.store"], WIRE)


def test_only_forge_s_grpc_edges_convert() -> None:
    converting = {
        path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "forge_service").rglob("*.py"))
        if any(n == CONVERTERS or n.startswith(CONVERTERS + ".") for n in _imports(path))
    }
    assert converting <= FORGE_EDGES, f"convert at the gRPC edges only: {sorted(converting - FORGE_EDGES)}"
