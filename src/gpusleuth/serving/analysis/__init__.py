"""Serving, analysis stage: every serving number, once (load levels, tokens, requests, batching, SLO misses,
capacity, the engine per level)."""
