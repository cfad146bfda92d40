"""The log streamer masks secret values wherever they fall: split across PTY reads and
flushes, byte by byte, around a verb that may park (and then does not), at the end of
a pass, across a park into the next pass, split across lines, with escape sequences
inside, hex- or base64-encoded, and a multi-line secret printed through a PTY with
`onlcr`. Each test prints the
secret the way an attacker would and checks that every byte posted, joined, holds no
secret (nor a meaningful piece of one)."""

from __future__ import annotations

import asyncio
import base64
import random
import re
from typing import Any

from agent.logs import REDACTED, LogStreamer
from cryopg.redaction import (
    MAX_HOLD_BYTES,
    MIN_PREFIX_BYTES,
    Masker,
    StreamMasker,
    encodings,
    mask_json,
)

SECRET = "hunter2-secret"
PEM = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAoIB\n-----END KEY-----"


class _Api:
    def __init__(self) -> None:
        self.posts: list[bytes] = []
        self.context: bytes | None = None  # what the server would hold for the next pass

    async def logs(self, run_id: str, token: str, data: bytes, timeout: float = 30,
                   context: bytes | None = None, offset: int | None = None) -> bool:
        self.posts.append(data)
        if context is not None:
            self.context = context
        return False


def _streamer(api: Any, secrets: list[str], context: bytes = b"") -> LogStreamer:
    return LogStreamer(api, "dev:default:run-x", "tok", on_cancel=lambda: None,
                       on_stale=lambda: None, secrets=secrets, context=context)


def _clear_pieces(secret: str, n: int = MIN_PREFIX_BYTES) -> list[bytes]:
    """Every piece of the secret at least n bytes long."""
    b = secret.encode()
    return [b[i:j] for i in range(len(b)) for j in range(i + n, len(b) + 1)]


def _assert_no_secret(sent: bytes, secret: str) -> None:
    sent = sent.replace(REDACTED, b"|")  # the mask's own word is no leak
    leaked = [p for p in _clear_pieces(secret, 5) if p in sent]
    assert not leaked, (sent, leaked[:3])


def test_a_value_split_across_reads_and_flushes_never_leaves() -> None:
    api = _Api()
    logs = _streamer(api, [SECRET, "pw"])

    async def go() -> None:
        logs.feed(b"start hunter2-")
        await logs.flush()
        logs.feed(b"sec")
        await logs.flush()
        logs.feed(b"ret end pw!\n")
        await logs.flush(final=True)

    asyncio.run(go())
    sent = b"".join(api.posts)
    assert sent == b"start " + REDACTED + b" end " + REDACTED + b"!\n"
    assert all(b"hunter2" not in p for p in api.posts)


def test_a_value_written_one_byte_at_a_time_with_flushes_between() -> None:
    api = _Api()
    logs = _streamer(api, [SECRET])

    async def go() -> None:
        for byte in f"> {SECRET} <\n".encode():
            logs.feed(bytes([byte]))
            await logs.flush()
        await logs.flush(final=True)

    asyncio.run(go())
    assert b"".join(api.posts) == b"> " + REDACTED + b" <\n"


def test_a_half_printed_before_a_verb_that_might_park_and_the_rest_after() -> None:
    # flush_before_park sends with final=True before the server says whether the pass
    # parks; a lock that is free (or a signal already there) lets the script go on.
    api = _Api()
    logs = _streamer(api, [SECRET])

    async def go() -> None:
        logs.feed(b"a: " + SECRET[:7].encode())
        await logs.flush(final=True)  # the verb call: maybe a park
        logs.feed(SECRET[7:].encode() + b" :b\n")  # it was not: the rest follows
        await logs.flush(final=True)

    asyncio.run(go())
    sent = b"".join(api.posts)
    _assert_no_secret(sent, SECRET)
    assert sent.startswith(b"a: " + REDACTED) and sent.endswith(b" :b\n"), sent


