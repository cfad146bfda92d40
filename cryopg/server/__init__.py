"""The aiohttp server: user routes, agent routes, the LISTEN notifier and the ticker."""
