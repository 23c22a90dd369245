"""Spark SQL views lowered to the builder: `flow.sql(text, **collections)` and `.sql` plans.

sqlglot (the parser executor/operators/linear/expressions.py already uses, Spark dialect) reads the query, so a
plan is built and explained without Spark. Only the relational structure is translated here
(FROM, joins, WHERE, GROUP BY, subqueries, set operations, ORDER BY ... LIMIT); every scalar
expression is handed on as Spark SQL text to map/filter, where Spark (or the Arrow compiler
proven equal to it) gives it its meaning, types and null rules. Aggregates follow Spark's
rules: a group without rows disappears, count(x) skips nulls, sum and avg take Spark's result
types (plans/types.py). What is not translated exactly is refused when the plan is built,
with one line naming the construct.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Optional

import sqlglot
from sqlglot import exp

from .errors import PlanError
from .schema import NON_DETERMINISTIC
from .sql_names import spark_name
from .types import (avg_type, band_comparable, columns_of, common_type, ddl_columns,
                    expression_type, same_type)

_NON_DETERMINISTIC_NODES = (exp.Rand, exp.Randn, exp.Uuid, exp.CurrentDate,
                            exp.CurrentTimestamp, exp.CurrentTime)
# the variance family: Spark's names for each (stddev and std are stddev_samp, variance is
# var_samp) -> (whether it is the population's, whether it is the square root)
MOMENTS = {exp.StddevSamp: (False, True), exp.StddevPop: (True, True),
           exp.Variance: (False, False), exp.VariancePop: (True, False)}
BY_VALUE = (exp.ArgMax, exp.ArgMin)  # max_by(x, y), min_by(x, y)
TWO_PASS = (*MOMENTS, *BY_VALUE)
AGGREGATES = (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg, *TWO_PASS)


def refuse(construct: str, rule: str = "") -> PlanError:
    return PlanError(f"sql: {construct} is not supported{'; ' + rule if rule else ''}")


def _text(e: exp.Expression) -> str:
    return e.sql(dialect="spark")


@dataclass
class Col:
    name: str               # as the query names it
    table: Optional[str]    # qualifier (lower case) or None
    internal: str           # the collection's column
    type: Optional[str]
    hidden: bool = False    # a JOIN ... USING side's key: read only qualified, not in `*`


@dataclass
class Rel:
    """A collection and the columns a query sees in it (others may ride along unseen)."""
    coll: object
    cols: list[Col]

    def resolve(self, column: exp.Column) -> Optional[Col]:
        name, table = column.name.lower(), column.table.lower() or None
        hits = [c for c in self.cols if c.name.lower() == name and
                (c.table == table if table is not None else not c.hidden)]
        if len(hits) > 1:
            raise PlanError(f"sql: column '{column.sql(dialect='spark')}' is ambiguous "
                            f"(rule: qualify it with its table)")
        return hits[0] if hits else None

    def types(self) -> dict:
        return {c.internal.lower(): c.type for c in self.cols}

    def starred(self, e) -> Optional[list[Col]]:
        """The columns a SELECT item `*` or `t.*` stands for; None for any other item."""
        if not (isinstance(e, exp.Star) or (isinstance(e, exp.Column)
                                            and isinstance(e.this, exp.Star))):
            return None
        table = e.table.lower() if isinstance(e, exp.Column) else None
        return [c for c in self.cols if (c.table == table if table is not None
                                         else not c.hidden)]


# the clauses of a SELECT beyond FROM ... WHERE (as sqlglot names them)
_BEYOND_WHERE = ("group", "having", "limit", "offset", "order", "with_", "with", "qualify",
                 "windows")
# a join's kind as sqlglot spells it -> the builder's `how`
_JOIN_HOW = {"": "inner", "inner": "inner", "left": "left", "right": "right", "full": "full"}


class Lowering:
    """One statement's translation; `relations` maps lower-case names to Collections of
    `flow`."""

    def __init__(self, flow, relations: dict, statement, text: str):
        self.flow = flow
        self.text = text  # the SQL parsed, which sqlglot's positions index (sql_names)
        self.relations = dict(relations)
        self.mentioned = _mentioned(statement)
        self.n = 0
        self.used: set = set()  # ids of WHERE conjuncts already applied
        self.ranked: dict = {}  # id of a derived table's SELECT -> (its ranking window, k)

    def fresh(self, hint: str) -> str:
        self.n += 1
        return f"_{self.n}_{hint}"

    # ------------------------------------------------------------------ queries
    def query(self, q: exp.Expression, ctes: Optional[dict] = None) -> Rel:
        """A query as a Rel whose collection has exactly the output columns, named as the
        query names them."""
        ctes = dict(ctes or {})
        with_ = q.args.get("with_") or q.args.get("with")
        if with_ is not None:
            for cte in with_.expressions:
                name = cte.alias.lower()
                columns = [c.name for c in cte.args["alias"].columns or []]
                if with_.args.get("recursive") and _reads(cte.this, name):
                    ctes[name] = self._recursive(name, cte.this, columns, ctes)
                else:
                    ctes[name] = _renamed(self.query(cte.this, ctes), columns, name)
        if isinstance(q, exp.Subquery):
            return self.query(q.this, ctes)
        if isinstance(q, (exp.Union, exp.Intersect, exp.Except)):
            return self._set_operation(q, ctes)
        if not isinstance(q, exp.Select):
            raise refuse(f"statement {type(q).__name__.upper()}", "a view is a query")
        return self._select(q, ctes)

    def _recursive(self, name: str, q, columns: list, ctes) -> Rel:
        """WITH RECURSIVE name AS (anchor UNION ALL step): the fixed point of
        R = anchor + step(R), by iterate. Spark runs the step on each level's new rows
        until a level adds none and returns the sum of the levels; that sum is the fixed
        point where the step is linear in R (_linear_step; others are refused). Columns
        keep the anchor's types, which the step's must equal, as in Spark. A recursion that
        never ends fails its step at diffspark.iterate.max_rounds (Spark's fails at its
        level limit)."""
        what = f"recursive CTE {name}"
        if not isinstance(q, exp.Union) or q.args.get("distinct") or \
                isinstance(q.this, exp.Union) or _reads(q.this, name):
            raise refuse(f"{what} other than anchor UNION ALL step", "Spark's form: an "
                         f"anchor that does not read {name}, UNION ALL, one step that does")
        step = _linear_step(q.expression, name, what)
        base = _renamed(self.query(q.this, ctes), columns, name)
        cols = [Col(c.name, None, self.fresh(c.name), c.type) for c in base.cols]
        start = base.coll.map(*(f"`{b.internal}` AS `{c.internal}`"
                                for b, c in zip(base.cols, cols)))

        def body(variable):
            out = self.query(step, {**ctes, name: Rel(variable, cols)})
            if len(out.cols) != len(cols):
                raise PlanError(f"sql: {what}: its step has {len(out.cols)} columns, its "
                                f"anchor {len(cols)} (rule: as many)")
            for o, c in zip(out.cols, cols):
                if o.type and c.type and not same_type(o.type, c.type):
                    raise refuse(f"{what}: step column '{o.name}' ({o.type}) under anchor "
                                 f"column '{c.name}' ({c.type})", "CAST it to the anchor's "
                                 "type, as Spark requires")
            return start.concat(out.coll.map(*(f"`{o.internal}` AS `{c.internal}`"
                                               for o, c in zip(out.cols, cols))))
        return Rel(start.iterate(body), cols)

    def _set_operation(self, q, ctes) -> Rel:
        """UNION [ALL], INTERSECT [ALL], EXCEPT [ALL] by multiplicities, as Spark (nulls
        equal): ALL keeps m(L) + m(R), min(m(L), m(R)) and max(m(L) - m(R), 0); without ALL
        the result is distinct. Columns of two types are cast to Spark's common type
        (types.common_type), where it is exact."""
        what = f"{q.key.upper()}{'' if q.args.get('distinct') else ' ALL'}"
        left, right = self.query(q.this, ctes), self.query(q.expression, ctes)
        if len(left.cols) != len(right.cols):
            raise PlanError(f"sql: {what} of {len(left.cols)} and {len(right.cols)} columns "
                            f"(rule: both sides have as many columns)")
        types = []  # per column, the type both sides are cast to (None: as they are)
        nulls = _null_items(q.this), _null_items(q.expression)
        for i, (a, b) in enumerate(zip(left.cols, right.cols)):
            if (i in nulls[0]) != (i in nulls[1]):  # NULL takes the other side's type
                t = b.type if i in nulls[0] else a.type
                if t is None:
                    raise refuse(f"{what} of a NULL column '{a.name}' with one of a type not "
                                 f"known when the plan is built", "CAST the NULL")
                types.append(t)
                continue
            if a.type is None or b.type is None or same_type(a.type, b.type):
                types.append(None)
                continue
            t = common_type(a.type, b.type)  # Spark's widening, where it is exact
            if t is None:
                raise refuse(f"{what} of column '{a.name}' ({a.type}) with '{b.name}' "
                             f"({b.type})", "CAST one side to the other's type")
            types.append(t)
        l_ = left.coll if not any(types) else left.coll.map(
            *(f"{_cast(f'`{a.internal}`', t)} AS `{a.internal}`"
              for a, t in zip(left.cols, types)))
        r_ = right.coll.map(*(f"{_cast(f'`{b.internal}`', t)} AS `{a.internal}`"
                              for a, b, t in zip(left.cols, right.cols, types)))
        distinct = bool(q.args.get("distinct"))
        if isinstance(q, exp.Union):
            coll = l_.concat(r_).distinct() if distinct else l_.concat(r_)
        elif distinct:  # each side distinct: a record counts 1 per side it is in
            both = isinstance(q, exp.Intersect)
            coll = l_.distinct().concat(r_.distinct() if both else r_.distinct().negate())
            coll = coll.threshold(f"CASE WHEN count = {2 if both else 1} THEN 1 ELSE 0 END")
        else:
            surplus = l_.concat(r_.negate()).threshold("CASE WHEN count > 0 THEN count "
                                                       "ELSE 0 END")
            coll = surplus if isinstance(q, exp.Except) else l_.concat(surplus.negate())
        return self._top(q, Rel(coll, [Col(a.name, a.table, a.internal, t or a.type)
                                       for a, t in zip(left.cols, types)]))

    def _select(self, q: exp.Select, ctes) -> Rel:
        for key in ("qualify", "windows"):
            if q.args.get(key):
                raise refuse(key.upper())
        ranked = self.ranked.pop(id(q), None)
        if ranked is not None:  # drop the ranking item; its rank was the outer filter
            q = q.copy()
            q.set("expressions", [e for e in q.expressions if not e.find(exp.Window)])
        self._rank_source(q)
        rel = self._from(q, ctes)
        where = q.args.get("where")
        if where is not None:
            rel = self._where(rel, where.this, ctes)
        q = _lateral(q, rel)
        rel, q = self._windows(rel, q)
        q, hidden = self._order_items(q, rel)
        if ranked is not None:
            if q.args.get("group") or any(_aggregates(e) for e in q.expressions):
                raise refuse(f"{_text(ranked[0].this)} over grouped rows",
                             "rank the rows of a derived table without GROUP BY")
            rel = self._ranked(rel, *ranked)
        group = q.args.get("group")
        aggs = [a for e in q.expressions for a in _aggregates(e)]
        having = q.args.get("having")
        sets = _grouping_sets(group) if group is not None else None
        if sets is not None:
            rel, items = self._per_grouping_set(q, rel, *sets, having, ctes)
        elif group is not None or aggs or having is not None:
            rel, items = self._aggregate(q, rel, group, having, ctes)
        else:
            rel, q = self._scalar_items(rel, q, ctes)
            items = self._items(q, rel)
        names = [name for name, _ in items]
        lowered = [n.lower() for n in names]
        dup = sorted({n for n in lowered if lowered.count(n) > 1})
        if dup:
            raise PlanError(f"sql: output column '{dup[0]}' is named twice (rule: unique "
                            f"names; use AS)")
        coll = rel.coll.map(*(f"{text} AS `{name}`" for name, (text, _) in items))
        if q.args.get("distinct"):
            if q.args["distinct"].args.get("on"):
                raise refuse("SELECT DISTINCT ON")
            coll = coll.distinct()
        cols = [Col(name, None, name, t) for name, (_, t) in items]
        out = self._top(q, Rel(coll, cols))
        if not hidden:
            return out
        shown = [c for c in cols if c.name not in hidden]
        return Rel(out.coll.map(*(f"`{c.internal}`" for c in shown)), shown)

    def _order_items(self, q: exp.Select, rel: Rel) -> tuple[exp.Select, set]:
        """(q, hidden names): an ORDER BY key read as Spark reads it, a name first as the
        output column of that name, else as the input's (outside an aggregate); a key that
        reads more than the output (an input column, an aggregate) is a SELECT item of its
        own, `hidden`, which top_k orders by and the output then drops."""
        order = q.args.get("order")
        if order is None or (q.args.get("limit") is None and q.args.get("offset") is None):
            return q, set()
        named = {}  # output name -> the item's expression (a star's: its column)
        for e in q.expressions:
            starred = rel.starred(e)
            if starred is not None:
                for c in starred:
                    named.setdefault(c.name.lower(), exp.column(c.name))
            elif not e.find(exp.Window):
                name, body = _named(e, self.text)
                named.setdefault(name.lower(), body)
        bodies = {_canonical(b): n for n, b in reversed(list(named.items()))}
        q, hidden = q.copy(), set()
        for o in q.args["order"].expressions:
            key = o.this
            output = all(_plain_column(c) and c.name.lower() in named
                         for c in key.find_all(exp.Column))
            if (isinstance(key, exp.Literal) and not key.is_string) or (
                    output and not _aggregates(key) and not key.find(exp.Subquery)):
                continue
            body = _canonical(key.transform(lambda n: _inlined(named[n.name.lower()]) if (
                _plain_column(n) and n.name.lower() in named and not _under_aggregate(n))
                else n))
            if body in bodies:
                o.set("this", exp.column(bodies[body], quoted=True))
            elif q.args.get("distinct"):
                raise refuse(f"ORDER BY {_text(key)} of SELECT DISTINCT", "order by the "
                             "selected columns")
            else:
                name = self.fresh("order")
                hidden.add(name)
                q.append("expressions", exp.alias_(body, name, quoted=True))
                o.set("this", exp.column(name, quoted=True))
        return q, hidden

    def _top(self, q, rel: Rel) -> Rel:
        """ORDER BY ... LIMIT k [OFFSET n] as top_k over the query's output columns: the
        first n + k rows less the first n (top_k breaks ties by the whole record, so the
        first n are among the first n + k); OFFSET without LIMIT is every row less them."""
        order, limit, offset = (q.args.get(k) for k in ("order", "limit", "offset"))
        if order is None and limit is None and offset is None:
            return rel
        if order is None:
            raise refuse(f"{'LIMIT' if limit is not None else 'OFFSET'} without ORDER BY",
                         "which rows it keeps is not determined")
        if limit is None and offset is None:
            raise refuse("ORDER BY without LIMIT", "a view is a multiset; order it when "
                         "reading, or add LIMIT k for the first k rows")
        by = self._order(order, rel)
        k = _count(limit, "LIMIT") if limit is not None else None
        n = _count(offset, "OFFSET") if offset is not None else 0
        first = rel.coll.top_k(n + k, order_by=by) if k is not None else rel.coll
        if n == 0:
            return Rel(first, rel.cols)
        return Rel(first.concat(rel.coll.top_k(n, order_by=by).negate()), rel.cols)

    def _order(self, order, rel: Rel) -> str:
        """top_k's order_by text of an ORDER BY (Spark's null order made explicit);
        ORDER BY ALL is every output column in turn, unless one is named `all`."""
        return _order_text(self._order_keys(order, rel))

    def _order_keys(self, order, rel: Rel) -> list[tuple[str, str]]:
        """An ORDER BY's keys: (expression over `rel`, its direction and null order)."""
        keys, items = [], order.expressions
        if any(isinstance(o.this, exp.Var) for o in items):
            if len(items) > 1 or items[0].this.name.upper() != "ALL":
                raise refuse(f"ORDER BY {', '.join(_text(o) for o in items)}")
            if not any(c.name.lower() == "all" for c in rel.cols):
                o = items[0]
                items = [exp.Ordered(this=exp.Literal.number(i + 1), desc=o.args.get("desc"),
                                     nulls_first=o.args.get("nulls_first"))
                         for i in range(len(rel.cols))]
            else:
                items = [items[0].copy()]
                items[0].set("this", exp.column("all"))
        for o in items:
            e = o.this
            if isinstance(e, exp.Literal) and not e.is_string:  # ORDER BY 2: a column
                e = exp.column(rel.cols[int(e.this) - 1].internal, quoted=True)
            text = self._expr(e, rel, "ORDER BY")
            keys.append((text, f"{'DESC' if o.args.get('desc') else 'ASC'} NULLS "
                               f"{'FIRST' if o.args.get('nulls_first') else 'LAST'}"))
        return keys

    def _rank_source(self, q: exp.Select) -> None:
        """FROM (SELECT ..., row_number() OVER (PARTITION BY p ORDER BY o) AS rn ...) AS s
        WHERE rn <= k, or rank() or dense_rank() in its place: noted for the derived table's
        lowering by top_k per p (`_ranked`; its WHERE conjunct marked applied); rn may be
        used nowhere else."""
        source = q.args.get("from_") or q.args.get("from")
        item = source.this if source is not None else None
        if not (isinstance(item, exp.Subquery) and isinstance(item.this, exp.Select)):
            return
        windows = [e for e in item.this.expressions if e.find(exp.Window)]
        where = q.args.get("where")
        if not windows or where is None:
            return
        w = windows[0]
        if len(windows) > 1 or not (isinstance(w, exp.Alias) and _ranking(w.this)):
            raise refuse(f"window function {_text(w)}", "only row_number(), rank() or "
                         "dense_rank() OVER (PARTITION BY ... ORDER BY ...) AS rn, filtered "
                         "by rn <= k outside")
        rn = w.alias.lower()
        limits = [(c, _rank_limit(c, rn)) for c in _conjuncts(where.this)]
        limits = [(c, k) for c, k in limits if k is not None]
        uses = [c for c in q.find_all(exp.Column) if c.name.lower() == rn]
        if any(e.find(exp.Star) for e in q.expressions):
            uses.append("*")
        if len(limits) != 1 or len(uses) != 1:
            raise refuse(f"{_text(w.this.this)} AS {w.alias} used other than once, as "
                         f"{w.alias} <= k in the outer WHERE",
                         "its value is not kept; only the rows ranked at most k")
        self.ranked[id(item.this)] = (w.this, limits[0][1])
        self.used.add(id(limits[0][0]))

    def _windows(self, rel: Rel, q: exp.Select) -> tuple[Rel, exp.Select]:
        """Aggregates OVER (PARTITION BY p) without ORDER BY or frame (over the whole
        partition, `x / sum(x) OVER (PARTITION BY g)`): per partition, one reduction of its
        aggregates over the rows keyed by their partition's values (one JSON value, so
        NULLs partition together, as in Spark), joined back on that key; each window reads
        its value's column."""
        found = [w for e in q.expressions for w in e.find_all(exp.Window)]
        if not found:
            return rel, q
        for e in q.expressions:
            if e.find(exp.Window) and not isinstance(e, exp.Alias):
                raise PlanError(f"sql: SELECT item {_text(e)} needs a name (rule: add AS "
                                f"name)")
        outside = [a for e in q.expressions for a in _aggregates(e)
                   if not any(isinstance(p, exp.Window) for p in _parents(a))]
        if q.args.get("group") or q.args.get("having") or outside:
            raise refuse(f"window function {_text(found[0])} over grouped rows",
                         "aggregate in a derived table, then window over it")
        for w in found:
            if not _whole_partition(w):
                raise refuse(f"window function {_text(w)}", _WINDOWS)
        partitions: list = []  # [(partition expressions, [windows])]
        for w in found:
            parts = list(w.args.get("partition_by") or [])
            same = next((ws for ps, ws in partitions if ps == parts), None)
            if same is None:
                partitions.append((parts, [w]))
            else:
                same.append(w)
        cols = [f"`{c.internal}`" for c in rel.cols]
        values: dict = {}  # id(window) -> its value's column
        for parts, ws in partitions:
            key = self.fresh("window")
            partition = _tie_key([self._expr(p, rel, "PARTITION BY") for p in parts],
                                 [self._tie_type(p, rel, f"{_text(ws[0])} partitioned by")
                                  for p in parts])
            keyed = Rel(rel.coll.map(*cols, f"{partition} AS `{key}`" if parts
                                     else f"'' AS `{key}`"),
                        rel.cols + [Col(key, None, key, "STRING")])
            names = [self.fresh("over") for _ in ws]
            agg, items = self._aggregate(
                exp.Select(expressions=[exp.alias_(w.this.copy(), n, quoted=True)
                                        for w, n in zip(ws, names)]),
                keyed, exp.Group(expressions=[exp.column(key, quoted=True)]), None)
            value = agg.coll.map(f"`{agg.cols[0].internal}` AS `{key}`",
                                 *(f"{text} AS `{n}`" for n, (text, _) in items))
            joined = keyed.coll.join(value, on=[key]).map(*cols, *(f"`{n}`" for n in names))
            rel = Rel(joined, rel.cols + [Col(n, None, n, t) for n, (_, t) in items])
            cols += [f"`{n}`" for n in names]
            values.update({id(w): n for w, n in zip(ws, names)})
        q = q.copy()
        copies = [w for e in q.expressions for w in e.find_all(exp.Window)]
        for w, original in zip(copies, found):
            w.replace(exp.column(values[id(original)], quoted=True))
        return rel, q

    def _ranked(self, rel: Rel, window, k: int) -> Rel:
        """The rows ranked at most k in their partition by the window's order.
        row_number: the first k rows (ties by the record), top_k per partition. rank: the
        rows tied (equal partition and order values) with one of those k, as a row ranks
        at most k exactly when fewer than k rows come strictly before it, and then the
        first k hold a row of its values. dense_rank: the rows of the first k distinct
        order values per partition. Ties are told by one JSON value of the partition and
        order values (NULLs equal, as in Spark's windows), a semijoin's key."""
        partition = window.args.get("partition_by") or []
        parts = [self.fresh("p") for _ in partition]
        keyed = self._keyed(rel, partition, parts)
        keys = self._order_keys(window.args["order"], rel)
        order = _order_text(keys)
        if isinstance(window.this, exp.RowNumber):
            return Rel(keyed.top_k(k, order_by=order, by=parts), rel.cols)
        tie, cols = self.fresh("tie"), [f"`{c.internal}`" for c in rel.cols]
        kinds = [self._tie_type(e, rel, f"{_text(window.this)} over") for e in
                 [*partition, *(o.this for o in window.args["order"].expressions)]]
        key = _tie_key([f"`{p}`" for p in parts] + [text for text, _ in keys], kinds)
        if isinstance(window.this, exp.Rank):
            first = keyed.top_k(k, order_by=order, by=parts).map(f"{key} AS `{tie}`")
        else:  # dense_rank
            names = [self.fresh("o") for _ in keys]
            distinct = keyed.map(*(f"`{p}`" for p in parts), *(
                f"{text} AS `{n}`" for (text, _), n in zip(keys, names))).distinct()
            order = _order_text([(f"`{n}`", way) for n, (_, way) in zip(names, keys)])
            first = distinct.top_k(k, order_by=order, by=parts).map(
                f"{_tie_key([f'`{v}`' for v in parts + names], kinds)} AS `{tie}`")
        tagged = keyed.map(*cols, f"{key} AS `{tie}`")
        return Rel(tagged.semijoin(first, on=[tie]).map(*cols), rel.cols)

    def _tie_type(self, e, rel: Rel, construct: str) -> str:
        """The type of a value that tells a rank's ties or a window's partition
        (`_tie_key`), which must be known: a floating -0.0 is 0.0 first."""
        kind = expression_type(_resolved(e, rel), rel.types())
        if kind is None:
            raise refuse(f"{construct} {_text(e)}, of a type not known here",
                         f"CAST({_text(e)} AS type)")
        return kind

    # ------------------------------------------------------------------ FROM and joins
    def _from(self, q: exp.Select, ctes) -> Rel:
        source = q.args.get("from_") or q.args.get("from")
        if source is None:  # SQL's one row without columns (a constant, fed at time 0)
            return Rel(self.flow.constant("`_one` INT", [(1,)]), [])
        joins = q.args.get("joins") or []
        rels = [self._scan(item, ctes) for item in [source.this] + [j.this for j in joins]]
        where = q.args.get("where")
        conds = _conjuncts(where.this) if where is not None else []
        pooled = self._inner_joins(rels, joins, conds)
        if pooled is not None:
            return pooled
        rel = rels[0]
        pending = []  # comma joins: joined by the WHERE clause's equalities
        for j, right in zip(joins, rels[1:]):
            kind = (j.args.get("side") or j.args.get("kind") or "").lower()
            on, using = j.args.get("on"), j.args.get("using")
            if using or (j.args.get("method") or "").upper() == "NATURAL":
                names = [u.name for u in using] if using else [  # NATURAL: the shared names
                    c.name for c in rel.cols if not c.hidden and any(
                        d.name.lower() == c.name.lower() for d in right.cols)]
                rel = self._using(rel, right, names, kind, _text(j))
                continue
            if on is None and kind in ("", "cross"):
                pending.append(right)
                continue
            if on is None:
                raise refuse(f"{kind.upper()} JOIN without ON")
            how = _JOIN_HOW.get(kind)
            if how is None or j.args.get("method"):
                raise refuse(f"{(j.args.get('method') or kind).upper()} JOIN")
            rel = self._join(rel, right, _conjuncts(on), how)
        if pending:
            rel = self._comma_join([rel] + pending, conds)
        return rel

    def _inner_joins(self, rels: list[Rel], joins: list, conds: list) -> Optional[Rel]:
        """FROM a JOIN b ON ... JOIN c ON ... of inner joins only (commas too), joined as
        the comma list is (`_comma_join`) with every ON condition beside the WHERE
        clause's, as inner joins commute; what no join applied of an ON then filters the
        joined rows. None (joined as written) with an outer, USING or NATURAL join, an
        INNER JOIN without ON, or an ON that reads a column by a name that more than one
        of the FROM's relations has (it names the one to its left)."""
        kinds = [(j.args.get("side") or j.args.get("kind") or "").lower() for j in joins]
        if not joins or any(j.args.get("using") or j.args.get("method") or k not in (
                "", "inner", "cross") or (k == "inner" and j.args.get("on") is None)
                for j, k in zip(joins, kinds)):
            return None
        ons = [c for j in joins if j.args.get("on") is not None
               for c in _conjuncts(j.args["on"])]
        for column in (x for c in ons for x in c.find_all(exp.Column)):
            try:
                if sum(r.resolve(column) is not None for r in rels) != 1:
                    return None
            except PlanError:  # ambiguous within one relation: refused as written
                return None
        rel = self._comma_join(rels, ons + conds)
        for c in ons:
            if id(c) not in self.used:
                rel = Rel(rel.coll.filter(self._expr(c, rel, "ON")), rel.cols)
                self.used.add(id(c))
        return rel

    def _scan(self, item, ctes) -> Rel:
        """A table, CTE or derived table with fresh internal names under its qualifier."""
        if isinstance(item, exp.Table):
            name = item.name.lower()
            if item.args.get("db") or item.args.get("catalog"):
                raise refuse(f"qualified table name '{_text(item)}'")
            if name in ctes:
                rel = ctes[name]
            elif name in self.relations:
                coll = self.relations[name]
                cols = columns_of(coll.node)
                if cols is None:
                    raise PlanError(f"sql: relation '{item.name}': its column names are not "
                                    f"known when the plan is built (rule: name every "
                                    f"expression of its maps with AS)")
                rel = Rel(coll, [Col(n, None, n, t) for n, t in cols])
            else:
                known = ", ".join(sorted(set(self.relations) | set(ctes))) or "none"
                raise PlanError(f"sql: unknown table '{item.name}' (known: {known})")
            alias = (item.alias or item.name).lower()
        elif isinstance(item, exp.Subquery):
            if not item.alias:
                raise refuse("a derived table without an alias", "name it: (SELECT ...) AS t")
            rel, alias = self.query(item.this, ctes), item.alias.lower()
        else:
            raise refuse(f"FROM item {_text(item)}")
        read = [c for c in rel.cols if self.mentioned is None or c.name.lower() in self.mentioned]
        read = read or rel.cols[:1]  # count(*) alone: one column carries the rows
        cols = [Col(c.name, alias, self.fresh(c.name), c.type) for c in read]
        coll = rel.coll.map(*(f"`{c.internal}` AS `{n.internal}`" for c, n in zip(read, cols)))
        return Rel(coll, cols)

    def _using(self, left: Rel, right: Rel, names: list, kind: str, what: str) -> Rel:
        """a JOIN b USING (k, ...), as Spark: the join on a.k = b.k, then one column k per
        name (a's for an inner or left join, b's for a right one, coalesce(a.k, b.k) for a
        full one) ahead of both sides' other columns; a.k and b.k stay readable qualified."""
        how = _JOIN_HOW.get(kind)
        if how is None:
            raise refuse(f"{kind.upper()} JOIN ... USING")
        pairs = []
        for n in names:
            column = exp.column(n)
            mine, theirs = left.resolve(column), right.resolve(column)
            if mine is None or theirs is None:
                raise PlanError(f"sql: USING column '{n}' is missing from the "
                                f"{'left' if mine is None else 'right'} side of {what}")
            pairs.append((mine, theirs))
        conds = [exp.EQ(this=exp.column(a.internal, quoted=True), expression=exp.column(
            b.internal, quoted=True)) for a, b in pairs]
        # the keys read by their internal names: a USING column of an earlier join is not
        # qualified by any one table
        inner = [Col(c.internal, None, c.internal, c.type) for c in left.cols + right.cols]
        joined = self._join(Rel(left.coll, inner[:len(left.cols)]),
                            Rel(right.coll, inner[len(left.cols):]), conds, how)
        merged, hidden, extra = [], [], []
        for (a, b), n in zip(pairs, names):
            if how == "full":
                m = Col(n, None, self.fresh(n), common_type(a.type, b.type)
                        if a.type and b.type else a.type or b.type)
                extra.append(f"coalesce(`{a.internal}`, `{b.internal}`) AS `{m.internal}`")
            else:
                m = b if how == "right" else a
            merged.append(Col(m.name, m.table, m.internal, m.type))
            hidden += [Col(c.name, c.table, c.internal, c.type, True) for c in (a, b)
                       if c is not m]
        keys = {id(c) for pair in pairs for c in pair}
        rest = [c for c in left.cols + right.cols if id(c) not in keys]
        coll = joined.coll if not extra else joined.coll.map(
            *(f"`{c.internal}`" for c in left.cols + right.cols), *extra)
        return Rel(coll, merged + rest + hidden)

    def _join(self, left: Rel, right: Rel, conds: list, how: str) -> Rel:
        """`left` joined with `right` on `conds`: equalities between the sides are the
        keys, the rest filters. A join without an equality (a cross join, or one on other
        conditions only) is keyed by a constant: each row meets every row of the other
        side, and a step costs its changes times the other side's rows. In an outer join a
        predicate on the padded side alone filters that side first; any other is
        `_outer_mixed`'s."""
        keys, rest = [], []
        for c in conds:
            pair = self._key_pair(c, left, right)
            (keys if pair else rest).append(pair or c)
        if not keys:
            keys = [(exp.Literal.number(1), exp.Literal.number(1))]
        if how != "inner":
            pad, mixed = {"left": right, "right": left}.get(how), []
            for c in rest:
                if pad is None or not self._within(c, pad):
                    mixed.append(c)
                    continue
                filtered = Rel(pad.coll.filter(self._expr(c, pad, "ON")), pad.cols)
                left, right = (left, filtered) if how == "left" else (filtered, right)
                pad = filtered
            if mixed:
                return self._outer_mixed(left, right, keys, mixed, how)
            rest = []
        names = [self.fresh("k") for _ in keys]
        casts = self._key_casts(keys, left, right)
        lk = self._keyed(left, [a for a, _ in keys], names, [mine for mine, _ in casts])
        rk = self._keyed(right, [b for _, b in keys], names, [theirs for _, theirs in casts])
        rel = Rel(lk.join(rk, on=names, how=how), left.cols + right.cols)
        for c in rest:
            rel = Rel(rel.coll.filter(self._expr(c, rel, "ON")), rel.cols)
        return rel

    def _outer_mixed(self, left: Rel, right: Rel, keys: list, mixed: list, how: str) -> Rel:
        """An outer join whose ON also reads the preserved side(s) otherwise than by the
        keys (l.k = r.k AND l.a < r.b, or a predicate on the preserved side alone, which
        pads the rows it fails): the inner join on the keys filtered by `mixed`, plus each
        preserved side's rows that no pair survived for, padded with NULLs. A preserved
        row is told apart by a tag of all its columns (_tie_key: a NULL in it matches
        itself, as the row it came from must); a row with a NULL key meets nothing."""
        names = [self.fresh("k") for _ in keys]
        casts = self._key_casts(keys, left, right)
        tags = {side: self.fresh("tag") for side in
                (("left", "right") if how == "full" else (how,))}
        lk = self._keyed(left, [a for a, _ in keys], names, [t for t, _ in casts],
                         tags.get("left"))
        rk = self._keyed(right, [b for _, b in keys], names, [t for _, t in casts],
                         tags.get("right"))
        cols = left.cols + right.cols
        pairs = Rel(lk.join(rk, on=names), cols)
        matched = pairs.coll.filter(" AND ".join(f"({self._expr(c, pairs, 'ON')})"
                                                 for c in mixed))
        parts = [matched.map(*(f"`{c.internal}`" for c in cols))]
        for side, tag in tags.items():
            own, k = (left, lk) if side == "left" else (right, rk)
            mine = {id(c) for c in own.cols}
            for c in cols:
                if id(c) not in mine and c.type is None:
                    raise refuse(f"{how.upper()} JOIN padding column {c.name} of an unknown "
                                 "type", "CAST it in a derived table")
            alone = k.antijoin(matched.map(*(f"`{n}`" for n in names), f"`{tag}`"),
                               on=names + [tag])
            parts.append(alone.map(*(f"`{c.internal}`" if id(c) in mine else
                                     f"CAST(NULL AS {c.type}) AS `{c.internal}`" for c in cols)))
        return Rel(parts[0].concat(*parts[1:]), cols)

    def _key_casts(self, pairs, left: Rel, right: Rel) -> list[tuple]:
        """Per key pair a = b (a of `left`, b of `right`), the types to CAST a and b to
        (None: as it is) so that both compare in the type Spark compares them in
        (types.common_type: a join compares values as stored, Spark casts a side). Keys of
        two known types without an exact common type are refused."""
        casts = []
        for a, b in pairs:
            ta = expression_type(_resolved(a, left), left.types())
            tb = expression_type(_resolved(b, right), right.types())
            if ta is None or tb is None or same_type(ta, tb):
                casts.append((None, None))
                continue
            t = common_type(ta, tb)
            if t is None:
                raise refuse(f"join key {_text(a)} ({ta}) = {_text(b)} ({tb})",
                             "CAST one side to the other's type")
            casts.append(tuple(None if same_type(x, t) else t for x in (ta, tb)))
        return casts

    def _keyed(self, rel: Rel, exprs, names, casts=None, tag: Optional[str] = None):
        """Only the columns the query sees, plus the join keys (each CAST to its type in
        `casts`, where given and not None), plus, where `tag` names one, a column telling
        the row apart by all those it sees (_tie_key)."""
        casts = casts or [None] * len(names)
        own = [f"`{c.internal}`" for c in rel.cols]
        tagged = [f"{_tie_key(own, [c.type for c in rel.cols])} AS `{tag}`"] if tag else []
        return rel.coll.map(*own, *(f"{_cast(self._expr(e, rel, 'ON'), t)} AS `{n}`"
                                    for e, n, t in zip(exprs, names, casts)), *tagged)

    def _key_pair(self, c, left: Rel, right: Rel):
        if not isinstance(c, exp.EQ):
            return None
        a, b = c.this, c.expression
        if self._within(a, left) and self._within(b, right):
            return a, b
        if self._within(b, left) and self._within(a, right):
            return b, a
        return None

    def _within(self, e, rel: Rel) -> bool:
        """Whether `e` reads columns, all of them of `rel`, and no subquery."""
        cols = list(e.find_all(exp.Column))
        if not cols or any(e.find_all(exp.Subquery, exp.Exists)):
            return False
        try:
            return all(rel.resolve(c) is not None for c in cols)
        except PlanError:
            return False

    def _comma_join(self, rels: list[Rel], conds: list) -> Rel:
        """FROM a, b, c: single-relation predicates filter before the joins (`_pushed`);
        a relation so filtered that the equalities (the WHERE clause's, and the ON clauses'
        of inner joins, `_inner_joins`) link to one other relation only, one not filtered
        (a dimension, like TPC-H's nation and region), joins that one first, so that its
        filter narrows the joins after it, their arrangements and the changes they pass
        on (Q7's lineitems meet its two nations' suppliers, not every supplier); where both
        are filtered, which narrows more is not known without statistics, and FROM's order
        stands. Then each relation linked to those joined so far joins them, in FROM order.
        Inner joins commute and associate: only the order of work changes. The columns keep
        FROM's order (`*`)."""
        place = {c.internal: i for i, r in enumerate(rels) for c in r.cols}
        pushed = [self._pushed(r, conds) for r in rels]
        filtered = [p.coll is not r.coll for p, r in zip(pushed, rels)]
        rels = pushed
        while len(rels) > 2:
            leaves = ((i, [j for j, o in enumerate(rels) if j != i and self._links(conds, o, r)])
                      for i, r in enumerate(rels) if filtered[i])
            leaf = next(((i, linked[0]) for i, linked in leaves
                         if len(linked) == 1 and not filtered[linked[0]]), None)
            if leaf is None:
                break
            i, j = leaf
            rels[j] = self._linked(rels[j], rels[i], conds)
            filtered[j] = True
            del rels[i], filtered[i]
        rel, rest = rels[0], rels[1:]
        while rest:
            for i, r in enumerate(rest):
                if self._links(conds, rel, r):
                    rel = self._linked(rel, r, conds)
                    del rest[i]
                    break
            else:  # nothing links: a cross join with the next
                rel = self._join(rel, rest.pop(0), [], "inner")
        return Rel(rel.coll, sorted(rel.cols, key=lambda c: place[c.internal]))

    def _links(self, conds: list, left: Rel, right: Rel) -> list:
        """The equalities among `conds` between `left` and `right`: join keys."""
        return [c for c in conds if self._key_pair(c, left, right)]

    def _linked(self, left: Rel, right: Rel, conds: list) -> Rel:
        """`left` joined with `right` on the equalities between them (marked applied)."""
        links = self._links(conds, left, right)
        self.used.update(id(c) for c in links)
        return self._join(left, right, links, "inner")

    def _pushed(self, rel: Rel, conds) -> Rel:
        """`rel` filtered, before the joins, by the predicates that read it alone, and by
        what an OR over several relations asks of it in every branch (`_implied`); that OR
        still filters the joined rows."""
        for c in conds:
            if self._within(c, rel):
                rel = Rel(rel.coll.filter(self._expr(c, rel, "WHERE")), rel.cols)
                self.used.add(id(c))
                continue
            implied = self._implied(c, rel)
            if implied is not None:
                rel = Rel(rel.coll.filter(self._expr(implied, rel, "WHERE")), rel.cols)
        return rel

    def _implied(self, c, rel: Rel):
        """(A1 AND B1) OR (A2 AND B2) where each Ai reads `rel` alone: A1 OR A2, true of
        every row the OR keeps (a branch that is TRUE has each of its conjuncts TRUE, in
        SQL's three-valued logic too), so `rel` may be filtered by it before the joins, as
        Spark's optimizer does (PushExtraPredicateThroughJoin): TPC-H Q19 arranges only the
        parts of its three brands, Q7 only its two nations. None where some branch asks
        nothing of `rel` alone, or holds a subquery."""
        branches = _disjuncts(c)
        if len(branches) < 2 or any(c.find_all(exp.Subquery, exp.Exists)):
            return None
        asked = []
        for branch in branches:
            own = [x for x in _conjuncts(branch) if self._within(x, rel)]
            if not own:
                return None
            asked.append(exp.and_(*own) if len(own) > 1 else own[0].copy())
        return exp.or_(*asked)

    # ------------------------------------------------------------------ WHERE
    def _where(self, rel: Rel, cond, ctes) -> Rel:
        for c in _conjuncts(cond):
            if id(c) in self.used:
                continue
            negated = isinstance(c, exp.Not)
            inner = c.this if negated else c
            bare = c.unnest()
            if isinstance(bare, exp.Or) and (any(_predicate_subqueries(bare))
                                             or len(list(_scalar_subqueries(bare))) > 1):
                rel = self._either(rel, bare, ctes)
            elif isinstance(inner, exp.In) and inner.args.get("query") is not None:
                rel = (self._not_in if negated else self._in)(rel, inner, ctes)
            elif isinstance(inner, exp.Exists):
                rel = self._exists(rel, inner.this, ctes, negated)
            elif any(_scalar_subqueries(c)):
                rel = self._scalar_filter(rel, c, ctes)
            else:
                rel = Rel(rel.coll.filter(self._expr(c, rel, "WHERE")), rel.cols)
        return rel

    def _either(self, rel: Rel, c, ctes) -> Rel:
        """A OR B where a side holds an IN or EXISTS subquery (or each a scalar one): the
        rows A keeps, plus those B keeps, less those both keep. Each side keeps or drops a
        row by its own values (a filter, a semijoin, an antijoin, a join to one value per
        row), so a row counts once where A OR B is true, as SQL's three-valued OR."""
        first, *rest = _disjuncts(c)
        other = exp.or_(*rest) if len(rest) > 1 else rest[0]
        cols = [f"`{col.internal}`" for col in rel.cols]
        a = self._where(rel, first, ctes)
        b, both = self._where(rel, other, ctes), self._where(a, other, ctes)
        return Rel(a.coll.map(*cols).concat(b.coll.map(*cols),
                                            both.coll.map(*cols).negate()), rel.cols)

    def _scalar_filter(self, rel: Rel, c, ctes) -> Rel:
        """A condition on one scalar subquery, an aggregate without GROUP BY: over the rows
        joined to its value. Uncorrelated, the value is one row (on a constant). Correlated
        by equalities outer = inner, the subquery is grouped by its inner sides and joined
        on them (decorrelated, as TPC-H Q2, Q17 and Q20 need); exact where SQL's value over
        no correlated rows is NULL and the condition a comparison with it, which a NULL
        makes unknown: rows without a group drop out of both."""
        subs = list(_scalar_subqueries(c))
        if len(subs) > 1:
            raise refuse(f"condition {_text(c)} with {len(subs)} scalar subqueries",
                         "one per condition; AND them")
        q = _scalar_query(subs[0])
        inside, pairs = self._correlated(rel, q, ctes, "a scalar subquery")
        v, cols = self.fresh("scalar"), [f"`{col.internal}`" for col in rel.cols]
        if pairs:
            _null_over_no_rows(subs[0], q.expressions[0], c)
            outer, names, agg, (text, t), groups, _ = self._per_key(rel, q, inside, pairs)
        else:
            agg, items = self._aggregate(q, inside, None, None)
            (text, t), = [item for _, item in items]
            names = [self.fresh("one")]
            outer = rel.coll.map(*cols, f"1 AS `{names[0]}`")
            groups = [f"1 AS `{names[0]}`"]
        cond = c.copy().transform(lambda n: exp.column(v, quoted=True)
                                  if n == subs[0] else n)
        band = _band(cond, rel, v)
        if band is not None and band_comparable(_type(outer, band[0]), t):
            # a bound that moves costs the rows it passes (ir.Band); the value's type stated
            # (the same type: no change) for the builder, which cannot infer every one
            value = agg.coll.map(*groups, f"CAST({text} AS {t}) AS `{v}`")
            return Rel(outer.band_join(value, names, band[0], band[1], v).map(*cols), rel.cols)
        value = agg.coll.map(*groups, f"{text} AS `{v}`")
        joined = Rel(outer.join(value, on=names), rel.cols + [Col(v, None, v, t)])
        return Rel(joined.coll.filter(self._expr(cond, joined, "WHERE")).map(*cols), rel.cols)

    def _per_key(self, rel: Rel, q: exp.Select, inside: Rel, pairs):
        """A scalar subquery correlated by `pairs` (outer = inner) decorrelated: the
        aggregate grouped by its inner sides. (rel with the outer sides as columns `names`,
        names, the aggregate, (text, type) of its value there, its group columns renamed
        `names`.) Each side is CAST to the type Spark compares the pair in."""
        outer, probe, names, casts = self._meeting(rel, inside, pairs, "corr", carried=True)
        # the magic set: only the groups some outer row asks for are aggregated (the
        # others' values are never read), so a change of the inner rows of groups no
        # outer row has (TPC-H Q17's other parts) stops at a semijoin
        inside = Rel(probe.semijoin(outer, on=names), inside.cols)
        agg, items = self._aggregate(q, inside, exp.Group(expressions=[
            b.copy() for _, b in pairs]), None)
        (value,) = [item for _, item in items]
        groups = [f"{_cast(f'`{g.internal}`', to)} AS `{n}`"
                  for g, n, (_, to) in zip(agg.cols, names, casts)]
        return outer, names, agg, value, groups, casts

    def _scalar_items(self, rel: Rel, q: exp.Select, ctes) -> tuple[Rel, exp.Select]:
        """(rel joined with the value of each scalar subquery in the SELECT list, q with
        each such subquery read as its value's column). Uncorrelated, the value is a global
        aggregate, one row whether or not it has rows (count 0, max NULL over none), so
        every row of rel meets it on a constant, as in SQL. Correlated by equalities, the
        value is grouped by the correlated keys (_per_key) and LEFT joined: a row no group
        meets reads SQL's value over no rows, NULL (sum, avg, min, max and arithmetic on
        them) or 0 (a count by itself); any other value is refused."""
        rel, q = self._predicate_values(rel, q)
        subs = [sub for e in q.expressions for sub in _outermost(e)]
        if not subs:
            return rel, q
        for e in q.expressions:  # named before the subquery becomes a column of ours
            if any(_outermost(e)):
                _named(e, self.text)
        values = []  # (subquery, its value's column)
        base = rel  # each value is worked out over it; `rel` gains a column per value
        for sub in subs:
            inner = _scalar_query(sub)
            inside, pairs = self._correlated(base, inner, ctes, "a scalar subquery")
            v, cols = self.fresh("scalar"), [f"`{col.internal}`" for col in rel.cols]
            if pairs:
                item = inner.expressions[0]
                counted = isinstance(item.unalias(), exp.Count)
                if not counted:
                    _null_over_no_rows(sub, item)
                outer, names, agg, (text, t), groups, casts = self._per_key(base, inner, inside,
                                                                            pairs)
                if t is None:  # the LEFT join pads it with a NULL of its type
                    raise refuse(f"correlated scalar subquery {_text(sub)} in the SELECT "
                                 f"list, its value of a type not known when the plan is "
                                 f"built", "CAST it inside the subquery")
                # the value of every outer key (NULL or 0 where no group meets it), then
                # joined to the rows on one non-null value of the key: each value reads the
                # rows before it once, so n of them grow a Spark plan linearly, not as 3^n
                key = self.fresh("row")
                packed = f"to_json(struct({', '.join(f'`{n}`' for n in names)})) AS `{key}`"
                value = agg.coll.map(*groups, f"CAST({text} AS {t}) AS `{v}`")
                read = f"coalesce(`{v}`, 0)" if counted else f"`{v}`"
                every = outer.map(*(f"`{n}`" for n in names), packed).distinct().join(
                    value, on=names, how="left").map(f"`{key}`", f"{read} AS `{v}`")
                mine = self._keyed(rel, [a for a, _ in pairs], names, [m for m, _ in casts])
                joined = mine.map(*cols, packed).join(every, on=[key]).map(*cols, f"`{v}`")
            else:
                agg, items = self._aggregate(inner, inside, None, None)
                (text, t), = [item for _, item in items]
                one = self.fresh("one")
                value = agg.coll.map(f"1 AS `{one}`", f"{text} AS `{v}`")
                joined = rel.coll.map(*cols, f"1 AS `{one}`").join(value, on=[one]).map(
                    *cols, f"`{v}`")
            # qualified by its own name and hidden: no query name reaches it, nor `*`
            rel = Rel(joined, rel.cols + [Col(v, v, v, t, hidden=True)])
            values.append((sub, v))
        q = q.copy()
        q.set("expressions", [e.transform(lambda n: next(
            (exp.column(v, v, quoted=True) for sub, v in values if n == sub), n))
            for e in q.expressions])
        return rel, q

    def _predicate_values(self, rel: Rel, q: exp.Select) -> tuple[Rel, exp.Select]:
        """EXISTS and IN subqueries as values in the SELECT list, read through counts that
        _scalar_items keeps (correlated by equalities, or global), with the two values
        Spark 4.1 gives them there (an existence join, never NULL, unlike SQL's IN): EXISTS
        is count(*) > 0; x IN (SELECT y ... WHERE c) is count(c AND y = x) > 0; x NOT IN is
        false where some y equals x, or is NULL, or x is NULL and some row meets c. x is a
        column of its own (`probe`), so the inner scope cannot take it for one of its own."""
        if not any(_predicate_subqueries(e) for e in q.expressions):
            return rel, q
        q = q.copy()
        for e in list(q.expressions):
            if any(_predicate_subqueries(e)) and not isinstance(e, exp.Alias):
                e.replace(exp.alias_(e.copy(), _named(e, self.text)[0], quoted=True))
        outermost = [n for e in q.expressions for n in _predicate_subqueries(e)
                     if not any(isinstance(p, (exp.Subquery, exp.Exists)) for p in _parents(n))]
        for node in outermost:
            inner = node.this if isinstance(node, exp.Exists) else node.args["query"].this
            if not isinstance(inner, exp.Select) or any(inner.args.get(k) for k in
                                                        _BEYOND_WHERE):
                raise refuse(f"subquery {_text(node)} as a value", "EXISTS or IN over SELECT "
                             "... FROM ... WHERE")
            if isinstance(node, exp.Exists):
                node.replace(_some(_counted(inner)))
                continue
            if isinstance(node.this, exp.Tuple) or len(inner.expressions) != 1 or \
                    not node.this.find(exp.Column):
                raise refuse(f"IN {_text(node)} as a value", "one column or expression of "
                             "columns before IN (Spark answers a constant's otherwise)")
            probe = self.fresh("probe")  # qualified by its own name, seen nowhere else
            t = expression_type(_resolved(node.this, rel), rel.types())
            rel = Rel(rel.coll.map(*(f"`{c.internal}`" for c in rel.cols),
                                   f"{self._expr(node.this, rel, 'IN')} AS `{probe}`"),
                      rel.cols + [Col(probe, probe, probe, t, hidden=True)])
            y, x = inner.expressions[0].unalias(), exp.column(probe, probe, quoted=True)
            match = _some(_counted(inner, exp.EQ(this=y.copy(), expression=x.copy())))
            negation = node.parent
            while isinstance(negation, exp.Paren):
                negation = negation.parent
            if not isinstance(negation, exp.Not):
                node.replace(match)
                continue
            nulls = _some(_counted(inner, exp.Is(this=y.copy(), expression=exp.Null())))
            unknown = exp.and_(exp.Is(this=x.copy(), expression=exp.Null()),
                               _some(_counted(inner)))
            negation.replace(exp.Not(this=exp.Paren(this=exp.or_(match, nulls, unknown))))
        return rel, q

    def _correlated(self, rel: Rel, q: exp.Select, ctes, construct: str,
                    mixed: Optional[list] = None):
        """(q's FROM filtered by its uncorrelated predicates, the (outer, inner) pairs of
        its correlating equalities outer = inner). Any other predicate that reads `rel`
        (outside a nested subquery) goes to `mixed` where the caller gives one (EXISTS
        tests it per distinct outer value), else it is refused."""
        inside = self._from(q, ctes)
        where = q.args.get("where")
        conjuncts = [k for k in (_conjuncts(where.this) if where is not None else [])
                     if id(k) not in self.used]
        pairs = {id(k): pair for k in conjuncts for pair in [self._key_pair(k, rel, inside)]
                 if pair and not self._within(k, inside)}
        for k in conjuncts:
            if id(k) in pairs:
                continue
            if any(inside.resolve(col) is None and rel.resolve(col) is not None
                   for col in k.find_all(exp.Column) if not _in_subquery(col, k)):
                if mixed is None or any(k.find_all(exp.Subquery, exp.Exists)):
                    raise refuse(f"correlated predicate {_text(k)} in {construct}",
                                 "correlate by equalities outer = inner")
                mixed.append(k)
                continue
            inside = self._where(inside, k, ctes)
        return inside, list(pairs.values())

    def _in(self, rel: Rel, c: exp.In, ctes) -> Rel:
        """x IN (SELECT y ...): a semijoin on x = y (a null x or y matches nothing), and on
        the subquery's correlating equalities, if any."""
        outer, values, names, _ = self._in_sides(rel, c, ctes)
        return Rel(outer.semijoin(values, on=names), rel.cols)

    def _not_in(self, rel: Rel, c: exp.In, ctes) -> Rel:
        """(x1, ..., xm) NOT IN (SELECT y1, ..., ym ...) with SQL's null rule (Spark's
        null-aware anti join). Per outer row, S is the inner rows it meets on the subquery's
        correlating equalities (all of them, uncorrelated: one group on a constant); the row
        is kept when no row of S might equal it: none whose every xi = yi is true or unknown
        (a null on either side). So, per pattern P of the x that are null and pattern Q of
        the y that are null among the other positions, the outer rows of pattern P are
        antijoined with the inner rows of pattern Q on the correlation and the positions in
        neither: 3^m antijoins. For one value: x not among S's y, no y of S null, and a null
        x kept only where S is empty."""
        m = len(c.this.expressions) if isinstance(c.this, exp.Tuple) else 1
        if m > 3:
            raise refuse(f"NOT IN of {m} values {_text(c.this)}", "at most 3 (each pattern "
                         "of nulls is an antijoin of its own: 3^m), or NOT EXISTS with "
                         "equalities")
        outer, values, names, _ = self._in_sides(rel, c, ctes)
        corr, ks = names[:-m], names[-m:]
        cols = [f"`{col.internal}`" for col in rel.cols]
        if not corr:
            one = self.fresh("one")
            outer = outer.map(*cols, *(f"`{k}`" for k in ks), f"1 AS `{one}`")
            values = values.map(*(f"`{k}`" for k in ks), f"1 AS `{one}`")
            corr = [one]

        def pattern(keys, nulls):
            return " AND ".join(f"`{k}` IS {'' if null else 'NOT '}NULL"
                                for k, null in zip(keys, nulls))
        parts = []
        for p in product((False, True), repeat=m):
            rows = outer.filter(pattern(ks, p))
            present = [k for k, null in zip(ks, p) if not null]
            for q in product((False, True), repeat=len(present)):
                inner = values.filter(pattern(present, q)) if present else values
                on = corr + [k for k, null in zip(present, q) if not null]
                rows = rows.antijoin(inner, on=on)
            parts.append(rows)
        return Rel(parts[0].concat(*parts[1:]).map(*cols), rel.cols)

    def _in_sides(self, rel: Rel, c: exp.In, ctes):
        """_meeting's (rel with key columns, the subquery's rows with theirs, the key names,
        the casts) of x [NOT] IN (subquery): its correlating equalities outer = inner, then
        x = y (or each of (x1, x2) IN (SELECT y1, y2 ...)), the last. A plain SELECT of
        values may be correlated in its WHERE; any other subquery is a query of its own."""
        q = c.args["query"].this
        probes = c.this.expressions if isinstance(c.this, exp.Tuple) else [c.this]
        if isinstance(q, exp.Select) and not any(q.args.get(k) for k in _BEYOND_WHERE) and \
                not any(_aggregates(e) or e.find(exp.Star) for e in q.expressions):
            inside, pairs = self._correlated(rel, q, ctes, "an IN subquery")
            items = [e.unalias() for e in q.expressions]
        else:
            sub, pairs = self.query(q, ctes), []
            items = [exp.column(col.internal, quoted=True) for col in sub.cols]
            inside = Rel(sub.coll, [Col(col.internal, None, col.internal, col.type)
                                    for col in sub.cols])
        if len(items) != len(probes):
            raise PlanError(f"sql: IN (subquery) selects {len(items)} columns for "
                            f"{len(probes)} (rule: as many as the values before IN)")
        return self._meeting(rel, inside, pairs + list(zip(probes, items)), "in")

    def _meeting(self, rel: Rel, inside: Rel, pairs, hint: str, carried: bool = False):
        """(rel with a key column per pair outer = inner, inside with its side of each pair
        under the same names (and its own columns where `carried`), the names, the casts),
        each side CAST to the type Spark compares the pair in (_key_casts)."""
        names = [self.fresh(hint) for _ in pairs]
        casts = self._key_casts(pairs, rel, inside)
        outer = self._keyed(rel, [a for a, _ in pairs], names, [mine for mine, _ in casts])
        probe = inside.coll.map(*(f"{_cast(self._expr(b, inside, 'a subquery'), t)} AS `{n}`"
                                  for (_, b), n, (_, t) in zip(pairs, names, casts)),
                                *(f"`{c.internal}`" for c in (inside.cols if carried else [])))
        return outer, probe, names, casts

    def _exists(self, rel: Rel, q, ctes, negated: bool) -> Rel:
        """[NOT] EXISTS (SELECT ... FROM ... WHERE outer = inner AND ...): a semijoin
        (antijoin) on the correlated equalities; the other predicates filter the inside."""
        if not isinstance(q, exp.Select) or any(q.args.get(k) for k in _BEYOND_WHERE):
            raise refuse("EXISTS over anything but SELECT ... FROM ... WHERE")
        mixed: list = []
        inside, keys = self._correlated(rel, q, ctes, "EXISTS", mixed)
        if not keys and mixed:
            raise refuse(f"EXISTS correlated by {_text(mixed[0])} alone",
                         "correlate by an equality outer = inner too")
        if not keys:  # a global condition: every row kept (dropped) while the inside has rows
            one, cols = self.fresh("one"), [f"`{c.internal}`" for c in rel.cols]
            outer = rel.coll.map(*cols, f"1 AS `{one}`")
            op = outer.antijoin if negated else outer.semijoin
            return Rel(op(inside.coll.map(f"1 AS `{one}`"), on=[one]).map(*cols), rel.cols)
        # the mixed predicates read the inside's columns after the join
        outer, probe, names, _ = self._meeting(rel, inside, keys, "ex", carried=bool(mixed))
        if mixed:
            outer, probe, names = self._mixed(rel, inside, outer, probe, names, mixed)
        op = outer.antijoin if negated else outer.semijoin
        return Rel(op(probe, on=names), rel.cols)

    def _mixed(self, rel: Rel, inside: Rel, outer, probe, names: list, mixed: list):
        """EXISTS whose predicates also compare outer and inner columns otherwise than by
        equality (TPC-H Q21: l2.l_suppkey <> l1.l_suppkey): the distinct (key, outer
        columns) values of the outer side meet the inside on the key, the predicates filter
        the pairs, and the outer rows are kept (dropped) by (key, outer columns) among the
        survivors. The outer columns travel as one JSON value, so a NULL among them matches
        itself, as the outer row it came from must."""
        seen: dict = {}  # outer column's internal name -> (its Col, its name in the pairs)

        def swap(node):
            if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                col = inside.resolve(node)  # the inner scope shadows the outer one
                if col is None:
                    col = rel.resolve(node)
                    if col is None:
                        raise PlanError(f"sql: unknown column '{_text(node)}'")
                    col = seen.setdefault(col.internal, (col, self.fresh("oc")))[1]
                    return exp.column(col, quoted=True)
                return exp.column(col.internal, quoted=True)
            return node
        cond = " AND ".join(f"({_text(self._checked(k.copy().transform(swap), 'EXISTS'))})"
                            for k in mixed)
        tag = self.fresh("tag")
        own, keys = [f"`{c.internal}`" for c in rel.cols], [f"`{n}`" for n in names]
        carried = [f"`{n}`" for _, n in seen.values()]
        # tagged before the distinct, which may make a floating -0.0 0.0, so that the tag
        # is the outer row's whatever the column's type
        tagged = _tie_key([f"`{c.internal}`" for c, _ in seen.values()],
                          [c.type for c, _ in seen.values()])
        outer = outer.map(*own, *keys, *(f"`{c.internal}` AS `{n}`" for c, n in seen.values()),
                          f"{tagged} AS `{tag}`")
        pairs = outer.map(*keys, *carried, f"`{tag}`").distinct().join(probe, on=names)
        return (outer.map(*own, *keys, f"`{tag}`"), pairs.filter(cond).map(*keys, f"`{tag}`"),
                names + [tag])

    # ------------------------------------------------------------------ expressions
    def _expr(self, e, rel: Rel, where: str) -> str:
        """Spark SQL text of `e` with column references renamed to `rel`'s internal names."""
        return _text(self._checked(_resolved(e, rel), where))

    def _checked(self, e, where: str):
        for node in e.walk():  # rand() was refused by _checked_statement
            if isinstance(node, exp.AggFunc):  # subqueries were refused by _resolved
                raise refuse(f"aggregate {_text(node)} in {where}")
            if isinstance(node, exp.Window):  # a ranking outside _rank_source's form
                raise refuse(f"window function {_text(node)} in {where}", "row_number(), "
                             "rank() or dense_rank() AS rn in a derived table filtered by "
                             "rn <= k outside")
        return e

    def _items(self, q: exp.Select, rel: Rel) -> list:
        """(output name, (text, type)) per SELECT item, stars expanded."""
        out = []
        for e in q.expressions:
            cols = rel.starred(e)
            if cols is not None:
                if not cols:
                    raise PlanError(f"sql: {_text(e)} matches no columns")
                out += [(c.name, (f"`{c.internal}`", c.type)) for c in cols]
                continue
            name, body = _named(e, self.text)
            resolved = _resolved(body, rel)
            out.append((name, (_text(self._checked(resolved, "SELECT")),
                               expression_type(resolved, rel.types()))))
        return out

    # ------------------------------------------------------------------ GROUP BY
    def _aggregate(self, q: exp.Select, rel: Rel, group, having, ctes=None):
        """GROUP BY: the aggregates computed per group in one reduction (`aggregate`), each
        DISTINCT one in its own, joined on a non-null key of the group where there are
        several (JSON of its columns: a null group column matches); then HAVING (a scalar
        subquery in it as in WHERE, over the groups), then the SELECT list over group
        columns and aggregates. Without GROUP BY, one group that always exists (_phantom):
        SQL's one row, even over no rows."""
        items = [(name, _canonical(body)) for name, body in
                 (_named(e, self.text) for e in q.expressions)]
        if any(isinstance(b, exp.Star) for _, b in items):
            raise refuse("SELECT * with GROUP BY or aggregates")
        aliases = {}  # a SELECT item's name -> its expression, first of a name
        for name, body in items:
            aliases.setdefault(name.lower(), body)
        group_exprs, shown = [], []  # resolved, and as the query spells them
        groups = group.expressions if group is not None else []
        if group is not None and group.args.get("all"):  # GROUP BY ALL: the items without
            groups = [b for _, b in items if not _aggregates(b)]  # aggregates (none: global)
        for g in groups:
            if isinstance(g, exp.Literal) and not g.is_string:  # GROUP BY 1: a SELECT item
                g = items[int(g.this) - 1][1]
            group_exprs.append(_resolved(_grouped_by_alias(g, rel, aliases), rel))
            shown.append(_text(g))
        exprs = [_resolved(b, rel) for _, b in items]
        # a scalar subquery in HAVING stands aside (a placeholder) until the groups exist:
        # its columns and aggregates are its own, not the groups'
        cond, aside = (having.this.copy(), {}) if having is not None else (None, {})
        for sub in list(_scalar_subqueries(cond)) if cond is not None else []:
            mark = exp.Placeholder(this=self.fresh("sub"))
            aside[mark.name] = sub
            sub.replace(mark)
        if cond is not None:
            cond = _resolved(_having_aliases(_canonical(cond), rel, aliases, group_exprs),
                             rel)
        phantom = None
        if not group_exprs:
            rel, phantom = self._phantom(rel, exprs + [cond])
        types = rel.types()
        aggs: list = []
        for e in exprs + ([cond] if cond is not None else []):
            for a in e.find_all(*AGGREGATES):
                if a not in aggs:
                    aggs.append(a)
        for a in {n for e in exprs + [cond] if e is not None for n in e.find_all(exp.AggFunc)}:
            if not isinstance(a, AGGREGATES):
                raise refuse(f"aggregate {_text(_shown(a, rel))}", "count, sum, min, max, "
                             "avg, any_value, max_by, min_by, stddev, variance and their "
                             "_samp and _pop forms are")
        gnames = [self.fresh("g") for _ in group_exprs]
        gtypes = [expression_type(g, types) for g in group_exprs]
        names = [self.fresh("agg") for _ in aggs]
        # min and max of the distinct values are min and max
        distinct = [(a, n) for a, n in zip(aggs, names) if isinstance(a.this, exp.Distinct)
                    and not isinstance(a, (exp.Min, exp.Max, *TWO_PASS))]
        two_pass = [(a, n) for a, n in zip(aggs, names) if isinstance(a, TWO_PASS)]
        plain = [(a, n) for a, n in zip(aggs, names) if (a, n) not in distinct + two_pass]
        # a two-pass aggregate joins its rows with their group's first value on this key
        key = self.fresh("key") if two_pass or bool(plain) + len(distinct) > 1 else None
        unknown = next((g for g, t in zip(shown, gtypes) if t is None), None)
        if key and unknown is not None:  # _tie_key makes a floating -0.0 0.0, if it knows
            beside = (_text(_shown(two_pass[0][0], rel)) if two_pass else
                      "a DISTINCT aggregate beside others")
            raise refuse(f"GROUP BY {unknown}, of a type not known here, with {beside}",
                         f"CAST({unknown} AS type)")
        base = rel.coll.map(*(f"{_text(self._checked(g, 'GROUP BY'))} AS `{n}`"
                              for g, n in zip(group_exprs, gnames)),
                            *(f"`{c.internal}`" for c in rel.cols),
                            *([f"`{phantom}`"] if phantom else []),
                            *([f"{_tie_key([f'`{n}`' for n in gnames], gtypes)} "
                               f"AS `{key}`" if gnames else f"'' AS `{key}`"] if key else []))
        outs = []
        if plain:
            outs.append(self._plain_aggregates(base, plain, ([key] if key else []) + gnames,
                                               types, phantom))
        for a, name in distinct + two_pass:
            by = ([key] if key else []) + ([] if outs else gnames)
            outs.append(self._two_pass(base, a, by, name, key, rel, phantom)
                        if isinstance(a, TWO_PASS) else
                        self._distinct_aggregate(base, a, by, name, phantom))
        if not aggs:
            result = base.map(*(f"`{n}`" for n in gnames)).distinct()
        else:
            result = outs[0]
            for o in outs[1:]:
                result = result.join(o, on=[key])
        cols = [Col(n, None, n, t) for n, t in zip(gnames, gtypes)]

        def over_groups(e):
            e = e.copy()
            mapping = [(a, n) for a, n in zip(aggs, names)] + list(zip(group_exprs, gnames))

            def swap(node):  # parentheses aside: GROUP BY (k % 2) groups SELECT k % 2
                for src, n in mapping:
                    if node.unnest() == src.unnest():
                        return exp.column(n, quoted=True)
                return node
            e = e.transform(swap)
            stray = [c for c in e.find_all(exp.Column) if c.name not in gnames + names]
            if stray:
                name = next((c.name for c in rel.cols if c.internal == stray[0].name),
                            stray[0].name)
                raise PlanError(f"sql: column '{name}' is neither grouped nor aggregated "
                                f"(rule: add it to GROUP BY or aggregate it)")
            return e

        agg_types = {n: self._agg_type(a, types) for a, n in zip(aggs, names)}
        all_types = {**dict(zip(gnames, gtypes)), **agg_types}
        if aside:
            groups = Rel(result, cols + [Col(n, None, n, t) for n, t in agg_types.items()])
            cond = over_groups(cond).transform(
                lambda n: aside[n.name] if isinstance(n, exp.Placeholder) else n)
            result = self._scalar_filter(groups, cond, ctes or {}).coll
        elif cond is not None:
            result = result.filter(_text(self._checked(over_groups(cond), "HAVING")))
        out = []
        for (name, _), e in zip(items, exprs):
            e = over_groups(e)
            out.append((name, (_text(self._checked(e, "SELECT")),
                               expression_type(e, {k.lower(): v for k, v in all_types.items()}))))
        return Rel(result, cols), out

    def _per_grouping_set(self, q: exp.Select, rel: Rel, every: list, sets: list, having,
                          ctes):
        """GROUP BY ROLLUP, CUBE, GROUPING SETS (or WITH ROLLUP / CUBE): one GROUP BY per set,
        UNION ALL, as Spark's Expand: a grouping expression outside the set reads NULL
        outside aggregates (in the SELECT list and HAVING), grouping(g) is 1 there, and
        grouping_id() sets a bit per such expression (the first the highest). The empty set
        groups every row into one group, which does not exist over no rows. `every`: the
        distinct grouping expressions; `sets`: lists of them (_grouping_sets)."""
        types = rel.types()
        kinds = [expression_type(_resolved(g, rel), types) for g in every]
        for g, t in zip(every, kinds):
            if t is None:
                raise refuse(f"grouping expression {_text(g)} of a type unknown when the plan "
                             f"is built", "CAST it")
        outs, items, named = [], None, [_named(e, self.text) for e in q.expressions]
        for chosen in sets:
            bits = [int(not any(_same(g, c, rel) for c in chosen)) for g in every]
            missing = [(g, t) for g, t, bit in zip(every, kinds, bits) if bit]

            def swap(node):
                if isinstance(node, exp.Grouping):
                    (arg,) = node.expressions
                    return exp.Literal.number(int(any(_same(arg, g, rel) for g, _ in missing)))
                if isinstance(node, exp.GroupingId):
                    return exp.Literal.number(int("".join(map(str, bits)) or "0", 2))
                if _under_aggregate(node):
                    return node
                for g, t in missing:
                    if _same(node, g, rel):
                        return exp.Cast(this=exp.Null(), to=exp.DataType.build(t,
                                                                               dialect="spark"))
                return node
            one = q.copy()  # each item named first: `k` is still named k where it is NULL
            one.set("expressions", [exp.alias_(body.transform(swap), name, quoted=True)
                                    for name, body in named])
            cond = having.this.transform(swap) if having is not None else None
            by = exp.Group(expressions=[c.copy() for c in chosen] or [exp.Literal.string("")])
            part, part_items = self._aggregate(one, rel, by, exp.Having(this=cond)
                                               if cond is not None else None, ctes)
            outs.append(part.coll.map(*(f"{text} AS `{name}`"
                                        for name, (text, _) in part_items)))
            items = items or part_items
        return (Rel(outs[0].concat(*outs[1:]), [Col(n, None, n, t) for n, (_, t) in items]),
                [(n, (f"`{n}`", t)) for n, (_, t) in items])

    def _phantom(self, rel: Rel, exprs) -> tuple[Rel, str]:
        """A global aggregate's input, narrowed to the columns `exprs` read, plus one row of
        typed NULLs flagged true in a new column (from a constant, at time 0): the one group
        then exists even over no rows, and as every aggregate skips the flagged row
        (_plain_aggregates), over no rows it gives SQL's answer: count 0, the others NULL."""
        used = {c.name for e in exprs if e is not None for c in e.find_all(exp.Column)}
        cols = [c for c in rel.cols if c.internal in used]
        untyped = [c for c in cols if c.type is None]
        if untyped:
            raise refuse(f"an aggregate without GROUP BY over column '{untyped[0].name}' of "
                         "a type unknown when the plan is built", "CAST it where it is "
                         "computed (its NULL over no rows needs the type)")
        flag = self.fresh("phantom")
        rows = rel.coll.map(*(f"`{c.internal}`" for c in cols), f"false AS `{flag}`")
        nulls = self.flow.constant("one INT", [(1,)]).map(
            *(f"CAST(NULL AS {c.type}) AS `{c.internal}`" for c in cols), f"true AS `{flag}`")
        return Rel(rows.concat(nulls), cols), flag

    def _plain_aggregates(self, base, aggs: list, by: list, types, phantom=None):
        """The aggregates without DISTINCT ((aggregate, output name) each) in one reduction:
        columns `by` + the names. A `phantom` row (a column true there) counts nowhere and
        gives NULL to the others; avg is its sum over its count (a map after)."""
        keep = [f"`{b}`" for b in by]
        inputs, parts, after = [], {}, []
        for a, name in aggs:
            star = isinstance(a, exp.Count) and (a.this is None or isinstance(a.this, exp.Star))
            after.append(f"`{name}`")
            if star and phantom is None:
                parts[name] = "count(*)"
                continue
            arg = a.this.expressions[0] if isinstance(a.this, exp.Distinct) else a.this
            if isinstance(a.this, exp.Distinct) and len(a.this.expressions) != 1:
                raise refuse(f"aggregate {_text(a)}", "DISTINCT of one column")
            x = _skipping("1" if star else self._argument(arg), phantom)
            inputs.append(f"{x} AS `{name}`")
            if not isinstance(a, exp.Avg):
                kind = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min", exp.Max: "max"}
                parts[name] = f"{kind[type(a)]}(`{name}`)"
                continue
            result = avg_type(expression_type(a.this, types))
            if result is None:
                raise refuse(f"avg({x}) over a value of unknown type", "CAST its argument")
            total, n = self.fresh("sum"), self.fresh("n")
            parts[total], parts[n] = f"sum(`{name}`)", f"count(`{name}`)"
            if result == "DOUBLE":
                ratio = f"CAST(`{total}` AS DOUBLE) / CAST(`{n}` AS DOUBLE)"
            else:  # Spark's Average: sum / count as DECIMAL(20, 0), cast to the result type
                ratio = f"CAST(`{total}` / CAST(`{n}` AS DECIMAL(20, 0)) AS {result})"
            # avg over no non-null values is NULL (never a division by zero, which ANSI
            # refuses)
            after[-1] = f"CASE WHEN `{n}` = 0 THEN NULL ELSE {ratio} END AS `{name}`"
        out = base.map(*keep, *inputs).aggregate(by=by, **parts)
        if any(isinstance(a, exp.Avg) for a, _ in aggs):
            out = out.map(*keep, *after)
        return out

    def _distinct_aggregate(self, base, a, by, name, phantom=None):
        """count(DISTINCT x) or sum(DISTINCT x) per group: columns `by` + `name`, over the
        distinct (group, x); a `phantom` row counts nowhere."""
        keep = [f"`{b}`" for b in by]
        if len(a.this.expressions) != 1 or not isinstance(a, (exp.Count, exp.Sum)):
            raise refuse(f"aggregate {_text(a)}", "DISTINCT in count or sum of one column")
        x = _skipping(self._argument(a.this.expressions[0]), phantom)
        values = base.map(*keep, f"{x} AS `{name}`").distinct()
        kind = "count" if isinstance(a, exp.Count) else "sum"
        return values.aggregate(by=by, **{name: f"{kind}(`{name}`)"})

    def _two_pass(self, base, a, by, name, key, rel: Rel, phantom=None):
        """An aggregate that needs its group's value of another first: two reductions, with
        a join on the group's `key` between them (a change re-reads the rows of each group
        whose first value it moves). var_samp, var_pop and their square roots (stddev_samp,
        stddev_pop) over the values as DOUBLE, as Spark's: each value's deviation from its
        group's mean, squared and summed (a sum of squares less the square of the sum loses
        every digit where the spread is small beside the mean), NULL over no values, and
        the samples' NULL over one. max_by(x, y) and min_by(x, y): x at the group's max
        (min) y, NULL where no y is; where rows tie there, the greatest of their x (Spark
        takes whichever it meets first). Columns `by` + `name`; a `phantom` row counts
        nowhere."""
        keep = [f"`{b}`" for b in by]

        def value(e):
            return _skipping(self._argument(e), phantom)
        arg = a.this
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1 or isinstance(a, BY_VALUE):
                raise refuse(f"aggregate {_text(_shown(a, rel))}", "DISTINCT of one column, "
                             "in stddev or variance")
            arg = arg.expressions[0]
        v, w, s, n, m = (self.fresh(h) for h in ("v", "w", "s", "n", "m"))
        if isinstance(a, BY_VALUE):
            values = base.map(*keep, f"{value(arg)} AS `{v}`",
                              f"{value(a.expression)} AS `{w}`")
            best = values.aggregate(by=[key], **{
                m: f"{'max' if isinstance(a, exp.ArgMax) else 'min'}(`{w}`)"})
            at = values.join(best, on=[key]).map(
                *keep, f"CASE WHEN `{w}` = `{m}` THEN `{v}` END AS `{name}`")
            return at.aggregate(by=by, **{name: f"max(`{name}`)"})
        t = expression_type(arg, rel.types())
        if t is not None and avg_type(t) is None:  # not a number
            raise refuse(f"aggregate {_text(_shown(a, rel))} of {t}", "a numeric argument")
        values = base.map(*keep, f"CAST({value(arg)} AS DOUBLE) AS `{v}`")
        if isinstance(a.this, exp.Distinct):
            values = values.distinct()
        means = values.aggregate(by=[key], **{s: f"sum(`{v}`)", n: f"count(`{v}`)"})
        # greatest: no division by zero (no value there, so v is NULL)
        deviation = f"(`{v}` - `{s}` / greatest(`{n}`, 1))"
        squares = values.join(means, on=[key]).map(*keep, f"{deviation} * {deviation} AS `{w}`")
        sums = squares.aggregate(by=by, **{s: f"sum(`{w}`)", n: f"count(`{w}`)"})
        population, root = MOMENTS[type(a)]
        variance = (f"CASE WHEN `{n}` = 0 THEN NULL ELSE `{s}` / greatest(`{n}`, 1) END"
                    if population else
                    f"CASE WHEN `{n}` < 2 THEN NULL ELSE `{s}` / greatest(`{n}` - 1, 1) END")
        return sums.map(*keep, f"{f'sqrt({variance})' if root else variance} AS `{name}`")

    def _argument(self, e) -> str:
        """An aggregate's argument as SQL text (no aggregate or window inside)."""
        return _text(self._checked(e, "an aggregate"))

    def _agg_type(self, a, types):
        from .types import sum_type
        arg = a.this.expressions[0] if isinstance(a.this, exp.Distinct) else a.this
        if isinstance(a, exp.Count):
            return "BIGINT"
        if isinstance(a, tuple(MOMENTS)):
            return "DOUBLE"
        t = expression_type(arg, types)
        if isinstance(a, exp.Sum):
            return sum_type(t)
        if isinstance(a, exp.Avg):
            return avg_type(t)
        return t


