"""Masking a project's secret values: what to look for, one-shot masking of a text or a
JSON value (the server's user reads), and a streaming masker (the agent's log).

Stdlib only: the agent imports it too. A secret is looked for as written and, when it
spans lines, with "\\r\\n" line ends (a PTY with `onlcr` turns "\\n" into "\\r\\n") and
line by line (a line long enough to mean something), so reformatting a multi-line
secret does not print it in clear.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, AnyStr, Generic

# `secret set` refuses shorter values: masking a 3-letter value hides ordinary words
# and protects nothing.
MIN_SECRET_CHARS = 6
# A line of a multi-line secret is masked on its own from this length.
MIN_LINE_CHARS = 6
# A pass that ends (park, exit, kill) with at least this many held bytes that begin a
# secret masks them: the next pass cannot complete them.
MIN_PREFIX_BYTES = 4
MASK = "[secret]"


def variants(secrets: Iterable[AnyStr]) -> list[AnyStr]:
    """Every form of the secrets to mask, longest first, without duplicates."""
    found: set[AnyStr] = set()
    for s in secrets:
        if not s:
            continue
        found.add(s)
        nl, cr = ("\n", "\r") if isinstance(s, str) else (b"\n", b"\r")
        if nl not in s and cr not in s:
            continue
        lf = s.replace(cr + nl, nl)  # type: ignore[operator]
        found.update((lf, lf.replace(nl, cr + nl), s.replace(nl, cr + nl)))  # type: ignore[operator]
        for line in lf.split(nl):
            line = line.strip(cr)  # type: ignore[arg-type]
            if len(line) >= MIN_LINE_CHARS:
                found.add(line)
    return sorted(found, key=len, reverse=True)


def spans(text: AnyStr, patterns: list[AnyStr]) -> list[tuple[int, int]]:
    """The merged [start, end) ranges of `text` that some pattern covers (overlapping
    occurrences included, so two overlapping secrets leave nothing of either)."""
    found: list[tuple[int, int]] = []
    for p in patterns:
        i = text.find(p)
        while i >= 0:
            found.append((i, i + len(p)))
            i = text.find(p, i + 1)
    if not found:
        return found
    found.sort()
    merged = [found[0]]
    for start, end in found[1:]:
        if start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _masked(text: AnyStr, cover: list[tuple[int, int]], lo: int, hi: int, mask: AnyStr
            ) -> AnyStr:
    """text[lo:hi] with every covered range (clipped to it) replaced by one mask."""
    parts: list[AnyStr] = []
    at = lo
    for start, end in cover:
        start, end = max(start, lo), min(end, hi)
        if start >= end:
            continue
        parts.append(text[at:start])
        parts.append(mask)
        at = end
    parts.append(text[at:hi])
    return text[:0].join(parts)


class Masker(Generic[AnyStr]):
    """One-shot masking of whole texts with a fixed set of secrets."""

    def __init__(self, secrets: Iterable[AnyStr], mask: AnyStr) -> None:
        self.patterns: list[AnyStr] = variants(secrets)
        self._mask = mask
        # A secret of digits (a PIN) copied into a JSON value can arrive as a number.
        self.numeric = any(isinstance(p, str) and set(p) <= _NUMBER_CHARS
                           for p in self.patterns)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def text(self, text: AnyStr) -> AnyStr:
        if not self.patterns:
            return text
        cover = spans(text, self.patterns)
        return _masked(text, cover, 0, len(text), self._mask) if cover else text


def mask_json(masker: Masker[str], value: Any) -> Any:
    """A JSON value with every string (keys too) masked; the value itself is not
    changed. No secrets, no walk."""
    if not masker:
        return value
    return _walk(masker, value)


_NUMBER_CHARS = set("0123456789+-.eE")


def _walk(masker: Masker[str], value: Any) -> Any:
    if isinstance(value, str):
        return masker.text(value)
    if masker.numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
        text = json.dumps(value)
        hidden = masker.text(text)
        return value if hidden == text else hidden
    if isinstance(value, dict):
        return {masker.text(k) if isinstance(k, str) else k: _walk(masker, v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(masker, v) for v in value]
    return value


class StreamMasker:
    """Masks secrets in a byte stream that arrives in pieces (PTY reads, flushes).

    `push` returns what may leave now. Bytes that could still be the start of a secret
    (at most longest-1 of them) stay back until more output shows whether they are; a
    `cut` (the pass may end here: a park, an exit, a kill) releases them, masked when
    they are a meaningful prefix of a secret. The last bytes stay as context after a
    cut, so a pass that goes on after all and prints the rest of that secret has the
    rest masked too.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.patterns: list[bytes] = variants(s.encode() for s in secrets)
        self._longest = len(self.patterns[0]) if self.patterns else 0
        self._ctx = b""  # the stream's last bytes: context, then what is held back
        self._sent = 0  # how many of _ctx have been released already
        self._prefix_at = 0  # where in _ctx the held bytes' secret prefix begins

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def push(self, data: bytes) -> bytes:
        if not self.patterns:
            return data
        text = self._ctx + data
        cover = spans(text, self.patterns)
        # The earliest point from which the text could still grow into a secret (even
        # one starting inside a match already found: a longer secret may contain it).
        hold = len(text)
        for p in self.patterns:
            i = text.find(p[:1], max(len(text) - len(p) + 1, 0))
            while 0 <= i < hold:
                # A cheap look at the first bytes before comparing the whole tail.
                if text.startswith(p[:min(len(text) - i, 16)], i) and p.startswith(text[i:]):
                    hold = i
                    break
                i = text.find(p[:1], i + 1)
        cut = max(hold, self._sent)
        out = _masked(text, cover, self._sent, cut, MASK.encode())
        # Keep the last longest-1 bytes (and all held ones) as the next push's context,
        # and the whole of a match the cut splits, so its held rest is found again.
        keep = min(max(len(text) - self._longest + 1, 0), cut)
        for start, end in cover:
            if start < cut < end:
                keep = min(keep, start)
        self._ctx, self._sent = text[keep:], cut - keep
        self._prefix_at = hold - keep
        return out

    def cut(self) -> bytes:
        """Release the held bytes now: the pass may end before they complete."""
        held = self._ctx[self._sent:]
        if not held:
            return b""
        self._sent = len(self._ctx)
        if len(self._ctx) - self._prefix_at >= MIN_PREFIX_BYTES:
            return MASK.encode()
        return held
