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
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import cast

from pydantic import ValidationError

from kernel_forge.common.v1 import types_pb2
from kforge_domain.card import OperatorCard
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import FIGURE_NAMES, CandidateStatus, RunFigures, Verdict, verdict_of
from servicekit.errors import InvalidArgument


def card_to_proto(card: OperatorCard) -> types_pb2.OperatorCard:
    """The wire form of ``card``: its JSON plus the fields a listing shows (no spread: one not recorded)."""
    return types_pb2.OperatorCard(
        id=card.id, kind=card.kind, op=card.op, time_share=card.time_share, eager_us=card.eager_us or 0.0,
        eager_spread_us=card.eager_spread_us, call_count=card.call_count, optimisable=card.optimisable,
        card_json=card.to_json(),
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
