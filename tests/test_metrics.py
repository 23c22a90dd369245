"""Per-step metrics of `follow` (executor/apps/metrics.py): the JSON lines `--metrics FILE`
writes hold what the step read and wrote (checked against the files), the trace sizes of
runner.stats(), the driver's memory and the lag from a file's modification time; the
status line is drawn only on a terminal."""
from __future__ import annotations

import io
import json
import os
import time

import pyarrow.parquet as pq

from conftest import ROOT
from executor import Runner
from executor.apps.cli import load_plan
from executor.apps.follow import Follower
from executor.apps.metrics import Sink
from test_follow import PLAN, drop, make_files


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_metrics_lines_hold_each_steps_rows_traces_and_lag(spark, conf, tmp_path):
    for name in ("orders", "prices"):
        (tmp_path / name).mkdir()
    files = make_files(5)
    path, screen = tmp_path / "metrics.jsonl", Terminal()
    sink = Sink(str(path), screen)
    runner = Runner(load_plan(str(PLAN)), conf=conf, spark=spark, state=str(tmp_path / "s"))
    out = tmp_path / "out"
    follower = Follower(runner, {n: str(tmp_path / n) for n in ("orders", "prices")},
                        str(out), say=lambda *a, **k: None, metrics=sink)
    late = 30.0  # the first step's files arrived 30 s ago
    for i, (name, rows) in enumerate(files):
        drop(tmp_path, i, name, rows)
        if i == 0:
            old = time.time() - late
            os.utime(tmp_path / name / f"{i:04d}.parquet", (old, old))
        if i in (0, 2, 4):
            follower.step(follower.new_files())
    sink.close()
    runner.release_state()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3]
    batches = [files[0:1], files[1:3], files[3:5]]
    for record, batch in zip(lines, batches):
        assert record["files"] == len(batch)
        want = {}
        for name, rows in batch:
            want[name] = want.get(name, 0) + len(rows)
        assert record["input_rows"] == want
        for name, n in record["output_changes"].items():
            written = out / name / f"step-{record['step']:012d}.parquet"
            assert n == (pq.read_table(written).num_rows if written.exists() else 0)
        assert record["placement"] == "driver"
        ops = record["operator_seconds"]  # every operator of the walk, by its own time
        assert set(record["traces"]) <= set(ops) and all(v >= 0 for v in ops.values())
        assert sum(ops.values()) <= record["seconds"]["step"]
        assert record["upto"] > record["lower"]
        assert 0 <= record["seconds"]["step"] <= record["seconds"]["total"]
        assert record["driver_rss_bytes"] > 50 * 2**20
        assert 0 <= record["lag_seconds"]["min"] <= record["lag_seconds"]["max"] < 60
        assert record["traces"] and all(t["records"] >= 0 and t["bytes"] >= 0 and
                                        t["stored"] in ("driver", "spark")
                                        for t in record["traces"].values())
    assert lines[0]["lag_seconds"]["min"] >= late
    assert lines[2]["lag_seconds"]["max"] < late
    assert sum(t["records"] for t in lines[-1]["traces"].values()) > \
        sum(t["records"] for t in lines[0]["traces"].values())  # the orders arrived later
    assert sum(sum(r["output_changes"].values()) for r in lines) > 0
    shown = screen.getvalue()
    assert shown.count("\r") == 3 and "step 3 [driver] in " in shown and " lag " in shown

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("#### Metrics"):readme.index("## Configuration")]
    assert all(f"`{field}`" in table for field in lines[0])  # every field documented
    assert all(f"`{field}`" in table for t in lines[0]["traces"].values() for field in t)

    quiet = io.StringIO()  # not a terminal: nothing drawn
    Sink(None, quiet)(lines[0])
    assert quiet.getvalue() == ""
