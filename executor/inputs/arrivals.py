"""Batches that arrive rather than being stepped by hand (`follow`'s files, a streaming
micro-batch: executor/streaming.py): rows without `time` are at the frontier, and a batch
is one step up to just past its latest time, so each arrival is one step whatever its
times."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from executor.time import DIFF, TIME


def completed(table: pa.Table, frontier: int) -> pa.Table:
    """Rows as given, with `time` (the frontier) and `diff` (+1) added when absent."""
    lower = {c.lower() for c in table.column_names}
    for column, value in ((TIME, frontier), (DIFF, 1)):
        if column not in lower:
            table = table.append_column(column, pa.array([value] * table.num_rows,
                                                         pa.int64()))
    return table


def step_tables(runner, tables: dict[str, pa.Table], note: dict):
    """One step of these tables (each completed) to upto = max(frontier, their latest
    time) + 1, `note` committed with it; its StepResult."""
    upto = max([runner.frontier] + [_latest(t) for t in tables.values()]) + 1
    return runner.step(tables, upto=upto, note=note)


def _latest(table: pa.Table) -> int:
    """The latest time of a batch's rows (-1 when none, or when a time is not an integer:
    the step's checks then refuse it by name)."""
    column = table.column(next(c for c in table.column_names if c.lower() == TIME))
    try:
        latest = pc.max(column.cast(pa.int64())).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return -1
    return -1 if latest is None else latest
