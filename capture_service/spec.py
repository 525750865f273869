"""MODEL_SPEC: which model to capture and on what inputs.

Two forms: a ``.py`` file defining ``get_model()`` and ``get_inputs()``, or
``package.module:factory`` naming a callable that returns ``(model, inputs)``. Inputs may be a
tensor, a tuple/list (positional arguments) or a dict (keyword arguments).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import site
import sys
import sysconfig
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from capture_service.errors import InputsError, InvalidModelSpec


@dataclass
class LoadedModel:
    """A model and the positional and keyword arguments of its forward."""

    model: torch.nn.Module
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def describe_exception(exc: BaseException) -> str:
    """``ValueError: boom (model.py:12 in get_inputs)``: the error and where the user's code raised it."""
    if isinstance(exc, SyntaxError) and exc.filename is not None and exc.lineno is not None:
        where = f" ({Path(exc.filename).name}:{exc.lineno})"
        message = _first_line(exc.msg or "")
    else:
        frame = _blamed_frame(traceback.extract_tb(exc.__traceback__))
        where = f" ({Path(frame.filename).name}:{frame.lineno} in {frame.name})" if frame else ""
        message = _first_line(str(exc))
    return f"{type(exc).__name__}: {message}{where}" if message else f"{type(exc).__name__}{where}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


_OWN_DIR = Path(__file__).resolve().parent
_TORCH_DIR = Path(torch.__file__).resolve().parent
_SITE_DIRS = tuple({Path(p).resolve() for p in (*site.getsitepackages(), sysconfig.get_paths()["purelib"])})
_STDLIB_DIRS = tuple({Path(sysconfig.get_paths()[n]).resolve() for n in ("stdlib", "platstdlib")})
# Where a failure is best shown, most telling first: the user's code, a library it calls
# (transformers, diffusers), torch's modules (which layer failed); never capture's own frames.
_BLAME_ORDER = ("user", "library", "torch.nn")


def _blamed_frame(frames: traceback.StackSummary) -> traceback.FrameSummary | None:
    """The deepest frame of the most telling kind, else the last frame.

    The last frame alone is usually inside torch's dispatch or importlib, which says nothing
    about which line of the model failed.
    """
    kinds = [_frame_kind(f.filename) for f in frames]
    for wanted in _BLAME_ORDER:
        found = [f for f, kind in zip(frames, kinds, strict=True) if kind == wanted]
        if found:
            return found[-1]
    return frames[-1] if frames else None


def _frame_kind(filename: str) -> str:
    """``user``, ``library``, ``torch.nn``, ``torch``, ``stdlib``, ``capture`` or ``other``."""
    if filename.startswith("<"):
        return "other"  # <frozen importlib._bootstrap>, <string>
    path = Path(filename).resolve()
    if path.is_relative_to(_OWN_DIR):
        return "capture"
    if path.is_relative_to(_TORCH_DIR):
        return "torch.nn" if path.is_relative_to(_TORCH_DIR / "nn") else "torch"
    if any(path.is_relative_to(d) for d in _SITE_DIRS):
        return "library"
    if any(path.is_relative_to(d) for d in _STDLIB_DIRS):
        return "stdlib"
    return "user"


def load_model_spec(spec: str) -> LoadedModel:
    """Import the spec and build the model and its inputs (this runs user code)."""
    if spec.endswith(".py") or Path(spec).is_file():
        return _load_file(Path(spec))
    if ":" in spec:
        return _load_factory(spec)
    raise InvalidModelSpec(
        f"MODEL_SPEC {spec!r} is neither a .py file (defining get_model() and get_inputs()) "
        "nor package.module:factory"
    )


def _load_file(path: Path) -> LoadedModel:
    if not path.is_file():
        raise InvalidModelSpec(f"model file {path} does not exist")
    path = path.resolve()
    try:
        module = _import_file(path)
    except Exception as exc:
        raise InvalidModelSpec(f"model file {path.name} failed to import: {describe_exception(exc)}") from exc
    get_model = _function(module, "get_model", path.name)
    get_inputs = _function(module, "get_inputs", path.name)
    model = _call_get_model(get_model, f"{path.name}: get_model()")
    try:
        inputs = get_inputs()
    except Exception as exc:
        raise InputsError(f"{path.name}: get_inputs() raised {describe_exception(exc)}") from exc
    return _with_inputs(model, inputs, f"{path.name}: get_inputs()")


def _import_file(path: Path) -> ModuleType:
    """Import a model file under the name Python would give it from its package root.

    ``examples/small_cnn.py`` inside the ``examples`` package becomes ``examples.small_cnn``, so
    module cards name classes as the user's own imports do (the class name is part of a module
    card's key). A file that cannot be imported by such a name gets a private one.
    """
    parts, root = [path.stem], path.parent
    while (root / "__init__.py").is_file() and root.name.isidentifier():
        parts.insert(0, root.name)
        root = root.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    name = ".".join(parts)
    if all(p.isidentifier() for p in parts):
        found = importlib.util.find_spec(name)
        if found is not None and found.origin is not None and Path(found.origin).resolve() == path:
            return importlib.import_module(name)
    private = f"kforge_model_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    module_spec = importlib.util.spec_from_file_location(private, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[private] = module
    module_spec.loader.exec_module(module)
    return module


def _load_factory(spec: str) -> LoadedModel:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidModelSpec(f"MODEL_SPEC {spec!r} must be package.module:factory")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise InvalidModelSpec(f"module {module_name} failed to import: {describe_exception(exc)}") from exc
    factory = _function(module, attr, module_name)
    try:
        built = factory()
    except Exception as exc:
        raise InvalidModelSpec(f"{spec}() raised {describe_exception(exc)}") from exc
    if not isinstance(built, tuple) or len(built) != 2:
        raise InvalidModelSpec(f"{spec}() must return (model, inputs), got {type(built).__name__}")
    model, inputs = built
    if not isinstance(model, torch.nn.Module):
        raise InvalidModelSpec(f"{spec}() returned a {type(model).__name__} as model, not a torch.nn.Module")
    return _with_inputs(model, inputs, f"{spec}()")


def _function(module: object, name: str, where: str) -> Callable[[], Any]:
    found = getattr(module, name, None)
    if not callable(found):
        raise InvalidModelSpec(f"{where} defines no function {name}()")
    return found


def _call_get_model(get_model: Callable[[], Any], what: str) -> torch.nn.Module:
    try:
        model = get_model()
    except Exception as exc:
        raise InvalidModelSpec(f"{what} raised {describe_exception(exc)}") from exc
    if not isinstance(model, torch.nn.Module):
        raise InvalidModelSpec(f"{what} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _with_inputs(model: torch.nn.Module, inputs: object, what: str) -> LoadedModel:
    if isinstance(inputs, torch.Tensor):
        return LoadedModel(model, (inputs,), {})
    if isinstance(inputs, (tuple, list)):
        return LoadedModel(model, tuple(inputs), {})
    if isinstance(inputs, dict):
        bad = [k for k in inputs if not isinstance(k, str)]
        if bad:
            raise InputsError(f"{what} returned a dict with non-string keys {bad!r}")
        return LoadedModel(model, (), dict(inputs))
    raise InputsError(
        f"{what} returned a {type(inputs).__name__}; expected a tensor, a tuple/list of arguments "
        "or a dict of keyword arguments"
    )
