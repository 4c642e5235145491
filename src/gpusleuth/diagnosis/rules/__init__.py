"""Rule families. Each rule is a pure function ``Facts -> list[Finding] | Missing``."""
