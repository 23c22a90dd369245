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

from executor.arrange.encoding import arrow_schema
from executor.time import DIFF
from plans import ir


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
    out_schema = arrow_output_schema(stages[-1], time_cols)

    def per_partition(batches):
        from gpu_kernels.backend import namespace

        xp = namespace(backend)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            yield run_batch(xp, batch, stages, time_cols, out_schema)

    return df.mapInArrow(per_partition, schema)


def run_batch(xp, batch, stages: tuple[ir.Kernel, ...], time_cols: list[str], schema):
    """An Arrow record batch of updates through a run of kernel stages, as a record batch
    of Arrow `schema` (arrow_output_schema): a Spark partition's, or a driver step's."""
    from gpu_kernels.arrow import arrays_to_batch, batch_to_arrays

    out = run_chain(xp, batch_to_arrays(batch, xp), time_cols, stages)
    return arrays_to_batch(out, schema, xp)


def arrow_output_schema(stage: ir.Kernel, time_cols: list[str]):
    return arrow_schema(output_schema(stage, time_cols))


def reduce_groups(acc: DataFrame, by: list[str], red: ir.Reduction, group_cols: list[str],
                  mult: str, backend: str) -> DataFrame:
    """A user reduction kernel over `acc` (by columns, value columns, `group_cols` beyond by,
    multiplicity `mult`): rows of one (by, group_cols) group are brought together and
    numbered, and each partition's groups go to `red.fn` in one call. Output: by columns,
    group_cols, the schema's columns, `mult`."""
    from pyspark.sql.types import StructType as ST

    keys = by + group_cols
    values = [c for c in acc.columns if c not in keys and c != mult]
    fields = {f.name: f for f in acc.schema.fields}
    schema = ST([fields[k] for k in keys] + list(ST.fromDDL(red.schema).fields)
                + [StructField(mult, LongType(), False)])
    out_schema = arrow_schema(schema)
    value_schema = arrow_schema(ST(list(ST.fromDDL(red.schema).fields)))

    def per_partition(batches):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from gpu_kernels.arrow import arrays_to_batch, batch_to_arrays
        from gpu_kernels.backend import namespace, to_numpy
        from plans.reduce_kernel import call_reduce_kernel

        batches = [b for b in batches if b.num_rows]  # a group may straddle Arrow batches
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        xp = namespace(backend)
        new = np.zeros(table.num_rows, dtype=bool)
        new[0] = True
        for k in keys:  # a group starts where any key differs from the row before (null-aware)
            col = table.column(k)
            a, b = col.slice(1), col.slice(0, table.num_rows - 1)
            differ = pc.or_(pc.fill_null(pc.not_equal(a, b), False),
                            pc.xor(pc.is_null(a), pc.is_null(b)))
            new[1:] |= differ.to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(new)
        group = np.cumsum(new) - 1
        batch = table.select(values).combine_chunks().to_batches()[0] if values else None
        cols = batch_to_arrays(batch, xp) if batch is not None else {}
        out_group, out, count = call_reduce_kernel(
            red, xp, xp.asarray(group), cols, xp.asarray(table.column(mult).to_numpy()),
            int(starts.shape[0]))
        keep = to_numpy(xp, count) != 0
        rows = starts[to_numpy(xp, out_group)][keep]
        out_batch = arrays_to_batch({c: out[c] for c in value_schema.names}, value_schema, xp)
        arrays = [table.column(k).take(pa.array(rows)) for k in keys]
        arrays += [c.filter(pa.array(keep)) for c in out_batch.columns]
        arrays.append(pa.array(to_numpy(xp, count)[keep], type=pa.int64()))
        yield from pa.Table.from_arrays(arrays, schema=out_schema).to_batches()

    return (acc.repartition(*keys).sortWithinPartitions(*keys)
            .mapInArrow(per_partition, schema))
