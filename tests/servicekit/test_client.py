import asyncio
import logging
import re

import pytest

from servicekit.client import channel
from servicekit.errors import ConfigurationError
from servicekit.security import Security


@pytest.mark.parametrize("address", ["192.0.2.10:50054", "sandbox.lab:50054", "dns:///sandbox.lab:50054"])
def test_plain_text_to_another_machine_needs_insecure(address):
    expected = re.escape(f"refusing a plain-text connection to non-loopback address {address}")
    with pytest.raises(ConfigurationError, match=expected):
        channel(address, Security(token="t"))


def test_insecure_client_may_dial_plain_text_with_a_warning(caplog):
    async def scenario():
        ch = channel("192.0.2.10:50054", Security(insecure=True))
        await ch.close()

    with caplog.at_level(logging.WARNING, logger="servicekit.client"):
        asyncio.run(scenario())
    assert "plain text because --insecure" in caplog.text


def test_client_with_a_missing_ca_file_fails_at_once(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read the TLS CA"):
        channel("192.0.2.10:50054", Security(tls_ca=tmp_path / "nope.pem"))
