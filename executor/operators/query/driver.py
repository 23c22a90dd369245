"""Conjunctive queries on the driver placement: the delta rules over the step's seeds, with
constants as value codes (codes.py) and index rows looked up in the arrangements' mirrors."""
from __future__ import annotations

from array_api_compat import is_numpy_namespace
from pyspark.sql.types import StructField

from executor.arrange.changes import Changes, updates_schema
from executor.arrange.encoding import NULL_CODE
from executor.operators.query import codes, delta_rules
from executor.runtime.config import host_threads
from plans import ir, query as cq


def delta(step, node: ir.Query) -> Changes:
    """The query's delta rules (delta_rules.py) over the step's seeds, looking index rows up
    in the mirrors of the arrangements the extenders read."""
    xp = step.xp
    inputs = {r: step.due((node, r), step.changes(i))
              for r, i in zip(node.relations, node.inputs)}
    kinds = {r: [f.dataType for f in c.schema.fields[:len(c.cols)]]
             for r, c in inputs.items()}
    query = codes.coded(node.query, kinds, step.encoder)
    position = {r: i for i, r in enumerate(node.relations)}
    seeds = {r: (c.cols, c.t, c.d) for r, c in inputs.items()}

    def lookup(wants: dict) -> dict:
        out = {}
        for req, tables in wants.items():
            names = inputs[req.relation].names
            arranged = ir.Arrange(node.inputs[position[req.relation]],
                                  tuple(names[k] for k in req.key))
            step.value(arranged)
            mirror = step.views[arranged].read
            asked = [xp.concat([t[j] for t in tables]) for j in range(len(req.key))]
            run = mirror.rows(asked, superset=True)  # the index ignores keys not asked
            col = {n: run.cols[mirror.columns.index(n)] for n in names}
            value = xp.zeros_like(run.t) if req.value is None else col[names[req.value]]
            found = ([col[names[k]] for k in req.key], value, run.t, run.d)
            if not req.constants and not req.repeats:
                out[req] = found
                continue
            keep = xp.ones(run.t.shape[0], dtype=xp.bool)
            for k, x in req.constants:
                keep = xp.logical_and(keep, col[names[k]] == x)
            for k in req.repeats:
                keep = xp.logical_and(keep, col[names[k]] == value)
            rows = xp.nonzero(keep)[0]
            out[req] = ([xp.take(c, rows) for c in found[0]],
                        *(xp.take(a, rows) for a in found[1:]))
        return out

    threads = host_threads(step.runner.conf) if is_numpy_namespace(xp) else 1
    cols, t, d = delta_rules.run(xp, query, cq.delta_rules(query, node.order), seeds,
                                 lookup, null=NULL_CODE, threads=threads,
                                 canonical=frozenset(r for r, c in inputs.items() if c.canonical))
    joined = delta_rules.joined(query)
    fields = []
    for v in query.head:
        r, k = query.binding(v)
        column = inputs[r].schema.fields[k]
        fields.append(StructField(v, column.dataType, column.nullable and v not in joined))
    return Changes(updates_schema(fields), list(cols), t, d)
