"""Which server URLs the check calls: any locally; on a public demo only those listed, never a non-public address."""

import pytest

from specdec_core.served.addresses import ALLOWLIST_VARIABLE, PUBLIC_RULE, server_address
from specdec_core.served.errors import ServerError


@pytest.fixture
def public(monkeypatch):
    monkeypatch.setenv("SPECDEC_PUBLIC", "1")
    monkeypatch.delenv("SPACE_ID", raising=False)
    return lambda listed: monkeypatch.setenv(ALLOWLIST_VARIABLE, listed)


@pytest.fixture
def local(monkeypatch):
    monkeypatch.delenv("SPECDEC_PUBLIC", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)


@pytest.mark.parametrize(
    "typed, root",
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
        ("  https://serving.example.com/team/llm/v1 ", "https://serving.example.com/team/llm"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_locally_any_http_server_is_called_at_its_root(local, typed, root):
    address = server_address(typed)
    assert address.root == root
    assert address.api_base == root + "/v1" and address.metrics_url == root + "/metrics"


@pytest.mark.parametrize(
    "typed, message",
    [
        ("", "No server URL given"),
        ("127.0.0.1:8000", "must start with http:// or https://"),
        ("file:///etc/passwd", "must start with http:// or https://"),
        ("http://user:secret@127.0.0.1:8000", "no user name, password"),
        ("http://127.0.0.1:8000/v1?debug=1", "no user name, password, query"),
    ],
)
def test_what_is_not_a_server_url_gets_a_one_line_message(local, typed, message):
    with pytest.raises(ServerError, match=message) as raised:
        server_address(typed)
    assert "\n" not in str(raised.value) and "secret" not in str(raised.value)


def test_in_public_mode_the_server_source_is_off_without_an_allowlist(public):
    public("")
    with pytest.raises(ServerError) as raised:
        server_address("http://8.8.8.8:8000/v1")
    assert str(raised.value) == PUBLIC_RULE
    assert ALLOWLIST_VARIABLE in PUBLIC_RULE and "loopback, link-local or private" in PUBLIC_RULE


def test_in_public_mode_a_listed_public_server_is_called_and_an_unlisted_one_refused(public):
    public("http://8.8.8.8:8000/v1/, not a url, https://1.1.1.1")
    assert server_address("http://8.8.8.8:8000").root == "http://8.8.8.8:8000"  # listed with /v1/: the same root
    assert server_address("https://1.1.1.1/v1").root == "https://1.1.1.1"
    with pytest.raises(ServerError, match="only the servers its owner listed"):
        server_address("http://8.8.4.4:8000/v1")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",  # loopback
        "http://localhost:8000",  # a name that resolves to loopback
        "http://[::1]:8000",  # IPv6 loopback
        "http://169.254.169.254",  # link-local: a cloud's metadata service
        "http://10.1.2.3:8000",  # private
        "http://192.168.0.10",  # private
        "http://[::ffff:127.0.0.1]:8000",  # loopback written as IPv6
        "http://0.0.0.0:8000",  # unspecified
    ],
)
def test_in_public_mode_non_public_addresses_are_refused_even_when_listed(public, url):
    public(url)
    with pytest.raises(ServerError) as raised:
        server_address(url)
    assert str(raised.value) == PUBLIC_RULE


def test_in_public_mode_a_listed_host_that_does_not_resolve_is_refused(public):
    public("http://no-such-host.invalid:8000")
    with pytest.raises(ServerError, match="does not resolve"):
        server_address("http://no-such-host.invalid:8000/v1")
