"""The callback allow-list (COUNTERSIGN_CALLBACK_HOSTS): only listed hosts, loopback and
private addresses only when listed themselves, no credentials, http(s) only."""

from __future__ import annotations

import pytest

from agent_host.approvals.callback_hosts import callback_refusal, parse_callback_hosts, unroutable

LISTED = parse_callback_hosts(" hooks.example.com, 127.0.0.1:8080 ,[::1]:9000,Ops.Example.com:443")


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/countersign",
        "http://hooks.example.com:9999/any-port-of-a-host-listed-without-one",
        "http://127.0.0.1:8080/hook",
        "http://[::1]:9000/hook",
        "https://OPS.example.com/hook",
    ],
)
def test_listed_hosts_are_allowed(url: str) -> None:
    assert callback_refusal(url, LISTED) == ""


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:8081/hook", "127.0.0.1:8081 are not allowed"),
        ("http://localhost:8080/hook", "add it to COUNTERSIGN_CALLBACK_HOSTS"),
        ("http://10.0.0.1/hook", "10.0.0.1:80"),
        ("http://169.254.169.254/latest/meta-data", "not allowed"),
        ("https://ops.example.com:8443/hook", "ops.example.com:8443"),
        ("https://user:pw@hooks.example.com/hook", "credentials"),
        ("file:///etc/passwd", "http:// or https://"),
        ("hooks.example.com/hook", "absolute"),
        ("http://hooks.example.com:99999/", "not a valid URL"),
        ("https://hooks.example.com/" + "a" * 3000, "longer than"),
    ],
)
def test_anything_else_is_refused_saying_what_to_set(url: str, says: str) -> None:
    assert says in callback_refusal(url, LISTED)


def test_nothing_is_allowed_by_default() -> None:
    assert "not allowed" in callback_refusal("https://example.com/", parse_callback_hosts(""))


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("169.254.169.254", True),  # where most clouds serve instance metadata
        ("fe80::1%eth0", True),
        ("0.0.0.0", True),
        ("::", True),
        ("224.0.0.1", True),
        ("240.0.0.1", True),
        ("::ffff:127.0.0.1", True),  # loopback written as IPv6
        ("::ffff:169.254.169.254", True),
        ("not an address", True),
        ("10.1.2.3", False),  # an internal service, by its listed name
        ("192.168.0.10", False),
        ("fd00::5", False),
        ("93.184.216.34", False),
        ("2606:2800:220:1::1", False),
    ],
)
def test_a_listed_name_may_not_lead_to_loopback_link_local_or_reserved_addresses(
    address: str, refused: bool
) -> None:
    assert unroutable(address) is refused
