from kernel_forge.common.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunConfig(_message.Message):
    __slots__ = ("model_spec", "backend", "proposer", "api_base", "budget_per_card", "max_cards", "budget_usd", "time_limit_s", "target_cards", "sandbox_addresses", "seed", "grad_mode", "samples", "min_speedup", "include_vendor_ops", "parallel", "sample_budget_bytes", "skip_compile_baseline", "cuda_graphs", "search_policy", "patience", "max_compiled_cards")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    API_BASE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_PER_CARD_FIELD_NUMBER: _ClassVar[int]
    MAX_CARDS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    TARGET_CARDS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    GRAD_MODE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MIN_SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VENDOR_OPS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    SKIP_COMPILE_BASELINE_FIELD_NUMBER: _ClassVar[int]
    CUDA_GRAPHS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_POLICY_FIELD_NUMBER: _ClassVar[int]
    PATIENCE_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPILED_CARDS_FIELD_NUMBER: _ClassVar[int]
    model_spec: str
    backend: str
    proposer: str
    api_base: str
    budget_per_card: int
    max_cards: int
    budget_usd: float
    time_limit_s: float
    target_cards: _containers.RepeatedScalarFieldContainer[str]
    sandbox_addresses: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    grad_mode: str
    samples: int
    min_speedup: float
    include_vendor_ops: bool
    parallel: int
    sample_budget_bytes: int
    skip_compile_baseline: bool
    cuda_graphs: bool
    search_policy: str
    patience: int
    max_compiled_cards: int
    def __init__(self, model_spec: _Optional[str] = ..., backend: _Optional[str] = ..., proposer: _Optional[str] = ..., api_base: _Optional[str] = ..., budget_per_card: _Optional[int] = ..., max_cards: _Optional[int] = ..., budget_usd: _Optional[float] = ..., time_limit_s: _Optional[float] = ..., target_cards: _Optional[_Iterable[str]] = ..., sandbox_addresses: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., grad_mode: _Optional[str] = ..., samples: _Optional[int] = ..., min_speedup: _Optional[float] = ..., include_vendor_ops: _Optional[bool] = ..., parallel: _Optional[int] = ..., sample_budget_bytes: _Optional[int] = ..., skip_compile_baseline: _Optional[bool] = ..., cuda_graphs: _Optional[bool] = ..., search_policy: _Optional[str] = ..., patience: _Optional[int] = ..., max_compiled_cards: _Optional[int] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "config", "status", "error", "created_at", "updated_at", "cards_total", "cards_done", "evaluations_done", "evaluations_budget", "cost", "best_e2e_speedup", "run_dir", "model_name")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    CARDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CARDS_DONE_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_BUDGET_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    BEST_E2E_SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    config: RunConfig
    status: str
    error: str
    created_at: float
    updated_at: float
    cards_total: int
    cards_done: int
    evaluations_done: int
    evaluations_budget: int
    cost: _types_pb2.Cost
    best_e2e_speedup: float
    run_dir: str
    model_name: str
    def __init__(self, run_id: _Optional[str] = ..., config: _Optional[_Union[RunConfig, _Mapping]] = ..., status: _Optional[str] = ..., error: _Optional[str] = ..., created_at: _Optional[float] = ..., updated_at: _Optional[float] = ..., cards_total: _Optional[int] = ..., cards_done: _Optional[int] = ..., evaluations_done: _Optional[int] = ..., evaluations_budget: _Optional[int] = ..., cost: _Optional[_Union[_types_pb2.Cost, _Mapping]] = ..., best_e2e_speedup: _Optional[float] = ..., run_dir: _Optional[str] = ..., model_name: _Optional[str] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: RunConfig
    def __init__(self, config: _Optional[_Union[RunConfig, _Mapping]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("run_id", "seq", "timestamp", "kind", "message", "card_id", "candidate_id", "result", "status")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CARD_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    timestamp: float
    kind: str
    message: str
    card_id: str
    candidate_id: str
    result: _types_pb2.CandidateResult
    status: str
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., timestamp: _Optional[float] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ..., card_id: _Optional[str] = ..., candidate_id: _Optional[str] = ..., result: _Optional[_Union[_types_pb2.CandidateResult, _Mapping]] = ..., status: _Optional[str] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("run_id", "after_seq")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class RunCard(_message.Message):
    __slots__ = ("card", "status", "reason", "best_latency_us", "eager_latency_us", "speedup", "floor_us", "best_candidate_id", "audit_class", "evaluations", "cost", "budget", "eager_spread_us", "best_spread_us")
    CARD_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BEST_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    EAGER_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    FLOOR_US_FIELD_NUMBER: _ClassVar[int]
    BEST_CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIT_CLASS_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    EAGER_SPREAD_US_FIELD_NUMBER: _ClassVar[int]
    BEST_SPREAD_US_FIELD_NUMBER: _ClassVar[int]
    card: _types_pb2.OperatorCard
    status: str
    reason: str
    best_latency_us: float
    eager_latency_us: float
    speedup: float
    floor_us: float
    best_candidate_id: str
    audit_class: str
    evaluations: int
    cost: _types_pb2.Cost
    budget: int
    eager_spread_us: float
    best_spread_us: float
    def __init__(self, card: _Optional[_Union[_types_pb2.OperatorCard, _Mapping]] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ..., best_latency_us: _Optional[float] = ..., eager_latency_us: _Optional[float] = ..., speedup: _Optional[float] = ..., floor_us: _Optional[float] = ..., best_candidate_id: _Optional[str] = ..., audit_class: _Optional[str] = ..., evaluations: _Optional[int] = ..., cost: _Optional[_Union[_types_pb2.Cost, _Mapping]] = ..., budget: _Optional[int] = ..., eager_spread_us: _Optional[float] = ..., best_spread_us: _Optional[float] = ...) -> None: ...

class ListRunCardsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListRunCardsResponse(_message.Message):
    __slots__ = ("cards",)
    CARDS_FIELD_NUMBER: _ClassVar[int]
    cards: _containers.RepeatedCompositeFieldContainer[RunCard]
    def __init__(self, cards: _Optional[_Iterable[_Union[RunCard, _Mapping]]] = ...) -> None: ...

class GetCardTreeRequest(_message.Message):
    __slots__ = ("run_id", "card_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CARD_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    card_id: str
    def __init__(self, run_id: _Optional[str] = ..., card_id: _Optional[str] = ...) -> None: ...

class TreeNode(_message.Message):
    __slots__ = ("candidate_id", "parent_id", "depth", "status", "latency_us", "speedup", "visits", "value", "description")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    VISITS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    parent_id: str
    depth: int
    status: _types_pb2.CandidateStatus
    latency_us: float
    speedup: float
    visits: int
    value: float
    description: str
    def __init__(self, candidate_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., depth: _Optional[int] = ..., status: _Optional[_Union[_types_pb2.CandidateStatus, str]] = ..., latency_us: _Optional[float] = ..., speedup: _Optional[float] = ..., visits: _Optional[int] = ..., value: _Optional[float] = ..., description: _Optional[str] = ...) -> None: ...

class CardTree(_message.Message):
    __slots__ = ("card_id", "nodes", "best_candidate_id")
    CARD_ID_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    BEST_CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    card_id: str
    nodes: _containers.RepeatedCompositeFieldContainer[TreeNode]
    best_candidate_id: str
    def __init__(self, card_id: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[TreeNode, _Mapping]]] = ..., best_candidate_id: _Optional[str] = ...) -> None: ...

class GetCandidateRequest(_message.Message):
    __slots__ = ("run_id", "candidate_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    candidate_id: str
    def __init__(self, run_id: _Optional[str] = ..., candidate_id: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("candidate_id", "card_id", "parent_id", "source", "description", "knobs_json", "proposer", "result", "exchanges", "cost")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    CARD_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    KNOBS_JSON_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    EXCHANGES_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    card_id: str
    parent_id: str
    source: str
    description: str
    knobs_json: str
    proposer: str
    result: _types_pb2.CandidateResult
    exchanges: _containers.RepeatedCompositeFieldContainer[_types_pb2.LlmExchange]
    cost: _types_pb2.Cost
    def __init__(self, candidate_id: _Optional[str] = ..., card_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., source: _Optional[str] = ..., description: _Optional[str] = ..., knobs_json: _Optional[str] = ..., proposer: _Optional[str] = ..., result: _Optional[_Union[_types_pb2.CandidateResult, _Mapping]] = ..., exchanges: _Optional[_Iterable[_Union[_types_pb2.LlmExchange, _Mapping]]] = ..., cost: _Optional[_Union[_types_pb2.Cost, _Mapping]] = ...) -> None: ...

class ExportCastRequest(_message.Message):
    __slots__ = ("run_id", "min_speedup")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    min_speedup: float
    def __init__(self, run_id: _Optional[str] = ..., min_speedup: _Optional[float] = ...) -> None: ...

class GetReportRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class Report(_message.Message):
    __slots__ = ("run_id", "json", "markdown")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    MARKDOWN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    json: str
    markdown: str
    def __init__(self, run_id: _Optional[str] = ..., json: _Optional[str] = ..., markdown: _Optional[str] = ...) -> None: ...
