"""Serving, data model: request ids, an engine's samples, the per-request export."""
