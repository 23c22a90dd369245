"""What one step of a continuously running runner cost: a JSON-able record per step
(`follow --metrics FILE` writes one line each; benchmarks/soak.py reads them), and the
status line `follow` draws on a terminal.

Fields: `step`, `lower`, `upto`, `placement` ("driver": no Spark job; "spark"), `files`,
`input_rows` and `output_changes` per name, `seconds` (`step`: the runner's step; `total`:
reading the files to the outputs written), `operator_seconds` (a step on the driver:
each operator's own seconds, its inputs' excluded, summed over an iterate's rounds,
`StepResult.operators`; a step on Spark: each iterate's rounds summed), `traces` (per
arrangement: records, bytes, batches, where stored, the driver mirror's records and bytes:
`runner.stats()`),
`driver_rss_bytes`, `lag_seconds` (`max`: the oldest file's modification time to the
step's outputs written, `min`: the newest file's) and `written_at` (Unix seconds).
"""
from __future__ import annotations

import json
import os
import sys
from typing import Optional

TRACE_FIELDS = ("records", "bytes", "batches", "stored", "mirror_records", "mirror_bytes")


def step_record(runner, result, input_rows: dict, files: int, total: float,
                arrived: list, written_at: float, rounds_before: dict) -> dict:
    """The metrics of a step just taken; `arrived`: its files' modification times;
    `rounds_before`: runner.rounds before the step (an iterate the step left alone keeps
    its earlier step's list there)."""
    return {
        "step": result.step, "lower": result.lower, "upto": result.upper,
        "placement": result.placement, "files": files,
        "input_rows": input_rows,
        "output_changes": {name: result.arrow(name).num_rows for name in runner.plan},
        "seconds": {"step": round(result.seconds, 6), "total": round(total, 6)},
        "operator_seconds": {name: round(s, 6) for name, s in result.operators.items()}
        if result.operators else {label: round(sum(s), 6) for label, s in runner.rounds.items()
                                  if s is not rounds_before.get(label)},
        "traces": {label: {f: stats[f] for f in TRACE_FIELDS}
                   for label, stats in runner.stats().items()},
        "driver_rss_bytes": rss_bytes(),
        "lag_seconds": {"max": round(written_at - min(arrived), 6),
                        "min": round(written_at - max(arrived), 6)} if arrived else None,
        "written_at": round(written_at, 6),
    }


def rss_bytes() -> Optional[int]:
    """This process's resident memory now (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Sink:
    """Where step records go: a JSON-lines file (appended, one flushed line a step) and,
    when stderr is a terminal, a status line redrawn in place."""

    def __init__(self, path: Optional[str], stream=None):
        self.file = open(path, "a", encoding="utf-8") if path else None
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()

    def __call__(self, record: dict) -> None:
        if self.file is not None:
            self.file.write(json.dumps(record, sort_keys=True) + "\n")
            self.file.flush()
        if self.tty:
            self.stream.write("\r\033[K" + status_line(record))
            self.stream.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.tty:
            self.stream.write("\n")


def status_line(record: dict) -> str:
    traces = record["traces"].values()
    lag = record["lag_seconds"]
    return (f"step {record['step']} [{record['placement']}] "
            f"in {sum(record['input_rows'].values())} out "
            f"{sum(record['output_changes'].values())} "
            f"{record['seconds']['total']:.2f}s"
            + (f" lag {lag['max']:.2f}s" if lag else "")
            + f" traces {sum(t['records'] for t in traces)} rec "
              f"{sum(t['bytes'] + t['mirror_bytes'] for t in traces) / 2**20:.1f} MiB"
            + (f" rss {record['driver_rss_bytes'] / 2**20:.0f} MiB"
               if record["driver_rss_bytes"] else ""))
