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
from gpu_sandbox_service.harness.tensors import allocate, assign
from kforge_domain.blobs import INPUT_PREFIX, OUTPUT_PREFIX, sample_key
from kforge_domain.card import OperatorCard, Sample, TensorSpec
from packager.variant import decode_call, dtype_name, encode_call, line_offset, variant_key


def tensor_spec(tensor: torch.Tensor) -> TensorSpec:
    return TensorSpec(shape=list(tensor.shape), stride=list(tensor.stride()), dtype=dtype_name(tensor.dtype),
                      storage_offset=line_offset(tensor), aligned16=tensor.data_ptr() % 16 == 0)


def card_from_call(op: str, args: Sequence[object], kwargs: Mapping[str, object], store: BlobStore,
                   samples: int = 1) -> OperatorCard:
    """The card of ``op(*args, **kwargs)`` with ``samples`` captured samples stored in ``store``.

    The first sample is the call itself; further samples redraw float inputs with ``randn_like``.
    """
    overload = resolve_aten(op)
    template, tensors = encode_call(args, kwargs)
    # run on exact copies: an op that mutates an input must leave the samples' values as they were
    copies = [_clone_exact(t) for t in tensors]
    copy_args, copy_kwargs = decode_call(template, copies)
    outputs = flatten_tensors(overload(*copy_args, **copy_kwargs))
    mutated = mutated_inputs(overload, copy_args, copy_kwargs, copies)
    card_samples = []
    for i in range(samples):
        current = tensors if i == 0 else [torch.randn_like(t) if t.is_floating_point() else t for t in tensors]

        call_args, call_kwargs = decode_call(template, [_clone_exact(t) for t in current])
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
        outputs=[tensor_spec(t) for t in outputs], mutated_inputs=mutated, call_count=1, samples=card_samples,
    )


def _clone_exact(tensor: torch.Tensor) -> torch.Tensor:
    """A copy with the same shape, strides and storage offset (broadcast dimensions kept)."""
    copy = allocate(tensor_spec(tensor), str(tensor.device))
    assign(copy, tensor.detach())
    return copy


def mutated_inputs(overload: torch._ops.OpOverload, args: Sequence[object], kwargs: Mapping[str, object],
                    tensors: Sequence[torch.Tensor]) -> list[int]:
    """Indices into ``tensors`` of the arguments the schema marks written (``self`` of ``add_``)."""
    schema = overload._schema.arguments
    bound = {a.name: (args[k] if k < len(args) else kwargs.get(a.name)) for k, a in enumerate(schema)}
    written = {id(bound[a.name]) for a in schema if a.alias_info is not None and a.alias_info.is_write}
    return [i for i, t in enumerate(tensors) if id(t) in written]
