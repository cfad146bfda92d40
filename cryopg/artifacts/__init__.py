"""Artifacts: content-addressed blobs in a directory or an S3 bucket, named in PostgreSQL.

settings.py reads the deployment's choices from the environment, store.py moves bytes
(never a whole blob in memory), and the routes live in cryopg/server/*/artifacts.py.
"""
