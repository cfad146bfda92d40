"""The cryo schema as pg_dump prints it, made stable enough to commit and compare."""

from __future__ import annotations

import subprocess

from psycopg.conninfo import conninfo_to_dict

from cryopg.devpg import find_bindir


def dump_schema(dsn: str) -> str:
    params = conninfo_to_dict(dsn)
    cmd = [str(find_bindir() / "pg_dump"), "--schema-only", "--schema=cryo", "--no-owner",
           "--no-privileges", "-h", str(params.get("host", "")),
           "-p", str(params.get("port", "5432")), "-U", str(params.get("user", "")),
           str(params.get("dbname", ""))]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return normalize(out)


def normalize(text: str) -> str:
    """Drops what varies between runs and versions: pg_dump's comments, SET lines and
    restrict keys, and the digest comment `cryopg migrate` keeps on the schema."""
    kept = []
    for line in text.splitlines():
        if line.startswith(("--", "SET ", "SELECT pg_catalog.", "\\restrict", "\\unrestrict")):
            continue  # \restrict carries a random key per dump
        if line.startswith("COMMENT ON SCHEMA cryo IS"):
            continue
        if not line.strip() and (not kept or not kept[-1].strip()):
            continue
        kept.append(line.rstrip())
    return "\n".join(kept).strip() + "\n"
