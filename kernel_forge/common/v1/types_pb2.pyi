from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CandidateStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CANDIDATE_STATUS_UNSPECIFIED: _ClassVar[CandidateStatus]
    COMPILE_ERROR: _ClassVar[CandidateStatus]
    RUNTIME_ERROR: _ClassVar[CandidateStatus]
    TIMEOUT: _ClassVar[CandidateStatus]
    WRONG_RESULT: _ClassVar[CandidateStatus]
    REJECTED: _ClassVar[CandidateStatus]
    PASSED: _ClassVar[CandidateStatus]
CANDIDATE_STATUS_UNSPECIFIED: CandidateStatus
COMPILE_ERROR: CandidateStatus
RUNTIME_ERROR: CandidateStatus
TIMEOUT: CandidateStatus
WRONG_RESULT: CandidateStatus
REJECTED: CandidateStatus
PASSED: CandidateStatus

class TensorSpec(_message.Message):
    __slots__ = ("shape", "stride", "dtype", "storage_offset", "aligned16")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ALIGNED16_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    stride: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    storage_offset: int
    aligned16: bool
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., stride: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., storage_offset: _Optional[int] = ..., aligned16: _Optional[bool] = ...) -> None: ...

class DeviceInfo(_message.Message):
    __slots__ = ("backend", "name", "arch", "sm_count", "l2_bytes", "copy_bandwidth_gbps", "toolchain", "sandbox_id", "memory_bytes", "copy_bandwidth_by_size", "candidate_slots")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    SM_COUNT_FIELD_NUMBER: _ClassVar[int]
    L2_BYTES_FIELD_NUMBER: _ClassVar[int]
    COPY_BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    TOOLCHAIN_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    COPY_BANDWIDTH_BY_SIZE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    backend: str
    name: str
    arch: str
    sm_count: int
    l2_bytes: int
    copy_bandwidth_gbps: float
    toolchain: str
    sandbox_id: str
    memory_bytes: int
    copy_bandwidth_by_size: _containers.RepeatedCompositeFieldContainer[CopyBandwidthAtSize]
    candidate_slots: int
    def __init__(self, backend: _Optional[str] = ..., name: _Optional[str] = ..., arch: _Optional[str] = ..., sm_count: _Optional[int] = ..., l2_bytes: _Optional[int] = ..., copy_bandwidth_gbps: _Optional[float] = ..., toolchain: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., copy_bandwidth_by_size: _Optional[_Iterable[_Union[CopyBandwidthAtSize, _Mapping]]] = ..., candidate_slots: _Optional[int] = ...) -> None: ...

class CopyBandwidthAtSize(_message.Message):
    __slots__ = ("working_set_bytes", "gbps")
    WORKING_SET_BYTES_FIELD_NUMBER: _ClassVar[int]
    GBPS_FIELD_NUMBER: _ClassVar[int]
    working_set_bytes: int
    gbps: float
    def __init__(self, working_set_bytes: _Optional[int] = ..., gbps: _Optional[float] = ...) -> None: ...

class OperatorCard(_message.Message):
    __slots__ = ("id", "kind", "op", "time_share", "eager_us", "call_count", "optimisable", "card_json", "eager_spread_us", "compiled_only")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    TIME_SHARE_FIELD_NUMBER: _ClassVar[int]
    EAGER_US_FIELD_NUMBER: _ClassVar[int]
    CALL_COUNT_FIELD_NUMBER: _ClassVar[int]
    OPTIMISABLE_FIELD_NUMBER: _ClassVar[int]
    CARD_JSON_FIELD_NUMBER: _ClassVar[int]
    EAGER_SPREAD_US_FIELD_NUMBER: _ClassVar[int]
    COMPILED_ONLY_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    op: str
    time_share: float
    eager_us: float
    call_count: int
    optimisable: bool
    card_json: str
    eager_spread_us: float
    compiled_only: bool
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., op: _Optional[str] = ..., time_share: _Optional[float] = ..., eager_us: _Optional[float] = ..., call_count: _Optional[int] = ..., optimisable: _Optional[bool] = ..., card_json: _Optional[str] = ..., eager_spread_us: _Optional[float] = ..., compiled_only: _Optional[bool] = ...) -> None: ...

