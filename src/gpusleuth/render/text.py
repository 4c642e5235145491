"""Make untrusted text inert before it reaches a terminal.

Why one place: kernel, op, process and file names come from traces and command lines, which anyone can
write. Printed raw, ``ESC ] 52`` writes the user's clipboard, ``ESC ] 8`` plants a link, CSI sequences
repaint the screen, NUL and C1 controls confuse terminals and bidi overrides reorder what is shown. Rich
strips only BEL/BS/CR. Every console renderer prints through :class:`SafeConsole`, whose ``render_str``
(the single door every ``str`` renderable, table cell and markup string goes through) escapes these
characters visibly, so no renderer has to remember to do it. Rich's own styling is added after this
point and is untouched. (HTML gets the same protection from escaping in render/html.py.)
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.text import Text

# C0 controls except tab and newline, DEL, C1 controls, line/paragraph separators, bidi embeddings and
# overrides/isolates, and lone surrogates (which no terminal encoding can write).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def inert(text: str) -> str:
    """``text`` with every control, escape, bidi and surrogate character written as a visible escape."""
    return _UNSAFE.sub(_visible, text) if _UNSAFE.search(text) else text


#: the longest text one console string prints whole (our own sentences stay under ~400 characters)
CONSOLE_TEXT_MAX = 2000


def clip(text: str, limit: int = CONSOLE_TEXT_MAX) -> str:
    """``text`` cut in its middle when longer than ``limit``, saying how much was cut: a 100 kB job label,
    command or kernel name printed whole made a 213 KB console report. Head and tail both stay, so a
    sentence around a long name keeps its meaning."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 6
    return f"{text[:head]}… [{len(text) - head - tail:,} characters not shown] …{text[-tail:]}"


class SafeConsole(Console):
    """A rich Console that never writes a control character it was given in text (only its own styling),
    nor more than :data:`CONSOLE_TEXT_MAX` characters of one string."""

    def render_str(self, text: str, *args: Any, **kwargs: Any) -> Text:
        return super().render_str(clip(inert(text)), *args, **kwargs)
