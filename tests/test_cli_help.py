"""`cryopg --help` names every in-script verb, which click itself never sees."""

from __future__ import annotations

import re

from cryopg.cli.inscript import IN_SCRIPT_VERBS
from cryopg.cli.main import IN_SCRIPT_HELP


def test_help_lists_exactly_the_in_script_verbs() -> None:
    listed = set(re.findall(r"[a-z][a-z-]+", IN_SCRIPT_HELP.split(":", 1)[1]))
    assert listed == set(IN_SCRIPT_VERBS)
