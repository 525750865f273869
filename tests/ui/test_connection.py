from __future__ import annotations

from pathlib import Path

import pytest

from servicekit.errors import ConfigurationError
from servicekit.security import Security
from ui.connection import DEFAULT_FORGE_ADDRESS, ForgeTarget, blocking_channel, call_metadata


def test_a_target_survives_the_trip_through_the_environment() -> None:
    target = ForgeTarget("forge.example:50050", Security(tls_ca=Path("/ca.pem"), tls_server_name="forge",
                                                         token="s3cret"))
    assert ForgeTarget.from_environ(target.to_environ()) == target
    plain = ForgeTarget("10.0.0.5:50050", Security(insecure=True))
    assert ForgeTarget.from_environ(plain.to_environ()) == plain
    assert ForgeTarget.from_environ({}).address == DEFAULT_FORGE_ADDRESS


def test_plain_text_to_another_machine_is_refused_unless_insecure() -> None:
    with pytest.raises(ConfigurationError, match="plain-text connection to non-loopback"):
        blocking_channel(ForgeTarget("10.0.0.5:50050", Security()))
    blocking_channel(ForgeTarget("10.0.0.5:50050", Security(insecure=True))).close()
    blocking_channel(ForgeTarget("127.0.0.1:50050", Security())).close()


def test_the_token_rides_as_metadata_with_or_without_tls() -> None:
    assert call_metadata(ForgeTarget("127.0.0.1:1", Security(token="t"))) == (("authorization", "Bearer t"),)
    with_tls = ForgeTarget("127.0.0.1:1", Security(token="t", tls_ca=Path("/ca.pem")))
    assert call_metadata(with_tls) == (("authorization", "Bearer t"),)
    assert call_metadata(ForgeTarget("127.0.0.1:1", Security())) == ()
