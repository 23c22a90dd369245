"""Linear chains on the driver placement: a fused chain of stages over a step's updates,
without a Spark job where the stages compile to Arrow or are kernels (the Spark placement's
chains are spark.py; both keep Spark SQL's semantics)."""
from __future__ import annotations

from itertools import groupby
from typing import Optional

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructField, StructType

from executor.arrange.changes import Changes, Coded, Unsupported, updates_schema
from executor.arrange.encoding import arrow_schema
from executor.arrange.spine import local_rows
from executor.operators.linear import expressions, kernels, spark as linear
from executor.time import TIME
from plans import ir


def apply(step, node: ir.Linear, source=None, schema: Optional[StructType] = None):
    """A fused chain, run by run: expression stages on Arrow (expressions.py) where they
    compile and Spark's answer is reproduced, otherwise Spark's expressions over the local
    rows (Catalyst on the driver); kernel stages on the arrays (kernels.py). Stages that set
    times join them with the update's, as on Spark; what lands at or after upto is held by
    the operators downstream. `source` and `schema` replace the node's input and schema."""
    value = step.changes(node.input) if source is None else source
    if isinstance(value, Changes) and not value.size:  # no update in, none out
        return step.empty(schema or step.runner.node_schemas[node])
    schema, done = schema or step.runner.node_schemas[node], 0
    for is_kernel, run in groupby(node.stages, key=lambda s: isinstance(s, ir.Kernel)):
        run = tuple(run)
        done += len(run)
        table = None if isinstance(value, Changes) else table_of(step, value)

        def decoded(value=value, table=table) -> pa.Table:  # Changes decode when asked
            return table_of(step, value) if table is None else table
        if is_kernel:
            value = _kernels(step, decoded(), run)
            continue
        try:
            compiled = expressions.compile_stages(
                run, arrow_schema(value.schema) if table is None else table.schema,
                conf=step.runner.conf)
            last = done == len(node.stages)
            selected = _projected(value, compiled, schema if last else None)
            if selected is not None:
                value = selected
                continue
            carried = _carried(step, value, compiled, schema) if last else None
            value = compiled(decoded()) if carried is None else carried
        except (expressions.NotCompiled, expressions.Fallback):
            value = linear.apply(step.spark.createDataFrame(decoded()), run, [TIME],
                                 step.runner.backend)
    return step.encoded(value, schema) if isinstance(value, pa.Table) else value


def _projected(value, compiled: expressions.Compiled, schema: Optional[StructType]
               ) -> Optional[Changes]:
    """A chain that only selects and renames columns, run on the codes: no decoding and
    coding again (a plan's chains are often such: a join's key columns, a view's names).
    `schema` is the node's (None inside a chain: the input's types, the chain's names).
    None where the chain computes something, or the updates are not Changes."""
    positions = compiled.projection
    if positions is None or not isinstance(value, Changes):
        return None
    fields, k = value.schema.fields, len(value.names)
    if schema is None:
        schema = StructType([StructField(name, fields[i].dataType, fields[i].nullable)
                             for name, i in zip(compiled.schema.names, positions)]
                            + fields[k:])
    elif [f.dataType for f in schema.fields[:len(positions)]] != \
            [fields[i].dataType for i in positions]:
        return None
    return value.select(positions, schema)


def _carried(step, value, compiled: expressions.Compiled, schema: StructType
             ) -> Optional[Changes]:
    """A chain that filters, maps and negates, run on Arrow with each row's index for its
    time: an output column that is an input column as it is takes the input's codes by that
    index instead of a second encoding of its values (a STRING carried through a filter
    cost a dictionary lookup per distinct value), and input columns that no stage reads and
    no output keeps are never decoded. None where the chain reads or moves times, or no
    output column has codes to take."""
    copies = compiled.copies
    if copies is None or not isinstance(value, Changes) or value.inner:
        return None
    cols, fields = value.cols, value.schema.fields
    have = cols.encoded if isinstance(cols, Coded) else (lambda i: True)
    taken = [j for j, i in enumerate(copies)
             if i is not None and have(i) and schema.fields[j].dataType == fields[i].dataType]
    if not taken:
        return None
    xp = step.xp
    kept = {i for j, i in enumerate(copies) if i is not None and j not in taken}
    # an unread column is all nulls, unless it may hold none (a filter keeps its input's
    # schema, and Arrow refuses nulls in it): those are decoded too
    solid = {i for i, f in enumerate(fields[:len(value.names)]) if not f.nullable}
    table = value.table(xp, step.encoder, only=compiled.reads | kept | solid)
    at = table.num_columns - 2
    table = table.set_column(at, table.schema.field(at),
                             pa.array(np.arange(table.num_rows, dtype=np.int64)))
    out = compiled(table)
    rows = xp.asarray(out.column(out.num_columns - 2).to_numpy())
    records = Coded(out, schema, step.encoder, xp)  # computed columns encode when read
    for j in taken:
        records.given(j, xp.take(cols[copies[j]], rows))
    return Changes(schema, records, xp.take(value.t, rows),
                   xp.asarray(out.column(out.num_columns - 1).to_numpy()))


def _kernels(step, table: pa.Table, run: tuple) -> pa.Table:
    """A run of kernel stages over the step's updates in one call, as on a Spark
    partition; a column no kernel takes (a null, a string) goes to Spark, which reports
    it."""
    schema = kernels.arrow_output_schema(run[-1], [TIME])
    try:
        out = [kernels.run_batch(step.xp, b, run, [TIME], schema)
               for b in table.combine_chunks().to_batches() if b.num_rows]
    except TypeError as e:
        raise Unsupported(str(e)) from None
    return pa.Table.from_batches(out, schema=schema)


def table_of(step, value) -> pa.Table:
    """A chain's updates as decoded Arrow: Changes, Arrow, or a local frame's rows."""
    if isinstance(value, Changes):
        return value.table(step.xp, step.encoder)
    return value if isinstance(value, pa.Table) else local_rows(value)


def inner(step, node: ir.Linear) -> Changes:
    """A chain inside an iterate scope. The body refuses stages that set times, so every
    output row keeps the times of the input row it came from: the chain runs with the
    row's index (below any upto) as its only time, and rows take their times back by it."""
    xp, source = step.xp, step.changes(node.input)
    n = source.size
    index = xp.arange(n, dtype=xp.int64) - n
    records = source.schema.fields[:len(source.names)]
    schema = step.runner.node_schemas[node]
    out = apply(step, node, Changes(updates_schema(records), source.cols, index, source.d),
                       updates_schema(schema.fields[:-3]))
    out = out if isinstance(out, Changes) else step.encoded(local_rows(out), out.schema)
    rows = out.t + n
    return Changes.of(schema, out.cols, [xp.take(c, rows) for c in source.times], out.d)
