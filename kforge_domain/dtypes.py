"""Dtypes by their torch name without the ``torch.`` prefix (``"bfloat16"``), as cards spell them.

``ABI_DTYPE_CODES`` is the ``kf_dtype`` enum of ``gpu_sandbox_service/include/kf_abi.h`` (a test
checks the header against it); ``DTYPE_BYTES`` is the size of one element.
"""

from __future__ import annotations

#: ``kf_dtype`` codes: the dtypes a kernel can be handed.
ABI_DTYPE_CODES: dict[str, int] = {
    "float32": 0, "float16": 1, "bfloat16": 2, "float64": 3, "int32": 4, "int64": 5, "bool": 6,
    "uint8": 7, "int8": 8,
}

#: Bytes per element (torch's ``element_size``) of every dtype a captured tensor may have.
DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
    "complex128": 16, "complex64": 8, "complex32": 4,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "qint32": 4, "qint8": 1, "quint8": 1,
}


def element_bytes(dtype: str) -> int:
    """The size of one element of ``dtype``; ``ValueError`` for a name not in :data:`DTYPE_BYTES`."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}") from None
