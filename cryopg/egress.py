"""Egress policy: may the product fetch this URL, and at which address.

Every outbound request whose URL a user chose (an http node, a commit status) goes
through here, so the engine cannot be used to read its own files or reach its own
network: only http(s); the host resolved once; refused if ANY address it resolves to
is not public (loopback, private, link-local, CGNAT, cloud metadata, multicast,
reserved, and the IPv6 forms that embed such an IPv4, judged by that IPv4: mapped,
translated, compatible, NAT64, 6to4, Teredo, ISATAP); the connection then made to a
checked address only (no second lookup, so a DNS answer cannot change in between),
while the Host header and TLS name stay the URL's host.

A deployment that needs an internal host names it in CRYOPG_EGRESS_ALLOW: host
names, IP addresses or CIDRs, comma-separated (CRYOPG_FORGE_ALLOWLIST, its old name
for commit statuses, is still read). Cloud metadata addresses pass only when named
exactly (a host name or the address itself), never through a wider CIDR.

Standard library only: the http node's job imports it in a short-lived process.
"""

from __future__ import annotations

import http.client
import ipaddress
import os
import socket
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

ALLOW_ENV = "CRYOPG_EGRESS_ALLOW"
OLD_ALLOW_ENVS = ("CRYOPG_FORGE_ALLOWLIST",)
WEB_SCHEMES = frozenset({"http", "https"})

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Iterable[str]]

METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean ...
    "169.254.170.2",    # AWS ECS task credentials
    "169.254.170.23",   # AWS EKS pod identity
    "100.100.100.200",  # Alibaba Cloud
    "fd00:ec2::254",    # AWS over IPv6
    "fd00:ec2::23",     # AWS EKS pod identity over IPv6
))