# ---------------------------------------------------------------------- helpers
_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "=": "="}
_BAND_OPS = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.EQ: "="}


def _cast(text: str, t: Optional[str]) -> str:
    """An expression's text CAST to type t (None: as it is)."""
    return text if t is None else f"CAST({text} AS {t})"


def _band(cond, rel: Rel, value: str) -> Optional[tuple[str, str]]:
    """(column, op) where `cond` compares a column of `rel` with the scalar `value` (the
    column's internal name, on the left), as a band join does; else None."""
    op = _BAND_OPS.get(type(cond))
    if op is None:
        return None
    a, b = cond.this, cond.expression

    def scalar(e):
        return isinstance(e, exp.Column) and not e.table and e.name == value
    if scalar(a):
        a, b, op = b, a, _FLIPPED[op]
    col = rel.resolve(a) if isinstance(a, exp.Column) and scalar(b) else None
    return None if col is None else (col.internal, op)


def _type(coll, column: str) -> Optional[str]:
    """A column's type as the builder knows it (plans/types.columns_of), or None."""
    return dict(columns_of(coll.node) or []).get(column)


def _conjuncts(e) -> list:
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    if isinstance(e, exp.Or):
        return _factored(e)
    return [e]


def _factored(e: exp.Or) -> list:
    """(A AND B) OR (A AND C) as A AND (B OR C), exact in SQL's three-valued logic too: a
    condition every branch shares is a conjunct of the whole, so a join key written in each
    branch (TPC-H Q19) joins instead of making a cross join. A's nodes are the first
    branch's own, so a join that uses one is known by identity."""
    branches = _disjuncts(e)
    terms = [_conjuncts(b) for b in branches]
    common = [c for c in terms[0] if all(any(c == x for x in t) for t in terms[1:])]
    if not common:
        return [e]
    rest = [[x for x in t if not any(x == c for c in common)] for t in terms]
    if any(not r for r in rest):  # A OR (A AND C) is A
        return common
    return common + [exp.Paren(this=exp.or_(*(exp.and_(*r) for r in rest)))]


