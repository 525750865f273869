"""Operator cards: the schema every service reads and writes.

A card is one runtime variant of an aten overload or of a leaf module, with its exact tensor
layouts, its non-tensor arguments, how often and how long it ran, and a few captured samples
as content-addressed safetensors blobs. How long it ran is the median of eager calls timed the
way the sandbox times them (:mod:`kforge_torch.timing`), their interquartile range beside it.
The card's ``key`` is :class:`packager.variant.VariantKey` in JSON form; ``id`` is that key's
id. The call template (non-tensor arguments, tensors as ``{"tensor": i}``) is stored once, in
``key["template"]``; :attr:`OperatorCard.template` reads it there. Cards written before carried
a copy as a top-level ``template``: they still load (the copy must equal the key's and is
dropped), as do cards written before the spread was recorded.

Kernel arguments (the contract of kf_abi.h): ``inputs`` are the call's tensors in template
order (for module cards: forward tensors, then the module's parameters and buffers). ``outputs``
are what the kernel must write: the op's returned tensors, which the harness allocates with
exactly the given shape, stride and dtype.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kforge_domain.blobs import BLOBS_DIR

__all__ = ["BLOBS_DIR", "CARDS_FILE", "SCHEMA_VERSION", "CardSet", "OperatorCard", "Sample", "TensorSpec"]

CARDS_FILE = "cards.json"
SCHEMA_VERSION = 1


class TensorSpec(BaseModel):
    """The exact layout of one tensor."""

    model_config = ConfigDict(frozen=True)

    shape: list[int]
    stride: list[int]
    dtype: str
    storage_offset: int = 0
    aligned16: bool = True

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


class Sample(BaseModel):
    """One captured call: its input and output tensors, each a safetensors blob by sha256.

    The inputs blob holds ``input.0 ... input.N``, the outputs blob ``output.0 ... output.M``.
    """

    inputs_blob: str
    outputs_blob: str


class OperatorCard(BaseModel):
    """One runtime variant that a kernel may replace."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    id: str
    kind: Literal["aten", "module"]
    op: str
    device: str
    key: dict[str, Any] = Field(description="packager.variant.VariantKey.to_json(), the call template included")
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    mutated_inputs: list[int] = Field(default_factory=list)
    call_count: int = 0
    eager_us: float | None = Field(default=None, description="median µs of one eager call, timed at capture")
    eager_spread_us: float | None = Field(
        default=None, description="interquartile range of those timed calls, µs (None: cards written before it)"
    )
    time_share: float = 0.0
    module_paths: list[str] = Field(default_factory=list)
    samples: list[Sample] = Field(default_factory=list)
    optimisable: bool = True
    reason: str = ""
    degenerate: str = ""
    vendor_op: bool = False
    compiled_only: bool = Field(
        default=False,
        description="a layout only torch.compile's graphs give this call (eager never ran it): its kernel serves "
                    "compiled graphs, and its time is not part of the captured eager total",
    )
    module_program_blob: str | None = Field(
        default=None, description="for module cards: torch.export program of the module (sha256)"
    )
    module_graph: dict[str, Any] | None = Field(
        default=None,
        description="for module cards: the aten calls the forward makes, as JSON (capture_service.program_graph)",
    )
    module_attributes: dict[str, Any] = Field(
        default_factory=dict,
        description="for module cards: the instance's scalar attributes (eps, num_groups, ...) that its forward reads",
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_template_copy(cls, data: Any) -> Any:
        """Accept a card that still carries the template's old top-level copy, if it is the key's."""
        if isinstance(data, dict) and "template" in data:
            data = dict(data)
            copy = data.pop("template")
            key = data.get("key")
            if not isinstance(key, dict) or key.get("template") != copy:
                raise ValueError("the card's template differs from its key's template")
        return data

    @property
    def template(self) -> dict[str, Any]:
        """The call template (``packager.variant.decode_call`` rebuilds the call from it)."""
        template: dict[str, Any] = self.key["template"]
        return template

    @property
    def non_tensor_args(self) -> dict[str, Any]:
        """The template without tensor placeholders, for prompts and tables."""
        return {"args": self.template.get("args", []), "kwargs": self.template.get("kwargs", {})}

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> OperatorCard:
        """The one way to read a card's JSON (a run's stored card, a request's ``card_json``);
        raises ``pydantic.ValidationError`` when it is not a valid card."""
        return cls.model_validate_json(text)


class CardSet(BaseModel):
    """What ``kforge capture --out DIR`` writes to ``DIR/cards.json``."""

    model_spec: str
    device: str
    grad_mode: str
    total_eager_us: float
    cards: list[OperatorCard]

    def save(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / CARDS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.model_dump(mode="json"), indent=1))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, out_dir: Path) -> CardSet:
        path = Path(out_dir) / CARDS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no {CARDS_FILE} in {out_dir}")
        return cls.model_validate_json(path.read_text())

    def card(self, card_id: str) -> OperatorCard:
        for card in self.cards:
            if card.id == card_id:
                return card
        raise KeyError(f"no card {card_id!r}")
