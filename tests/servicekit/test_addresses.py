import pytest

from servicekit.addresses import is_local_address, split_host


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1:0", "127.3.4.5:80", "localhost:50051", "[::1]:50051", "unix:/tmp/kf.sock", "dns:///localhost:1"],
)
def test_local_addresses(address):
    assert is_local_address(address)


@pytest.mark.parametrize(
    "address",
    ["0.0.0.0:50051", "[::]:50051", "192.0.2.10:1", "sandbox.lab:50054", "dns:///sandbox.lab:443", "ipv4:192.0.2.1:5"],
)
def test_addresses_reachable_from_elsewhere(address):
    assert not is_local_address(address)


def test_split_host_forms():
    assert split_host("[::1]:80") == "::1"
    assert split_host("host:80") == "host"
    assert split_host("dns://8.8.8.8/host:80") == "host"
