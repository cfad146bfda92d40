"""Which server replica this is, and how its writes say so.

Replicas of `cryopg server` share one database; each names itself with
CRYOPG_REPLICA_ID (the host name by default). The name is shown by /api/v1/health and
reaches the database as the session setting `cryo.replica_id` on every pooled
connection, which the column default of cryo.history.replica reads (V0019): every
history row a replica writes names it, without a function passing it along.
"""

from __future__ import annotations

import os
import re
import socket

from psycopg.conninfo import conninfo_to_dict, make_conninfo

# Plain enough to sit in a libpq `options` string without escaping.
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


def replica_id_from_env() -> str:
    """CRYOPG_REPLICA_ID, else the host name (cut to what an id may hold)."""
    given = os.environ.get("CRYOPG_REPLICA_ID", "").strip()
    if given:
        if not _ID.match(given):
            raise ValueError("CRYOPG_REPLICA_ID must be 1-128 characters of letters, digits "
                             "and ._:@- (starting with a letter or digit)")
        return given
    host = re.sub(r"[^A-Za-z0-9._:@-]", "-", socket.gethostname())[:128].lstrip("._:@-")
    return host or "replica"


def with_replica(dsn: str, replica_id: str) -> str:
    """The connection string whose sessions carry `cryo.replica_id`."""
    if not _ID.match(replica_id):
        raise ValueError(f"not a replica id: {replica_id!r}")
    params = conninfo_to_dict(dsn)
    extra = f"-c cryo.replica_id={replica_id}"
    params["options"] = f"{params['options']} {extra}" if params.get("options") else extra
    return make_conninfo(**params)
