"""The callback allow-list (COUNTERSIGN_CALLBACK_HOSTS): only listed hosts, loopback and
private addresses only when listed themselves, no credentials, http(s) only."""

from __future__ import annotations

import pytest

from agent_host.approvals.callback_hosts import callback_refusal, parse_callback_hosts

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
