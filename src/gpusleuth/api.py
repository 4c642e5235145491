"""Explicit instrumentation API: for code that wants to say where its steps and phases are.

Under ``gpusleuth run`` the job's processes carry the auto-instrumentation hook (``_gpusleuth_autohook``,
loaded by our ``sitecustomize``); these functions hand their events to it. Anywhere else they are cheap
no-ops, so a script can keep its ``gpusleuth.step()`` calls whether or not it is being recorded.

The hook module is looked up on every call (one dict lookup) rather than cached at import, so this file
stays correct whatever the import order of start-up code.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

if TYPE_CHECKING:  # typing.Self is Python 3.11's; the package runs on 3.10 too
    from typing_extensions import Self

_HOOK = "_gpusleuth_autohook"
T = TypeVar("T")


def _hook():
    mod = sys.modules.get(_HOOK)
    if mod is None or getattr(mod, "R", None) is None:
        return None
    return mod


def step(samples: int | None = None) -> None:
    """End the current training step (and start the next). ``samples``: how many samples it processed,
    when the batch size cannot be read from what the DataLoader returned.

    Once a process calls this, only these calls delimit its steps (automatic delimiting by
    ``optimizer.step()``/``backward()`` stops), so call it once per iteration.
    """
    h = _hook()
    if h is not None:
        h.api_step(samples)


class _Span:
    """A named span: a context manager and a decorator (each call of the function is one span). A
    subclass names the hook's begin and end functions; without the hook (not recording) it does nothing."""

    __slots__ = ("name", "_tokens")
    _begin = _end = ""

    def __init__(self, name: str):
        self.name = str(name)
        self._tokens: list = []

    def __enter__(self) -> Self:
        h = _hook()
        begin = getattr(h, self._begin, None) if h is not None else None
        # a stack, so one object can be entered again while open (recursion through a decorator)
        self._tokens.append(begin(self.name) if begin is not None else None)
        return self

    def __exit__(self, *exc: Any) -> bool:
        tok = self._tokens.pop() if self._tokens else None
        if tok is not None:
            h = _hook()
            if h is not None:
                getattr(h, self._end)(tok)
        return False

    def __call__(self, fn: Callable[..., T]) -> Callable[..., T]:
        name, kind = self.name, type(self)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                with kind(name):
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with kind(name):
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"gpusleuth.{type(self).__name__}({self.name!r})"


class phase(_Span):
    """A named phase (``"eval"``, ``"checkpoint"``, ``"logging"``…): a context manager and a decorator.

    ``with gpusleuth.phase("eval"): ...`` or ``@gpusleuth.phase("eval")`` on a function (each call is
    one phase). Time in a phase is reported as that phase, not as training compute; DataLoader waits inside
    a phase that contains no step boundary belong to the phase, not to the surrounding step.
    """

    __slots__ = ()
    _begin, _end = "api_phase_begin", "api_phase_end"


class stage(_Span):
    """A named stage of the request being served (``"tokenize"``, ``"detokenize"``…): a context manager
    and a decorator. Inside a server recorded by ``gpusleuth run``, the hook adds its time to the
    request's ``stages`` (docs/serving.md, "Per-request stages"); the stage still falls in the request's pre/post split
    by when it ran. Outside a request, or when not recording, it does nothing.
    """

    __slots__ = ()
    _begin, _end = "api_stage_begin", "api_stage_end"


def in_phase(name: str) -> bool:
    """Whether a phase of this name is open in this process (the program's own or one the hook opened by
    itself, like the automatic ``eval`` from ``model.eval()``). Integrations ask before opening theirs, so a
    phase is never counted twice. False when not recording."""
    h = _hook()
    r = getattr(h, "R", None) if h is not None else None
    return r is not None and any(p[0] == name for p in getattr(r, "open_phases", ()))


def flush() -> None:
    """Write this process's buffered step and phase events to the run directory now (the hook writes about
    once a second by itself). For integrations that read gpusleuth's live numbers back mid-run."""
    h = _hook()
    if h is not None and getattr(h, "R", None) is not None:
        h.R.flush()


def watch(iterable: Iterable[T]) -> Iterable[T]:
    """Wrap an iterable so that time spent fetching its items counts as data wait, like a DataLoader's.

    Returns the iterable itself when not recording. Batch sizes are read from the items as for a
    DataLoader (a tensor's first dimension, or the first tensor in a tuple/list/dict).
    """
    h = _hook()
    if h is None:
        return iterable
    return h.api_watch(iterable)


def log(samples: int | None = None, tokens: int | None = None, **metrics: Any) -> None:
    """Record samples/tokens processed and any metrics (loss, accuracy, learning rate…) at this moment.

    ``samples`` given here override the batch size read from the DataLoader for the current step (calls
    within one step add up). Tensor values are converted with ``.item()``, which synchronizes a GPU:
    pass Python numbers in hot loops.
    """
    h = _hook()
    if h is not None:
        h.api_log(samples, tokens, metrics)