class BlobChunk(_message.Message):
    __slots__ = ("sha256", "offset", "total_size", "data")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    offset: int
    total_size: int
    data: bytes
    def __init__(self, sha256: _Optional[str] = ..., offset: _Optional[int] = ..., total_size: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class CandidateResult(_message.Message):
    __slots__ = ("candidate_id", "status", "latency_us", "latency_spread_us", "eager_latency_us", "eager_spread_us", "speedup", "rel_l2_error", "max_scaled_error", "audit_class", "error_message", "log_tail", "compile_s", "total_s", "source_sha256", "compiler_flags", "toolchain", "arch", "sandbox_id", "artifact", "floor_us", "remeasured", "workspace_bytes", "start_s", "prepared_ahead_s")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SPREAD_US_FIELD_NUMBER: _ClassVar[int]
    EAGER_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    EAGER_SPREAD_US_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    REL_L2_ERROR_FIELD_NUMBER: _ClassVar[int]
    MAX_SCALED_ERROR_FIELD_NUMBER: _ClassVar[int]
    AUDIT_CLASS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOG_TAIL_FIELD_NUMBER: _ClassVar[int]
    COMPILE_S_FIELD_NUMBER: _ClassVar[int]
    TOTAL_S_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SHA256_FIELD_NUMBER: _ClassVar[int]
    COMPILER_FLAGS_FIELD_NUMBER: _ClassVar[int]
    TOOLCHAIN_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    FLOOR_US_FIELD_NUMBER: _ClassVar[int]
    REMEASURED_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    START_S_FIELD_NUMBER: _ClassVar[int]
    PREPARED_AHEAD_S_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    status: CandidateStatus
    latency_us: float
    latency_spread_us: float
    eager_latency_us: float
    eager_spread_us: float
    speedup: float
    rel_l2_error: float
    max_scaled_error: float
    audit_class: str
    error_message: str
    log_tail: str
    compile_s: float
    total_s: float
    source_sha256: str
    compiler_flags: str
    toolchain: str
    arch: str
    sandbox_id: str
    artifact: bytes
    floor_us: float
    remeasured: bool
    workspace_bytes: int
    start_s: float
    prepared_ahead_s: float
    def __init__(self, candidate_id: _Optional[str] = ..., status: _Optional[_Union[CandidateStatus, str]] = ..., latency_us: _Optional[float] = ..., latency_spread_us: _Optional[float] = ..., eager_latency_us: _Optional[float] = ..., eager_spread_us: _Optional[float] = ..., speedup: _Optional[float] = ..., rel_l2_error: _Optional[float] = ..., max_scaled_error: _Optional[float] = ..., audit_class: _Optional[str] = ..., error_message: _Optional[str] = ..., log_tail: _Optional[str] = ..., compile_s: _Optional[float] = ..., total_s: _Optional[float] = ..., source_sha256: _Optional[str] = ..., compiler_flags: _Optional[str] = ..., toolchain: _Optional[str] = ..., arch: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., artifact: _Optional[bytes] = ..., floor_us: _Optional[float] = ..., remeasured: _Optional[bool] = ..., workspace_bytes: _Optional[int] = ..., start_s: _Optional[float] = ..., prepared_ahead_s: _Optional[float] = ...) -> None: ...

class Cost(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "usd", "llm_calls")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USD_FIELD_NUMBER: _ClassVar[int]
    LLM_CALLS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    usd: float
    llm_calls: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., usd: _Optional[float] = ..., llm_calls: _Optional[int] = ...) -> None: ...

class LlmExchange(_message.Message):
    __slots__ = ("model", "prompt", "response", "cost", "latency_s", "error")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt: str
    response: str
    cost: Cost
    latency_s: float
    error: str
    def __init__(self, model: _Optional[str] = ..., prompt: _Optional[str] = ..., response: _Optional[str] = ..., cost: _Optional[_Union[Cost, _Mapping]] = ..., latency_s: _Optional[float] = ..., error: _Optional[str] = ...) -> None: ...
