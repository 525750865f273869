"""A candidate's result as the run store keeps it: the JSON of its wire message, without protobuf.

Runs of earlier versions stored each result as ``json_format.MessageToJson`` of
``kernel_forge.common.v1.CandidateResult`` (the artifact cleared: the store keeps it as a blob),
and they must still load. So the store keeps that form, written and read here from the domain
type alone, and the store imports no generated code: field names in lowerCamelCase (snake_case is
read too), the status by name, an int64 as a string, NaN and infinities as strings, a field at
its zero value left out except a figure the run measured (zero included), the derived ``speedup``
written for older readers and ignored on reading. ``tests/forge_service/test_stored_result.py``
checks both directions against ``json_format``.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import Any

from kforge_domain.result import CandidateResult
from kforge_domain.verdict import FIGURE_NAMES, CandidateStatus, RunFigures, verdict_of

#: Evidence fields of the result the JSON holds (the artifact is a blob of its own).
_EVIDENCE = {f.name: f.default for f in fields(CandidateResult) if f.name not in ("candidate_id", "verdict",
                                                                                   "artifact")}
#: Each figure's value when not measured: None for an optional one, 0 for ``workspace_bytes``.
_FIGURE_DEFAULTS = {f.name: f.default for f in fields(RunFigures) if f.name in FIGURE_NAMES}
_DERIVED = "speedup"


def result_to_json(result: CandidateResult) -> str:
    """The stored JSON of ``result`` (without its artifact)."""
    values: dict[str, Any] = {"candidate_id": result.candidate_id, "status": result.status.value}
    figures = result.figures
    if figures is not None:
        values |= {name: getattr(figures, name) for name in FIGURE_NAMES} | {_DERIVED: figures.speedup}
    values |= {"error_message": result.error_message} | {name: getattr(result, name) for name in _EVIDENCE}
    out = {}
    for name, value in values.items():
        optional = _FIGURE_DEFAULTS.get(name, 0) is None or name == _DERIVED
        if value is None or (not optional and not value):
            continue  # not measured, or a plain field at its zero value
        out[_json_name(name)] = _to_json_value(value)
    return json.dumps(out, indent=2)


def result_from_json(text: str) -> CandidateResult:
    """The result a stored JSON holds. Raises ValueError for one without a (known) status."""
    raw = json.loads(text)
    values = {_field_name(key): value for key, value in raw.items()}
    if "status" not in values:
        raise ValueError("a stored result has no status")
    measured = {name: _from_json_value(values[name], default) for name, default in _FIGURE_DEFAULTS.items()
                if name in values}
    measured = {name: value for name, value in measured.items() if value != _FIGURE_DEFAULTS[name]}
    verdict = verdict_of(CandidateStatus(values["status"]), str(values.get("error_message", "")), measured)
    evidence = {name: _from_json_value(values[name], default) for name, default in _EVIDENCE.items()
                if name in values}
    return CandidateResult(candidate_id=str(values.get("candidate_id", "")), verdict=verdict, **evidence)


def _json_name(name: str) -> str:
    """protoc's JSON name of a field: ``rel_l2_error`` is ``relL2Error``."""
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


_FIELD_NAMES = {_json_name(n): n for n in ("candidate_id", "status", "error_message", *_FIGURE_DEFAULTS, *_EVIDENCE)}


def _field_name(key: str) -> str:
    return _FIELD_NAMES.get(key, key)


def _to_json_value(value: object) -> object:
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return str(value)  # proto3 JSON writes an int64 as a string
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _from_json_value(value: object, default: object) -> Any:
    """``value`` as the type of the field whose default is ``default`` (None: an optional float)."""
    if isinstance(default, bool):
        return bool(value)
    if isinstance(default, int):
        return int(value)  # type: ignore[call-overload]
    if isinstance(default, str):
        return str(value)
    return float(value)  # type: ignore[arg-type]  # a number, or "NaN" / "Infinity" / "-Infinity"