def test_a_prefix_held_when_the_pass_ends_is_masked_not_printed() -> None:
    # The pass parks (or exits, or is killed) right after the first half: the next pass
    # cannot complete it, so the held bytes go out masked.
    for end in ("park", "exit"):
        api = _Api()
        logs = _streamer(api, [SECRET])

        async def go(logs: LogStreamer = logs, end: str = end) -> bytes:
            logs.feed(b"half: " + SECRET[:9].encode())
            await logs.flush()
            if end == "park":
                await logs.flush(final=True)
                return b""
            return await logs.take_final()

        last = asyncio.run(go())
        sent = b"".join(api.posts) + last
        assert sent == b"half: " + REDACTED, (end, sent)


def test_a_short_held_tail_that_is_not_a_secret_goes_out_at_the_end() -> None:
    api = _Api()
    logs = _streamer(api, ["topsecret"])
    logs.feed(b"to")
    asyncio.run(logs.flush())
    assert api.posts == []  # could be the start of the secret
    asyncio.run(logs.flush(final=True))
    assert b"".join(api.posts) == b"to"  # too short to be a meaningful prefix


def test_bytes_that_cannot_start_a_secret_are_not_held() -> None:
    api = _Api()
    logs = _streamer(api, [SECRET])
    logs.feed(b"Enter your name: ")  # a prompt, nothing like the secret: goes now
    asyncio.run(logs.flush())
    assert b"".join(api.posts) == b"Enter your name: "
    logs.feed(b"hunt")
    asyncio.run(logs.flush())
    assert b"".join(api.posts) == b"Enter your name: "  # "hunt" may begin it
    logs.feed(b"ing season\n")
    asyncio.run(logs.flush())
    assert b"".join(api.posts) == b"Enter your name: hunting season\n"


def test_a_multi_line_secret_through_onlcr_and_line_by_line() -> None:
    crlf = PEM.replace("\n", "\r\n").encode()
    for printed in (crlf, PEM.encode(), b"\r\n".join(PEM.encode().split(b"\n")[1:3])):
        api = _Api()
        logs = _streamer(api, [PEM])

        async def go(logs: LogStreamer = logs, printed: bytes = printed) -> None:
            mid = len(printed) // 2
            logs.feed(b"key:\r\n" + printed[:mid])
            await logs.flush()
            logs.feed(printed[mid:] + b"\r\ndone\r\n")
            await logs.flush(final=True)

        asyncio.run(go())
        sent = b"".join(api.posts)
        for line in PEM.split("\n")[1:3]:
            assert line.encode()[:10] not in sent, sent
        assert sent.startswith(b"key:\r\n") and sent.endswith(b"done\r\n"), sent


def test_overlapping_secrets_leave_nothing_of_either() -> None:
    api = _Api()
    logs = _streamer(api, ["abcdef-1234", "1234-ghijkl"])
    logs.feed(b"x abcdef-1234-ghijkl y\n")
    asyncio.run(logs.flush(final=True))
    assert b"".join(api.posts) == b"x " + REDACTED + b" y\n"


def test_without_secrets_nothing_is_held_back() -> None:
    api = _Api()
    logs = _streamer(api, [])
    logs.feed(b"abc")
    asyncio.run(logs.flush())
    assert api.posts == [b"abc"]
    assert not StreamMasker([])


def test_the_streaming_masker_never_holds_more_than_the_longest_secret() -> None:
    m = StreamMasker([SECRET])
    out = m.push(b"x" * 100 + b"hunter2-secre")
    assert out == b"x" * 100  # 13 bytes held: one short of the secret
    assert m.push(b"t!") == REDACTED + b"!"


def test_json_masking_reaches_keys_nested_values_and_leaves_the_rest() -> None:
    masker = Masker([SECRET], "[secret]")
    value = {"token": f"Bearer {SECRET}", SECRET: [1, None, True, {"x": SECRET}]}
    assert mask_json(masker, value) == {
        "token": "Bearer [secret]", "[secret]": [1, None, True, {"x": "[secret]"}]}
    assert value["token"] == f"Bearer {SECRET}"  # the original is untouched
    assert mask_json(Masker([], "[secret]"), value) is value


