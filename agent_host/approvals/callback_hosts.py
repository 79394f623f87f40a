"""Where decision callbacks may go: an operator's allow-list (`COUNTERSIGN_CALLBACK_HOSTS`).

A callback URL names a host the caller chose, and countersign POSTs to it from inside the
operator's network; without a list, any caller holding the API token could make it reach
internal services. So only listed hosts are called: `host` (any port) or `host:port`, and
a loopback or private address only when it is listed itself. A listed *name* is not
trusted with where it points: one that resolves to a loopback, link-local (169.254.169.254,
where most clouds serve instance metadata), unspecified, multicast or reserved address is
not called (`unroutable`; its owner's DNS could point it there), nor one that does so
between the check and the connection (see `agent_host.durable.callbacks`). Private
networks' addresses are reachable by name, a metadata service at one included. Redirects
are not followed either, so a listed host cannot bounce a callback elsewhere.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["CALLBACK_HOSTS_VAR", "callback_refusal", "parse_callback_hosts", "unroutable"]

CALLBACK_HOSTS_VAR = "COUNTERSIGN_CALLBACK_HOSTS"
MAX_URL_LENGTH = 2048


def parse_callback_hosts(text: str) -> frozenset[str]:
    """`host[:port]` entries, comma-separated, lower-cased."""
    return frozenset(h.strip().lower() for h in text.split(",") if h.strip())


def callback_refusal(url: str, allowed: frozenset[str]) -> str:
    """Why `url` may not receive callbacks, in words that say what to do; empty if it may."""
    if len(url) > MAX_URL_LENGTH:
        return f"callback_url is longer than {MAX_URL_LENGTH} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"callback_url is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "callback_url must be an absolute http:// or https:// URL"
    if parts.username is not None or parts.password is not None:
        return "callback_url must not carry credentials; the callback is signed instead"
    host = parts.hostname.lower()
    default_port = 443 if parts.scheme == "https" else 80
    netloc = f"{host}:{port or default_port}"
    bracketed = f"[{host}]:{port or default_port}" if ":" in host else netloc
    if host in allowed or netloc in allowed or bracketed in allowed or f"[{host}]" in allowed:
        return ""
    return (
        f"callbacks to {netloc} are not allowed: add it to {CALLBACK_HOSTS_VAR} "
        "(comma-separated host or host:port) on the countersign server"
    )


def unroutable(address: str) -> bool:
    """Whether a host name resolving to `address` may not be called: loopback, link-local,
    unspecified, multicast or reserved (an IPv4 address written as IPv6 too). Private
    networks' addresses may: a listed internal name is how a callback reaches an internal
    service. To call such an address anyway, list the address itself."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # (an IPv6 scope id dropped)
    except ValueError:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback
        or ip.is_link_local
        or ip.is_unspecified
        or ip.is_multicast
        or (ip.is_reserved)
    )
