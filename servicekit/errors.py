"""Domain errors that carry their gRPC status, mapped once by :mod:`servicekit.server`.

Domain layers raise these and know nothing of gRPC beyond the status each one names.
"""

from __future__ import annotations

import grpc


class KforgeError(Exception):
    """Base of every error a service reports to its clients."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidArgument(KforgeError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(KforgeError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(KforgeError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(KforgeError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unauthenticated(KforgeError):
    code = grpc.StatusCode.UNAUTHENTICATED


class Unavailable(KforgeError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(KforgeError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class ConfigurationError(KforgeError, ValueError):
    """A server or client was configured in a way that cannot work or is unsafe.

    Raised before anything listens or connects, so the operator sees it at start-up.
    """

    code = grpc.StatusCode.INVALID_ARGUMENT
