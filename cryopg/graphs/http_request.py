"""The job an http node runs on a connector agent: the request it was given (as the
run's input), and its answer printed as one line of JSON: {status, headers, body}.
A status of 400 or more exits 1, so the node fails and its retry can cover it."""

import json
import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    with open(os.environ["CRYO_INPUT_FILE"], encoding="utf-8") as f:
        req = json.load(f)
    body = req.get("body")
    data = None
    headers = dict(req.get("headers") or {})
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        if not isinstance(body, str):
            headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(req["url"], data=data, headers=headers,
                                     method=req.get("method", "GET"))
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            status, got_headers, raw = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        status, got_headers, raw = exc.code, dict(exc.headers), exc.read()
    text = raw.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    print(json.dumps({"status": status, "headers": got_headers, "body": parsed}))
    return 0 if status < 400 else 1


if __name__ == "__main__":
    sys.exit(main())
