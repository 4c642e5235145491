"""Throttling is decided once (``analysis/telemetry.throttle_sources``): the summary's shares and the HTML chart's
bands read each clock-event reason from the same place. On R535-R570 drivers the power-cap counter works while
the thermal counters are null, so thermal events exist only as reason bits: the chart used to read bits only when
no counter moved at all, and drew no thermal band where the summary reported thermal throttling."""

from __future__ import annotations

import numpy as np

from gpusleuth.analysis.telemetry import _throttled
from gpusleuth.analysis.timeseries import build_display
from gpusleuth.run.model import Run, Table


def r535_gpu_run() -> Run:
    n = 40
    t = 1_000_000_000_000 + np.arange(n, dtype=np.int64) * 100_000_000  # 10 Hz
    power = np.cumsum(np.where(np.arange(n) < 10, 50_000_000, 0)).astype(float)  # the power cap, early on
    bits = np.where((np.arange(n) >= 25) & (np.arange(n) < 35), 0x20, 0)  # SW thermal slowdown, later
    gpu = Table({"t_ns": t, "gpu": np.zeros(n, np.int64), "util_gpu": np.full(n, 90.0),
                 "throttle_power_ns": power, "throttle_thermal_ns": np.full(n, np.nan),
                 "throttle_hw_thermal_ns": np.full(n, np.nan), "clock_event_reasons": bits.astype(float)})
    return Run(meta={"start_ns": int(t[0]), "end_ns": int(t[-1])}, gpu=gpu)


def test_the_chart_draws_every_reason_the_summary_reports():
    run = r535_gpu_run()
    shares = _throttled(run.gpu)
    assert set(shares) == {"sw_power_cap", "sw_thermal"}
    bands = [b for b in build_display(run, [], None, {}).bands if b.kind == "throttle"]
    assert bands, "no throttle band at all"
    drawn = " ".join(b.label for b in bands)
    assert "sw_power_cap" in drawn and "sw_thermal" in drawn  # the thermal reason was missing
    later = [b for b in bands if b.start_s >= 2.0]  # the thermal samples (2.5-3.4 s) have a band of their own
    assert later and abs(later[0].start_s - 2.5) < 0.15


def test_a_counter_read_once_a_second_still_draws_its_band():
    """The sampler reads a field NVML times as slow once a second (recorder/nvml.py): the throttle counter is
    null between readings. A rise between two readings marks the second before the later one (a diff against
    the previous row, null, marked nothing: the chart lost every band of such a driver)."""
    n = 40
    t = 1_000_000_000_000 + np.arange(n, dtype=np.int64) * 100_000_000
    held = np.where((np.arange(n) >= 11) & (np.arange(n) <= 20), 100_000_000, 0)  # 1.1-2.0 s held down
    power = np.cumsum(held).astype(float)
    power[np.arange(n) % 10 != 0] = np.nan  # read at 0, 1, 2, 3 s only
    gpu = Table({"t_ns": t, "gpu": np.zeros(n, np.int64), "util_gpu": np.full(n, 90.0), "throttle_power_ns": power})
    run = Run(meta={"start_ns": int(t[0]), "end_ns": int(t[-1])}, gpu=gpu)
    assert abs(_throttled(run.gpu)["sw_power_cap"] - 1.0 / 3.9) < 0.01
    bands = [b for b in build_display(run, [], None, {}).bands if b.kind == "throttle"]
    assert len(bands) == 1 and 1.0 <= bands[0].start_s <= 1.15 and bands[0].end_s >= 1.95, bands