def _disjuncts(e) -> list:
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Or):
        return _disjuncts(e.this) + _disjuncts(e.expression)
    return [e]


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
# what a correlated scalar subquery's value may be made of: NULL over no rows, as the join
# that decorrelates it gives (count is 0 there: the "count bug")
_NULL_OVER_NO_ROWS = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Column, exp.Identifier,
                      exp.Literal, exp.Paren, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg,
                      exp.Cast, exp.DataType, exp.DataTypeParam, exp.Alias)


def _null_items(q) -> set:
    """Positions of a SELECT's items that are a bare NULL (Spark's VOID type)."""
    while isinstance(q, exp.Subquery):
        q = q.this
    return {i for i, e in enumerate(q.expressions) if isinstance(e.unalias(), exp.Null)} \
        if isinstance(q, exp.Select) else set()


def _reads(q, name: str) -> bool:
    """Whether query `q` reads the relation `name` (a CTE reading itself)."""
    return any(t.name.lower() == name and not t.args.get("db")
               for t in q.find_all(exp.Table))


def _renamed(rel: Rel, columns: list, name: str) -> Rel:
    """A CTE's relation with the names of its column list (`WITH c(a, b) AS ...`)."""
    if not columns:
        return rel
    if len(columns) != len(rel.cols):
        raise PlanError(f"sql: CTE {name} names {len(columns)} columns of its query's "
                        f"{len(rel.cols)} (rule: as many)")
    return Rel(rel.coll, [Col(n, c.table, c.internal, c.type)
                          for n, c in zip(columns, rel.cols)])


