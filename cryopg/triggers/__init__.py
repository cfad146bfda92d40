"""What triggers need outside SQL: cron arithmetic, webhook signatures and payloads, and
sending commit statuses to forges."""
