"""Masking a project's secret values: what to look for, one-shot masking of a text or a
JSON value (the server's user reads and what the agent stores: step names, labels,
notes), and a streaming masker (the agent's log).

Stdlib only: the agent imports it too. Each secret is looked for three ways:

- as written, and when it spans lines with "\\r\\n" line ends (a PTY with `onlcr`) and
  line by line (a line long enough to mean something);
- in the text as a terminal shows it: line breaks, control characters and escape
  sequences (CSI colours, OSC titles and links) dropped, so a secret printed across
  two lines or with an escape sequence between its characters is found all the same;
  the mask then covers the raw bytes from its first character to its last;
- encoded: its hex (both cases) and base64 (standard and URL-safe, at each of the three
  alignments a value can fall on inside a longer encoded text), also across line breaks.

Every search is `str.find`/`bytes.find` over the text and one regular-expression pass
(no backtracking construct) to drop what a terminal does not show: linear in the text.
"""

from __future__ import annotations

import base64
import json
import re
from bisect import bisect_right
from collections.abc import Iterable
from typing import Any, AnyStr, Generic

# `secret set` refuses shorter values: masking a 3-letter value hides ordinary words
# and protects nothing.
MIN_SECRET_CHARS = 6
# A line of a multi-line secret is masked on its own from this length.
MIN_LINE_CHARS = 6
# A pass that ends (park, exit, kill) with at least this many held characters that begin
# a secret masks them: the next pass cannot complete them. A held tail that crosses a
# line break or an escape sequence is held only from this length.
MIN_PREFIX_BYTES = 4
# An encoded form shorter than this would hide ordinary words.
MIN_ENCODED_CHARS = 8
# The most bytes the stream masker holds back or keeps as context (escape sequences
# between a secret's characters make a held prefix longer than the secret).
MAX_HOLD_BYTES = 16 << 10
MASK = "[secret]"

# What a terminal does not show: a CSI (final byte optional, so one cut off at the end
# of a read counts), an OSC, DCS, SOS, PM or APC string (to its terminator, or the end),
# any other escape, and single control characters (CR and LF among them).
_IGNORABLE = (r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|\][^\x07\x1b]*(?:\x07|\x1b\\)?"
              r"|[PX^_][^\x1b]*(?:\x1b\\)?|[ -/]*[0-~]?)|[\x00-\x1a\x1c-\x1f\x7f]")
_IGNORE_STR = re.compile(_IGNORABLE)
_IGNORE_BYTES = re.compile(_IGNORABLE.encode())
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _ignore(text: AnyStr) -> re.Pattern[AnyStr]:
    return _IGNORE_BYTES if isinstance(text, bytes) else _IGNORE_STR  # type: ignore[return-value]


def shown(text: AnyStr) -> AnyStr:
    """The text without what a terminal does not show (line breaks included)."""
    return _ignore(text).sub(text[:0], text)


def variants(secrets: Iterable[AnyStr]) -> list[AnyStr]:
    """Every form of the secrets to find in the raw text, longest first, no duplicates."""
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


