"""Soak (benchmarks/soak.py, slow): many small steps through a join, a reduction and an
iteration fed as files to `follow`; per step latency, driver RSS, JVM heap and trace
sizes must show no upward trend beyond benchmarks/soak.py's tolerances (a fitted line's
rise across the steady state relative to its median). The traces fill up to their
plateau (about three times the live rows: merges compact only as batches meet) over the
first ~150 steps, so the trend is fitted after that warm-up, not over the climb; a leak of
a few KiB a step still shows. The real run is `python benchmarks/soak.py --steps 1000`."""
from __future__ import annotations

import pytest

from benchmarks import soak


@pytest.mark.slow
@pytest.mark.parametrize("steps, warmup, changes", [(300, 150, 100)])
def test_soak_shows_no_upward_trend(spark, conf, steps, warmup, changes):
    records = soak.soak(spark, conf, steps, changes, say=None)
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert all(r["placement"] == "driver" for r in records[1:])  # no Spark lineage to grow
    found = soak.trends(soak.series(records), warmup)
    assert soak.rising(found, soak.TOLERANCE) == []
