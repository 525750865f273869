"""Which kernels compiled graphs leave to inductor before anything is measured: pointwise work.

Inductor fuses a chain of pointwise ops (and dtype conversions) into the kernels around it, so
the chain costs no memory pass of its own; a kernel of ours in its place is an opaque op that
reads and writes its tensors in full, which the fused graph never did (on the H200 one
``aten::mul.Tensor`` kernel, 2.25x eager on its own, made the compiled SD3.5 MMDiT 12% slower).
Leaving such kernels out of compiled modes up front spares the end-to-end check a compile per
kernel it would prune anyway; eager calls keep them. The model's own forward is the exception: a
card of the root module is the whole compiled graph, with no kernel around it to fuse into, so
the end-to-end measurement decides it like any other kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Conversions inductor fuses like pointwise ops, though torch does not tag them so.
FUSED_CONVERSIONS = frozenset({"aten::to.dtype", "aten::_to_copy.default", "aten::type_as.default"})

FUSED_REASON = ("left to inductor: pointwise work, which inductor fuses into the kernels around it "
                "(a kernel of its own would cost the graph a memory pass)")


def is_pointwise(op: str) -> bool:
    """``op`` (``aten::name.overload``) is tagged pointwise by torch, or is a dtype conversion."""
    import torch  # imported here: the forge imports its packaging without torch

    from packager.aten_dispatch import UnsupportedOp, resolve_overload

    if op in FUSED_CONVERSIONS:
        return True
    try:
        overload = resolve_overload(op)
    except UnsupportedOp:  # not an aten overload this torch knows: nothing to say about it
        return False
    return torch.Tag.pointwise in overload.tags


def is_whole_forward(card: Mapping[str, Any]) -> bool:
    """A module card seen only as the model itself (its one module path is the root's, ``""``)."""
    paths = card.get("module_paths") or []
    return card.get("kind") == "module" and bool(paths) and all(path == "" for path in paths)


def fused_by_inductor(card: Mapping[str, Any]) -> bool:
    """The card (its JSON) computes only pointwise work inside a larger graph: an aten card of a
    pointwise op, or a module card below the model's root whose described forward calls nothing else."""
    if card.get("kind") == "aten":
        return is_pointwise(str(card.get("op", "")))
    if is_whole_forward(card):
        return False
    nodes = (card.get("module_graph") or {}).get("nodes") or []
    return bool(nodes) and all(is_pointwise(str(node.get("op", ""))) for node in nodes)