def _linear_step(step, name: str, what: str):
    """A recursive CTE's step, if it is linear in `name`: one SELECT that reads `name`
    once, in its FROM or an inner join, without DISTINCT, aggregates, windows, ORDER BY or
    LIMIT, and not in a subquery or an outer join. Spark applies those per level, where
    a fixed point would apply them to the whole relation: they would mean another thing."""
    if not isinstance(step, exp.Select):
        raise refuse(f"{what}: a step {type(step).__name__.upper()}", f"one SELECT reading "
                     f"{name} once")
    refs = [t for t in step.find_all(exp.Table) if t.name.lower() == name]
    joins = step.args.get("joins") or []
    outer = [j for j in joins if (j.args.get("side") or j.args.get("kind") or "").lower()
             not in ("", "inner", "cross")]
    if step.args.get("distinct") or step.args.get("group") or step.args.get("having") or \
            _aggregates(step) or any(step.find_all(exp.Window)) or step.args.get("order") \
            or step.args.get("limit") or step.args.get("offset") or outer or len(refs) != 1 or \
            not isinstance(refs[0].parent, (exp.From, exp.Join)) or \
            refs[0].parent.parent is not step:
        raise refuse(f"{what}: a step that is not linear in {name}", f"read {name} once, "
                     f"in FROM or an inner join, without DISTINCT, aggregates, windows, "
                     f"ORDER BY, LIMIT, subqueries over it or outer joins")
    return step


