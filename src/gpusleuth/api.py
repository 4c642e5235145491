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
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Iterable, ParamSpec, Protocol, Sequence, TypeVar, cast

if TYPE_CHECKING:  # typing.Self is Python 3.11's; the package runs on 3.10 too
    from typing_extensions import Self

_HOOK = "_gpusleuth_autohook"
T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


class _HookRecorder(Protocol):
    """What this module reads of the hook's recorder (``_gpusleuth_state.Recorder``)."""

    open_phases: Sequence[Sequence[object]]  # [name, start, source, snapshot] per open phase

    def flush(self) -> None: ...


class _Hook(Protocol):
    """The hook's entry points (``hook/_gpusleuth_api.py``, re-exported by ``_gpusleuth_autohook``): the contract
    this module calls. The hook is standard-library code loaded into the job by our ``sitecustomize``, outside
    the package and the type check, so its module is seen through this description."""

    R: _HookRecorder | None

    def api_step(self, samples: int | None) -> None: ...

    def api_phase_begin(self, name: str) -> object: ...

    def api_phase_end(self, tok: object) -> None: ...

    def api_stage_begin(self, name: str) -> object: ...

    def api_stage_end(self, tok: object) -> None: ...

    def api_log(self, samples: int | None, tokens: int | None, metrics: dict[str, Any]) -> None: ...

    def api_watch(self, iterable: Iterable[T]) -> Iterable[T]: ...


def _hook() -> _Hook | None:
    """The hook when it records in this process. Its module is read as a ``_Hook`` (a module's attributes are
    untyped to a checker, so any module would pass): the entry points that protocol lists are the contract.
    No ``cast`` here: this runs on every ``step()``, and a call to ``cast`` costs a quarter of it."""
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


class _Span(ABC):
    """A named span: a context manager and a decorator (each call of the function is one span). A
    subclass calls the hook's begin and end functions; without the hook (not recording) it does nothing."""

    __slots__ = ("name", "_tokens")

    def __init__(self, name: str):
        self.name = str(name)
        self._tokens: list[object] = []

    @abstractmethod
    def _begin(self, h: _Hook) -> object:
        """The hook's begin for this kind of span: its token (None when the hook opened nothing)."""

    @abstractmethod
    def _end(self, h: _Hook, tok: object) -> None:
        """The hook's end of the span that ``tok`` (from ``_begin``) opened."""

    def __enter__(self) -> Self:
        h = _hook()
        # a stack, so one object can be entered again while open (recursion through a decorator)
        self._tokens.append(self._begin(h) if h is not None else None)
        return self

    def __exit__(self, *exc: object) -> None:
        tok = self._tokens.pop() if self._tokens else None
        if tok is not None:
            h = _hook()
            if h is not None:
                self._end(h, tok)

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        name, kind = self.name, type(self)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> object:
                with kind(name):
                    return await fn(*args, **kwargs)

            # an async function's wrapper is an async function of the same parameters: calling it gives the
            # coroutine that calling fn gives (R), awaiting to what fn's awaits to
            return cast("Callable[P, R]", async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
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

    def _begin(self, h: _Hook) -> object:
        return h.api_phase_begin(self.name)

    def _end(self, h: _Hook, tok: object) -> None:
        h.api_phase_end(tok)


class stage(_Span):
    """A named stage of the request being served (``"tokenize"``, ``"detokenize"``…): a context manager
    and a decorator. Inside a server recorded by ``gpusleuth run``, the hook adds its time to the
    request's ``stages`` (docs/serving.md, "Per-request stages"); the stage still falls in the request's pre/post split
    by when it ran. Outside a request, or when not recording, it does nothing.
    """

    __slots__ = ()

    def _begin(self, h: _Hook) -> object:
        return h.api_stage_begin(self.name)

    def _end(self, h: _Hook, tok: object) -> None:
        h.api_stage_end(tok)


def in_phase(name: str) -> bool:
    """Whether a phase of this name is open in this process (the program's own or one the hook opened by
    itself, like the automatic ``eval`` from ``model.eval()``). Integrations ask before opening theirs, so a
    phase is never counted twice. False when not recording."""
    h = _hook()
    r = h.R if h is not None else None
    return r is not None and any(p[0] == name for p in r.open_phases)


def flush() -> None:
    """Write this process's buffered step and phase events to the run directory now (the hook writes about
    once a second by itself). For integrations that read gpusleuth's live numbers back mid-run."""
    h = _hook()
    r = h.R if h is not None else None
    if r is not None:
        r.flush()


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
