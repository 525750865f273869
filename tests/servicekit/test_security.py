from pathlib import Path

import pytest

from servicekit.errors import ConfigurationError
from servicekit.security import Security, scrubbed_environ, token_fingerprint

SECRET = "s3cr3t-token-value"


def test_repr_and_str_hide_the_token():
    security = Security(token=SECRET, tls_ca=Path("/etc/ca.pem"))
    for text in (repr(security), str(security), f"{security}", repr([security])):
        assert SECRET not in text
        assert "<hidden>" in text
        assert "/etc/ca.pem" in text


def test_paths_given_as_strings_become_paths():
    security = Security(tls_cert="a.pem", tls_key="a.key")  # type: ignore[arg-type]
    assert security.tls_cert == Path("a.pem")
    assert security.uses_tls


@pytest.mark.parametrize("kwargs", [{"tls_cert": Path("c.pem")}, {"tls_key": Path("k.pem")}])
def test_cert_without_key_is_refused(kwargs):
    with pytest.raises(ConfigurationError, match="--tls-cert and --tls-key"):
        Security(**kwargs)


@pytest.mark.parametrize("bad", ["", " padded", "two words", "line\nbreak", "naïve"])
def test_malformed_tokens_are_refused(bad):
    with pytest.raises(ConfigurationError, match="token"):
        Security(token=bad)


def test_uses_tls_for_a_client_with_only_a_ca():
    assert Security(tls_ca=Path("ca.pem")).uses_tls
    assert not Security(token=SECRET).uses_tls


def test_fingerprint_identifies_without_revealing():
    fingerprint = Security(token=SECRET).token_fingerprint
    assert fingerprint == token_fingerprint(SECRET)
    assert fingerprint is not None and len(fingerprint) == 12 and SECRET not in fingerprint
    assert token_fingerprint("other") != fingerprint
    assert Security().token_fingerprint is None


def test_scrubbed_environ_drops_the_token():
    env = {"KFORGE_TOKEN": SECRET, "PATH": "/usr/bin"}
    assert scrubbed_environ(env) == {"PATH": "/usr/bin"}
    assert env["KFORGE_TOKEN"] == SECRET