def _null_over_no_rows(sub, item, cond=None) -> None:
    """Refuse a correlated scalar subquery whose decorrelation would not be exact (and,
    in a condition `cond`, one the condition does not compare with)."""
    odd = [n for n in item.walk() if not isinstance(n, _NULL_OVER_NO_ROWS)]
    if odd:
        raise refuse(f"correlated scalar subquery {_text(sub)}", "its value must be NULL "
                     "where no row correlates: sum, avg, min or max, and arithmetic on them"
                     + ("" if cond is not None else "; or a count by itself"))
    if cond is None:
        return
    bare = cond.this if isinstance(cond, exp.Paren) else cond
    operands = [o.this if isinstance(o, exp.Paren) else o
                for o in (getattr(bare, "this", None), getattr(bare, "expression", None))]
    if not isinstance(bare, _COMPARISONS) or not any(o is sub for o in operands):
        raise refuse(f"condition {_text(cond)} on a correlated scalar subquery",
                     "compare a column or expression with it (=, <>, <, <=, >, >=)")


def _lateral(q: exp.Select, rel: Rel) -> exp.Select:
    """q with each name in a SELECT item that the input lacks but an earlier item has
    (Spark's lateral column alias: `SELECT x * 2 AS y, y + 1 AS z`) read as that item's
    expression. An item that reads one needs an alias: Spark names it after an internal
    node (`(lateralAliasReference(y) + 1)`)."""
    q, earlier = q.copy(), {}
    for e in list(q.expressions):
        if rel.starred(e) is not None:
            continue
        body = e.this if isinstance(e, exp.Alias) else e
        read = body.transform(lambda n: _inlined(earlier[n.name.lower()]) if (
            _plain_column(n) and n.name.lower() in earlier and rel.resolve(n) is None) else n)
        if read != body:
            if not isinstance(e, exp.Alias):
                raise PlanError(f"sql: SELECT item {_text(e)} needs a name (rule: add AS "
                                f"name; it reads an earlier item's alias)")
            body.replace(read)
        if isinstance(e, exp.Alias):
            earlier.setdefault(e.alias.lower(), e.this)
    return q


