from __future__ import annotations

import torch

from kforge_domain.card import OperatorCard, TensorSpec
from packager.variant import variant_key


def make_card(op: str = "aten::relu.default", shape: tuple[int, ...] = (64, 64), *, time_share: float = 0.5,
              eager_us: float = 10.0, vendor: bool = False, optimisable: bool = True, dtype: str = "float32"
              ) -> OperatorCard:
    """A card for a one-tensor call, built the way capture builds it."""
    x = torch.empty(shape, dtype=getattr(torch, dtype))
    key = variant_key(op, [x], {})
    spec = TensorSpec(shape=list(shape), stride=list(x.stride()), dtype=dtype)
    return OperatorCard(
        id=key.id + ("" if optimisable else "n"), kind="aten", op=op, device="cpu", key=key.to_json(),
        inputs=[spec], outputs=[spec], time_share=time_share, eager_us=eager_us,
        vendor_op=vendor, optimisable=optimisable, reason="" if optimisable else "a view",
    )
