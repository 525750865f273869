"""Real kernels compiled with g++, real cards, and helpers to build .cast files from them."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from kforge_domain.card import OperatorCard, TensorSpec
from packager import load_cast
from packager.format import FallbackEntry, KernelEntry, ModelIdentity, build_cast
from packager.manifest import KEPT, ModeVerdict
from packager.runtime import host_cpu_arch
from packager.variant import (
    STATE_KWARG,
    dtype_name,
    encode_call,
    module_state,
    module_variant_key,
    qualified_class_name,
    variant_key,
)

REPO = Path(__file__).resolve().parents[2]
INCLUDE = REPO / "gpu_sandbox_service" / "include"
FLAGS = "-O3 -shared -fPIC -fopenmp"

KERNEL_PRELUDE = '#include "kf_abi.h"\n#include <math.h>\n#define KF extern "C" int kf_launch(' \
    'const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream)\n' \
    'static int64_t numel(const kf_tensor *t) { int64_t n = 1; for (int d = 0; d < t->ndim; ++d) ' \
    'n *= t->shape[d]; return n; }\n'

RELU = KERNEL_PRELUDE + """
KF {
  if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 2;
  const float *x = (const float *)in[0].data; float *y = (float *)out[0].data;
  int64_t n = numel(&in[0]);
  #pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
  return 0;
}
"""

SOFTMAX = KERNEL_PRELUDE + """
KF {
  if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32) return 2;
  int64_t cols = in[0].shape[in[0].ndim - 1], rows = numel(&in[0]) / cols;
  const float *x = (const float *)in[0].data; float *y = (float *)out[0].data;
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * cols; float *yr = y + r * cols;
    float m = xr[0]; for (int64_t c = 1; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
    float s = 0.f; for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
  }
  return 0;
}
"""

# relu(x) * weight, for ScaledRelu: inputs are x then the module's weight.
SCALED_RELU = KERNEL_PRELUDE + """
KF {
  if (n_in != 2 || n_out != 1) return 2;
  int64_t cols = in[1].shape[0], n = numel(&in[0]);
  const float *x = (const float *)in[0].data, *w = (const float *)in[1].data; float *y = (float *)out[0].data;
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] > 0.f ? x[i] : 0.f) * w[i % cols];
  return 0;
}
"""

FAILING = KERNEL_PRELUDE + "KF { return 7; }\n"


class ScaledRelu(torch.nn.Module):
    """A leaf module a module card replaces."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.weight


