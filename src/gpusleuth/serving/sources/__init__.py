"""Serving, sources stage: an engine's own /metrics as recorded."""
