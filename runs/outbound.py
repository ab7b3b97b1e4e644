"""Outbound HTTP to addresses people choose: an agent's base URL, a webhook URL, an `http.fetch`
URL. Two rules, shared by all three:

1. A URL is parsed and normalized once, where it enters, by the same parser that later sends
   (httpx's), so a URL that saves can always be sent: `http://localhost:abc/` or a fullwidth
   host name is refused at the form, not found broken at the first delivery.
2. Unless ALLOW_PRIVATE_ADDRESSES (on in development only), a connection goes only to a public
   address, and to exactly the address that was checked: the host name is resolved once, inside
   the connection, and the socket connects to the checked IP (TLS still verifies the name). A
   DNS answer that changes between a check and the connect ("rebinding") cannot reach the
   internal network. Hosts on an operator allow-list (PROVIDER_ALLOWED_HOSTS, for a vLLM or
   Ollama on a private network) skip the address check, never the parsing.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
import threading
import typing
from collections.abc import Callable, Iterable

import httpcore
import httpx
from django.conf import settings

Resolver = Callable[[str, int], list[str]]

# IPv6 ranges that carry an IPv4 address inside them: the embedded address is what is reached.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_6TO4 = ipaddress.ip_network("2002::/16")
_COMPATIBLE = ipaddress.ip_network("::/96")  # the deprecated ::a.b.c.d form
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT's IPv4-translated form (RFC 2765)
# Local-use NAT64 (RFC 8215): an operator's own translator, which reaches whatever it is set up to
# reach; never a public destination.
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")


class UnsafeURL(ValueError):
    """A URL that cannot be used here; the message says why, in words for the person who typed it."""


def normalize_url(url: str, *, field: str, schemes: Iterable[str] = ("https", "http")) -> str:
    """The URL as httpx will send it, or UnsafeURL naming `field`."""
    text = url.strip()
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise UnsafeURL(f"{field} is not a usable URL ({_reason(exc)})") from None
    allowed = tuple(schemes)
    if parsed.scheme not in allowed or not parsed.host:
        kind = "http(s)" if set(allowed) == {"http", "https"} else f"{allowed[0]}://"
        raise UnsafeURL(f"{field} must be an absolute {kind} URL")
    if parsed.userinfo:
        raise UnsafeURL(f"{field} must not carry a user name or password")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise UnsafeURL(f"{field} has a port outside 1-65535")
    return str(parsed)


def _reason(exc: Exception) -> str:
    text = str(exc).split(",")[0].strip().rstrip(".")
    return text[:80] or type(exc).__name__


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to (mapped, NAT64, 6to4, IPv4-compatible)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64 or address in _TRANSLATED or (address in _COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _6TO4:
        return address.sixtofour
    return None


def address_problem(ip: str) -> str:
    """Why a connection may not go to this address ("" when it may): private, loopback,
    link-local, reserved, or an IPv6 form of one of those."""
    try:
        address = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return "does not resolve to an IP address"
    inner = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if not address.is_global or (inner is not None and not inner.is_global) or address in _LOCAL_NAT64:
        return "points to a private or reserved network address"
    if address.is_multicast or (inner is not None and inner.is_multicast):
        return "points to a multicast address"
    return ""


def resolve(host: str, port: int) -> list[str]:
    """Every address the host name resolves to, in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _system_resolver(host: str, port: int) -> list[str]:
    return resolve(host, port)  # looked up when called, so tests can point names at addresses


def host_problem(host: str, *, resolver: Resolver | None = None, allowed_hosts: Iterable[str] = ()) -> str:
    """Why `host` may not be reached ("" when it may), checked now; for saving a URL."""
    if host in set(allowed_hosts):
        return ""
    try:
        addresses = (resolver or _system_resolver)(host, 443)
    except (OSError, UnicodeError):
        return "has a host name that does not resolve"
    return next((problem for problem in map(address_problem, addresses) if problem), "")


class CheckedBackend(httpcore.NetworkBackend):
    """httpcore's network backend that resolves, checks and connects to the checked address."""

    def __init__(self, *, allowed_hosts: Iterable[str] = (), resolver: Resolver | None = None) -> None:
        self.allowed_hosts = frozenset(allowed_hosts)
        self.resolver = resolver or _system_resolver
        self.inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = self.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"{host} does not resolve ({type(exc).__name__})") from None
        if host not in self.allowed_hosts:
            problems = [p for p in map(address_problem, addresses) if p] or (
                [] if addresses else ["has no address"]
            )
            if problems:
                raise httpcore.ConnectError(f"refused to connect: {host} {problems[0]}")
        last: Exception | None = None
        for address in addresses:  # the checked addresses, never a fresh lookup
            try:
                return self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                last = exc
        assert last is not None
        raise last

    def connect_unix_socket(self, *args: typing.Any, **kwargs: typing.Any) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable from here")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


_tls_lock = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """httpx's TLS defaults (certificate and host name verification), built once per process:
    building one loads the CA bundle, about 20 ms of CPU, and every run opens clients. Once, even
    when a burst's runs all start at the same moment: they wait for the first to build it instead
    of each building its own."""
    with _tls_lock:
        return _tls_context()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def warm_tls(**kwargs: object) -> None:
    """Build this process's TLS context now (django-q2's post_spawn: a worker as it starts)."""
    tls_context()


class CheckedTransport(httpx.HTTPTransport):
    """httpx's transport over CheckedBackend."""

    def __init__(self, *, allowed_hosts: Iterable[str] = (), resolver: Resolver | None = None) -> None:
        super().__init__(verify=tls_context())
        # HTTPTransport offers no way to pass a network backend; its pool is rebuilt with ours,
        # with the same TLS context.
        self._pool = httpcore.ConnectionPool(
            ssl_context=tls_context(),
            network_backend=CheckedBackend(allowed_hosts=allowed_hosts, resolver=resolver),
        )


def client(
    *, timeout: float | httpx.Timeout, allowed_hosts: Iterable[str] = (), resolver: Resolver | None = None
) -> httpx.Client:
    """An httpx client for a URL someone chose: no redirects followed (a redirect could lead
    anywhere), and in production only public addresses, connected to as checked."""
    if settings.ALLOW_PRIVATE_ADDRESSES:
        return httpx.Client(timeout=timeout, follow_redirects=False, verify=tls_context())
    transport = CheckedTransport(allowed_hosts=allowed_hosts, resolver=resolver)
    return httpx.Client(timeout=timeout, follow_redirects=False, transport=transport)
