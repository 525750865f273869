"""The paper's four models as model specs, built from their libraries' configuration classes.

Each module here is a model spec (``get_model()`` and ``get_inputs()``) that ``kforge
capture`` and ``kforge optimize`` take by path. Weights are random (nothing is downloaded);
the architecture, widths, head counts, activations, normalisations, routing and dtypes are
the published model's, with depth reduced where noted, because per-layer operator variants
are what kernels are specialised for and depth only repeats them. See
:mod:`examples.paper.settings` for the size, variant and device knobs.
"""

#: Spec module names, in the paper's order.
PAPER_MODELS = ("resnet50", "sd35_mmdit", "sd35_vae_decoder", "gemma4_e2b", "qwen35_moe")
