"""Errors of the .cast format and runtime.

Every failure to read, verify, build or apply a .cast raises a :class:`CastError` subclass whose
message names the file, kernel or argument at fault, so a deployment can refuse a damaged
package without a traceback hunt.
"""

from __future__ import annotations


class CastError(Exception):
    """Base of every .cast error."""


class CastCorruptError(CastError):
    """The file is not a readable .cast archive (not a ZIP, truncated, malformed JSON)."""


class CastIntegrityError(CastError):
    """A file's checksum, the checksum list, or the set of files does not match."""


class CastSignatureError(CastError):
    """The signature is missing, or does not verify with the given key."""


class CastVersionError(CastError):
    """The archive's format version is not one this runtime reads."""


class CastBuildError(CastError):
    """The inputs handed to the builder are inconsistent or incomplete."""


class CastApplyError(CastError):
    """The cast cannot be applied or removed in the current state."""
