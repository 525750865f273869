import argparse
import logging
import urllib.request

import pytest

from servicekit.cli_options import (
    add_metrics_arguments,
    add_security_arguments,
    read_token_file,
    security_from_args,
    start_metrics_from_args,
)
from servicekit.errors import ConfigurationError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_security_arguments(parser)
    add_metrics_arguments(parser)
    return parser.parse_args(list(argv))


def _token_file(tmp_path, text="tok-123\n", mode=0o600):
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_all_options_reach_security(tmp_path):
    token = _token_file(tmp_path)
    args = _parse(
        "--tls-cert", "s.pem", "--tls-key", "s.key", "--tls-ca", "ca.pem",
        "--tls-server-name", "sandbox.lab", "--token-file", str(token), "--insecure",
    )  # fmt: skip
    security = security_from_args(args, environ={})
    assert (str(security.tls_cert), str(security.tls_key), str(security.tls_ca)) == ("s.pem", "s.key", "ca.pem")
    assert security.token == "tok-123"
    assert security.insecure and security.tls_server_name == "sandbox.lab"


def test_defaults_are_plain_loopback():
    security = security_from_args(_parse(), environ={})
    assert security.token is None and not security.uses_tls and not security.insecure


def test_token_from_environment_is_removed_once_read():
    env = {"KFORGE_TOKEN": "from-env", "HOME": "/root"}
    assert security_from_args(_parse(), environ=env).token == "from-env"
    assert env == {"HOME": "/root"}


def test_token_file_and_environment_together_are_ambiguous(tmp_path):
    with pytest.raises(ConfigurationError, match="either --token-file or KFORGE_TOKEN"):
        security_from_args(_parse("--token-file", str(_token_file(tmp_path))), environ={"KFORGE_TOKEN": "x"})


def test_unreadable_or_empty_token_file(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read the token file"):
        read_token_file(tmp_path / "absent")
    with pytest.raises(ConfigurationError, match="is empty"):
        read_token_file(_token_file(tmp_path, text="  \n"))


def test_world_readable_token_file_warns(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="servicekit.cli_options"):
        assert read_token_file(_token_file(tmp_path, mode=0o644)) == "tok-123"
    assert "readable by other users" in caplog.text
    assert "tok-123" not in caplog.text


def test_cert_without_key_is_a_clear_error():
    with pytest.raises(ConfigurationError, match="--tls-cert and --tls-key must be given together"):
        security_from_args(_parse("--tls-cert", "s.pem"), environ={})


def test_metrics_endpoint_from_arguments():
    assert start_metrics_from_args(_parse()) is None
    server = start_metrics_from_args(_parse("--metrics-port", "0"))
    assert server is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
            assert response.status == 200
    finally:
        server.close()
    with pytest.raises(ConfigurationError, match="--metrics-port must be"):
        start_metrics_from_args(_parse("--metrics-port", "70000"))
