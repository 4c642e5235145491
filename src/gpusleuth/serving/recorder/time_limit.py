"""A time limit on an awaited block: ``async with time_limit(seconds):`` raises ``asyncio.TimeoutError`` (a
``TimeoutError``) when the block has not finished in time.

Why its own module: the load generator (each request) and the server probe (each poll) both need it, and on
Python 3.10 ``asyncio.timeout`` does not exist — ``_WaitFor`` stands in by cancelling the task at the deadline
(``asyncio.wait_for`` would cost an extra task per request).
"""

from __future__ import annotations

import asyncio


class _WaitFor:
    """``asyncio.timeout`` for Python 3.10, by cancelling the task at the deadline."""

    def __init__(self, seconds: float):
        self.seconds, self.handle, self.fired = seconds, None, False

    async def __aenter__(self):
        task = asyncio.current_task()
        self.handle = asyncio.get_running_loop().call_later(self.seconds, self._fire, task)

    def _fire(self, task) -> None:
        self.fired = True
        task.cancel()

    async def __aexit__(self, kind, exc, tb):
        self.handle.cancel()
        if self.fired and kind is asyncio.CancelledError:
            raise asyncio.TimeoutError from None
        return False


# 3.11+: asyncio.timeout, no extra task per request (wait_for makes one)
time_limit = getattr(asyncio, "timeout", None) or _WaitFor
