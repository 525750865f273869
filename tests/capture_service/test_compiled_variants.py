import collections

import torch

from capture_service.blobs import BlobStore
from capture_service.compiled_variants import compiled_variant_records, relaid
from capture_service.options import CaptureOptions
from capture_service.recorder import OperatorRecorder
from capture_service.records import SamplePolicy, VariantRecord
from capture_service.session import capture_loaded
from capture_service.spec import load_model_spec
from capture_service.timing import TimingPolicy
from kforge_domain.card import CardSet
from packager.variant import TensorSignature, VariantKey, variant_key

FAST = TimingPolicy(warmup=1, min_reps=3, max_reps=5, budget_s=0.005)

TRANSPOSED_RESIDUAL = """
import torch
from torch import nn


class TransposedResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x):
        b, c, h, w = x.shape
        mixed = self.proj(x.reshape(b, c, h * w).transpose(1, 2)).transpose(1, 2).reshape(b, c, h, w)
        return self.norm(self.conv(mixed + x))


def get_model():
    torch.manual_seed(0)
    return TransposedResidual().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(1, 8, 4, 4)
"""

UNTRACEABLE = """
import torch


@torch.library.custom_op("kforge_spec::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


class Untraceable(torch.nn.Module):
    def forward(self, x):
        return torch.relu(opaque(x) * 2)


def get_model():
    return Untraceable()


def get_inputs():
    return torch.randn(4, 8)
"""


def _capture(spec, out, trace_compiled: bool = True, stages: list[str] | None = None) -> CardSet:
    messages = stages if stages is not None else []
    return capture_loaded(str(spec), load_model_spec(str(spec)), CaptureOptions(trace_compiled=trace_compiled),
                          out, progress=lambda p: messages.append(p.message), timing=FAST)


def test_capture_cards_the_layout_only_the_compiled_graph_gives_a_call(write_spec, tmp_path) -> None:
    spec = write_spec(TRANSPOSED_RESIDUAL, "residual.py")
    cards = _capture(spec, tmp_path / "traced")
    norms = {card.compiled_only: card for card in cards.cards if card.op == "aten::group_norm.default"}
    eager, compiled = norms[False], norms[True]
    assert eager.inputs[0].stride == [128, 16, 4, 1] and compiled.inputs[0].stride == [128, 1, 32, 8]
    assert compiled.template == eager.template and compiled.call_count == 1 and compiled.eager_us
    store = BlobStore(tmp_path / "traced")
    x, weight, bias = store.read_tensors(compiled.samples[0].inputs_blob)
    (out,) = store.read_tensors(compiled.samples[0].outputs_blob)
    assert torch.allclose(torch.nn.functional.group_norm(x, 2, weight, bias), out, atol=1e-6)
    eager_aten = [c for c in cards.cards if c.kind == "aten" and not c.compiled_only]
    assert abs(sum(c.time_share for c in eager_aten) - 1.0) < 1e-9  # compiled-only time is no eager time
    assert compiled.time_share > 0
    plain = _capture(spec, tmp_path / "plain", trace_compiled=False)
    assert not any(c.compiled_only for c in plain.cards)
    assert {c.id for c in plain.cards} == {c.id for c in cards.cards if not c.compiled_only}


def test_a_model_that_cannot_be_traced_keeps_its_eager_cards(write_spec, tmp_path) -> None:
    spec = write_spec(UNTRACEABLE, "untraceable.py")
    messages: list[str] = []
    cards = _capture(spec, tmp_path / "out", stages=messages)
    assert {"aten::mul.Tensor", "aten::relu.default"} <= {c.op for c in cards.cards}
    assert not any(c.compiled_only for c in cards.cards)
    assert any(m.startswith("no compiled layouts: tracing the model as torch.compile does failed: ")
               for m in messages)


def _add_records() -> list[VariantRecord]:
    recorder = OperatorRecorder(SamplePolicy(2, 1 << 20))
    x = torch.randn(2, 3, 4, 5)
    with torch.inference_mode(), recorder:
        torch.add(x, 1.5)
        torch.add(x, 1.5)
    return list(recorder.records.values())


def _traced(args: tuple[object, ...], stride: tuple[int, ...], offset: int = 0) -> VariantKey:
    key = variant_key("aten::add.Tensor", args, {})
    (signature,) = key.tensors
    return key._replace(tensors=(signature._replace(stride=stride, storage_offset=offset),))


def test_derived_records_take_only_new_layouts_of_a_captured_call() -> None:
    records = _add_records()
    (source,) = records
    x = source.samples[0].inputs[0]
    channels_last = (60, 1, 15, 3)
    traced = collections.Counter({
        _traced((x, 1.5), x.stride()): 4,  # eager's own layout
        _traced((x, 1.5), channels_last): 2,
        _traced((x, 1.5), channels_last, offset=60): 1,  # the same layout at another offset
        _traced((x, 2.5), channels_last): 5,  # another call: no eager record to derive from
        _traced((x, 1.5), (0, 0, 0, 0)): 3,  # overlapping memory: not a layout a call's own tensor has
    })
    (derived,) = compiled_variant_records(records, traced, SamplePolicy(2, 1 << 20))
    assert derived.compiled_only and derived.call_count == 3 and derived.op == source.op
    assert derived.key.tensors[0].stride == channels_last and derived.key.template == source.key.template
    sample = derived.samples[0]
    assert sample.inputs[0].stride() == channels_last and torch.equal(sample.inputs[0], x)
    assert torch.equal(sample.outputs[0], x + 1.5)
    assert len(derived.samples) == len(source.samples)


def test_relaid_copies_values_into_the_layout_and_offset_asked_for() -> None:
    values = torch.arange(24.0).reshape(2, 3, 4)
    signature = TensorSignature((2, 3, 4), (1, 2, 6), "float32", 5, True, "cpu")
    copy = relaid(values, signature, torch.device("cpu"))
    assert copy.stride() == (1, 2, 6) and copy.storage_offset() == 5 and torch.equal(copy, values)
