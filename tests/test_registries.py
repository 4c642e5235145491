"""The extension points are lists of records (issue 35 item 4): a cause is one ``Cause``, an input format one
``InputFormat``; everything else about them is derived from the list, so the list is checked here."""

from __future__ import annotations

import typing

from gpusleuth.diagnosis.taxonomy import CAUSE_LIST, CAUSES, STAGE_OF_CAUSE, STAGES, Stage
from gpusleuth.sources.detect import FORMAT_BY_NAME, FORMATS, TRACE_FORMATS


def test_one_record_per_cause_with_a_stage_the_report_walks():
    ids = [c.id for c in CAUSE_LIST]
    assert len(ids) == len(set(ids))
    assert list(CAUSES) == ids and set(STAGE_OF_CAUSE) == set(ids)
    assert {key for key, _ in STAGES} == set(typing.get_args(Stage))
    assert all(c.meaning and c.stage in typing.get_args(Stage) for c in CAUSE_LIST)


def test_one_record_per_input_format():
    names = [f.name for f in FORMATS]
    assert len(names) == len(set(names)) and set(FORMAT_BY_NAME) == set(names)
    assert TRACE_FORMATS == ("kineto", "nsys")
    assert all(callable(f.read) and f.kind in ("trace", "telemetry") for f in FORMATS)