def test_a_secret_of_digits_stored_as_a_json_number_is_masked_too() -> None:
    masker = Masker(["48151623"], "[secret]")
    assert mask_json(masker, {"pin": 48151623, "n": [948151623.5, 7, True]}) == {
        "pin": "[secret]", "n": ["9[secret].5", 7, True]}


def test_random_splits_and_cuts_never_release_a_byte_of_a_secret() -> None:
    # Secrets drawn from "ab-\r\n", filler from "xyz": any a, b or - that leaves
    # unmasked is a leak, except the few raw bytes a cut releases as too short a prefix.
    rnd = random.Random(20)
    for _ in range(3000):
        secrets = ["".join(rnd.choice("ab-\r\n") for _ in range(rnd.randint(6, 12)))
                   for _ in range(rnd.randint(1, 3))]
        parts = []
        for _ in range(rnd.randint(1, 6)):
            parts.append("".join(rnd.choice("xyz") for _ in range(rnd.randint(0, 6))))
            parts.append(rnd.choice(secrets))
        text = ("".join(parts) + "Z").encode()
        m, out, allowed, i = StreamMasker(secrets), b"", 0, 0
        while i < len(text):
            step = rnd.randint(1, 8)
            out += m.push(text[i:i + step])
            i += step
            if rnd.random() < 0.2:
                released = m.cut()
                out += released
                allowed += 0 if released == REDACTED else len(released)
        out += m.cut()
        raw = out.replace(REDACTED, b"")
        assert sum(raw.count(c) for c in (b"a", b"b", b"-")) <= allowed, (secrets, text, out)


LONG = "tok-9f3b1c77a2e4-Zq-7d1e55c0b9a8f"  # 33 characters, as in the report
# What a terminal does not show, for reading the masked output as a person would see it.
_TERMINAL_ONLY = rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.|[\x00-\x1f]"


def _run(chunks: list[bytes], secrets: list[str], cut_after: tuple[int, ...] = ()) -> bytes:
    m, out = StreamMasker(secrets), b""
    for i, chunk in enumerate(chunks):
        out += m.push(chunk)
        if i in cut_after:
            out += m.cut()
    return out + m.cut()


def test_a_secret_split_across_two_lines_is_masked() -> None:
    b = LONG.encode()
    for line_end in (b"\n", b"\r\n", b"\r"):
        for at in (1, 4, 16, 32):
            printed = b"key: " + b[:at] + line_end + b[at:] + b" end\n"
            whole = _run([printed], [LONG])
            assert whole == b"key: " + REDACTED + b" end\n", (line_end, at, whole)
            # ... and when the line break falls between two reads and a flush
            split = printed.index(line_end) + len(line_end)
            out = _run([printed[:split], printed[split:]], [LONG])
            _assert_no_secret(out, LONG)
            assert out.endswith(b" end\n") and REDACTED in out, out


def test_a_line_tail_that_begins_a_secret_waits_for_the_next_line() -> None:
    api = _Streamer = _Api()
    logs = _streamer(api, [LONG])

    async def go() -> None:
        logs.feed(b"first line\n" + LONG[:12].encode() + b"\r\n")
        await logs.flush()
        assert b"".join(api.posts) == b"first line\n"  # the tail stays back
        logs.feed(LONG[12:].encode() + b"\r\nafter\r\n")
        await logs.flush(final=True)

    asyncio.run(go())
    sent = b"".join(_Streamer.posts)
    _assert_no_secret(sent, LONG)
    assert sent == b"first line\n" + REDACTED + b"\r\nafter\r\n", sent


def test_escape_sequences_and_controls_inside_a_secret_do_not_hide_it() -> None:
    b = LONG.encode()
    sequences = [b"\x1b[31m", b"\x1b[0m", b"\x1b[1;38;5;208m", b"\x1b]0;title\x07",
                 b"\x1b]8;;https://example.com\x1b\\", b"\x07", b"\x00", b"\x1b(B",
                 b"\x1b[2K\r"]
    rnd = random.Random(7)
    for _ in range(200):
        cuts = sorted(rnd.sample(range(1, len(b)), rnd.randint(1, 6)))
        pieces, at = [], 0
        for c in cuts:
            pieces += [b[at:c], rnd.choice(sequences)]
            at = c
        printed = b"<" + b"".join(pieces) + b[at:] + b">\n"
        step = rnd.randint(1, len(printed))
        chunks = [printed[i:i + step] for i in range(0, len(printed), step)]
        out = _run(chunks, [LONG])
        shown = re.sub(_TERMINAL_ONLY, b"", out.replace(REDACTED, b"|"))
        leaked = [p for p in _clear_pieces(LONG, 5) if p in shown]
        assert not leaked, (printed, out, leaked[:3])
        assert out.startswith(b"<") and out.endswith(b">\n"), out


