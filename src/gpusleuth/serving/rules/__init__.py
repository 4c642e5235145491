"""Serving, diagnosis stage: the serving rules, each a pure function ``Facts -> list[Finding] | Missing``;
``diagnosis/engine.py`` lists them in ``RULES``."""