class SmallNet(torch.nn.Module):
    """Two ScaledRelu blocks and a softmax head."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.block1 = ScaledRelu(width)
        self.block2 = ScaledRelu(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.block2(self.block1(x)), dim=-1)


def compile_kernel(source: str, out_dir: Path, name: str) -> bytes:
    src = out_dir / f"{name}.cpp"
    lib = out_dir / f"{name}.so"
    src.write_text(source)
    subprocess.run(["g++", *FLAGS.split(), "-I", str(INCLUDE), str(src), "-o", str(lib)], check=True)
    return lib.read_bytes()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("kernels")
    return {name: compile_kernel(src, out, name) for name, src in
            {"relu": RELU, "softmax": SOFTMAX, "scaled_relu": SCALED_RELU, "failing": FAILING}.items()}


def _spec(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(shape=list(t.shape), stride=list(t.stride()), dtype=dtype_name(t.dtype),
                      storage_offset=t.storage_offset(), aligned16=t.data_ptr() % 16 == 0)


def aten_card(op: str, args: list[object], kwargs: dict[str, object], result: torch.Tensor) -> OperatorCard:
    key = variant_key(op, args, kwargs)
    _, tensors = encode_call(args, kwargs)
    return OperatorCard(id=key.id, kind="aten", op=op, device=tensors[0].device.type, key=key.to_json(),
                        inputs=[_spec(t) for t in tensors], outputs=[_spec(result)])


def module_card(module: torch.nn.Module, x: torch.Tensor, kwargs: dict[str, object] | None = None) -> OperatorCard:
    kwargs = kwargs or {}
    key = module_variant_key(module, [x], kwargs)
    _, tensors = encode_call([x], {**kwargs, STATE_KWARG: module_state(module)})
    with torch.no_grad():
        result = module(x, **kwargs)
    return OperatorCard(id=key.id, kind="module", op=qualified_class_name(module), device="cpu",
                        key=key.to_json(), inputs=[_spec(t) for t in tensors], outputs=[_spec(result)])


def relu_card(x: torch.Tensor) -> OperatorCard:
    return aten_card("aten::relu.default", [x], {}, torch.relu(x))


def softmax_card(x: torch.Tensor) -> OperatorCard:
    return aten_card("aten::_softmax.default", [x, -1, False], {}, torch.softmax(x, -1))


def entry(card: OperatorCard, source: str, artifact: bytes, *, arch: str | None = None,
          eager_us: float = 1000.0, kernel_us: float = 10.0) -> KernelEntry:
    arch = arch or host_cpu_arch()
    return KernelEntry(
        card_id=card.id, kind=card.kind, op=card.op, card_json=card.to_json(),
        backend="cuda" if arch.startswith("sm_") else "cpu", arch=arch, audit_class="custom",
        source=source, artifact=artifact, eager_latency_us=eager_us, eager_spread_us=1.0,
        latency_us=kernel_us, latency_spread_us=0.5, speedup=eager_us / kernel_us,
        rel_l2_error=1e-7, max_scaled_error=2e-7, source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        compiler_flags=FLAGS, toolchain="g++ 12", candidate_id=f"cand-{card.id[:6]}",
    )


def compiled_kept(*cards: OperatorCard, modes: tuple[str, ...] = ("compiled",)) -> dict[tuple[str, str], ModeVerdict]:
    """Verdicts letting compiled graphs of ``modes`` use these cards' kernels, as a run that measured
    them would."""
    return {(card.id, mode): ModeVerdict(KEPT, f"faster in {mode}") for card in cards for mode in modes}


MODEL = ModelIdentity(model_spec="tests/packager/conftest.py:SmallNet", name="SmallNet", run_id="run-1")


@dataclass
class CastFixture:
    path: Path
    x: torch.Tensor
    relu: OperatorCard
    softmax: OperatorCard


@pytest.fixture
def relu_softmax_cast(tmp_path: Path, artifacts: dict[str, bytes]) -> CastFixture:
    """A cast with a relu and a softmax kernel for float32 (4, 8) contiguous inputs."""
    x = torch.randn(4, 8)
    relu, softmax = relu_card(x), softmax_card(x)
    path = tmp_path / "model.cast"
    build_cast(path, MODEL, [entry(relu, RELU, artifacts["relu"]), entry(softmax, SOFTMAX, artifacts["softmax"])],
               [FallbackEntry("abc", "aten::addmm.default", "no kernel beat eager")])
    return CastFixture(path, x, relu, softmax)


@pytest.fixture
def net_cast(tmp_path: Path, artifacts: dict[str, bytes]):
    """A SmallNet and a cast with its ScaledRelu card (both blocks share it, a module card) and its
    softmax card (an aten card), both kept for compiled use; dynamo starts afresh."""
    net = SmallNet().eval()
    x = torch.randn(4, 8)
    block, head = module_card(net.block1, x), softmax_card(x)
    path = tmp_path / "net.cast"
    # Generous measured speedups: the guard's cost, measured at build time, must not decide these tests.
    build_cast(path, MODEL, [entry(block, SCALED_RELU, artifacts["scaled_relu"], eager_us=5000.0),
                             entry(head, SOFTMAX, artifacts["softmax"], eager_us=5000.0)], [],
               verdicts=compiled_kept(block, head))
    torch._dynamo.reset()
    return net, x, block, head, load_cast(path)
