"""`follow_stream` (executor/streaming.py): Parquet file streams feed a durable runner,
the query is stopped, more files arrive, a restarted query replays the batch Spark had not
logged as committed (skipped: the manifest has its id) and takes the new files; the
outputs equal the reference. A failing step stops the query and surfaces its error."""
from __future__ import annotations

import os
import time

import pyarrow.parquet as pq
import pytest

from conftest import updates_table
from executor import InputError, Runner, StateError
from executor.apps.cli import load_plan
from executor.reference import rows_of
from executor.streaming import follow_stream
from test_follow import ORDERS, PLAN, PRICES, expected, make_files

SCHEMAS = {"orders": ORDERS, "prices": PRICES}


def drop(folder, i: int, name: str, rows) -> None:
    """A file written hidden, renamed in, its modification time i seconds after 2020
    (Spark's file source takes files in that order)."""
    tmp, path = folder / name / f".{i:04d}.parquet", folder / name / f"{i:04d}.parquet"
    pq.write_table(updates_table(SCHEMAS[name], rows), tmp)
    os.replace(tmp, path)
    os.utime(path, (1577836800 + i, 1577836800 + i))


def streams(spark, folder, names=("orders", "prices")):
    return {n: spark.readStream.schema(f"{SCHEMAS[n]}, time BIGINT, diff BIGINT")
            .parquet(str(folder / n)) for n in names}


def wait_for(predicate, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_streamed_files_stopped_and_resumed_equal_the_reference(spark, conf, tmp_path):
    for name in SCHEMAS:
        (tmp_path / name).mkdir()
    files = make_files(10)
    state, checkpoint = str(tmp_path / "state"), str(tmp_path / "ckpt")
    runner = Runner(load_plan(str(PLAN)), conf=conf, spark=spark, state=state)
    for i, (name, rows) in enumerate(files[:6]):
        drop(tmp_path, i, name, rows)
    handle = follow_stream(runner, streams(spark, tmp_path), checkpoint,
                           trigger={"processingTime": "0.5 seconds"})
    wait_for(lambda: handle.result is not None)
    handle.stop()
    assert handle.await_termination() and handle.exception is None
    first = handle.batch
    assert runner.frontier == 6  # every file of the first batch: times 0..5

    # as if the driver died after our commit but before Spark logged the batch's commit
    # (stop() may have come in between already)
    for lost in (str(first), f".{first}.crc"):
        if os.path.exists(os.path.join(checkpoint, "commits", lost)):
            os.remove(os.path.join(checkpoint, "commits", lost))
    for i, (name, rows) in enumerate(files[6:], start=6):
        drop(tmp_path, i, name, rows)
    steps = runner.steps
    handle = follow_stream(runner, streams(spark, tmp_path), checkpoint,
                           trigger={"availableNow": True})
    handle.await_termination()
    assert handle.exception is None and handle.batch > first
    assert runner.steps == steps + 1  # the replayed batch was skipped, the new one ran
    batches = [r["stream"]["batch"] for r in runner._store.history()]
    assert batches == sorted(set(batches))
    runner.release_state()
    got = {n: rows_of(runner.output(n)) for n in runner.plan}
    assert got == expected(spark, files)


def test_a_failing_step_stops_the_stream_and_surfaces(spark, conf, tmp_path):
    (tmp_path / "orders").mkdir()
    runner = Runner(load_plan(str(PLAN)), conf=conf, spark=spark, state=str(tmp_path / "s"))
    with pytest.raises(InputError, match="takes streaming DataFrames"):
        follow_stream(runner, {"orders": spark.range(1)}, str(tmp_path / "c"))
    with pytest.raises(InputError, match="input 'nope', column '-': unknown input"):
        follow_stream(runner, {"nope": streams(spark, tmp_path, ["orders"])["orders"]},
                      str(tmp_path / "c"))
    drop(tmp_path, 0, "orders", [((1, 1), 5, 1)])
    handle = follow_stream(runner, streams(spark, tmp_path, ["orders"]), str(tmp_path / "c"),
                           trigger={"processingTime": "0.5 seconds"})
    wait_for(lambda: handle.result is not None or handle.exception is not None)
    drop(tmp_path, 1, "orders", [((2, 1), 2, 1)])  # below the frontier 6
    with pytest.raises(InputError, match=r"input 'orders'.*time"):
        handle.await_termination(120)
    assert isinstance(handle.exception, InputError) and not handle.query.isActive
    assert runner.steps == 1 and runner.frontier == 6  # the failed step changed nothing
    runner.release_state()
    volatile = Runner(load_plan(str(PLAN)), conf=conf, spark=spark)
    with pytest.raises(StateError, match="exactly once needs a durable runner"):
        follow_stream(volatile, streams(spark, tmp_path, ["orders"]), str(tmp_path / "c"))
