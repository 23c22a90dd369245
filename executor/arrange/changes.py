"""A step's updates on the driver placement, as arrays: what every operator's driver reads and
writes (executor/driver.py walks the plan, calling executor/operators/<family>/driver.py),
and the signal that a step must run on Spark instead."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa
from pyspark.sql.types import LongType, StructField, StructType

from executor.arrange.encoding import NoCode, arrow_schema
from executor.time import DIFF, ITERATION, TIME
from gpu_kernels import to_numpy


class Unsupported(Exception):
    """This step cannot run on the driver: the runner runs it on Spark."""


class Coded(Sequence):
    """Record columns of an Arrow table as int64 codes, each encoded when an operator first
    reads it: a column no operator reads (a comment a view never selects) is never encoded,
    and its values never enter the STRING dictionary."""

    def __init__(self, table: pa.Table, schema: StructType, encoder, xp):
        self._table, self._fields, self._encoder, self._xp = table, schema.fields, encoder, xp
        self._codes: list = [None] * (len(schema.fields) - 2)

    def __len__(self) -> int:
        return len(self._codes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        if self._codes[i] is None:
            try:
                codes = self._encoder.encode(self._table.column(i), self._fields[i].dataType)
            except NoCode as e:
                raise Unsupported(str(e)) from None
            self._codes[i] = self._xp.asarray(codes)
        return self._codes[i]

    def encoded(self, i: int) -> bool:
        """Whether column i's codes are made already."""
        return self._codes[i] is not None

    def values(self, i: int) -> pa.ChunkedArray:
        """Column i as Arrow, as given."""
        return self._table.column(i)

    def given(self, i: int, codes) -> None:
        """Column i's codes, known to the caller (taken from the codes of the column it
        copies), instead of encoding its values again."""
        self._codes[i] = codes

    def select(self, positions: list[int], schema: StructType) -> "Coded":
        """The columns at `positions` (codes made so far kept) as records of `schema`."""
        n = len(self._codes)
        table = self._table.select([*positions, *range(n, self._table.num_columns)])
        out = Coded(table, schema, self._encoder, self._xp)
        out._codes = [self._codes[i] for i in positions]
        return out


@dataclass
class Changes:
    """A step's updates on the driver: record columns as int64 codes (executor/arrange/encoding.py),
    times and diff, with the Spark schema they stand for (records, times, diff). A time has
    k coordinates: the outer time `t`, then inside an iterate scope the iteration (`inner`);
    consolidation is over all of them and joins take their element-wise max
    (gpu_kernels/times.py)."""

    schema: StructType
    cols: list
    t: object
    d: object
    inner: list = field(default_factory=list)
    # The same updates as Arrow (records, times, diff; Coded's table): read instead of
    # decoding the codes, so a chain over an input sees the values exactly as given.
    arrow: Optional[pa.Table] = None
    # Known consolidated: one row per (record, times), sorted by them, no zero diff.
    canonical: bool = False

    @classmethod
    def of(cls, schema: StructType, cols, times: list, d, canonical: bool = False
           ) -> "Changes":
        return cls(schema, cols if isinstance(cols, Coded) else list(cols), times[0], d,
                   list(times[1:]), canonical=canonical)

    @property
    def times(self) -> list:
        return [self.t, *self.inner]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.schema.fields[:-2 - len(self.inner)]]

    def col(self, name: str):
        return self.cols[self.names.index(name)]

    def table(self, xp, encoder, only: Optional[set] = None) -> pa.Table:
        """The updates as Arrow, their values decoded; `only`: the record columns (by
        position) decoded, the others all null (a caller that never looks at them)."""
        arrow = arrow_schema(self.schema)
        k = len(self.names)
        if self.arrow is not None:
            return pa.Table.from_arrays(
                [pa.nulls(len(c), f.type) if only is not None and i < k and i not in only
                 else c if c.type == f.type else c.cast(f.type)
                 for i, (c, f) in enumerate(zip(self.arrow.columns, arrow))], schema=arrow)
        records = [pa.nulls(self.size, arrow.field(i).type) if only is not None and i not in only
                   else self._values(i, arrow.field(i).type) if isinstance(self.cols, Coded)
                   and not self.cols.encoded(i)
                   else encoder.decode(to_numpy(xp, self.cols[i]), f.dataType)
                   for i, f in enumerate(self.schema.fields[:k])]
        times = [pa.array(to_numpy(xp, a)) for a in (*self.times, self.d)]
        return pa.Table.from_arrays(records + times, schema=arrow)

    def _values(self, i: int, kind: pa.DataType):
        """A column of Coded records not encoded yet: its Arrow values, not a round trip
        through the dictionary."""
        values = self.cols.values(i)
        return values if values.type == kind else values.cast(kind)

    @property
    def size(self) -> int:
        return int(self.t.shape[0])

    def select(self, positions: list[int], schema: StructType) -> "Changes":
        """The record columns at `positions` (a projection), as records of `schema`."""
        cols = self.cols.select(positions, schema) if isinstance(self.cols, Coded) else \
            [self.cols[i] for i in positions]
        n = len(self.names)
        arrow = None if self.arrow is None else \
            self.arrow.select([*positions, *range(n, self.arrow.num_columns)])
        return Changes(schema, cols, self.t, self.d, list(self.inner), arrow=arrow)

    def take(self, xp, rows) -> "Changes":
        return Changes.of(self.schema, [xp.take(c, rows) for c in self.cols],
                          [xp.take(c, rows) for c in self.times], xp.take(self.d, rows))


def updates_schema(records: list[StructField], inner: bool = False) -> StructType:
    """(records, time[, iteration], diff): inside an iterate scope times gain the iteration."""
    times = [TIME, ITERATION] if inner else [TIME]
    return StructType(records + [StructField(t, LongType(), False) for t in times]
                      + [StructField(DIFF, LongType(), False)])
