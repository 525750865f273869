"""A run's configuration, as the domain sees it (the servicer converts the proto message)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from forge_service.parent_policy import DEFAULT_POLICY, POLICIES
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from kforge_domain.backends import BACKEND_CHOICES
from servicekit.errors import InvalidArgument

GRAD_MODES = ("inference", "no_grad", "grad")
DEFAULT_PATIENCE = 8
"""Evaluations without improvement after which a card's search stops (0: it never does)."""


_CHOICES: dict[str, tuple[str, ...]] = {"backend": BACKEND_CHOICES, "search_policy": POLICIES, "grad_mode": GRAD_MODES}


class RunConfig(BaseModel):
    """Everything that decides what a run does; stored with the run so a resume repeats it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_spec: str
    backend: str = "auto"
    proposer: str = "offline"
    api_base: str = ""
    budget_per_card: int = Field(default=8, ge=1)
    max_cards: int = Field(default=5, ge=1)
    max_compiled_cards: int | None = Field(default=None, ge=0)
    budget_usd: float | None = Field(default=None, ge=0)
    time_limit_s: float | None = Field(default=None, gt=0)
    target_cards: list[str] = Field(default_factory=list)
    sandbox_addresses: list[str] = Field(default_factory=list)
    seed: int = 0
    grad_mode: str = "inference"
    samples: int = Field(default=2, ge=1)
    min_speedup: float = Field(default=1.0, ge=0)
    include_vendor_ops: bool = False
    parallel: int = Field(default=0, ge=0)
    sample_budget_bytes: int = Field(default=0, ge=0)
    skip_compile_baseline: bool = False
    cuda_graphs: bool = False
    search_policy: str = DEFAULT_POLICY
    patience: int = Field(default=DEFAULT_PATIENCE, ge=0)

    @property
    def compiled_slots(self) -> int:
        """Slots for compiled-only cards (layouts only torch.compile's graphs make), apart from
        the ``max_cards`` eager ones: a kernel for them speeds up no eager call, so they never
        take an eager card's place. Unset: half as many as the eager slots, rounded up."""
        return self.max_compiled_cards if self.max_compiled_cards is not None else -(-self.max_cards // 2)

    @field_validator("backend", "search_policy", "grad_mode")
    @classmethod
    def _one_of_its_choices(cls, v: str, info: ValidationInfo) -> str:
        choices = _CHOICES[str(info.field_name)]
        if v not in choices:
            raise ValueError(f"{str(info.field_name).replace('_', ' ')} must be one of {', '.join(choices)}")
        return v

    @classmethod
    def from_proto(cls, msg: forge_pb2.RunConfig) -> RunConfig:
        try:
            return cls(
                model_spec=msg.model_spec,
                backend=msg.backend or "auto",
                proposer=msg.proposer or "offline",
                api_base=msg.api_base,
                budget_per_card=msg.budget_per_card or 8,
                max_cards=msg.max_cards or 5,
                max_compiled_cards=msg.max_compiled_cards if msg.HasField("max_compiled_cards") else None,
                budget_usd=msg.budget_usd if msg.HasField("budget_usd") else None,
                time_limit_s=msg.time_limit_s if msg.HasField("time_limit_s") else None,
                target_cards=list(msg.target_cards),
                sandbox_addresses=list(msg.sandbox_addresses),
                seed=msg.seed,
                grad_mode=msg.grad_mode or "inference",
                samples=msg.samples or 2,
                min_speedup=msg.min_speedup or 1.0,
                include_vendor_ops=msg.include_vendor_ops,
                parallel=msg.parallel,
                sample_budget_bytes=msg.sample_budget_bytes,
                skip_compile_baseline=msg.skip_compile_baseline,
                cuda_graphs=msg.cuda_graphs,
                search_policy=msg.search_policy or DEFAULT_POLICY,
                patience=msg.patience if msg.HasField("patience") else DEFAULT_PATIENCE,
            )
        except ValueError as exc:
            raise InvalidArgument(f"bad run configuration: {exc}") from exc

    def to_proto(self) -> forge_pb2.RunConfig:
        msg = forge_pb2.RunConfig(
            model_spec=self.model_spec, backend=self.backend, proposer=self.proposer, api_base=self.api_base,
            budget_per_card=self.budget_per_card, max_cards=self.max_cards, target_cards=self.target_cards,
            sandbox_addresses=self.sandbox_addresses, seed=self.seed, grad_mode=self.grad_mode,
            samples=self.samples, min_speedup=self.min_speedup, include_vendor_ops=self.include_vendor_ops,
            parallel=self.parallel, sample_budget_bytes=self.sample_budget_bytes,
            skip_compile_baseline=self.skip_compile_baseline, cuda_graphs=self.cuda_graphs,
            search_policy=self.search_policy, patience=self.patience,
        )
        if self.max_compiled_cards is not None:
            msg.max_compiled_cards = self.max_compiled_cards
        if self.budget_usd is not None:
            msg.budget_usd = self.budget_usd
        if self.time_limit_s is not None:
            msg.time_limit_s = self.time_limit_s
        return msg