def encodings(secret: bytes) -> list[bytes]:
    """The hex and base64 forms of a secret that any encoding of a text holding it
    contains: for base64, the characters that depend on the secret's bytes alone, at
    each of the three alignments, in both alphabets."""
    out = {secret.hex().encode(), secret.hex().upper().encode()}
    for lead in range(3):
        encoded = base64.b64encode(b"\0" * lead + secret)
        inner = encoded[-(-8 * lead // 6):(8 * (lead + len(secret))) // 6]
        out.update((inner, inner.translate(_TO_URLSAFE)))
    return sorted(p for p in out if len(p) >= MIN_ENCODED_CHARS)


def shown_patterns(secrets: Iterable[AnyStr]) -> list[AnyStr]:
    """What to find in the shown text: each raw form with line breaks and controls
    dropped, and each secret's encodings; longest first."""
    found: set[AnyStr] = set()
    for s in secrets:
        if not s:
            continue
        for v in variants([s]):
            flat = shown(v)
            if len(flat) >= MIN_PREFIX_BYTES and (len(flat) >= MIN_LINE_CHARS or flat == shown(s)):
                found.add(flat)
        raw = s.encode() if isinstance(s, str) else s
        lf = raw.replace(b"\r\n", b"\n")
        for form in {raw, lf, lf.replace(b"\n", b"\r\n")}:
            for e in encodings(form):
                found.add(e.decode("ascii") if isinstance(s, str) else e)  # type: ignore[arg-type]
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
    return _merge(found)


def _merge(found: list[tuple[int, int]]) -> list[tuple[int, int]]:
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


class _Shown(Generic[AnyStr]):
    """A text as a terminal shows it, and the way back to the raw text's offsets."""

    def __init__(self, text: AnyStr) -> None:
        self.raw_at: list[int] = []  # where each kept run starts in the raw text
        self.shown_at: list[int] = []  # ... and in the shown text
        parts: list[AnyStr] = []
        at = kept = 0
        for m in _ignore(text).finditer(text):
            if m.start() > at:
                self.raw_at.append(at)
                self.shown_at.append(kept)
                parts.append(text[at:m.start()])
                kept += m.start() - at
            at = m.end()
        if at < len(text):
            self.raw_at.append(at)
            self.shown_at.append(kept)
            parts.append(text[at:])
        self.text: AnyStr = text[:0].join(parts)

    def raw(self, i: int) -> int:
        """The raw offset of shown character i."""
        j = bisect_right(self.shown_at, i) - 1
        return self.raw_at[j] + i - self.shown_at[j]

    def raw_spans(self, cover: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return [(self.raw(a), self.raw(b - 1) + 1) for a, b in cover]


def _find_all(text: AnyStr, raw: list[AnyStr], flat: list[AnyStr]
              ) -> tuple[list[tuple[int, int]], _Shown[AnyStr] | None]:
    """The raw ranges to mask: forms found as written, and forms found in the shown
    text (mapped back). The shown text too, when it differs."""
    cover = spans(text, raw)
    if not flat:
        return cover, None
    view = _Shown(text) if _ignore(text).search(text) else None
    if view is None:
        return _merge(cover + spans(text, flat)), None
    return _merge(cover + view.raw_spans(spans(view.text, flat))), view


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
        given = [s for s in secrets if s]
        self.patterns: list[AnyStr] = variants(given)
        self.flat: list[AnyStr] = shown_patterns(given)
        self._mask = mask
        # A secret of digits (a PIN) copied into a JSON value can arrive as a number.
        self.numeric = any(isinstance(p, str) and set(p) <= _NUMBER_CHARS
                           for p in self.patterns)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def text(self, text: AnyStr) -> AnyStr:
        if not self.patterns or not text:
            return text
        cover, _ = _find_all(text, self.patterns, self.flat)
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


def _hold_from(text: AnyStr, patterns: list[AnyStr], floor: int) -> int:
    """The earliest i >= floor from which text[i:] is a proper start of some pattern
    (len(text) when none): those bytes may still grow into a secret."""
    hold = len(text)
    for p in patterns:
        i = text.find(p[:1], max(len(text) - len(p) + 1, floor))
        while 0 <= i < hold:
            # A cheap look at the first bytes before comparing the whole tail.
            if text.startswith(p[:min(len(text) - i, 16)], i) and p.startswith(text[i:]):
                hold = i
                break
            i = text.find(p[:1], i + 1)
    return hold


class StreamMasker:
    """Masks secrets in a byte stream that arrives in pieces (PTY reads, flushes, and
    the passes of one run).

    `push` returns what may leave now. Bytes that could still be the start of a secret
    (as written, or as shown once line breaks and escape sequences are dropped) stay
    back until more output shows whether they are; a `cut` (the pass may end here: a
    park, an exit, a kill) releases them, masked when they are a meaningful prefix of a
    secret. The last bytes stay as context after a cut, so a pass that goes on and
    prints the rest of that secret has the rest masked too; `context()` hands that
    context over to the run's next pass (`StreamMasker(secrets, context=...)`), so a
    secret begun before a park and finished after it is masked on both sides (the rest
    anywhere in that pass).
    """

    def __init__(self, secrets: Iterable[str], *, context: bytes = b"") -> None:
        given = [s.encode() for s in secrets if s]
        self.patterns: list[bytes] = variants(given)
        self.flat: list[bytes] = shown_patterns(given)
        self._longest = len(self.patterns[0]) if self.patterns else 0
        self._longest_flat = len(self.flat[0]) if self.flat else 0
        self._ctx = b""  # the stream's last bytes: context, then what is held back
        self._sent = 0  # how many of _ctx have been released already
        self._prefix_at = 0  # where in _ctx the held bytes' secret prefix begins
        if self.patterns and context:
            self._ctx = context[-MAX_HOLD_BYTES:]
            self._sent = len(self._ctx)
            self._prefix_at = self._scan(self._ctx)[1]
            self._rest_of(self._ctx[self._prefix_at:])

    def _rest_of(self, held: bytes) -> None:
        """The previous pass ended on the first characters of a secret: what would
        complete it is secret too, so this pass masks it wherever it appears, not only
        right after those characters (the script may print something else first)."""
        flat = shown(held)
        rest = {p[len(held):] for p in self.patterns if held and p.startswith(held)}
        rest |= {p[len(flat):] for p in self.flat if flat and p.startswith(flat)}
        rest = {r for r in rest if len(shown(r)) >= MIN_PREFIX_BYTES}
        if rest:
            self.flat = sorted(set(self.flat) | {shown(r) for r in rest}, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def _scan(self, text: bytes) -> tuple[list[tuple[int, int]], int, int]:
        """(ranges to mask, where the held tail begins, the first byte to keep as
        context)."""
        cover, view = _find_all(text, self.patterns, self.flat)
        hold = _hold_from(text, self.patterns, 0)
        keep = len(text) - self._longest + 1
        shown_text = text if view is None else view.text
        at = _hold_from(shown_text, self.flat, 0)
        if len(shown_text) - at >= MIN_PREFIX_BYTES or (view is None and at < len(text)):
            hold = min(hold, at if view is None else view.raw(at))
        if view is not None:
            first = len(view.text) - self._longest_flat + 1
            if first > 0:
                keep = min(keep, view.raw(first))
            elif view.text:
                keep = min(keep, view.raw(0))
        else:
            keep = min(keep, len(text) - self._longest_flat + 1)
        return cover, hold, max(keep, 0, len(text) - MAX_HOLD_BYTES)

    def push(self, data: bytes) -> bytes:
        if not self.patterns:
            return data
        text = self._ctx + data
        cover, hold, keep = self._scan(text)
        if len(text) - hold > MAX_HOLD_BYTES:  # too long to wait for: decide now
            self._ctx, self._prefix_at = text, hold
            out = _masked(text, cover, self._sent, hold, MASK.encode())
            self._sent = max(self._sent, hold)
            return out + self.cut()
        cut = max(hold, self._sent)
        out = _masked(text, cover, self._sent, cut, MASK.encode())
        # Keep the last bytes (and all held ones) as the next push's context, and the
        # whole of a match the cut splits, so its held rest is found again.
        keep = min(keep, cut)
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
        if len(shown(self._ctx[self._prefix_at:])) < MIN_PREFIX_BYTES:
            return held
        # The line break or escape sequences after the prefix's last character stay.
        return MASK.encode() + _trailing(held)

    def context(self) -> bytes:
        """The bytes the run's next pass needs to mask the rest of a secret this pass
        began (empty when its last bytes cannot begin one). They hold a secret's first
        characters in clear: the server seals them."""
        if not self.patterns or self._prefix_at >= len(self._ctx):
            return b""
        return self._ctx


def _trailing(held: bytes) -> bytes:
    """The ignorable bytes (line breaks, escape sequences) at the end of `held`."""
    end = len(held)
    runs = [(m.start(), m.end()) for m in _IGNORE_BYTES.finditer(held)]
    while runs and runs[-1][1] == end:
        end = runs.pop()[0]
    return held[end:]
