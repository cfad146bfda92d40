"""Which agent capability a script needs is one rule, in SQL: cryo._required_caps
(sql/functions/20_submit.sql). A submit given no capabilities (None) applies it there,
in the same call, so no second copy of the rule lives here."""

from __future__ import annotations


def required_caps(filename: str, interpreter: str | None) -> None:
    """None: let cryo.submit_script apply cryo._required_caps. Kept only for
    cryopg/graphs/starts.py, which imports it, until that module passes None itself."""
    del filename, interpreter
    return None
