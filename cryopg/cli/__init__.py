"""The `cryopg` (alias `cryo`) command line. Kept import-free: see entry.py."""
