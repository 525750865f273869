import re
from pathlib import Path

import pytest
import torch

from kforge_domain.blobs import blob_digest, blob_file_name, is_blob_digest, sample_key
from kforge_domain.card import TensorSpec
from kforge_domain.dtypes import ABI_DTYPE_CODES, DTYPE_BYTES, element_bytes
from kforge_domain.floor import memory_floor_us
from packager.abi import DTYPE_CODES

ABI_HEADER = Path(__file__).parents[2] / "gpu_sandbox_service" / "include" / "kf_abi.h"
HEADER_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I32": "int32",
                "I64": "int64", "BOOL": "bool", "U8": "uint8", "I8": "int8"}


def test_the_abi_codes_are_the_headers_enum() -> None:
    enum = {HEADER_NAMES[m[0]]: int(m[1]) for m in re.findall(r"KF_(\w+) = (\d+)", ABI_HEADER.read_text())}
    assert enum == ABI_DTYPE_CODES
    assert DTYPE_CODES[torch.bfloat16] == 2 and DTYPE_CODES[torch.int8] == 8 and len(DTYPE_CODES) == len(enum)


def test_element_sizes_are_torchs() -> None:
    for name, size in DTYPE_BYTES.items():
        dtype = getattr(torch, name, None)
        if isinstance(dtype, torch.dtype):
            assert dtype.itemsize == size, name
    with pytest.raises(ValueError, match="unknown dtype"):
        element_bytes("float128")


def _spec(shape: list[int], stride: list[int], dtype: str = "float32") -> TensorSpec:
    return TensorSpec(shape=shape, stride=stride, dtype=dtype)


def test_the_floor_moves_each_distinct_element_once() -> None:
    x = _spec([1000], [1])
    assert memory_floor_us([x], [x], 8.0) == 1.0  # 4000 bytes in + 4000 out at 8 GB/s
    bias = _spec([1000, 1000], [0, 1])  # a row broadcast down 1000 rows: 1000 distinct elements
    assert memory_floor_us([bias], [], 4.0) == 1.0
    assert memory_floor_us([_spec([0, 5], [0, 1])], [], 4.0) == 0.0
    assert memory_floor_us([x], [x], 8.0, aliased_outputs={0}) == 0.5  # written in place: counted once
    assert memory_floor_us([_spec([1000], [1], "bfloat16")], [], 2.0) == 1.0


def test_no_floor_without_a_bandwidth_or_a_known_dtype_size() -> None:
    assert memory_floor_us([_spec([4], [1])], [], 0.0) is None
    assert memory_floor_us([_spec([4], [1], "float128")], [], 8.0) is None


def test_a_blob_is_named_by_the_sha256_of_its_bytes() -> None:
    digest = blob_digest(b"abc")
    assert digest == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" and is_blob_digest(digest)
    assert not is_blob_digest(digest.upper()) and not is_blob_digest("../" + digest[3:])
    assert blob_file_name(digest, ".safetensors") == f"{digest}.safetensors" and blob_file_name(digest) == digest
    assert sample_key("input", 2) == "input.2"
