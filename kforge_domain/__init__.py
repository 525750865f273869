"""The concepts every service shares, free of gRPC and of any service.

- :mod:`kforge_domain.card`: the operator card (``OperatorCard``, ``CardSet``, ``TensorSpec``, ``Sample``).
- :mod:`kforge_domain.dtypes`: the kernel ABI's dtype codes and element sizes by dtype name.
- :mod:`kforge_domain.floor`: a card's memory-bandwidth floor.
- :mod:`kforge_domain.verdict`: the verdict on a candidate, a build failure or the figures of a run.
- :mod:`kforge_domain.result`: a candidate's result, its verdict with the evidence around it.
- :mod:`kforge_domain.cost`: what proposing cost (tokens, dollars) and each LLM exchange.
- :mod:`kforge_domain.device`: what a sandbox runs on (``DeviceInfo``).
- :mod:`kforge_domain.propose_request`, :mod:`kforge_domain.evaluate_request`: what the forge asks the
  agent (``ProposeRequest``) and a sandbox (``EvaluateRequest``).
- :mod:`kforge_domain.blobs`: how content-addressed blobs are named.
- :mod:`kforge_domain.backends`, :mod:`kforge_domain.paths`: the backend names and the default runs folder.

Every service imports these from here; converters to and from proto live outside the package
(``servicekit.convert``). Every module but ``card`` imports only the standard library, so the
dependency-light ``packager`` runtime may use them; ``card`` needs pydantic. This file imports
nothing, so importing one module never loads another.
"""