def test_the_hex_and_base64_of_a_secret_are_masked() -> None:
    b = LONG.encode()
    forms = [b.hex().encode(), b.hex().upper().encode()]
    for lead in (b"", b"x", b"xy"):
        for tail in (b"", b"z", b"zz"):
            plain = lead + b + tail
            forms += [base64.b64encode(plain), base64.urlsafe_b64encode(plain),
                      base64.encodebytes(plain * 3)]  # wrapped at 76 columns
    for form in forms:
        out = _run([b"value=" + form[:9], form[9:] + b"\n"], [LONG])
        assert REDACTED in out, (form, out)
        raw = out.replace(REDACTED, b"")
        for e in encodings(b):
            assert e[:10] not in raw.replace(b"\n", b""), (form, out)
    # a base64 text that does not hold the secret is left alone
    other = base64.b64encode(b"nothing to see here, really")
    assert _run([other + b"\n"], [LONG]) == other + b"\n"


def test_a_prefix_printed_before_a_park_and_the_rest_on_the_next_pass() -> None:
    # The report's case: 12 of 33 characters before the park, 21 on the next pass.
    api = _Api()
    first = _streamer(api, [LONG])

    async def one() -> None:
        first.feed(b"head: " + LONG[:12].encode())
        await first.flush(final=True)  # the pass parks here

    asyncio.run(one())
    assert api.context, "the pass hands its masker's context on"
    second = _streamer(api, [LONG], context=api.context)  # the next claim's grant

    async def two() -> bytes:
        second.feed(b"replayed line\n" + LONG[12:].encode() + b" :tail\n")
        return await second.take_final()

    last = asyncio.run(two())
    sent = b"".join(api.posts) + last
    _assert_no_secret(sent, LONG)
    assert sent.startswith(b"head: " + REDACTED), sent
    assert LONG[12:20].encode() not in sent and sent.endswith(b" :tail\n"), sent


def test_a_pass_whose_tail_begins_no_secret_sends_no_context() -> None:
    api = _Api()
    logs = _streamer(api, [LONG])

    async def go() -> None:
        logs.feed(b"nothing secret\n")
        await logs.flush(final=True)

    asyncio.run(go())
    assert api.context is None


def test_a_flood_of_escape_bytes_does_not_grow_the_held_tail_without_bound() -> None:
    m = StreamMasker([LONG])
    out = m.push(LONG[:6].encode() + b"\x1b]" + b"x" * (MAX_HOLD_BYTES + 10))
    assert out.startswith(REDACTED) and len(m._ctx) <= MAX_HOLD_BYTES + len(LONG) + 64


def test_names_and_notes_are_masked_with_the_same_secrets() -> None:
    logs = _streamer(_Api(), [LONG])
    assert logs.names.text(f"deploy-{LONG}") == "deploy-[secret]"
    assert logs.names.text(f"b64 {base64.b64encode(LONG.encode()).decode()}") == "b64 [secret]"
    assert logs.names.text("deploy-prod") == "deploy-prod"


def test_one_shot_masking_finds_split_and_coloured_secrets_in_json() -> None:
    masker = Masker([LONG], "[secret]")
    value = {"note": f"a {LONG[:10]}\n{LONG[10:]} b",
             "log": f"\x1b[32m{LONG[:3]}\x1b[0m{LONG[3:]}",
             "hex": LONG.encode().hex()}
    got = mask_json(masker, value)
    assert got == {"note": "a [secret] b", "log": "\x1b[32m[secret]", "hex": "[secret]"}, got
