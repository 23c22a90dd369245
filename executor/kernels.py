"""Kernel stages on Spark: a run of adjacent kernel join_functions as ONE `mapInArrow` call.

A kernel is `fn(xp, cols) -> dict`: `cols` maps record column names to arrays of one Arrow
batch; the result maps output column names (the stage's schema) to arrays, plus optional
`parent` (int64 index of the input row each output came from; absent = one output per input,
in order), `time` (element epochs, joined with the input's) and `diff` (multiplied). Stages
compose on the arrays (gpu_kernels.expand.compose), so a chain costs one Arrow round trip.
"""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StructField, StructType

from plans import ir

from .time import DIFF


def output_schema(stage: ir.Kernel, time_cols: list[str]) -> StructType:
    fields = list(StructType.fromDDL(stage.schema).fields)
    fields += [StructField(t, LongType(), False) for t in time_cols]
    return StructType(fields + [StructField(DIFF, LongType(), False)])


def run_chain(xp, cols: dict, time_cols: list[str], stages) -> dict:
    """Apply kernel stages to one batch of update columns; returns the output columns."""
    from gpu_kernels.expand import expand, gather

    times = tuple(cols[t] for t in time_cols)
    diff = cols[DIFF]
    records = {k: v for k, v in cols.items() if k not in time_cols and k != DIFF}
    for stage in stages:
        res = dict(stage.fn(xp, records))
        n = next(iter(records.values())).shape[0]
        parent = res.pop("parent", None)
        parent = xp.arange(n, dtype=xp.int64) if parent is None else xp.astype(parent, xp.int64)
        elem_time = res.pop("time", None)
        if elem_time is not None:
            elem_time = (xp.astype(elem_time, xp.int64),) + gather(xp, times[1:], parent)
        elem_diff = res.pop("diff", None)
        if elem_diff is not None:
            elem_diff = xp.astype(elem_diff, xp.int64)
        times, diff = expand(xp, times, diff, (parent, elem_time, elem_diff))
        records = res
    return {**records, **dict(zip(time_cols, times)), DIFF: diff}


def apply(df: DataFrame, stages: tuple[ir.Kernel, ...], time_cols: list[str],
          backend: str) -> DataFrame:
    schema = output_schema(stages[-1], time_cols)
    arrow_schema = _arrow_schema(schema)

    def per_partition(batches):
        from gpu_kernels.arrow import arrays_to_batch, batch_to_arrays
        from gpu_kernels.backend import namespace

        xp = namespace(backend)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            out = run_chain(xp, batch_to_arrays(batch, xp), time_cols, stages)
            yield arrays_to_batch(out, arrow_schema, xp)

    return df.mapInArrow(per_partition, schema)


def _arrow_schema(schema: StructType):
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.schema(to_arrow_schema(schema))
