import ssl

import pytest
from cryptography import x509

from servicekit.devcerts import main, make_certificates


def test_certificates_chain_to_the_ca_and_name_the_server(tmp_path):
    out = make_certificates(tmp_path, hosts=["sandbox.lab"], ips=["192.0.2.10"])
    server = x509.load_pem_x509_certificate(out.server_cert.read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "sandbox.lab" in sans.get_values_for_type(x509.DNSName)
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} >= {"192.0.2.10", "127.0.0.1"}
    context = ssl.create_default_context(cafile=str(out.ca_cert))
    context.load_cert_chain(out.client_cert, out.client_key)  # key matches certificate
    for private in (out.ca_key, out.server_key, out.client_key, out.token_file):
        assert private.stat().st_mode & 0o077 == 0
    assert len(out.token_file.read_text().strip()) >= 32


def test_cli_refuses_to_overwrite_a_ca_and_bad_ips(tmp_path, capsys):
    assert main([str(tmp_path / "c")]) == 0
    assert main([str(tmp_path / "c")]) == 1
    assert "already holds a CA" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path / "d"), "--ip", "not-an-ip"])
    assert refused.value.code == 2
    assert "is not an IP address" in capsys.readouterr().err
