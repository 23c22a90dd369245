"""Worst-case optimal joins by delta queries (DESIGN.md section 6, the dogsdogsdogs design).

A conjunctive query's change at time t is the sum over its atoms i of: atom i's changes at t,
joined with atoms before i as of `time <= t` ("new") and atoms after i as of `time < t`
("old"), so concurrent changes are neither lost nor counted twice. Each such delta rule
(plans.query.delta_rules) starts from the seed's changes and binds one variable at a time:
every atom able to bind it counts its candidates for each prefix, the smallest proposes, the
others validate. Only arrangements of the inputs are read (shared with every other rule,
query and operator keyed alike): memory is linear in the input, not in intermediate results.

Only seeds at times below the step's `upto` run: a rule reads other atoms as of its time, so
that time must be complete. Later seeds wait in `pending`, like a reduction's updates.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import Optional

from pyspark.sql import DataFrame, functions as F

from executor.arrange.spine import checkpoint
from executor.arrange.trace import View
from executor.operators.linear.spark import q, record_columns
from executor.operators.query import buckets, delta_rules, local as wcoj_local
from executor.time import DIFF, TIME
from plans import ir, query as cq
from plans.errors import PlanError

CANDIDATES = "__c"


def delta(node: ir.Query, deltas: list[DataFrame], index: Callable[[int, tuple], View],
          pending: dict, upto, local: Optional[tuple[str, int]] = None,
          per_bucket: Optional[tuple[int, str]] = None) -> tuple[DataFrame, dict]:
    """(the query's output changes this step, the seeds left pending per relation).

    `deltas[i]` are input i's changes; `index(i, columns)` is the View of input i arranged
    by `columns` (built once per step and shared). With `local` = (kernel backend, most
    seeds), a small step runs on the driver's arrays (executor/operators/query/local.py);
    with `per_bucket` = (buckets, kernel backend), a big step's extensions run per key
    bucket on the executors (executor/operators/query/buckets.py)."""
    position = {r: i for i, r in enumerate(node.relations)}
    names = {r: record_columns(deltas[i], [TIME]) for r, i in position.items()}
    for atom in node.query.atoms:
        if len(atom.terms) != len(names[atom.relation]):
            raise PlanError(f"{node.label()}: atom {atom} has {len(atom.terms)} terms but "
                            f"{atom.relation} has columns {names[atom.relation]} "
                            f"(rule: arity matches the relation)")
    ready, waiting = {}, {}
    for r, i in position.items():
        incoming = deltas[i] if pending.get(r) is None else pending[r].unionByName(deltas[i])
        if upto is None:
            ready[r], waiting[r] = incoming, None
        else:
            ready[r] = incoming.where(F.col(TIME) < upto)
            waiting[r] = incoming.where(F.col(TIME) >= upto)

    rules = cq.delta_rules(node.query, node.order)
    # every index the rules read takes the step's changes, whichever path runs below and
    # whether a seed is due or not: a seed held for a later time meets them in a later step
    for req in {req for rule in rules for req in delta_rules.requests(rule)}:
        index(position[req.relation], tuple(names[req.relation][k] for k in req.key))
    if local is not None and upto is not None and wcoj_local.applicable(node, deltas):
        out = wcoj_local.run(node, ready, deltas, names, index, *local)
        if out is not None:
            return out, waiting

    def trace(relation: str, columns: tuple[int, ...], constants) -> DataFrame:
        """All of a relation's arranged updates, keyed by `columns`, matching constants."""
        cols = names[relation]
        view = index(position[relation], tuple(cols[k] for k in columns))
        frames = view.all()
        df = reduce(DataFrame.union, frames) if frames else deltas[position[relation]].limit(0)
        for k, x in constants:
            df = df.where(F.col(q(cols[k])) == F.lit(x))
        return df

    ctx = _Context(names, trace, upto, per_bucket)
    outs = [_rule(rule, ready[rule.relation], ctx, node.query.head) for rule in rules]
    return reduce(DataFrame.union, outs), waiting


@dataclass
class _Context:
    names: dict[str, list[str]]  # relation -> record columns
    trace: Callable  # (relation, key columns, constants) -> all its arranged updates
    upto: int | None  # the step's upto: seeds run at times below it
    per_bucket: Optional[tuple[int, str]] = None  # (buckets, backend): extend per bucket


def _rule(rule: cq.DeltaRule, seed: DataFrame, ctx: _Context, head) -> DataFrame:
    cols = ctx.names[rule.relation]
    p = seed
    for k, x in rule.constants:
        p = p.where(F.col(q(cols[k])) == F.lit(x))
    first: dict[str, int] = {}
    for k, v in rule.columns:
        if v in first:  # a repeated variable: equal and non-null (SQL `=`)
            p = p.where(F.col(q(cols[k])) == F.col(q(cols[first[v]])))
        else:
            first[v] = k
    p = p.select(*[F.col(q(cols[k])).alias(v) for v, k in first.items()], TIME, DIFF)
    p = _filter(p, rule.comparisons)
    for val in rule.validators:
        t = ctx.trace(val.relation, tuple(k for k, _ in val.columns), val.constants)
        p = _consolidated(_read(p, t, ctx.names[val.relation], val.columns, val.reads),
                          list(first))
    bound = list(first)
    for depth, step in enumerate(rule.steps):
        p = _extend(p, step, bound, ctx, delta_rules.live_vars(rule, depth, head))
        bound = [c for c in p.columns if c not in (TIME, DIFF)]
    return p.select(*[q(v) for v in head], TIME, DIFF)


def _read(p: DataFrame, t: DataFrame, cols: list[str], on, reads: str,
          extra=()) -> DataFrame:
    """Prefixes joined with the records of an atom whose columns equal the prefix's
    variables (`on`: (column, variable)), read as of the prefix's time; diffs multiply.
    The records are re-aliased first: an arranged batch is a checkpoint of the prefixes' own
    lineage with the same attribute ids, and Spark then resolves none of `t`'s columns."""
    pa = p.alias("p")
    ta = t.select(*[F.col(q(c)).alias(c) for c in t.columns]).alias("t")
    cond = [F.col(f"t.{q(cols[k])}") == F.col(f"p.{q(v)}") for k, v in on]
    before = F.col(f"t.{TIME}") <= F.col(f"p.{TIME}") if reads == "new" else \
        F.col(f"t.{TIME}") < F.col(f"p.{TIME}")
    joined = pa.join(ta, reduce(lambda a, b: a & b, cond, before), "inner")
    keep = [F.col(f"p.{q(c)}").alias(c) for c in p.columns if c not in (TIME, DIFF)]
    return joined.select(*keep, *extra, F.col(f"p.{TIME}").alias(TIME),
                         (F.col(f"p.{DIFF}") * F.col(f"t.{DIFF}")).alias(DIFF))


def _propose(p: DataFrame, e: cq.Extender, var: str, ctx: _Context) -> DataFrame:
    cols = ctx.names[e.relation]
    t = ctx.trace(e.relation, tuple(k for k, _ in e.key), e.constants)
    for k in e.repeats:  # the variable occurs again in the atom: equal, non-null
        t = t.where(F.col(q(cols[k])) == F.col(q(cols[e.value])))
    return _read(p, t, cols, e.key, e.reads, [F.col(f"t.{q(cols[e.value])}").alias(var)])


def _validate(p: DataFrame, e: cq.Extender, var: str, ctx: _Context) -> DataFrame:
    cols = ctx.names[e.relation]
    on = e.key + ((e.value, var),) + tuple((k, var) for k in e.repeats)
    t = ctx.trace(e.relation, tuple(k for k, _ in e.key), e.constants)
    return _read(p, t, cols, on, e.reads)


def _extend(p: DataFrame, step: cq.Extension, bound: list[str], ctx: _Context,
            live: set) -> DataFrame:
    """Bind step.var: count, propose from the smallest, validate with the others; the
    step's comparisons applied. The kernel per bucket keeps only the `live` variables."""
    exts = step.extenders
    if len(exts) > 1 and ctx.per_bucket is not None:
        grown = buckets.extend(p, step, bound, live, ctx, *ctx.per_bucket)
        if grown is not None:
            return _consolidated(grown, [c for c in grown.columns if c not in (TIME, DIFF)])
    return _filter(_extended(p, step, bound, ctx), step.comparisons)


def _extended(p: DataFrame, step: cq.Extension, bound: list[str], ctx: _Context) -> DataFrame:
    exts = step.extenders
    if len(exts) == 1:
        return _consolidated(_propose(p, exts[0], step.var, ctx), bound + [step.var])
    # Each count reads the prefixes twice (their keys, then the join back) and each
    # extender's branch reads the counted prefixes again, so as plain DataFrames the plan
    # would copy the prefixes 2^len(exts) * len(exts) times per extension, compounding over
    # a rule's extensions (a 4-clique query: thousands of copies, gigabytes of plan and that
    # many recomputations). Both are checkpointed lazily instead, like a materialised CTE:
    # computed once, by the first job that reads them, and read from there; no extra job.
    counted = checkpoint(p, eager=False)
    for j, e in enumerate(exts):
        counted = _with_count(counted, e, f"{CANDIDATES}{j}", ctx)
    counts = [F.col(f"{CANDIDATES}{j}") for j in range(len(exts))]
    least = F.least(*counts)
    winner = F.coalesce(*[F.when(c == least, F.lit(j)) for j, c in enumerate(counts)])
    counted = checkpoint(counted.where(least > 0).withColumn("__winner", winner), eager=False)
    outs = []
    for j, e in enumerate(exts):
        mine = counted.where(F.col("__winner") == j).select(*bound, TIME, DIFF)
        grown = _propose(mine, e, step.var, ctx)
        for other in exts[:j] + exts[j + 1:]:
            grown = _validate(grown, other, step.var, ctx)
        outs.append(grown)
    return _consolidated(reduce(DataFrame.union, outs), bound + [step.var])


def _with_count(p: DataFrame, e: cq.Extender, name: str, ctx: _Context) -> DataFrame:
    """Each prefix with the number of records the extender holds for its key at times it
    may read: an upper bound on its candidates (0 means none), which is all the choice of
    proposer needs. Seed times are below upto, so "new" reads see times < upto and "old"
    reads times < upto - 1 (in a step of one time: only the batches before it)."""
    cols = ctx.names[e.relation]
    t = ctx.trace(e.relation, tuple(k for k, _ in e.key), e.constants)
    if ctx.upto is not None:
        t = t.where(F.col(TIME) < ctx.upto - (1 if e.reads == "old" else 0))
    key_cols = [cols[k] for k, _ in e.key]
    if not key_cols:  # the atom's only variable: every record is a candidate
        return p.crossJoin(t.agg(F.count(F.lit(1)).alias(name)))
    keys = p.select(*[F.col(q(v)).alias(c) for (_, v), c in zip(e.key, key_cols)]).distinct()
    counts = (t.join(keys, key_cols, "left_semi").groupBy(*map(q, key_cols))
              .agg(F.count(F.lit(1)).alias(name)))
    counts = counts.select(*[F.col(q(c)).alias(v) for (_, v), c in zip(e.key, key_cols)], name)
    joined = p.join(counts, [v for _, v in e.key], "left")
    return joined.withColumn(name, F.coalesce(F.col(name), F.lit(0)))


def _consolidated(p: DataFrame, variables: list[str]) -> DataFrame:
    return (p.groupBy(*map(q, variables), TIME).agg(F.sum(DIFF).alias(DIFF))
            .where(F.col(DIFF) != 0))


def _filter(p: DataFrame, comparisons) -> DataFrame:
    for c in comparisons:
        p = p.where(c.sql())
    return p
