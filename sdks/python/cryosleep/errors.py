"""The SDK's exceptions: the three failure kinds, plus bounded waits that ran out.

- StepFailed: a command (step or activity) ran and exited non-zero. A workflow result
  you may branch on.
- ScriptError: a rejected or malformed request, or bad input (a value with no JSON
  form, a reused activity name, a call outside a run, an agent too old for a verb).
  Deterministic: replaying will not fix it.
- AgentUnavailable: the agent could not be reached, or the connection dropped once a
  request was sent. Infrastructure: let it end the process; the run is re-dispatched and
  replays. Never retry the call yourself.
"""

from __future__ import annotations


class CryoError(Exception):
    """Base class of every error the SDK raises."""


class StepFailed(CryoError):
    """A step or activity command exited non-zero (recorded, so a replay raises again)."""

    def __init__(self, name: str, exit_code: int, stdout: str = "", what: str = "step") -> None:
        super().__init__(f"{what} {name!r} exited with code {exit_code}")
        self.name = name
        self.exit_code = exit_code
        self.stdout = stdout


class ScriptError(CryoError):
    """The request was refused or could not be made; a bug in the script."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class AgentTooOld(ScriptError):
    """The agent does not advertise a verb the call needs (checked at the call site)."""

    def __init__(self, verb: str, advertised: list[str]) -> None:
        super().__init__(
            "unsupported_verb",
            f"the agent running this script does not offer {verb!r} (it advertises "
            f"{', '.join(advertised) or 'nothing'}); upgrade the agent to use this call",
        )
        self.verb = verb


class AgentUnavailable(CryoError):
    """The agent went away: do not catch and continue; the run replays elsewhere."""


class WaitTimeout(CryoError, TimeoutError):
    """A bounded wait reached its deadline with nothing arrived (recorded: replays too)."""

    def __init__(self, kind: str, name: str, timeout: float) -> None:
        super().__init__(f"no {kind} {name!r} arrived within {timeout:g} s")
        self.name = name
        self.timeout = timeout


class WaitSignalTimeout(WaitTimeout):
    def __init__(self, name: str, timeout: float) -> None:
        super().__init__("signal", name, timeout)


class WaitEventTimeout(WaitTimeout):
    def __init__(self, name: str, timeout: float) -> None:
        super().__init__("event", name, timeout)