def _inlined(body):
    """A copy of an item's expression to stand for its name inside another: parenthesised,
    as the SQL text of the AST keeps only the parentheses written (x + 1 in y * 2 would
    otherwise read x + 1 * 2)."""
    if isinstance(body, (exp.Column, exp.Literal, exp.Paren)):
        return body.copy()
    return exp.Paren(this=body.copy())


def _some(count: exp.Subquery) -> exp.Expression:
    return exp.GT(this=count, expression=exp.Literal.number(0))


def _counted(q: exp.Select, also=None) -> exp.Subquery:
    """(SELECT count(*) FROM q's FROM WHERE q's WHERE [AND also])."""
    out = q.copy()
    out.set("expressions", [exp.Count(this=exp.Star())])
    where = out.args.get("where")
    conds = ([where.this] if where is not None else []) + ([also] if also is not None else [])
    out.set("where", exp.Where(this=exp.and_(*conds)) if conds else None)
    return exp.Subquery(this=out)


def _parents(node):
    p = node.parent
    while p is not None:
        yield p
        p = p.parent


def _grouping_sets(group) -> Optional[tuple[list, list]]:
    """(every grouping expression, the sets) of a GROUP BY with ROLLUP, CUBE or GROUPING
    SETS (each crossed with the plain expressions), None without any."""
    plain, choices = [], []
    for g in group.expressions:
        if isinstance(g, exp.Rollup):
            xs = list(g.expressions)
            choices.append([xs[:i] for i in range(len(xs), -1, -1)])
        elif isinstance(g, exp.Cube):
            xs = list(g.expressions)
            choices.append([[x for j, x in enumerate(xs) if mask >> (len(xs) - 1 - j) & 1]
                            for mask in range(2 ** len(xs) - 1, -1, -1)])
        elif isinstance(g, exp.GroupingSets):
            choices.append([list(x.expressions) if isinstance(x, exp.Tuple) else [x]
                            for x in g.expressions])
        else:
            plain.append(g)
    if group.args.get("rollup") or group.args.get("cube"):  # GROUP BY a, b WITH ROLLUP
        rolled = group.args.get("rollup")
        choices.append([plain[:i] for i in range(len(plain), -1, -1)] if rolled else
                        [[x for j, x in enumerate(plain) if mask >> (len(plain) - 1 - j) & 1]
                         for mask in range(2 ** len(plain) - 1, -1, -1)])
        plain = []
    if not choices:
        return None
    sets = [plain]
    for options in choices:
        sets = [s + o for s in sets for o in options]
    every: list = []
    for g in plain + [x for options in choices for o in options for x in o]:
        if not any(g == e for e in every):
            every.append(g)
    return every, sets


