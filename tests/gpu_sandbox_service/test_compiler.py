"""Building candidates with the sandbox's own flags and the real compilers: what the libraries hold."""

from __future__ import annotations

import asyncio
import ctypes
import struct
import subprocess
from pathlib import Path

import pytest
import torch

from agent_service.offline.catalog import plan_for_card
from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.cardkit import card_from_call
from gpu_sandbox_service.compiler import INCLUDE_DIR, Compiler, Toolchain, detect_toolchain
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from tests.gpu_sandbox_service.conftest import TEST_LIMITS, load_corpus

ARCH = "sm_90"
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch=ARCH, sm_count=132, l2_bytes=60 << 20)
FATBIN_MAGIC = 0xBA55ED50
IMAGE_KINDS = {1: "ptx", 2: "elf"}


def _nvcc() -> Toolchain | None:
    try:
        return detect_toolchain("cuda", ARCH)
    except FileNotFoundError:
        return None


NVCC = _nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


def _compiler(toolchain: Toolchain, tmp_path: Path) -> Compiler:
    return Compiler(toolchain, tmp_path / "cache", tmp_path / "scratch", TEST_LIMITS)


def _elf_section(path: Path, name: str) -> bytes:
    """One section of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    (table,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, table + i * entry_size) for i in range(count)]
    names = data[headers[names_index][4]:][:headers[names_index][5]]
    for name_at, _type, _flags, _address, offset, size in headers:
        if names[name_at:names.index(b"\0", name_at)].decode() == name:
            return data[offset:offset + size]
    raise KeyError(f"{path.name} has no {name} section")


def _fatbin_images(library: Path) -> list[tuple[str, int, bytes]]:
    """(kind, sm, bytes) of each device image embedded in ``library``: ``elf`` is a cubin (SASS), ``ptx`` PTX."""
    section = _elf_section(library, ".nv_fatbin")
    images = []
    offset = 0
    while offset + 16 <= len(section):
        magic, _version, header_size, size = struct.unpack_from("<IHHQ", section, offset)
        if magic != FATBIN_MAGIC:  # padding between two fatbins
            offset += 8
            continue
        entry, end = offset + header_size, offset + header_size + size
        while entry < end:
            kind, _version, entry_header, payload = struct.unpack_from("<HHIQ", section, entry)
            (sm,) = struct.unpack_from("<I", section, entry + 28)
            images.append((IMAGE_KINDS[kind], sm, section[entry + entry_header:entry + entry_header + payload]))
            entry += entry_header + payload
        offset = end
    return images


def _group_norm_source(store: BlobStore) -> str:
    """What the offline proposer writes for a bf16 group norm on an H200 (cuda_bf16.h and all)."""
    bf16 = torch.bfloat16
    args = [torch.randn(2, 128, 32, 32, dtype=bf16), torch.randn(128, dtype=bf16), torch.randn(128, dtype=bf16),
            2, 128, 1024, 32, 1e-6]
    card = card_from_call("aten::native_group_norm.default", args, {}, store)
    tensors = [{**t, "device": "cuda"} for t in card.key["tensors"]]
    card = OperatorCard.model_validate({**card.model_dump(), "device": "cuda",
                                        "key": {**card.key, "tensors": tensors}})
    plan = plan_for_card(card, "cuda")
    return plan.render("cuda", plan.knob_space("cuda", H200).default(), H200)


@needs_nvcc
def test_a_cuda_candidate_becomes_a_library_exporting_kf_launch_and_is_built_once(tmp_path: Path) -> None:
    assert NVCC is not None
    compiler = _compiler(NVCC, tmp_path)
    source = next(e.source for e in load_corpus("cuda") if e.name == "softmax_ok")
    built = asyncio.run(compiler.compile(source, []))
    assert built.library is not None and not built.cached, built.log
    assert "warning" not in built.log.lower(), built.log
    library = ctypes.CDLL(str(built.library))  # static cudart: loads without a driver
    assert library.kf_launch is not None
    again = asyncio.run(compiler.compile(source, []))
    assert again.cached and again.library == built.library and again.flags == built.flags


@needs_nvcc
def test_the_librarys_one_cubin_is_byte_for_byte_the_O3_device_build(tmp_path: Path, blob_store: BlobStore) -> None:
    """The build's host-side choices never reach the kernels, and no empty device-link cubin is added."""
    assert NVCC is not None
    source = _group_norm_source(blob_store)
    built = asyncio.run(_compiler(NVCC, tmp_path).compile(source, []))
    assert built.library is not None, built.log
    images = _fatbin_images(built.library)
    assert sorted((kind, sm) for kind, sm, _ in images) == [("elf", 90), ("ptx", 90)]
    cubin = next(image for kind, _, image in images if kind == "elf")

    path = tmp_path / "reference.cu"
    path.write_text(source)
    reference = subprocess.run([NVCC.compiler, "-cubin", f"-arch={ARCH}", "-O3", "-std=c++17", f"-I{INCLUDE_DIR}",
                                "-o", str(tmp_path / "reference.cubin"), str(path)], capture_output=True, text=True)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert cubin == (tmp_path / "reference.cubin").read_bytes()


def test_a_cpu_candidate_exports_kf_launch_and_a_compile_error_is_cached(tmp_path: Path) -> None:
    compiler = _compiler(detect_toolchain("cpu", "cpu"), tmp_path)
    source = ('#include "kf_abi.h"\nextern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, '
              "int32_t n_out, void *stream) { return n_in + n_out; }\n")
    built = asyncio.run(compiler.compile(source, []))
    assert built.library is not None, built.log
    launch = ctypes.CDLL(str(built.library)).kf_launch
    assert launch(None, 2, None, 3, None) == 5

    broken = asyncio.run(compiler.compile(source.replace("return", "retrun"), []))
    assert broken.library is None and "retrun" in broken.log
    again = asyncio.run(compiler.compile(source.replace("return", "retrun"), []))
    assert again.cached and again.library is None and again.log == broken.log
