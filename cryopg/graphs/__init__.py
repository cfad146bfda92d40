"""The graph tier: documents, expressions, and the job an http node runs."""
