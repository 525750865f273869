"""Why a capture failed, each error carrying the gRPC status it maps to.

The child process that runs the user's model reports failures by class name, so the parent can
re-raise the same class (see :func:`error_class`).
"""

from __future__ import annotations

import grpc

from servicekit.errors import FailedPrecondition, InvalidArgument, KforgeError, NotFound


class CaptureError(KforgeError):
    """Base of every capture failure."""


class InvalidModelSpec(CaptureError, InvalidArgument):
    """MODEL_SPEC does not name a loadable model (missing file, import error, no factory)."""


class InvalidCaptureOptions(CaptureError, InvalidArgument):
    """An option outside its domain (unknown device or grad mode, samples < 0, ...)."""


class InputsError(CaptureError, InvalidArgument):
    """``get_inputs()`` (or the factory) raised or returned something that is not inputs."""


class ForwardError(CaptureError, FailedPrecondition):
    """The model raised during its forward under capture."""


class DeviceUnavailable(CaptureError, FailedPrecondition):
    """The requested device is not present in the capturing process."""


class SampleBudgetExceeded(CaptureError, FailedPrecondition):
    """One reference sample per card does not fit in the sample size budget."""


class CaptureCrashed(CaptureError, FailedPrecondition):
    """The process running the model died (a signal or an uncaught native error)."""


class CaptureNotFound(CaptureError, NotFound):
    """No capture with that id, or no blob with that digest in it."""


_BY_NAME: dict[str, type[CaptureError]] = {
    cls.__name__: cls
    for cls in (
        InvalidModelSpec, InvalidCaptureOptions, InputsError, ForwardError, DeviceUnavailable,
        SampleBudgetExceeded, CaptureCrashed, CaptureNotFound,
    )
}


def error_class(name: str) -> type[CaptureError]:
    """The capture error class called ``name`` (CaptureError for unknown names)."""
    return _BY_NAME.get(name, CaptureError)


class CaptureCancelled(CaptureError):
    """The caller stopped the capture; its process was killed."""

    code = grpc.StatusCode.CANCELLED


_BY_NAME[CaptureCancelled.__name__] = CaptureCancelled
