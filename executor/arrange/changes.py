"""A step's updates on the driver placement, as arrays: what every operator's driver reads and
writes (executor/driver.py walks the plan, calling executor/operators/<family>/driver.py),
and the signal that a step must run on Spark instead."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from executor.time import DIFF, ITERATION, TIME
from gpu_kernels import to_numpy


class Unsupported(Exception):
    """This step cannot run on the driver: the runner runs it on Spark."""


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

    @classmethod
    def of(cls, schema: StructType, cols: list, times: list, d) -> "Changes":
        return cls(schema, list(cols), times[0], d, list(times[1:]))

    @property
    def times(self) -> list:
        return [self.t, *self.inner]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.schema.fields[:-2 - len(self.inner)]]

    def col(self, name: str):
        return self.cols[self.names.index(name)]

    def table(self, xp, encoder) -> pa.Table:
        """The updates as Arrow, their values decoded."""
        arrow = to_arrow_schema(self.schema)
        records = [encoder.decode(to_numpy(xp, c), f.dataType)
                   for c, f in zip(self.cols, self.schema.fields)]
        times = [pa.array(to_numpy(xp, a)) for a in (*self.times, self.d)]
        return pa.Table.from_arrays(records + times, schema=arrow)

    @property
    def size(self) -> int:
        return int(self.t.shape[0])

    def take(self, xp, rows) -> "Changes":
        return Changes.of(self.schema, [xp.take(c, rows) for c in self.cols],
                          [xp.take(c, rows) for c in self.times], xp.take(self.d, rows))


def updates_schema(records: list[StructField], inner: bool = False) -> StructType:
    """(records, time[, iteration], diff): inside an iterate scope times gain the iteration."""
    times = [TIME, ITERATION] if inner else [TIME]
    return StructType(records + [StructField(t, LongType(), False) for t in times]
                      + [StructField(DIFF, LongType(), False)])
