"""The `smd` command line."""
