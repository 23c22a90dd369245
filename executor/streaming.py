"""A durable Runner fed by Spark Structured Streaming DataFrames (`foreachBatch`).

    handle = follow_stream(runner, {"orders": orders_stream, "prices": prices_stream},
                           checkpoint="ckpt/", trigger={"processingTime": "1 second"})
    handle.await_termination()   # raises the error of a failing step

One query over a union of the streams, each input's rows in a struct column of its own
beside an input tag, rather than one query per input: one query has one micro-batch id
sequence and one `foreachBatch` thread, so a micro-batch of all inputs is exactly one step
(as `follow`'s files of all inputs are), and one id marks it in the manifest. Queries per
input would run steps from concurrent threads and need an id per query to agree after a
crash.

Exactly once: each step commits, in the durable state's manifest, the query name and
micro-batch id it consumed (history `stream`: {"query", "batch"}). Spark replays a batch
whose commit it had not logged when the driver died (same id, same offsets): a batch id at
or below the last committed one is skipped. The runner must be durable
(`Runner(..., state=DIR)`); `checkpoint` is Spark's (the source offsets).

A step is as `follow`'s: rows without `time` get the frontier, the step goes to upto =
max(frontier, the batch's latest time) + 1; a batch with no rows is no step. A step that
fails (a refused input, a subscriber's callback raising after its commit) stops the
query: `handle.exception` holds the error and `await_termination()` raises it; nothing
dies silently. Subscribers (`runner.subscribe`) are called from Spark's batch thread; do
not step the runner from another thread while the query runs.
"""
from __future__ import annotations

from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, functions as F

from executor.inputs.arrivals import completed, step_tables
from executor.runtime.errors import InputError, StateError

TAG = "__input"


class StreamHandle:
    """The running query: `stop()`, `await_termination()`, the last step's `result`, the
    `exception` of a failed step (None while none failed), `query` (Spark's)."""

    def __init__(self, runner, name: str):
        self.runner, self.name = runner, name
        self.result = None
        self.exception: Optional[BaseException] = None
        self.batch = last_batch(runner, name)
        self.query = None

    def _on_batch(self, frame: DataFrame, batch_id: int) -> None:
        if self.exception is not None:  # a failed step stops the query; never step past it
            raise self.exception
        if self.batch is not None and batch_id <= self.batch:
            return  # replayed by Spark after a restart: already committed
        try:
            tables = split(frame.toArrow(), self.runner)
            if tables:
                self.result = step_tables(self.runner, tables,
                                          {"stream": {"query": self.name, "batch": batch_id}})
            self.batch = batch_id
        except BaseException as e:
            self.exception = e
            raise

    def stop(self) -> None:
        """Stop the query after the micro-batch in flight (its step finishes)."""
        self.query.stop()

    def await_termination(self, timeout: Optional[float] = None) -> bool:
        """Wait for the query to end (True) or `timeout` seconds (False); raises the
        failing step's error when one stopped it."""
        try:
            done = self.query.awaitTermination(timeout)
        except StreamingQueryException:
            if self.exception is not None:
                raise self.exception from None
            raise
        if self.exception is not None:
            raise self.exception
        return True if done is None else done


def follow_stream(runner, streams: dict[str, DataFrame], checkpoint: str,
                  trigger: Optional[dict] = None, name: str = "diffspark") -> StreamHandle:
    """Start one streaming query feeding `runner` from `streams` (input name -> streaming
    DataFrame of the input's columns, optionally `time` and `diff`); `trigger`: keyword
    arguments of DataStreamWriter.trigger (e.g. {"availableNow": True}); `name`: the
    query's name, recorded with each step's batch id."""
    if runner._store is None:
        raise StateError("follow_stream: exactly once needs a durable runner "
                         "(Runner(..., state=DIR)) to record each micro-batch it consumed")
    if not streams:
        raise InputError("-", "-", "follow_stream: no streams given")
    for input_name, frame in streams.items():
        if input_name not in runner.input_schemas:
            raise InputError(input_name, "-", "unknown input",
                             f"the dataflow's inputs are {sorted(runner.input_schemas)}")
        if not frame.isStreaming:
            raise InputError(input_name, "-", "follow_stream takes streaming DataFrames "
                             "(spark.readStream...); hand a static one to runner.step",
                             "isStreaming is False")
    handle = StreamHandle(runner, name)
    writer = tagged(streams).writeStream.foreachBatch(handle._on_batch) \
        .option("checkpointLocation", checkpoint).queryName(name)
    if trigger:
        writer = writer.trigger(**trigger)
    handle.query = writer.start()
    return handle


def tagged(streams: dict[str, DataFrame]) -> DataFrame:
    """The streams as one: an input tag, and per input a struct column of its rows (null
    on the other inputs' rows)."""
    types = {n: F.struct(*[F.col(f"`{c}`") for c in s.columns]) for n, s in streams.items()}
    parts = []
    for n, s in streams.items():
        parts.append(s.select(F.lit(n).alias(TAG), *[
            (types[m] if m == n else F.lit(None).cast(streams[m].schema)).alias(m)
            for m in sorted(streams)]))
    union = parts[0]
    for p in parts[1:]:
        union = union.unionByName(p)
    return union


def split(table: pa.Table, runner) -> dict[str, pa.Table]:
    """A micro-batch's rows per input, each completed with `time` and `diff`."""
    out = {}
    for name in table.column_names:
        if name == TAG:
            continue
        rows = table.filter(pc.equal(table.column(TAG), name))
        if not rows.num_rows:
            continue
        struct = rows.column(name).combine_chunks()
        out[name] = completed(pa.Table.from_arrays(struct.flatten(),
                                                   names=[f.name for f in struct.type]),
                              runner.frontier)
    return out


def last_batch(runner, name: str) -> Optional[int]:
    """The last micro-batch id of query `name` a committed step consumed."""
    for record in reversed(runner._store.history()):
        stream = record.get("stream")
        if stream and stream.get("query") == name:
            return stream["batch"]
    return None
