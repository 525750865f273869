"""The offline proposer: parameterised kernel templates per operator family, no key, no network."""
