"""The hook times steps on the device the job's memory is on (issue 24, defect 9).

A model moved with ``.to("cuda:1")`` and no ``set_device`` leaves torch's *current* device at 0: events
recorded on the current stream timed device 0 and could create a context there. No GPU here, so
``torch.cuda`` is replaced at its boundary by a stand-in of two devices that records what was asked of it;
the hook's own functions run unchanged.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "hook"))
from _gpusleuth_device import Device  # noqa: E402


class TwoGpus:
    """torch.cuda with two H100s; the program's memory is on ``held`` devices; current device stays 0."""

    def __init__(self, held):
        self.held = held
        self.current = 0
        self.streams_used: list[int] = []
        self.entered: list[int] = []

    def device_count(self):
        return 2

    def memory_reserved(self, i):
        return 2 << 30 if i in self.held else 0

    def current_device(self):
        return self.current

    @contextlib.contextmanager
    def device(self, i):
        self.entered.append(i)
        old, self.current = self.current, i
        try:
            yield
        finally:
            self.current = old

    def is_current_stream_capturing(self):
        return False

    def current_stream(self, device=None):
        return SimpleNamespace(device=self.current if device is None else device)

    def get_device_properties(self, i):
        return SimpleNamespace(name="NVIDIA H100 80GB HBM3", uuid=f"0000000{i}-1111-2222-3333-444444444444",
                               multi_processor_count=132)

    def Event(self, enable_timing=False):  # noqa: N802 - torch's name
        cuda = self

        class Ev:
            def record(self, stream=None):
                cuda.streams_used.append(cuda.current if stream is None else stream.device)
        return Ev()


def recorder(cuda):
    """The Device of a recorder on ``cuda``; what it tells the recorder is collected."""
    infos, errors = [], []
    r = SimpleNamespace(worker=False, info=infos.append, error=lambda where, exc: errors.append((where, exc)))
    return Device(SimpleNamespace(cuda=cuda), r), infos, errors


def test_events_go_to_the_device_holding_the_model():
    cuda = TwoGpus(held={1})
    r, infos, errors = recorder(cuda)
    for _ in range(3):
        assert r.mark() is not None
    assert cuda.streams_used == [1, 1, 1]  # never device 0's stream
    assert 0 not in cuda.entered
    assert r.index == 1 and not errors
    assert infos == [{"kind": "cuda_device", "index": 1, "uuid": "00000001-1111-2222-3333-444444444444",
                      "name": "NVIDIA H100 80GB HBM3", "timed": True, "sm_count": 132}]


def test_no_event_before_the_job_holds_memory():
    cuda = TwoGpus(held=set())
    r, infos, _ = recorder(cuda)
    assert r.mark() is None and cuda.streams_used == [] and r.index is None
    cuda.held = {0}
    assert r.mark() is not None and cuda.streams_used == [0]


@pytest.mark.parametrize("current,expected", [(0, 0), (1, 1)])
def test_memory_on_several_devices_prefers_the_current_one(current, expected):
    cuda = TwoGpus(held={0, 1})
    cuda.current = current
    r, infos, _ = recorder(cuda)
    r.mark()
    assert cuda.streams_used == [expected]
    assert sorted(i["index"] for i in infos) == [0, 1]  # both are the job's GPUs
    assert [i["index"] for i in infos if i["timed"]] == [expected]


class Ev:
    """A CUDA event recorded at ``t_ms``; ``done`` says whether the device has reached it."""

    def __init__(self, t_ms, done=True):
        self.t_ms, self.done = t_ms, done

    def query(self):
        return self.done

    def elapsed_time(self, end):
        return end.t_ms - self.t_ms


def test_step_device_times_are_written_in_order_once_their_events_complete():
    """A step's device time runs from the previous step's end event to its own; ``G`` lines come out only
    for completed events, in order (never a wait), and a start event no step needs is recorded again."""
    lines = []
    r = SimpleNamespace(worker=False, info=lambda fact: None, error=lambda where, exc: None, line=lines.append)
    dev = Device(SimpleNamespace(cuda=TwoGpus(held={0})), r)
    e0, e1, e2, e3 = Ev(0.0), Ev(2.5), Ev(4.0, done=False), Ev(7.0)
    dev.step(0, e0)  # the first step's start event was not taken: nothing to time
    dev.step(1, e1)
    assert lines == ["G\t1\t2500000\n"] and dev.pool == [e0]
    dev.step(2, e2)
    dev.step(3, e3)
    assert lines == ["G\t1\t2500000\n"]  # step 2's end has not completed: step 3 waits behind it
    e2.done = True
    dev.poll()
    assert lines == ["G\t1\t2500000\n", "G\t2\t1500000\n", "G\t3\t3000000\n"] and dev.q == []
