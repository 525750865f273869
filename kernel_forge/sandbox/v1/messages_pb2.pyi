from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetDeviceInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UploadBlobResponse(_message.Message):
    __slots__ = ("sha256", "size")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size: int
    def __init__(self, sha256: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class HasBlobsRequest(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sha256: _Optional[_Iterable[str]] = ...) -> None: ...

class HasBlobsResponse(_message.Message):
    __slots__ = ("missing",)
    MISSING_FIELD_NUMBER: _ClassVar[int]
    missing: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, missing: _Optional[_Iterable[str]] = ...) -> None: ...

class EvaluationOptions(_message.Message):
    __slots__ = ("fresh_input_sets", "timing_runs", "compile_timeout_s", "run_timeout_s", "remeasure", "best_speedup")
    FRESH_INPUT_SETS_FIELD_NUMBER: _ClassVar[int]
    TIMING_RUNS_FIELD_NUMBER: _ClassVar[int]
    COMPILE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    RUN_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    REMEASURE_FIELD_NUMBER: _ClassVar[int]
    BEST_SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    fresh_input_sets: int
    timing_runs: int
    compile_timeout_s: float
    run_timeout_s: float
    remeasure: bool
    best_speedup: float
    def __init__(self, fresh_input_sets: _Optional[int] = ..., timing_runs: _Optional[int] = ..., compile_timeout_s: _Optional[float] = ..., run_timeout_s: _Optional[float] = ..., remeasure: _Optional[bool] = ..., best_speedup: _Optional[float] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("candidate_id", "card_json", "source", "backend", "options")
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    CARD_JSON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    candidate_id: str
    card_json: str
    source: str
    backend: str
    options: EvaluationOptions
    def __init__(self, candidate_id: _Optional[str] = ..., card_json: _Optional[str] = ..., source: _Optional[str] = ..., backend: _Optional[str] = ..., options: _Optional[_Union[EvaluationOptions, _Mapping]] = ...) -> None: ...