def _same(a, b, rel: Rel) -> bool:
    """Whether two expressions read the same columns alike (parentheses and qualifiers
    aside)."""
    try:
        return _resolved(a, rel).unnest() == _resolved(b, rel).unnest()
    except PlanError:
        return False


def _count(clause, what: str) -> int:
    """The rows of a LIMIT or OFFSET clause: a non-negative integer literal."""
    n = clause.expression
    if not (isinstance(n, exp.Literal) and not n.is_string and n.this.isdigit()):
        raise refuse(f"{what} {_text(n)}", f"{what} takes a non-negative integer")
    return int(n.this)


def _canonical(e):
    """e with its aggregates in the forms of AGGREGATES: `sum(x) FILTER (WHERE c)` is
    `sum(CASE WHEN c THEN x END)`, as a row where c is not true adds NULL, which every
    aggregate skips (count(*) counts CASE WHEN c THEN 1 END; DISTINCT stays outside; max_by
    drops the row's y too); count_if(c) is count(CASE WHEN c THEN 1 END); bool_or(c) and
    some(c) are max(c), bool_and(c) and every(c) min(c), over BOOLEAN as Spark orders it
    (false < true); stddev and std are stddev_samp; any_value(x) is min(x), one value of
    the group that does not depend on the order rows come in."""
    def swap(node):
        if isinstance(node, exp.CountIf):
            return exp.Count(this=exp.Case(ifs=[exp.If(this=node.this.copy(),
                                                       true=exp.Literal.number(1))]))
        if isinstance(node, exp.Stddev) or _std(node):
            return exp.StddevSamp(this=(node.this if isinstance(node, exp.Stddev)
                                        else node.expressions[0]).copy())
        if isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)) and \
                isinstance(node.this, exp.AnyValue):
            node = node.this
        if isinstance(node, exp.AnyValue):  # some value of the group: its least
            return exp.Min(this=node.this.copy())
        if isinstance(node, (exp.LogicalOr, exp.LogicalAnd)) or _boolean_aggregate(node):
            arg = node.this if not isinstance(node, exp.Anonymous) else node.expressions[0]
            some = isinstance(node, exp.LogicalOr) or (
                isinstance(node, exp.Anonymous) and node.name.lower() == "some")
            return (exp.Max if some else exp.Min)(this=arg.copy())
        if not isinstance(node, exp.Filter):
            return node
        agg = _canonical(node.this)
        if not isinstance(agg, AGGREGATES):
            raise refuse(f"FILTER on {_text(agg)}", "FILTER (WHERE ...) on count, sum, min, "
                         "max and avg")
        arg = agg.this
        distinct = isinstance(arg, exp.Distinct)
        if distinct and len(arg.expressions) != 1:
            raise refuse(f"aggregate {_text(node)}", "DISTINCT of one column")
        value = arg.expressions[0] if distinct else arg
        if value is None or isinstance(value, exp.Star):
            value = exp.Literal.number(1)
        case = exp.Case(ifs=[exp.If(this=node.expression.this.copy(), true=value.copy())])
        agg = agg.copy()
        agg.set("this", exp.Distinct(expressions=[case]) if distinct else case)
        if isinstance(agg, BY_VALUE):  # a row where c is not true has no y either
            agg.set("expression", exp.Case(ifs=[exp.If(this=node.expression.this.copy(),
                                                       true=agg.expression.copy())]))
        return agg
    return e.transform(swap)


def _std(node) -> bool:
    """std(x), Spark's stddev_samp, which sqlglot leaves as a function it does not know."""
    return isinstance(node, exp.Anonymous) and node.name.lower() == "std" and \
        len(node.expressions) == 1


def _boolean_aggregate(node) -> bool:
    """every(c) or some(c), which sqlglot leaves as functions it does not know."""
    return isinstance(node, exp.Anonymous) and node.name.lower() in ("every", "some") and \
        len(node.expressions) == 1


def _plain_column(node) -> bool:
    return isinstance(node, exp.Column) and not node.table and not isinstance(node.this,
                                                                              exp.Star)


def _under_aggregate(node) -> bool:
    return any(isinstance(p, exp.AggFunc) for p in _parents(node))


def _grouped_by_alias(g, rel: Rel, aliases: dict):
    """A GROUP BY expression with each name the input lacks read as the SELECT item of that
    name (Spark's groupByAliases: the input's columns first)."""
    def swap(node):
        if _plain_column(node) and rel.resolve(node) is None and node.name.lower() in aliases:
            body = aliases[node.name.lower()]
            if _aggregates(body):
                raise refuse(f"GROUP BY {node.name}, the name of an aggregate",
                             "group by input columns or expressions of them")
            return _inlined(body)
        return node
    return g.transform(swap)


def _having_aliases(cond, rel: Rel, aliases: dict, group_exprs: list):
    """HAVING's names as Spark 4.1 reads them: outside an aggregate, a grouped input column,
    else a SELECT item's name (`HAVING total > 3`), else the input's column; inside an
    aggregate, the input's column."""
    def swap(node):
        if not _plain_column(node) or node.name.lower() not in aliases or \
                _under_aggregate(node):
            return node
        col = rel.resolve(node)
        if col is not None and exp.column(col.internal, quoted=True) in group_exprs:
            return node
        return _inlined(aliases[node.name.lower()])
    return cond.transform(swap)


