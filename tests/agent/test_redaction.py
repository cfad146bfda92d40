"""The log streamer masks secret values wherever they fall: split across PTY reads and
flushes, byte by byte, around a verb that may park (and then does not), at the end of
a pass, and a multi-line secret printed through a PTY with `onlcr`. Each test prints the
secret the way an attacker would and checks that every byte posted, joined, holds no
secret (nor a meaningful piece of one)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from agent.logs import REDACTED, LogStreamer
from cryopg.redaction import MIN_PREFIX_BYTES, Masker, StreamMasker, mask_json

SECRET = "hunter2-secret"
PEM = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAoIB\n-----END KEY-----"


class _Api:
    def __init__(self) -> None:
        self.posts: list[bytes] = []

    async def logs(self, run_id: str, token: str, data: bytes, timeout: float = 30) -> bool:
        self.posts.append(data)
        return False


def _streamer(api: Any, secrets: list[str]) -> LogStreamer:
    return LogStreamer(api, "dev:default:run-x", "tok", on_cancel=lambda: None,
                       on_stale=lambda: None, secrets=secrets)


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
