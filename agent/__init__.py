"""The cryopg agent: claims runs, executes scripts under a PTY and serves durable verbs."""
