"""Native parts of the runtime: C++ built on first use against the torch in this process.

A .cast carries no code built against torch (kernels see only ``kf_abi.h``), so a runtime helper
that must sit inside torch's dispatcher is compiled where the cast runs, with the C++ compiler
torch's own extensions and inductor use, and cached per source and torch build. Where it cannot
be built the runtime keeps its Python path: same results, more host time per call.
"""
