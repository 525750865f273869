"""Building an operator card from a real call, for tests, benchmarks and ad-hoc evaluation.

Capture builds cards from a whole model; this makes one from a single aten call so the sandbox
can be exercised without the capture service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from safetensors.torch import save

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.harness.reference import flatten_tensors, resolve_aten
from kforge_domain.blobs import INPUT_PREFIX, OUTPUT_PREFIX, sample_key
from kforge_domain.card import OperatorCard, Sample, TensorSpec
from packager.variant import decode_call, dtype_name, encode_call, variant_key


def tensor_spec(tensor: torch.Tensor) -> TensorSpec:
    return TensorSpec(shape=list(tensor.shape), stride=list(tensor.stride()), dtype=dtype_name(tensor.dtype),
                      storage_offset=int(tensor.storage_offset()), aligned16=tensor.data_ptr() % 16 == 0)

def card_from_call(op: str, args: Sequence[object], kwargs: Mapping[str, object], store: BlobStore,
                   samples: int = 1) -> OperatorCard:
    """The card of ``op(*args, **kwargs)`` with ``samples`` captured samples stored in ``store``.

    The first sample is the call itself; further samples redraw float inputs with ``randn_like``.
    """
    overload = resolve_aten(op)
    template, tensors = encode_call(args, kwargs)
    outputs = flatten_tensors(overload(*args, **kwargs))
    card_samples = []
    for i in range(samples):
        current = tensors if i == 0 else [torch.randn_like(t) if t.is_floating_point() else t for t in tensors]

        call_args, call_kwargs = decode_call(template, [t.clone() for t in current])
        produced = flatten_tensors(overload(*call_args, **call_kwargs))
        inputs_blob = store.put_bytes(save({sample_key(INPUT_PREFIX, k): t.detach().cpu().contiguous()
                                            for k, t in enumerate(current)}))
        outputs_blob = store.put_bytes(save({sample_key(OUTPUT_PREFIX, k): t.detach().cpu().contiguous()
                                             for k, t in enumerate(produced)}))
        card_samples.append(Sample(inputs_blob=inputs_blob, outputs_blob=outputs_blob))
    key = variant_key(op, args, kwargs)
    device = tensors[0].device.type if tensors else "cpu"
    return OperatorCard(
        id=key.id, kind="aten", op=op, device=device, key=key.to_json(), inputs=[tensor_spec(t) for t in tensors],
        outputs=[tensor_spec(t) for t in outputs], call_count=1, samples=card_samples,
    )
