"""Console entry point for `cryopg` and `cryo`.

In-script verbs are a hot path (a bash workflow may call `cryopg step` thousands of
times), so they are dispatched before click, aiohttp or psycopg are imported.
"""

import sys  # and no `from __future__`: each verb pays for every import here


def main(checkout: str | None = None) -> None:
    """`checkout` comes from the launcher scripts/setup writes: it starts Python with -S
    (no site, no .pth files: ~5 ms less per verb) and only the checkout on sys.path."""
    argv = sys.argv[1:]
    if argv:
        from cryopg.cli.inscript import IN_SCRIPT_VERBS, state_goes_to_server

        if argv[0] in IN_SCRIPT_VERBS and not state_goes_to_server(argv):
            from cryopg.cli.inscript import main as inscript_main

            sys.exit(inscript_main(argv))
        if argv[0] == "artifact":  # inside a run: the socket, no click (artifact_socket.py)
            from cryopg.cli.artifact_socket import fast

            code = fast(argv)
            if code is not None:
                sys.exit(code)
    if checkout is not None:
        # Every other command needs site-packages: what -S skipped, with the checkout
        # back where its .pth file puts it.
        if checkout in sys.path:
            sys.path.remove(checkout)
        import site

        site.main()
    from cryopg.cli.main import cli

    cli(prog_name="cryopg")


if __name__ == "__main__":
    main()
