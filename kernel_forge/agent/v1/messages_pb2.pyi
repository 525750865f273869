from kernel_forge.common.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Revision(_message.Message):
    __slots__ = ("candidate_id", "description", "status", "latency_us", "knobs_json", "error_message")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    KNOBS_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    description: str
    status: _types_pb2.CandidateStatus
    latency_us: float
    knobs_json: str
    error_message: str
    def __init__(self, candidate_id: _Optional[str] = ..., description: _Optional[str] = ..., status: _Optional[_Union[_types_pb2.CandidateStatus, str]] = ..., latency_us: _Optional[float] = ..., knobs_json: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class ParentCandidate(_message.Message):
    __slots__ = ("candidate_id", "source", "description", "latency_us", "eager_latency_us", "knobs_json")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    EAGER_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    KNOBS_JSON_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    source: str
    description: str
    latency_us: float
    eager_latency_us: float
    knobs_json: str
    def __init__(self, candidate_id: _Optional[str] = ..., source: _Optional[str] = ..., description: _Optional[str] = ..., latency_us: _Optional[float] = ..., eager_latency_us: _Optional[float] = ..., knobs_json: _Optional[str] = ...) -> None: ...

class Feedback(_message.Message):
    __slots__ = ("status", "error_message", "log_tail")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOG_TAIL_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.CandidateStatus
    error_message: str
    log_tail: str
    def __init__(self, status: _Optional[_Union[_types_pb2.CandidateStatus, str]] = ..., error_message: _Optional[str] = ..., log_tail: _Optional[str] = ...) -> None: ...

class ProposeRequest(_message.Message):
    __slots__ = ("card_json", "device", "backend", "proposer", "api_base", "parent", "lineage", "failed_siblings", "feedback", "run_id", "budget_usd_remaining", "seed", "tried_knobs_json")
    CARD_JSON_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    API_BASE_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    LINEAGE_FIELD_NUMBER: _ClassVar[int]
    FAILED_SIBLINGS_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_REMAINING_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TRIED_KNOBS_JSON_FIELD_NUMBER: _ClassVar[int]
    card_json: str
    device: _types_pb2.DeviceInfo
    backend: str
    proposer: str
    api_base: str
    parent: ParentCandidate
    lineage: _containers.RepeatedCompositeFieldContainer[Revision]
    failed_siblings: _containers.RepeatedCompositeFieldContainer[Revision]
    feedback: Feedback
    run_id: str
    budget_usd_remaining: float
    seed: int
    tried_knobs_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, card_json: _Optional[str] = ..., device: _Optional[_Union[_types_pb2.DeviceInfo, _Mapping]] = ..., backend: _Optional[str] = ..., proposer: _Optional[str] = ..., api_base: _Optional[str] = ..., parent: _Optional[_Union[ParentCandidate, _Mapping]] = ..., lineage: _Optional[_Iterable[_Union[Revision, _Mapping]]] = ..., failed_siblings: _Optional[_Iterable[_Union[Revision, _Mapping]]] = ..., feedback: _Optional[_Union[Feedback, _Mapping]] = ..., run_id: _Optional[str] = ..., budget_usd_remaining: _Optional[float] = ..., seed: _Optional[int] = ..., tried_knobs_json: _Optional[_Iterable[str]] = ...) -> None: ...

class ProposeResponse(_message.Message):
    __slots__ = ("has_proposal", "source", "description", "knobs_json", "no_proposal_reason", "cost", "exchanges", "proposer")
    HAS_PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    KNOBS_JSON_FIELD_NUMBER: _ClassVar[int]
    NO_PROPOSAL_REASON_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    EXCHANGES_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    has_proposal: bool
    source: str
    description: str
    knobs_json: str
    no_proposal_reason: str
    cost: _types_pb2.Cost
    exchanges: _containers.RepeatedCompositeFieldContainer[_types_pb2.LlmExchange]
    proposer: str
    def __init__(self, has_proposal: _Optional[bool] = ..., source: _Optional[str] = ..., description: _Optional[str] = ..., knobs_json: _Optional[str] = ..., no_proposal_reason: _Optional[str] = ..., cost: _Optional[_Union[_types_pb2.Cost, _Mapping]] = ..., exchanges: _Optional[_Iterable[_Union[_types_pb2.LlmExchange, _Mapping]]] = ..., proposer: _Optional[str] = ...) -> None: ...

class ListProvidersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Provider(_message.Message):
    __slots__ = ("name", "description", "needs_api_key", "env_vars")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    NEEDS_API_KEY_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    needs_api_key: bool
    env_vars: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., needs_api_key: _Optional[bool] = ..., env_vars: _Optional[_Iterable[str]] = ...) -> None: ...

class ListProvidersResponse(_message.Message):
    __slots__ = ("providers",)
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    providers: _containers.RepeatedCompositeFieldContainer[Provider]
    def __init__(self, providers: _Optional[_Iterable[_Union[Provider, _Mapping]]] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("cost",)
    COST_FIELD_NUMBER: _ClassVar[int]
    cost: _types_pb2.Cost
    def __init__(self, cost: _Optional[_Union[_types_pb2.Cost, _Mapping]] = ...) -> None: ...
