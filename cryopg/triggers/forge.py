"""Outbound commit statuses: POST a run's outcome to a forge, safely.

The URL comes from whoever created the webhook, so the server must not become a way
into its own network: only https, only to a public address, the name resolved once and
the connection pinned to the address that was checked (so a DNS answer cannot change
between the check and the request), and no redirects. Hosts named in
CRYOPG_FORGE_ALLOWLIST (comma-separated) are allowed anyway, over http too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

ALLOWLIST_ENV = "CRYOPG_FORGE_ALLOWLIST"
TIMEOUT = aiohttp.ClientTimeout(total=10)


class Refused(Exception):
    """A status URL the server will not call, and why, in one line."""


def allowlist() -> frozenset[str]:
    return frozenset(h.strip().lower() for h in os.environ.get(ALLOWLIST_ENV, "").split(",")
                     if h.strip())


def outcome_state(status: str) -> str:
    """A run's status as a commit status state (GitHub's words)."""
    return {"succeeded": "success", "failed": "failure"}.get(status, "error")


class _Pinned(AbstractResolver):
    """Answers the one host with the one address that was checked."""

    def __init__(self, host: str, address: str) -> None:
        self.host, self.address = host, address

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host != self.host:
            raise OSError(f"unexpected host {host}")
        fam = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        return [ResolveResult(hostname=host, host=self.address, port=port, family=fam,
                              proto=0, flags=socket.AI_NUMERICHOST)]

    async def close(self) -> None:
        return None


async def resolve_checked(url: str, allowed: frozenset[str]) -> tuple[str, str]:
    """(host, address) to pin, or Refused."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if not host:
        raise Refused(f"status URL {url!r} has no host")
    listed = host in allowed
    if parts.scheme != "https" and not (listed and parts.scheme == "http"):
        raise Refused(f"status URL {url!r} must be https")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused(f"status URL {url!r} has a bad port") from None
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Refused(f"status host {host} does not resolve: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise Refused(f"status host {host} does not resolve")
    if not listed:
        for a in addresses:
            if not ipaddress.ip_address(a.split("%")[0]).is_global:
                raise Refused(f"status host {host} resolves to {a}, which is not a public "
                              f"address (name it in {ALLOWLIST_ENV} to allow it)")
    return host, addresses[0]


async def post_status(url: str, body: dict[str, Any],
                      allowed: frozenset[str] | None = None) -> None:
    """POSTs the body as JSON; raises Refused (never sent) or returns after a 2xx.
    Anything else (a refusal by the forge, a redirect, a network error) raises too."""
    allowed = allowlist() if allowed is None else allowed
    host, address = await resolve_checked(url, allowed)
    connector = aiohttp.TCPConnector(resolver=_Pinned(host, address), use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:
        async with session.post(url, json=body, allow_redirects=False) as resp:
            if not 200 <= resp.status < 300:
                raise Refused(f"status URL answered {resp.status}")