def _nets(*cidrs: str) -> tuple[Net, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# (networks, why) in order; the first that holds an address names the refusal.
_V4: tuple[tuple[tuple[Net, ...], str], ...] = (
    (_nets("0.0.0.0/8"), "an unspecified address"),
    (_nets("127.0.0.0/8"), "a loopback address"),
    (_nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"), "a private address"),
    (_nets("100.64.0.0/10"), "a shared (CGNAT) address"),
    (_nets("169.254.0.0/16"), "a link-local address"),
    (_nets("224.0.0.0/4"), "a multicast address"),
    (_nets("255.255.255.255/32"), "a broadcast address"),
    (_nets("240.0.0.0/4", "192.0.0.0/24", "192.0.2.0/24", "198.51.100.0/24",
           "203.0.113.0/24", "198.18.0.0/15", "192.88.99.0/24"),
     "a reserved address"),
)
_V6: tuple[tuple[tuple[Net, ...], str], ...] = (
    (_nets("::/128"), "an unspecified address"),
    (_nets("::1/128"), "a loopback address"),
    (_nets("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_nets("fc00::/7"), "a private (ULA) address"),
    (_nets("fe80::/10"), "a link-local address"),
    (_nets("fec0::/10"), "a site-local address"),
    (_nets("ff00::/8"), "a multicast address"),
    (_nets("100::/64", "2001:db8::/32", "2001:2::/48", "2001:10::/28", "2001:20::/28",
           "3fff::/20", "5f00::/16"), "a reserved address"),
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_COMPAT = ipaddress.ip_network("::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT (RFC 2765): ::ffff:0:a.b.c.d
_ISATAP_IIDS = (0x00005EFE, 0x02005EFE)  # an interface id of ::0:5efe:a.b.c.d (RFC 5214)


class Refused(Exception):
    """A URL the product will not fetch. `reason` is one line without the URL; `address`
    is the refused address when the refusal is about one (then the allowlist can help)."""

    def __init__(self, url: str, reason: str, address: str | None = None) -> None:
        super().__init__(reason)
        self.url, self.reason, self.address = url, reason, address

    def hint(self) -> str:
        return f" (set {ALLOW_ENV} to allow it)" if self.address else ""

    def line(self, who: str) -> str:
        """`who: refused URL: why (hint)`, the one line a user sees."""
        return f"{who}: refused {_shown(self.url)}: {self.reason}{self.hint()}"


def _shown(url: str) -> str:
    """The URL as one line of bounded length (a URL may carry CR/LF to forge lines)."""
    url = url if url.isprintable() else repr(url)
    return url if len(url) <= 200 else url[:200] + "..."


def embedded_ipv4(ip: IP) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, where it carries one (mapped,
    translated, compatible, NAT64, 6to4, ISATAP; Teredo's two are read by the caller).
    Such an address is judged by its IPv4 address: a host may route it there."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64 or ip in _TRANSLATED or (ip in _COMPAT and int(ip) > 1):
        return low
    if ip.sixtofour is not None:
        return ip.sixtofour
    if (int(ip) >> 32) & 0xFFFFFFFF in _ISATAP_IIDS and ip.teredo is None:
        return low
    return None


def why_not_public(ip: IP) -> str | None:
    """Why this address may not be fetched (a phrase such as "a loopback address"),
    or None for a public address."""
    if ip in METADATA:
        return "a cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            why = why_not_public(inner)
            return f"an IPv6 form of {inner}, {why}" if why else None
        if ip.teredo is not None:
            for part in ip.teredo:
                why = why_not_public(part)
                if why:
                    return f"a Teredo address embedding {part}, {why}"
            return None
    for nets, why in (_V4 if ip.version == 4 else _V6):
        if any(ip in n for n in nets):
            return why
    return None if ip.is_global else "not a public address"


def _parse_ip(text: str) -> IP | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Allow:
    """The deployment's exceptions: host names (exact, case-insensitive) and networks."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Net, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Allow:
        hosts: set[str] = set()
        nets: list[Net] = []
        for raw in text.split(","):
            entry = raw.strip().lower().strip("[]").rstrip(".")
            if not entry:
                continue
            try:
                nets.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry)
        return cls(frozenset(hosts), tuple(nets))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Allow:
        env = os.environ if environ is None else environ
        return cls.parse(",".join(env.get(n, "") for n in (ALLOW_ENV, *OLD_ALLOW_ENVS)))

    def host(self, host: str) -> bool:
        """Whether a URL host is named: by name, or as an address inside an allowed
        network (a metadata address only when named exactly)."""
        name = host.lower().strip("[]").rstrip(".")
        if name in self.hosts:
            return True
        ip = _parse_ip(name)
        return ip is not None and self.address(ip)

    def address(self, ip: IP) -> bool:
        exact = ip in METADATA
        for candidate in (ip, embedded_ipv4(ip)):
            if candidate is None:
                continue
            for net in self.networks:
                if candidate in net and (not exact or net.num_addresses == 1):
                    return True
        return False

    def __contains__(self, host: object) -> bool:
        return isinstance(host, str) and self.host(host)


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (the addresses, all checked) and what to ask."""

    url: str
    scheme: str
    host: str  # as the URL names it (IDNA ASCII), for Host and TLS
    port: int
    addresses: tuple[str, ...]
    path: str  # path and query, what the request line carries


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def split_url(url: str, schemes: frozenset[str] = WEB_SCHEMES,
              allow: Allow | None = None) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of a URL the product may try, or Refused. `schemes`
    are allowed to every host; http is also allowed to a host in `allow`."""
    if not isinstance(url, str) or not url:
        raise Refused(str(url), "not a URL")
    if any(ord(ch) <= 0x20 or ch in "\\\x7f" for ch in url):
        raise Refused(url, "the URL has spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
        port_given = parts.port
    except ValueError as exc:
        raise Refused(url, f"not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if scheme not in WEB_SCHEMES:
        raise Refused(url, f"the {scheme or 'missing'}: scheme is not allowed "
                           "(only http and https)")
    if not host:
        raise Refused(url, "the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise Refused(url, "credentials in the URL are not supported "
                           "(send an Authorization header)")
    if scheme not in schemes and not (allow is not None and allow.host(host)):
        raise Refused(url, f"must be {' or '.join(sorted(schemes))}", None)
    if _parse_ip(host) is None:
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise Refused(url, f"the host {host!r} is not a valid name") from None
    port = port_given or (443 if scheme == "https" else 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, host, port, path


def check_addresses(url: str, host: str, addresses: Iterable[str],
                    allow: Allow) -> tuple[str, ...]:
    """The addresses, if every one may be fetched; else Refused naming the first that
    may not."""
    got = tuple(dict.fromkeys(str(a) for a in addresses))
    if not got:
        raise Refused(url, f"{host} does not resolve")
    if allow.host(host) and _parse_ip(host) is None:
        return got  # a name the deployment allowed, whatever it resolves to
    for a in got:
        ip = _parse_ip(a)
        if ip is None:
            raise Refused(url, f"{host} resolves to {a!r}, which is not an address")
        if allow.address(ip):
            continue
        why = why_not_public(ip)
        if why:
            said = a if a == host.strip("[]") else f"{host} resolves to {a}, which"
            raise Refused(url, f"{said} is {why}", a)
    return got


def check_url(url: str, allow: Allow | None = None, resolve: Resolver = system_resolver,
              schemes: frozenset[str] = WEB_SCHEMES) -> Target:
    """The Target to connect to for this URL, or Refused before any packet is sent."""
    allow = Allow.from_env() if allow is None else allow
    scheme, host, port, path = split_url(url, schemes, allow)
    try:
        addresses = list(resolve(host, port))
    except (OSError, UnicodeError) as exc:
        raise Refused(url, f"{host} does not resolve ({exc})") from None
    return Target(url, scheme, host, port, check_addresses(url, host, addresses, allow), path)


def connection(target: Target, timeout: float,
               context: ssl.SSLContext | None = None) -> http.client.HTTPConnection:
    """An http.client connection to the target that connects only to its checked
    addresses; Host and TLS (SNI and certificate name) use the URL's host."""
    conn: http.client.HTTPConnection
    if target.scheme == "https":
        conn = http.client.HTTPSConnection(target.host, target.port, timeout=timeout,
                                           context=context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)

    def pinned(_address: object, timeout: float | None = None,
               source_address: object = None) -> socket.socket:
        last: OSError | None = None
        for a in target.addresses:
            try:
                return socket.create_connection((a, target.port), timeout)
            except OSError as exc:
                last = exc
        raise last or OSError(f"no address for {target.host}")

    conn._create_connection = pinned  # type: ignore[attr-defined]
    return conn
