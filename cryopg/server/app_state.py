"""Typed keys for what the app holds (see app.py for how each is set up)."""

from __future__ import annotations

from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from cryopg.graphs.driver import Timers
from cryopg.server.config import ServerConfig
from cryopg.server.keys import OrgKeys
from cryopg.server.notifier import Notifier

CONFIG = web.AppKey("config", ServerConfig)
POOL = web.AppKey("pool", AsyncConnectionPool)
NOTIFIER = web.AppKey("notifier", Notifier)
KEYS = web.AppKey("keys", OrgKeys)
TIMERS = web.AppKey("graph_timers", Timers)  # the graph driver's exact timers
