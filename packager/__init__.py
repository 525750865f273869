"""The .cast format and its runtime. Imports only torch and the standard library.

``load_cast(path)`` verifies a .cast and loads the kernels built for this machine;
``cast.apply(model)`` installs guarded dispatch, ``cast.remove()`` restores eager PyTorch.
"""

from packager.errors import (
    CastApplyError,
    CastBuildError,
    CastCorruptError,
    CastError,
    CastIntegrityError,
    CastSignatureError,
    CastVersionError,
)
from packager.runtime import Cast, SkippedKernel, load_cast

__all__ = [
    "Cast",
    "CastApplyError",
    "CastBuildError",
    "CastCorruptError",
    "CastError",
    "CastIntegrityError",
    "CastSignatureError",
    "CastVersionError",
    "SkippedKernel",
    "load_cast",
]
