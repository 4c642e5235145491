"""The hook's side of ``gpusleuth.step/phase/stage/log/watch`` (standard library only, Python 3.8+).

``gpusleuth.api`` finds these entry points on ``_gpusleuth_autohook`` (which re-exports them) when the hook
is active in the process, and calls them; each hands the event to the recorder (``_gpusleuth_state.R``) and
swallows its own failures, so an explicit call never raises into the job.
"""
import sys

import _gpusleuth_state as _state


def api_step(samples=None):
    r = _state.R
    try:
        if r is not None:
            r.api_step(samples)
    except BaseException as exc:
        r.error("api_step", exc)


def api_phase_begin(name, source="api"):
    r = _state.R
    try:
        if r is not None:
            return r.phase_begin(name, source)
    except BaseException as exc:
        r.error("api_phase", exc)
    return None


def api_phase_end(tok):
    r = _state.R
    try:
        if r is not None and tok is not None:
            r.phase_end(tok)
    except BaseException as exc:
        r.error("api_phase", exc)


def api_stage_begin(name):
    """``gpusleuth.stage(name)`` entered: a token when a request is open in this thread/task, else None."""
    r = _state.R
    try:
        if r is not None and "_gpusleuth_request" in sys.modules:
            return sys.modules["_gpusleuth_request"].stage_begin(name)
    except BaseException as exc:
        r.error("api_stage", exc)
    return None


def api_stage_end(tok):
    r = _state.R
    try:
        if r is not None and tok is not None:
            sys.modules["_gpusleuth_request"].stage_end(tok)
    except BaseException as exc:
        r.error("api_stage", exc)


def api_log(samples=None, tokens=None, metrics=None):
    r = _state.R
    try:
        if r is not None:
            r.log(samples, tokens, metrics or {})
    except BaseException as exc:
        r.error("api_log", exc)


def api_watch(iterable):
    if _state.R is None:
        return iterable
    return Watched(iterable)


class Watched:
    """An iterable whose ``__next__`` time counts as data wait, exactly like a DataLoader fetch (both go
    through ``Recorder.fetch``)."""

    def __init__(self, iterable):
        self._src = iterable
        self._it = None

    def __iter__(self):
        it = iter(self._src)
        if it is self._src:  # an iterator: we are its single pass
            self._it = it
            return self
        w = Watched(self._src)
        w._it = it
        return w

    def __len__(self):
        return len(self._src)

    def __next__(self):
        it = self._it
        if it is None:
            it = self._it = iter(self._src)
        r = _state.R
        if r is None:
            return next(it)
        return r.fetch(next, it)
