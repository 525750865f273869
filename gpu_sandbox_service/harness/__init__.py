"""The harness: the program that runs inside a candidate's isolated process.

It rebuilds the card's tensors, computes eager references before the candidate is loaded,
then verifies and times the candidate against eager, and writes one
:class:`~gpu_sandbox_service.harness.protocol.HarnessReport` to its result pipe.
"""
