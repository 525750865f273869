"""Domain types to and from proto: one converter pair per type that crosses gRPC.

The card travels as ``kernel_forge.common.v1.OperatorCard``: its full JSON in ``card_json`` (what
a receiver reads) and a few typed fields repeated for listings. A request that carries only the
JSON (``ProposeRequest.card_json``, ``EvaluateRequest.card_json``) is read by
:func:`card_from_json`. Malformed input raises :class:`servicekit.errors.InvalidArgument`, so the
peer gets ``INVALID_ARGUMENT`` naming the field.
"""

from __future__ import annotations

from pydantic import ValidationError

from kernel_forge.common.v1 import types_pb2
from kforge_domain.card import OperatorCard
from servicekit.errors import InvalidArgument


def card_to_proto(card: OperatorCard) -> types_pb2.OperatorCard:
    """The wire form of ``card``: its JSON plus the fields a listing shows."""
    return types_pb2.OperatorCard(
        id=card.id, kind=card.kind, op=card.op, time_share=card.time_share, eager_us=card.eager_us or 0.0,
        call_count=card.call_count, optimisable=card.optimisable, card_json=card.to_json(),
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
