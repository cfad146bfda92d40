"""In-script verbs exit 2 when the engine refuses the request as bad input (a reserved
`_cryo/` key, an invalid argument), as a usage error does; 1 stays "something broke"."""

from __future__ import annotations

import pytest

from cryopg.cli.inscript import main
from tests.agent.test_inscript import peer  # noqa: F401  (the fake agent socket fixture)


def refusal(code: str, message: str) -> dict[str, object]:
    return {"ok": False, "error": {"code": code, "message": message}}


def test_a_reserved_key_is_a_refusal_and_exits_2(
        peer, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    peer(refusal("reserved_key", "key '_cryo/x' is reserved for the engine"),
         refusal("invalid_argument", "a sleep lasts at most 10 years"),
         refusal("not_a_number", "cell n holds text, not a number"),
         refusal("engine", "server refused or unreachable"))
    assert main(["state", "set", "_cryo/x", "1"]) == 2
    assert "reserved" in capsys.readouterr().err
    assert main(["sleep", "1s"]) == 2
    assert main(["state", "incr", "n"]) == 1  # an answer about the data, not a refusal
    assert main(["state", "set", "k", "1"]) == 1  # something broke
