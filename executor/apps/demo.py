"""The demo (`python -m executor demo`): which tags are active, per user cohort, over time.

Events have a validity interval: `(user, item, lo, hi, tags)` is valid at times
lo <= t < hi. The dataflow keeps, for every time, the multiset of (cohort, tag) over the
valid events, one entry per tag of each event:

    filter            drop test accounts
    map               a user's cohort; each tag once
    explode           one update per tag (its `diff` is the weight: here 1 per tag)
    temporal_filter   present only while the event is valid
    map               keep (cohort, tag)

The optimizer fuses the chain into one Linear[...] node: one Spark projection per step.
The events arrive in steps: a large first batch (the history), then smaller ones, each also
retracting some earlier events (diff -1: the event was cancelled). Every step prints its
output changes: insertions (+) and retractions (-), including the ones the temporal filter
schedules when an interval ends. At the end, the collection as of the last final time.

Use it as a template: build a Dataflow, hand a Runner a DataFrame per input and step, read
`result.changes` (this step's final changes) or `runner.snapshot(...)`.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, functions as F

from executor import Runner
from plans import Dataflow

SCHEMA = "user BIGINT, item BIGINT, lo BIGINT, hi BIGINT, tags ARRAY<STRING>"
TAGS = np.array(["sports", "music", "news", "travel", "food", "tech", "kids", "promo"])
STEP_LENGTH = 1_000     # times per step: step s feeds times [s * STEP_LENGTH, (s+1) * ...)
USERS, ITEMS = 50_000, 5_000
RETRACT = 0.05          # each later step cancels this share of the events seen so far


def build(flow: Dataflow) -> None:
    events = flow.input("events", SCHEMA)
    active = (events
              .filter("user % 97 != 0")                                  # test accounts
              .map("user % 100 AS cohort", "lo", "hi", "array_distinct(tags) AS tags")
              .explode("transform(tags, t -> named_struct("
                       "'cohort', cohort, 'tag', t, 'lo', lo, 'hi', hi, 'diff', 1L))")
              .temporal_filter(lower="lo", upper="hi")
              .map("cohort", "tag"))
    flow.output("active_tags", active)


# ---------------------------------------------------------------------------- data
def make_events(rng: np.random.Generator, n: int, start: int) -> pa.Table:
    """`n` new events arriving at times in [start, start + STEP_LENGTH), each with 1 to 3
    tags and valid from shortly after its arrival for up to three steps."""
    time = rng.integers(start, start + STEP_LENGTH, n)
    lo = time + rng.integers(0, 200, n)
    hi = lo + rng.integers(1, 3 * STEP_LENGTH, n)
    sizes = rng.integers(1, 4, n)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    tags = pa.ListArray.from_arrays(pa.array(offsets),
                                    pa.array(TAGS[rng.integers(0, len(TAGS), offsets[-1])]))
    return pa.table({"user": rng.integers(0, USERS, n), "item": rng.integers(0, ITEMS, n),
                     "lo": lo, "hi": hi, "tags": tags, "time": time,
                     "diff": np.ones(n, dtype=np.int64)})


def retractions(rng: np.random.Generator, seen: pa.Table, share: float,
                start: int) -> tuple[pa.Table, pa.Table]:
    """Cancel a random `share` of the still-live events in `seen` at times in this step:
    the same records with diff -1. Returns (retractions, events still live)."""
    pick = rng.random(seen.num_rows) < share
    gone = seen.filter(pa.array(pick))
    gone = (gone.set_column(gone.schema.get_field_index("time"), "time",
                            pa.array(rng.integers(start, start + STEP_LENGTH, gone.num_rows)))
                .set_column(gone.schema.get_field_index("diff"), "diff",
                            pa.array(np.full(gone.num_rows, -1, dtype=np.int64))))
    return gone, seen.filter(pa.array(~pick))


def batches(events: int, steps: int, seed: int):
    """Per step, (its first time, its updates as an Arrow table): half of the events come in
    the first step, the rest evenly after, each later step with its retractions."""
    rng = np.random.default_rng(seed)
    first = events if steps == 1 else events // 2
    sizes = [first] + [(events - first) // (steps - 1) + (i < (events - first) % (steps - 1))
                       for i in range(steps - 1)]
    live = None
    for s, n in enumerate(sizes):
        start = s * STEP_LENGTH
        new = make_events(rng, n, start)
        if live is None:
            yield start, new
            live = new
        else:
            gone, live = retractions(rng, live, RETRACT, start)
            yield start, pa.concat_tables([new, gone])
            live = pa.concat_tables([live, new])


# ---------------------------------------------------------------------------- run
def count_changes(changes: DataFrame) -> tuple[int, int]:
    """(insertions, retractions) among a step's output changes, in one Spark job."""
    row = changes.agg(F.sum(F.when(F.col("diff") > 0, 1).otherwise(0)).alias("plus"),
                      F.sum(F.when(F.col("diff") < 0, 1).otherwise(0)).alias("minus")).first()
    return int(row["plus"] or 0), int(row["minus"] or 0)


def run_demo(spark: SparkSession, conf: dict, events: int = 200_000, steps: int = 5,
             seed: int = 7, out=print) -> dict:
    """Run the demo on `spark`; print one line per step and a summary; return the numbers."""
    flow = Dataflow()
    build(flow)
    runner = Runner(flow, conf=conf, spark=spark)
    out(runner.explain().split("== optimized ==\n")[-1])
    out(f"{events:,} events in {steps} steps (seed {seed}), local Spark "
        f"{spark.sparkContext.master}")

    report = {"steps": []}
    for s, (start, table) in enumerate(batches(events, steps, seed), start=1):
        updates = spark.createDataFrame(table)
        result = runner.step({"events": updates}, upto=start + STEP_LENGTH)
        plus, minus = count_changes(result.changes["active_tags"])
        report["steps"].append({"updates": table.num_rows, "plus": plus, "minus": minus,
                                "seconds": result.seconds})
        out(f"step {s}/{steps} times [{result.lower}, {result.upper}) "
            f"updates={table.num_rows:,} changes +{plus:,} -{minus:,} "
            f"seconds={result.seconds:.2f}")

    last = runner.frontier - 1  # every change at a time <= last is final
    snap = runner.snapshot("active_tags", last)
    row = snap.agg(F.count("*").alias("records"), F.sum("count").alias("total")).first()
    report["snapshot"] = {"at": last, "records": row["records"], "total": int(row["total"] or 0)}
    out(f"snapshot at time {last}: {row['records']:,} distinct (cohort, tag) records, "
        f"{report['snapshot']['total']:,} active event-tags "
        f"(total {sum(s['seconds'] for s in report['steps']):.1f} s in steps)")
    top = snap.orderBy(F.desc("count"), "cohort", "tag").limit(3).collect()
    out("busiest: " + ", ".join(f"cohort {r['cohort']} {r['tag']} x{r['count']}" for r in top))
    return report
