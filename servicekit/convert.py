"""Domain types to and from proto: one converter pair per type that crosses gRPC.

The card travels as ``kernel_forge.common.v1.OperatorCard``: its full JSON in ``card_json`` (what
a receiver reads) and a few typed fields repeated for listings. A request that carries only the
JSON (``ProposeRequest.card_json``, ``EvaluateRequest.card_json``) is read by
:func:`card_from_json`. Malformed input raises :class:`servicekit.errors.InvalidArgument`, so the
peer gets ``INVALID_ARGUMENT`` naming the field.

The verdict travels in ``kernel_forge.common.v1.CandidateResult``: its status, message and, for a
run, each figure (unset when not measured) and the derived ``speedup``. A ``COMPILE_ERROR``, or a
``REJECTED`` that carries no figure, reads back as a :class:`~kforge_domain.verdict.BuildFailure`
(a run that was rejected carries its timing). Stored results of earlier versions read back the same.
The evidence around the verdict (:class:`~kforge_domain.result.CandidateResult`) fills the other
fields of that message, each of the same name. ``Cost`` and ``LlmExchange`` map field for field.

What the forge asks of the agent and the sandbox (:class:`~kforge_domain.propose_request.ProposeRequest`,
:class:`~kforge_domain.evaluate_request.EvaluateRequest`, with the
:class:`~kforge_domain.device.DeviceInfo` it passes on) maps field for field too, but for the card
(``card_json``) and knob sets (``*knobs_json``, JSON with sorted keys); ``None`` is an unset field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any, cast

from google.protobuf.message import Message
from pydantic import ValidationError

from kernel_forge.agent.v1 import messages_pb2 as agent_pb2
from kernel_forge.common.v1 import types_pb2
from kernel_forge.sandbox.v1 import messages_pb2 as sandbox_pb2
from kforge_domain.card import OperatorCard
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.device import DeviceInfo
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.floor import BandwidthAtSize
from kforge_domain.propose_request import Feedback, Knobs, ParentCandidate, ProposeRequest, Revision
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import FIGURE_NAMES, CandidateStatus, RunFigures, Verdict, verdict_of
from servicekit.errors import InvalidArgument


def card_to_proto(card: OperatorCard) -> types_pb2.OperatorCard:
    """The wire form of ``card``: its JSON plus the fields a listing shows (no spread: one not recorded)."""
    return types_pb2.OperatorCard(
        id=card.id, kind=card.kind, op=card.op, time_share=card.time_share, eager_us=card.eager_us or 0.0,
        eager_spread_us=card.eager_spread_us, call_count=card.call_count, optimisable=card.optimisable,
        compiled_only=card.compiled_only, card_json=card.to_json(),
    )


def card_from_proto(message: types_pb2.OperatorCard, field: str = "card.card_json") -> OperatorCard:
    """The card a wire message carries (read from its ``card_json``)."""
    return card_from_json(message.card_json, field)


def card_from_json(text: str, field: str = "card_json") -> OperatorCard:
    """The card of a message's JSON field ``field``; :class:`InvalidArgument` naming the field and
    the first problem when it is empty or not a valid card."""
    if not text:
        raise InvalidArgument(f"{field} is empty")
    try:
        return OperatorCard.from_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidArgument(f"{field} is not a valid operator card: {first['msg']}"
                              + (f" at {where}" if where else "")) from exc


def status_to_proto(status: CandidateStatus) -> types_pb2.CandidateStatus:
    """The wire value of ``status`` (the enums share their names)."""
    return cast("types_pb2.CandidateStatus", types_pb2.CandidateStatus.Value(status.value))


def status_from_proto(value: types_pb2.CandidateStatus, field: str = "result.status") -> CandidateStatus:
    """The status a wire value names; :class:`InvalidArgument` naming ``field`` when it is unset."""
    if value == types_pb2.CANDIDATE_STATUS_UNSPECIFIED:
        raise InvalidArgument(f"{field} is unset")
    return CandidateStatus(types_pb2.CandidateStatus.Name(value))


def verdict_to_proto(verdict: Verdict) -> types_pb2.CandidateResult:
    """A ``CandidateResult`` holding only ``verdict`` (merge the evaluation's evidence into it)."""
    message = types_pb2.CandidateResult(status=status_to_proto(verdict.status), error_message=verdict.error_message)
    if isinstance(verdict, RunFigures):
        for name in FIGURE_NAMES:
            value = getattr(verdict, name)
            if value is not None:
                setattr(message, name, value)
        if verdict.speedup is not None:
            message.speedup = verdict.speedup
    return message


def verdict_from_proto(message: types_pb2.CandidateResult) -> Verdict:
    """The verdict a ``CandidateResult`` carries; :class:`InvalidArgument` for an unset status."""
    measured = {name: getattr(message, name) for name in FIGURE_NAMES if _measured(message, name)}
    return verdict_of(status_from_proto(message.status), message.error_message, measured)


def _measured(message: types_pb2.CandidateResult, name: str) -> bool:
    # workspace_bytes is a plain int64 (0 is "no workspace"); the other figures are optional.
    return bool(message.workspace_bytes) if name == "workspace_bytes" else message.HasField(name)


#: The evidence around a verdict, each a ``CandidateResult`` field of the same name.
_EVIDENCE = tuple(f.name for f in fields(CandidateResult) if f.name not in ("candidate_id", "verdict"))


def candidate_result_to_proto(result: CandidateResult) -> types_pb2.CandidateResult:
    """The wire form of ``result``: its verdict (:func:`verdict_to_proto`) and its evidence."""
    message = verdict_to_proto(result.verdict)
    message.candidate_id = result.candidate_id
    for name in _EVIDENCE:
        setattr(message, name, getattr(result, name))
    return message


def candidate_result_from_proto(message: types_pb2.CandidateResult) -> CandidateResult:
    """The result a ``CandidateResult`` carries; :class:`InvalidArgument` for an unset status."""
    return CandidateResult(candidate_id=message.candidate_id, verdict=verdict_from_proto(message),
                           **{name: getattr(message, name) for name in _EVIDENCE})


def cost_to_proto(cost: Cost) -> types_pb2.Cost:
    return types_pb2.Cost(**asdict(cost))


def cost_from_proto(message: types_pb2.Cost) -> Cost:
    return Cost(**{f.name: getattr(message, f.name) for f in fields(Cost)})


def exchange_to_proto(exchange: LlmExchange) -> types_pb2.LlmExchange:
    return types_pb2.LlmExchange(model=exchange.model, prompt=exchange.prompt, response=exchange.response,
                                 cost=cost_to_proto(exchange.cost), latency_s=exchange.latency_s, error=exchange.error)


def exchange_from_proto(message: types_pb2.LlmExchange) -> LlmExchange:
    return LlmExchange(model=message.model, prompt=message.prompt, response=message.response,
                       cost=cost_from_proto(message.cost), latency_s=message.latency_s, error=message.error)


def device_to_proto(device: DeviceInfo) -> types_pb2.DeviceInfo:
    return types_pb2.DeviceInfo(**asdict(device))


def device_from_proto(message: types_pb2.DeviceInfo) -> DeviceInfo:
    values: dict[str, Any] = {f.name: getattr(message, f.name) for f in fields(DeviceInfo)}
    values["copy_bandwidth_by_size"] = tuple(BandwidthAtSize(p.working_set_bytes, p.gbps)
                                             for p in message.copy_bandwidth_by_size)
    return DeviceInfo(**values)


def propose_request_to_proto(request: ProposeRequest) -> agent_pb2.ProposeRequest:
    """The wire form of ``request`` (an unset parent, feedback or dollar budget stays unset)."""
    parent = request.parent
    return agent_pb2.ProposeRequest(
        card_json=request.card.to_json(), device=device_to_proto(request.device), backend=request.backend,
        proposer=request.proposer, api_base=request.api_base, run_id=request.run_id, seed=request.seed,
        parent=None if parent is None else agent_pb2.ParentCandidate(
            candidate_id=parent.candidate_id, source=parent.source, description=parent.description,
            knobs_json=_knobs_to_json(parent.knobs), latency_us=parent.latency_us,
            eager_latency_us=parent.eager_latency_us),
        lineage=[_revision_to_proto(r) for r in request.lineage],
        failed_siblings=[_revision_to_proto(r) for r in request.failed_siblings],
        feedback=None if request.feedback is None else agent_pb2.Feedback(
            status=_optional_status_to_proto(request.feedback.status),
            error_message=request.feedback.error_message, log_tail=request.feedback.log_tail),
        budget_usd_remaining=request.budget_usd_remaining,
        tried_knobs_json=[_knobs_to_json(k) for k in request.tried_knobs],
    )


def propose_request_from_proto(message: agent_pb2.ProposeRequest) -> ProposeRequest:
    """The request a ``ProposeRequest`` carries; :class:`InvalidArgument` naming a malformed field."""
    parent = None
    if message.HasField("parent"):
        p = message.parent
        parent = ParentCandidate(
            candidate_id=p.candidate_id, source=p.source, description=p.description,
            knobs=_knobs_from_json(p.knobs_json, "parent.knobs_json"),
            latency_us=_optional(p, "latency_us"), eager_latency_us=_optional(p, "eager_latency_us"))
    feedback = None
    if message.HasField("feedback"):
        f = message.feedback
        feedback = Feedback(status=_optional_status_from_proto(f.status, "feedback.status"),
                            error_message=f.error_message, log_tail=f.log_tail)
    return ProposeRequest(
        card=card_from_json(message.card_json), device=device_from_proto(message.device), backend=message.backend,
        proposer=message.proposer, api_base=message.api_base, run_id=message.run_id, seed=message.seed,
        parent=parent,
        lineage=tuple(_revision_from_proto(r, f"lineage[{i}]") for i, r in enumerate(message.lineage)),
        failed_siblings=tuple(_revision_from_proto(r, f"failed_siblings[{i}]")
                              for i, r in enumerate(message.failed_siblings)),
        feedback=feedback, budget_usd_remaining=_optional(message, "budget_usd_remaining"),
        tried_knobs=tuple(_knobs_from_json(t, f"tried_knobs_json[{i}]")
                          for i, t in enumerate(message.tried_knobs_json)),
    )


def _revision_to_proto(revision: Revision) -> agent_pb2.Revision:
    return agent_pb2.Revision(
        candidate_id=revision.candidate_id, description=revision.description,
        status=_optional_status_to_proto(revision.status), latency_us=revision.latency_us,
        knobs_json=_knobs_to_json(revision.knobs), error_message=revision.error_message)


def _revision_from_proto(message: agent_pb2.Revision, field: str) -> Revision:
    return Revision(
        candidate_id=message.candidate_id, description=message.description,
        knobs=_knobs_from_json(message.knobs_json, f"{field}.knobs_json"),
        status=_optional_status_from_proto(message.status, f"{field}.status"),
        error_message=message.error_message, latency_us=_optional(message, "latency_us"))


def evaluate_request_to_proto(request: EvaluateRequest) -> sandbox_pb2.EvaluateRequest:
    """The wire form of ``request``; its options always travel, defaults or not."""
    return sandbox_pb2.EvaluateRequest(
        candidate_id=request.candidate_id, card_json=request.card.to_json(), source=request.source,
        backend=request.backend, options=sandbox_pb2.EvaluationOptions(**asdict(request.options)))


def evaluate_request_from_proto(message: sandbox_pb2.EvaluateRequest) -> EvaluateRequest:
    """The request an ``EvaluateRequest`` carries; :class:`InvalidArgument` for a malformed card."""
    options = EvaluationOptions(**{f.name: getattr(message.options, f.name) for f in fields(EvaluationOptions)})
    return EvaluateRequest(candidate_id=message.candidate_id, card=card_from_json(message.card_json),
                           source=message.source, backend=message.backend, options=options)


def _optional(message: Message, name: str) -> Any:
    """An optional field's value, ``None`` when unset."""
    return getattr(message, name) if message.HasField(name) else None


def _optional_status_to_proto(status: CandidateStatus | None) -> types_pb2.CandidateStatus | None:
    return None if status is None else status_to_proto(status)


def _optional_status_from_proto(value: types_pb2.CandidateStatus, field: str) -> CandidateStatus | None:
    return None if value == types_pb2.CANDIDATE_STATUS_UNSPECIFIED else status_from_proto(value, field)


def _knobs_to_json(knobs: Knobs) -> str:
    return json.dumps(knobs, sort_keys=True)


def _knobs_from_json(text: str, field: str) -> Knobs:
    """A knob set (a JSON object; empty text: none); :class:`InvalidArgument` naming ``field`` otherwise."""
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{field} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidArgument(f"{field} must be a JSON object, got {type(value).__name__}")
    return value
