from kernel_forge.common.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartCaptureRequest(_message.Message):
    __slots__ = ("model_spec", "device", "grad_mode", "samples", "sample_budget_bytes", "allow_unsampled", "trace_compiled")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    GRAD_MODE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALLOW_UNSAMPLED_FIELD_NUMBER: _ClassVar[int]
    TRACE_COMPILED_FIELD_NUMBER: _ClassVar[int]
    model_spec: str
    device: str
    grad_mode: str
    samples: int
    sample_budget_bytes: int
    allow_unsampled: bool
    trace_compiled: bool
    def __init__(self, model_spec: _Optional[str] = ..., device: _Optional[str] = ..., grad_mode: _Optional[str] = ..., samples: _Optional[int] = ..., sample_budget_bytes: _Optional[int] = ..., allow_unsampled: _Optional[bool] = ..., trace_compiled: _Optional[bool] = ...) -> None: ...

class CaptureProgress(_message.Message):
    __slots__ = ("capture_id", "stage", "message", "fraction", "done", "error", "n_cards")
    CAPTURE_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    N_CARDS_FIELD_NUMBER: _ClassVar[int]
    capture_id: str
    stage: str
    message: str
    fraction: float
    done: bool
    error: str
    n_cards: int
    def __init__(self, capture_id: _Optional[str] = ..., stage: _Optional[str] = ..., message: _Optional[str] = ..., fraction: _Optional[float] = ..., done: _Optional[bool] = ..., error: _Optional[str] = ..., n_cards: _Optional[int] = ...) -> None: ...

class ListCardsRequest(_message.Message):
    __slots__ = ("capture_id",)
    CAPTURE_ID_FIELD_NUMBER: _ClassVar[int]
    capture_id: str
    def __init__(self, capture_id: _Optional[str] = ...) -> None: ...

class ListCardsResponse(_message.Message):
    __slots__ = ("cards", "total_eager_us")
    CARDS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_EAGER_US_FIELD_NUMBER: _ClassVar[int]
    cards: _containers.RepeatedCompositeFieldContainer[_types_pb2.OperatorCard]
    total_eager_us: float
    def __init__(self, cards: _Optional[_Iterable[_Union[_types_pb2.OperatorCard, _Mapping]]] = ..., total_eager_us: _Optional[float] = ...) -> None: ...

class FetchBlobRequest(_message.Message):
    __slots__ = ("capture_id", "sha256")
    CAPTURE_ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    capture_id: str
    sha256: str
    def __init__(self, capture_id: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...
