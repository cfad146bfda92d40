"""Which agent capability a script needs, for runs submitted by users and spawned by runs."""

from __future__ import annotations

SHELL_SUFFIXES = (".sh", ".bash")
SHELL_INTERPRETERS = {"bash", "sh", "dash", "zsh"}


def required_caps(filename: str, interpreter: str | None) -> list[str]:
    """Shell scripts need `shell`; anything run by another interpreter needs `polyglot`."""
    if interpreter:
        program = interpreter.split()[0].rsplit("/", 1)[-1]
        return ["shell"] if program in SHELL_INTERPRETERS else ["polyglot"]
    base = filename.rsplit("/", 1)[-1]
    return ["shell"] if base.endswith(SHELL_SUFFIXES) or "." not in base else ["polyglot"]
