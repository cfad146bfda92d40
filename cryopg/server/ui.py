"""The web UI's files: `/` is the page, `/ui/…` its scripts and styles (cryopg/ui/static).

They hold no data and no secret, so they need no token; the page signs in with the
user's API token and calls the same `/api/v1` routes as the CLI.
"""

from __future__ import annotations

from aiohttp import web

from cryopg.ui import STATIC_DIR

# The page may only load its own files and talk to its own server: an injected
# <script> or inline handler (should escaping ever fail) does not run.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={
        "Content-Security-Policy": CSP, "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})


@web.middleware
async def ui_headers(request: web.Request, handler):  # type: ignore[no-untyped-def]
    resp = await handler(request)
    if request.path.startswith("/ui/"):
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Cache-Control"] = "no-cache"
    return resp


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_static("/ui/", STATIC_DIR, follow_symlinks=False)
