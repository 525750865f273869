"""Deprecated location of the card model, kept only as a thin re-export.

The card lives in :mod:`kforge_domain.card`; every service imports it from there. This module
remains for ``agent_service/offline/rowwise.py`` and ``agent_service/offline/catalog.py`` until
they move to the domain import; nothing else may use it (``tests/test_layering.py``).
"""

from kforge_domain.card import BLOBS_DIR, CARDS_FILE, SCHEMA_VERSION, CardSet, OperatorCard, Sample, TensorSpec

__all__ = ["BLOBS_DIR", "CARDS_FILE", "SCHEMA_VERSION", "CardSet", "OperatorCard", "Sample", "TensorSpec"]
