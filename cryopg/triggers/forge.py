"""Outbound commit statuses: POST a run's outcome to a forge, safely.

The URL comes from whoever created the webhook, so the server must not become a way
into its own network: only https, and the egress policy (cryopg/egress.py) on the
host: every address it resolves to public, the name resolved once and the connection
pinned to the addresses that were checked (so a DNS answer cannot change between the
check and the request), and no redirects. Hosts, addresses or CIDRs named in
CRYOPG_EGRESS_ALLOW (or its old name CRYOPG_FORGE_ALLOWLIST) are allowed anyway, over
http too.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from cryopg import egress

ALLOWLIST_ENV = egress.ALLOW_ENV
TIMEOUT = aiohttp.ClientTimeout(total=10)
HTTPS_ONLY = frozenset({"https"})


class Refused(Exception):
    """A status URL the server will not call, and why, in one line."""


def allowlist() -> egress.Allow:
    """The deployment's allowlist; `host in allowlist()` says whether a host is named."""
    return egress.Allow.from_env()


def outcome_state(status: str) -> str:
    """A run's status as a commit status state (GitHub's words)."""
    return {"succeeded": "success", "failed": "failure"}.get(status, "error")


class _Pinned(AbstractResolver):
    """Answers the one host with the addresses that were checked, and nothing else."""

    def __init__(self, host: str, addresses: tuple[str, ...]) -> None:
        self.host, self.addresses = host.lower(), addresses

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host.lower().strip("[]") != self.host:
            raise OSError(f"unexpected host {host}")
        return [ResolveResult(hostname=host, host=a, port=port,
                              family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                              proto=0, flags=socket.AI_NUMERICHOST) for a in self.addresses]

    async def close(self) -> None:
        return None


def _refusal(exc: egress.Refused) -> Refused:
    if exc.address:
        return Refused(f"status URL {exc.url!r} refused: {exc.reason}, not a public "
                       f"address{exc.hint()}")
    return Refused(f"status URL {exc.url!r} refused: {exc.reason}")


async def resolve_checked(url: str, allowed: egress.Allow) -> tuple[str, tuple[str, ...]]:
    """(host, addresses to pin), or Refused before anything is sent."""
    try:
        _, host, port, _ = egress.split_url(url, HTTPS_ONLY, allowed)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise egress.Refused(url, f"{host} does not resolve ({exc})") from None
        addresses = egress.check_addresses(url, host, [str(i[4][0]) for i in infos], allowed)
    except egress.Refused as exc:
        raise _refusal(exc) from None
    return host, addresses


async def post_status(url: str, body: dict[str, Any],
                      allowed: egress.Allow | None = None) -> None:
    """POSTs the body as JSON; raises Refused (never sent) or returns after a 2xx.
    Anything else (a refusal by the forge, a redirect, a network error) raises too."""
    allowed = allowlist() if allowed is None else allowed
    host, addresses = await resolve_checked(url, allowed)
    connector = aiohttp.TCPConnector(resolver=_Pinned(host, addresses), use_dns_cache=False)
    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:
        async with session.post(url, json=body, allow_redirects=False) as resp:
            if not 200 <= resp.status < 300:
                raise Refused(f"status URL answered {resp.status}")
