"""`cryopg state …` in a script: argument parsing, value parsing and printing, exit codes,
and the dispatch between the socket (inside a run) and the server (outside one)."""

from __future__ import annotations

import pytest

from cryopg.cli.inscript import format_value, main, parse_value, state_goes_to_server
from tests.agent.test_inscript import peer  # noqa: F401  (the fake agent socket fixture)


@pytest.mark.parametrize(
    ("text", "value"),
    [("5", 5), ("-2.5", -2.5), ("true", True), ("null", None), ('{"a":1}', {"a": 1}),
     ('"quoted"', "quoted"), ("hello world", "hello world"), ("NaN", "NaN"), ("", "")],
)
def test_a_value_is_json_when_it_parses_else_a_string(text: str, value: object) -> None:
    assert parse_value(text) == value


@pytest.mark.parametrize("text", ["{bad", "[1,2", '"unterminated', "{", " [", "1e999",
                                  '{"a": [1e999]}', "-1e400"])
def test_a_malformed_or_unstorable_json_value_is_refused(text: str) -> None:
    from cryopg.cli.inscript_client import UsageError

    with pytest.raises(UsageError):
        parse_value(text)


def test_get_prints_strings_bare_and_the_rest_compact() -> None:
    assert format_value("a b") == "a b"
    assert format_value({"a": [1, 2]}) == '{"a":[1,2]}'
    assert format_value(True) == "true"


def test_dispatch_between_socket_and_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRYO_SOCKET", raising=False)
    assert state_goes_to_server(["state", "get", "k", "--entity", "e"])
    monkeypatch.setenv("CRYO_SOCKET", "/x.sock")
    assert not state_goes_to_server(["state", "get", "k", "--entity", "e"])
    assert state_goes_to_server(["state", "list", "--run=run-1"])
    assert not state_goes_to_server(["step", "x", "--", "true"])


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["state"], "usage: cryopg state"),
        (["state", "frob"], "usage: cryopg state"),
        (["state", "set", "k"], "wrong number of arguments"),
        (["state", "get", "k", "--by", "2"], "unknown option --by"),
        (["state", "cas", "k", "v"], "--expect VERSION"),
        (["state", "cas", "k", "v", "--expect", "0"], "--expect VERSION"),
        (["state", "incr", "k", "--by", "two"], "--by needs a number"),
        (["state", "incr", "k", "--by"], "--by needs a value"),
        (["state", "get", "k", "--entity", ""], "--entity needs a non-empty name"),
    ],
)
def test_usage_errors_exit_2_never_3(
    peer, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str  # noqa: F811
) -> None:
    peer()
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_add_and_cas_answer_with_exit_codes(peer, capfd: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    p = peer({"ok": True, "claimed": True}, {"ok": True, "claimed": False},
             {"ok": True, "swapped": False}, {"ok": False, "error": {"code": "engine",
                                                                   "message": "unreachable"}})
    assert main(["state", "add", "seen-1", "--entity", "ledger"]) == 0
    assert main(["state", "add", "seen-1", "2024", "--entity=ledger"]) == 3
    assert main(["state", "cas", "cfg", '{"x":1}', "--expect", "4", "--op", "merge"]) == 3
    assert main(["state", "cas", "cfg", "v", "--expect", "4"]) == 1  # broken is 1, not 3
    assert p.requests == [
        {"op": "state.add", "entity": "ledger", "key": "seen-1"},
        {"op": "state.add", "entity": "ledger", "key": "seen-1", "value": 2024},
        {"op": "state.cas", "entity": None, "key": "cfg", "as": "merge", "value": {"x": 1},
         "expect": 4},
        {"op": "state.cas", "entity": None, "key": "cfg", "value": "v", "expect": 4},
    ]
    assert "unreachable" in capfd.readouterr().err


def test_get_version_list_and_incr_print(peer, capfd: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    p = peer({"ok": True, "found": True, "value": "hi", "version": 7},
             {"ok": True, "found": True, "value": "hi", "version": 7},
             {"ok": True, "found": False, "value": None, "version": None},
             {"ok": True, "cells": [{"key": "a", "value": [1], "version": 2}]},
             {"ok": True, "value": 9, "version": 3})
    assert main(["state", "get", "k"]) == 0
    assert main(["state", "version", "k"]) == 0
    assert main(["state", "get", "nope", "--version"]) == 0
    assert main(["state", "list", "--entity", "e"]) == 0
    assert main(["state", "incr", "n", "--by", "-2", "--as", "t"]) == 0
    assert capfd.readouterr().out == "hi\n7\na\t[1]\t2\n9\n"
    assert p.requests[-1] == {"op": "state.incr", "entity": None, "key": "n", "as": "t", "by": -2}
