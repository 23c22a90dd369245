"""End-to-end lag of `follow`: a file complete (renamed in; its modification time) to the
step's output changes written, measured by `follow --metrics` itself (executor/apps/
metrics.py, `lag_seconds`). A `follow` process on plans/examples/soak.py (join, sum,
iterate) polls every --poll seconds; after a load step, a group of files with --changes
updates (split over the three inputs as benchmarks/soak.py splits them; no `time` column,
so each step is at the frontier) arrives every --every seconds. Goal (issue 20): median lag
<= 1 s for 1,000-change files on the driver placement.

    python benchmarks/follow_lag.py [--files 30] [--changes 1000] [--every 1.0] [--poll 0.05]

Writes benchmarks/results/follow_lag.json: every step's metrics record and the lag's median,
p95 and max over the steady files (the load step excluded).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.soak import PLAN, SCHEMAS, Changes  # noqa: E402

GOAL_S = 1.0


def main(argv=None) -> dict:
    p = common.base_parser(__doc__, 0)
    p.add_argument("--files", type=int, default=30, help="steady file groups (default 30)")
    p.add_argument("--changes", type=int, default=1000, help="updates per group")
    p.add_argument("--every", type=float, default=1.0, help="seconds between groups")
    p.add_argument("--poll", type=float, default=0.05, help="follow's --poll")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="follow-lag-"))
    for name in SCHEMAS:
        (work / name).mkdir()
    metrics = work / "metrics.jsonl"
    argv_follow = [sys.executable, "-m", "executor", "follow", str(PLAN), "--output",
                   str(work / "out"), "--state", str(work / "state"), "--poll", str(args.poll),
                   "--metrics", str(metrics), "--spark-log", str(work / "spark.log")]
    argv_follow += [a for name in SCHEMAS for a in ("--input", f"{name}={work / name}")]
    argv_follow += [a for c in args.conf for a in ("--conf", c)]
    proc = subprocess.Popen(argv_follow, cwd=common.ROOT, stdout=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(common.ROOT)))
    gen = Changes(args.changes, args.seed)
    try:
        for t in range(args.files + 1):
            for name, table in gen.step(t).items():
                table = table.drop_columns(["time"])
                tmp = work / name / f".{t:06d}.parquet"
                pq.write_table(table, tmp)
                os.replace(tmp, work / name / f"{t:06d}.parquet")
            wait_steps(metrics, proc, t + 1)  # steps may merge groups: wait for >= t+1 files
            time.sleep(args.every)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    steady = [r for r in records if r["step"] > 1]
    lags = [r["lag_seconds"]["max"] for r in steady]
    summary = {"median": float(np.median(lags)), "p95": float(np.percentile(lags, 95)),
               "max": float(max(lags))}
    payload = {**common.header("follow_lag", argv), "files": args.files,
               "changes": args.changes, "every_s": args.every, "poll_s": args.poll,
               "placements": sorted({r["placement"] for r in steady}),
               "lag_seconds": summary, "goal_s": GOAL_S,
               "goal_met": summary["median"] <= GOAL_S, "records": records}
    path = common.save_json(common.results_path("follow_lag", args.out), payload)
    print(f"wrote {path}")
    print(f"lag over {len(lags)} steps of {args.changes} changes ({', '.join(payload['placements'])}"
          f"): median {summary['median']:.3f} s, p95 {summary['p95']:.3f} s, max "
          f"{summary['max']:.3f} s; goal median <= {GOAL_S:g} s: "
          f"{'met' if payload['goal_met'] else 'NOT met'}")
    return payload


def report(payload: dict) -> str:
    lag = payload["lag_seconds"]
    return (f"`follow --poll {payload['poll_s']:g}` on plans/examples/soak.py: "
            f"{payload['files']} groups of {payload['changes']} changes, one every "
            f"{payload['every_s']:g} s (placement {', '.join(payload['placements'])})\n\n"
            + common.markdown_table(["lag", "median s", "p95 s", "max s"],
                                    [("file complete to outputs written", lag["median"],
                                      lag["p95"], lag["max"])])
            + f"\n\ngoal: median <= {payload['goal_s']:g} s: "
              f"{'met' if payload['goal_met'] else 'NOT met'}\n")


def wait_steps(metrics: Path, proc, files: int, seconds: float = 300) -> None:
    """Until the metrics file accounts for `files` file groups (raises if follow died)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"follow exited with status {proc.returncode}")
        if metrics.exists():
            done = sum(json.loads(line)["files"] for line in metrics.read_text().splitlines())
            if done >= files * len(SCHEMAS):
                return
        time.sleep(0.02)
    raise SystemExit(f"follow took over {seconds:g} s for {files} file groups")


if __name__ == "__main__":
    main()