def _in_subquery(node, top) -> bool:
    """Whether `node` sits in a subquery nested in `top` (its own scope)."""
    p = node.parent
    while p is not None and p is not top:
        if isinstance(p, (exp.Subquery, exp.Exists)) or isinstance(p, exp.Select):
            return True
        p = p.parent
    return False


def _aggregates(e) -> list:
    """The aggregates of `e` itself (not of its subqueries), in any form _canonical reads."""
    return [n for n in e.walk(prune=lambda n: isinstance(n, exp.Subquery))
            if isinstance(n, AGGREGATES + (exp.CountIf, exp.LogicalOr, exp.LogicalAnd,
                                           exp.Stddev, exp.AnyValue))
            or _boolean_aggregate(n) or _std(n)]


def _scalar_query(sub: exp.Subquery) -> exp.Select:
    """The SELECT of a scalar subquery, one aggregate without GROUP BY or HAVING (else
    refused), its value named."""
    q = sub.this
    if not isinstance(q, exp.Select) or q.args.get("group") or q.args.get("having") or \
            len(q.expressions) != 1 or not _aggregates(q.expressions[0]):
        raise refuse(f"scalar subquery {_text(sub)}", "a scalar subquery is one "
                     "aggregate without GROUP BY or HAVING")
    if not isinstance(q.expressions[0], exp.Alias):  # a value needs no name
        q = q.copy()
        q.set("expressions", [exp.alias_(q.expressions[0], "value")])
    return q


def _outermost(e):
    """The scalar subqueries of `e` not inside another subquery of it, in order."""
    for node in _scalar_subqueries(e):
        parent = node.parent
        while parent is not None and parent is not e and not isinstance(parent, exp.Subquery):
            parent = parent.parent
        if not isinstance(parent, exp.Subquery):
            yield node


def _predicate_subqueries(e):
    """The IN and EXISTS subqueries of `e`."""
    for node in e.find_all(exp.Exists, exp.In):
        if isinstance(node, exp.Exists) or node.args.get("query") is not None:
            yield node


def _scalar_subqueries(e):
    """Subqueries in `e` used as values (not under IN or EXISTS)."""
    for node in e.find_all(exp.Subquery):
        if not isinstance(node.parent, (exp.In, exp.Exists)):
            yield node


def _func_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    return node.sql_name().lower()


def _named(e, text: str):
    """(output name, expression) of a SELECT item: its alias, else the name Spark gives it
    (sql_names)."""
    if isinstance(e, exp.Alias):
        return e.alias, e.this
    name = spark_name(e, text)
    if name is None:
        raise PlanError(f"sql: SELECT item {_text(e)} needs a name (rule: add AS name; "
                        f"an item without one is named only where its name is Spark's for "
                        f"certain)")
    return name, e


def _resolved(e, rel: Rel):
    """A copy of `e` whose column references name `rel`'s internal columns (a `*` or `t.*`
    among a function's arguments, `hash(*)` or `struct(*)`, stands for the columns it
    matches, as in Spark, not for the relation's internal ones)."""
    e = _stars_expanded(e.copy(), rel)

    def swap(node):
        if isinstance(node, (exp.Subquery, exp.Exists)) or (
                isinstance(node, exp.In) and node.args.get("query") is not None):
            raise refuse(f"subquery {_text(node)} here", "IN / EXISTS subqueries are "
                         "supported in WHERE, under AND and OR")
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            col = rel.resolve(node)
            if col is None:
                raise PlanError(f"sql: unknown column '{_text(node)}' (known: "
                                f"{', '.join(sorted({c.name for c in rel.cols}))})")
            return exp.column(col.internal, quoted=True)
        return node
    return e.transform(swap)  # e is this call's copy already


def _stars_expanded(e, rel: Rel):
    """`e` with each `*` or `t.*` that is one of a function's arguments replaced by the
    columns it matches (count(*) stays: it reads no column)."""
    for star in list(e.find_all(exp.Star)):
        node = star.parent if isinstance(star.parent, exp.Column) else star
        parent = node.parent
        if parent is None or isinstance(parent, (exp.Select, exp.Count)):
            continue
        cols = rel.starred(node)
        args = parent.args.get(node.arg_key)
        if not cols or not isinstance(args, list):
            raise refuse(f"{_text(parent)}", "name the columns instead of *")
        named = [exp.column(c.name, table=c.table, quoted=True) for c in cols]
        if isinstance(parent, exp.Struct):  # its fields keep the columns' names
            named = [exp.PropertyEQ(this=exp.to_identifier(c.name, quoted=True), expression=n)
                     for c, n in zip(cols, named)]
        at = args.index(node)
        parent.set(node.arg_key, args[:at] + named + args[at + 1:])
    return e


def _skipping(x: str, phantom: Optional[str]) -> str:
    """An aggregate's argument `x`, NULL on the `phantom` row (_phantom), which every
    aggregate skips."""
    return f"CASE WHEN `{phantom}` THEN NULL ELSE {x} END" if phantom is not None else x


def _shown(e, rel: Rel):
    """A copy of resolved `e` as the query names its columns, for a message."""
    names = {c.internal: c.name for c in rel.cols}
    return e.copy().transform(lambda n: exp.column(names[n.name]) if isinstance(n, exp.Column)
                              and n.name in names else n)


def parse(text: str) -> list:
    """The statements of `text` (`;`-separated, `--` comments), parsed as Spark SQL."""
    try:
        return [s for s in sqlglot.parse(text, read="spark")
                if s is not None and not isinstance(s, exp.Semicolon)]
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        raise PlanError(f"sql: syntax error at line {first.get('line', '?')}, column "
                        f"{first.get('col', '?')}: {first.get('description', e)}") from None


def view(flow, text: str, relations: dict):
    """flow.sql: one query over `relations` (lower-case name -> Collection of `flow`)."""
    statements = parse(text)
    if len(statements) != 1:
        raise PlanError(f"sql: expected one query, got {len(statements)} statements "
                        f"(rule: a .sql plan file holds several)")
    statement = _checked_statement(statements[0])
    return Lowering(flow, relations, statement, text).query(statement).coll


def _mentioned(statement) -> Optional[set]:
    """The names a statement spells (lower case), or None where it reads every column (a
    `*` other than count's): a table's column spelled nowhere cannot change the answer, so
    a scan leaves it out rather than carry it through every operator."""
    if any(not isinstance(s.parent, exp.Count) for s in statement.find_all(exp.Star)):
        return None
    return {i.name.lower() for i in statement.find_all(exp.Identifier)}


def _ranking(w) -> bool:
    """row_number(), rank() or dense_rank() OVER (ORDER BY ...) with the default frame,
    optionally partitioned."""
    return isinstance(w, exp.Window) and isinstance(w.this, _RANKINGS) and \
        w.args.get("order") is not None and not w.args.get("spec")


def _rank_limit(c, rn: str) -> Optional[int]:
    """k when `c` is rn <= k, rn < k + 1, k >= rn or k + 1 > rn (k a positive integer)."""
    flipped = {exp.GTE: exp.LTE, exp.GT: exp.LT}
    if type(c) in flipped:
        c = flipped[type(c)](this=c.expression, expression=c.this)
    if not isinstance(c, (exp.LTE, exp.LT)) or not isinstance(c.this, exp.Column) or \
            c.this.name.lower() != rn:
        return None
    k = c.expression
    if not (isinstance(k, exp.Literal) and not k.is_string and k.this.isdigit()):
        return None
    k = int(k.this) - (1 if isinstance(c, exp.LT) else 0)
    return k if k >= 1 else None


_RANKINGS = (exp.RowNumber, exp.Rank, exp.DenseRank)


def _tie_key(values: list[str], kinds: list[Optional[str]]) -> str:
    """One STRING per tuple of `values` (SQL texts of types `kinds`) that two tuples share
    exactly when Spark's window ranks or partitions them together: JSON, in which a NULL
    field is left out; a floating -0.0 is 0.0 first, as Spark holds them equal."""
    fields = [f"({v}) + CAST(0 AS DOUBLE)" if k and k.upper() in ("DOUBLE", "FLOAT") else v
              for v, k in zip(values, kinds)]
    return "to_json(struct({}))".format(", ".join(f"{v} AS v{i}" for i, v in enumerate(fields)))


def _order_text(keys: list[tuple[str, str]]) -> str:
    """top_k's order_by text of (expression, direction and null order) keys."""
    return ", ".join(f"{text} {way}" for text, way in keys)


_WINDOWS = ("an aggregate OVER (PARTITION BY ...) of the whole partition, and row_number(), "
            "rank() or dense_rank() OVER (PARTITION BY ... ORDER BY ...) AS rn in a derived "
            "table filtered by rn <= k outside")


def _whole_partition(w: exp.Window) -> bool:
    """An aggregate over its whole partition: no ORDER BY, frame or named window."""
    return not (w.args.get("order") or w.args.get("spec") or w.args.get("alias")) and \
        bool(_aggregates(w.this)) and _aggregates(w.this)[0] is w.this and \
        not w.this.find(exp.Distinct)


def _checked_statement(s):
    """Refuse windows and non-deterministic functions as written (before renaming)."""
    for node in s.walk():
        if isinstance(node, exp.Window) and not _whole_partition(node) and not (
                _ranking(node) and isinstance(node.parent, exp.Alias)):
            raise refuse(f"window function {_text(node)}", _WINDOWS)
        if isinstance(node, _NON_DETERMINISTIC_NODES) or (
                isinstance(node, exp.Func) and _func_name(node) in NON_DETERMINISTIC):
            raise refuse(f"non-deterministic function {_text(node)}",
                         "a view's rows must follow from its inputs")
    return s


def _table(name: str, schema: exp.Schema) -> tuple[str, Optional[list[str]]]:
    """A CREATE TABLE's input: its DDL and its PRIMARY KEY (a keyed input, upsert semantics;
    its columns are NOT NULL, as SQL has it). NOT NULL and COMMENT are kept as declared;
    constraints diffspark would not enforce (UNIQUE, CHECK, FOREIGN KEY, DEFAULT, ...) are
    refused rather than silently ignored."""
    columns, not_null, key = [], set(), None

    def primary(names: list[str], where: str) -> None:
        nonlocal key
        if key is not None:
            raise PlanError(f"sql: CREATE TABLE {name}: {where} is a second PRIMARY KEY "
                            f"(rule: a table has one primary key)")
        key = names

    for item in schema.expressions:
        if isinstance(item, exp.Constraint) and len(item.expressions) == 1:
            item = item.expressions[0]  # CONSTRAINT name PRIMARY KEY (...)
        if isinstance(item, exp.PrimaryKey):
            primary([e.name for e in item.expressions], _text(item))
            continue
        if not isinstance(item, exp.ColumnDef) or item.args.get("kind") is None:
            raise refuse(f"CREATE TABLE {name}: {_text(item)[:60]}", "a table declares "
                         "columns (name type [NOT NULL] [PRIMARY KEY]) and one PRIMARY KEY")
        columns.append((item.name, item.args["kind"].sql("spark")))
        for c in item.args.get("constraints") or []:
            kind = c.args.get("kind")
            if isinstance(kind, exp.NotNullColumnConstraint):
                if not kind.args.get("allow_null"):
                    not_null.add(item.name)
            elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
                primary([item.name], f"{item.name} PRIMARY KEY")
            elif not isinstance(kind, exp.CommentColumnConstraint):
                raise refuse(f"CREATE TABLE {name}: constraint {_text(c)[:40]} on column "
                             f"{item.name}", "a column accepts NOT NULL, PRIMARY KEY and "
                             "COMMENT (diffspark enforces what it accepts)")
    declared = {c.lower(): c for c, _ in columns}
    if key is not None:
        missing = [k for k in key if k.lower() not in declared]
        if missing:
            raise PlanError(f"sql: CREATE TABLE {name}: PRIMARY KEY column {missing[0]!r} is "
                            f"not a column of the table "
                            f"(its columns: {', '.join(declared.values())})")
        key = [declared[k.lower()] for k in key]
        not_null.update(key)
    ddl = ", ".join(f"`{c}` {t}" + (" NOT NULL" if c in not_null else "") for c, t in columns)
    ddl_columns(ddl)
    return ddl, key


def script(flow, text: str) -> None:
    """A .sql plan: CREATE TABLE declares an input, CREATE VIEW an intermediate collection,
    CREATE MATERIALIZED VIEW an output."""
    tables: dict = {}  # lower-case name -> Collection: inputs, then views
    for s in parse(text):
        if not isinstance(s, exp.Create) or s.kind not in ("TABLE", "VIEW"):
            raise refuse(f"statement {_text(s)[:60]}", "a plan holds CREATE TABLE, CREATE "
                         "VIEW and CREATE MATERIALIZED VIEW statements")
        if s.kind == "TABLE":
            schema = s.this
            if not isinstance(schema, exp.Schema) or s.expression is not None:
                raise refuse(f"CREATE TABLE {_text(s.this)[:40]} without a column list or "
                             f"with AS", "CREATE TABLE name (col type, ...) declares an input")
            name = schema.this.name
            if name.lower() in tables:
                raise PlanError(f"sql: '{name}' is declared twice")
            ddl, key = _table(name, schema)
            tables[name.lower()] = flow.input(name, ddl, key=key)
            continue
        name = s.this.name
        if name.lower() in tables:
            raise PlanError(f"sql: '{name}' is declared twice")
        statement = _checked_statement(s.expression)
        coll = Lowering(flow, tables, statement, text).query(statement).coll
        tables[name.lower()] = coll
        props = s.args.get("properties")
        if props is not None and any(isinstance(p, exp.MaterializedProperty)
                                     for p in props.expressions):
            flow.output(name, coll)

