"""Console entry point for `cryopg` and `cryo`.

In-script verbs are a hot path (a bash workflow may call `cryopg step` thousands of
times), so they are dispatched before click, aiohttp or psycopg are imported.
"""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv:
        from cryopg.cli.inscript import IN_SCRIPT_VERBS, state_goes_to_server

        if argv[0] in IN_SCRIPT_VERBS and not state_goes_to_server(argv):
            from cryopg.cli.inscript import main as inscript_main

            sys.exit(inscript_main(argv))
    from cryopg.cli.main import cli

    cli(prog_name="cryopg")


if __name__ == "__main__":
    main()
