"""A time limit on an awaited block: ``async with time_limit(seconds):`` raises ``asyncio.TimeoutError`` (a
``TimeoutError``) when the block has not finished in time.

Why its own module: the load generator (each request) and the server probe (each poll) both need it, and on
Python 3.10 ``asyncio.timeout`` does not exist — ``_WaitFor`` stands in by cancelling the task at the deadline
(``asyncio.wait_for`` would cost an extra task per request).
"""

from __future__ import annotations

import asyncio
import sys
from types import TracebackType
from typing import Any, Literal


class _WaitFor:
    """``asyncio.timeout`` for Python 3.10, by cancelling the task at the deadline."""

    def __init__(self, seconds: float):
        self.seconds, self.fired = seconds, False
        self.handle: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:  # as asyncio.timeout says it: without a task there is nothing to cancel at the deadline
            raise RuntimeError("time_limit should be used inside a task")
        self.handle = asyncio.get_running_loop().call_later(self.seconds, self._fire, task)

    def _fire(self, task: asyncio.Task[Any]) -> None:
        self.fired = True
        task.cancel()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> Literal[False]:
        if self.handle is not None:
            self.handle.cancel()
        if self.fired and kind is asyncio.CancelledError:
            raise asyncio.TimeoutError from None
        return False


# 3.11+: asyncio.timeout, no extra task per request (wait_for makes one)
if sys.version_info >= (3, 11):
    time_limit = asyncio.timeout
else:
    time_limit = _WaitFor
