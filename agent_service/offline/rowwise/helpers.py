"""C pieces every row renderer shares: the cuda reduction helpers and the exp macro."""

from __future__ import annotations

from importlib import resources

#: kf_stat, the ops that merge it and the group/column reductions (row_helpers.cuh, package data).
CUDA_ROW_HELPERS = resources.files(__package__).joinpath("row_helpers.cuh").read_text(encoding="utf-8")


def math_macros(backend: str, fast: bool) -> str:
    """``KF_EXP``: the fast intrinsic (cuda ``__expf``, cpu ``kf_expf``) or libm's ``expf``."""
    if backend == "cuda":
        return "#define KF_EXP(v) __expf(v)\n" if fast else "#define KF_EXP(v) expf(v)\n"
    return "#define KF_EXP(v) kf_expf(v)\n" if fast else "#define KF_EXP(v) expf(v)\n"
