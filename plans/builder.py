"""The user API: a `Dataflow` of named inputs and outputs, and chainable `Collection`s.

Nothing runs here: each method returns a new Collection wrapping a new immutable IR node, so
the same description runs on the reference interpreter, on Spark, or through the optimizer.
"""
from __future__ import annotations

import re
from typing import Callable, Optional

from . import ir
from . import query as cq
from .errors import PlanError
from .ordering import sort_keys
from .outer_join import HOW, outer_join
from .schema import check_expression, check_names, column_names, has_star
from .sql import view as sql_view
from .types import ORDERED_ALIKE, band_comparable, columns_of


_AGGREGATE = re.compile(r"(?i)(count|sum|min|max)\s*\(\s*(\*|`[^`]+`|[A-Za-z_][\w]*)\s*\)")


class Dataflow:
    """A dataflow description: inputs (name -> schema) and outputs (name -> collection)."""

    def __init__(self, strict: bool = False):
        self.strict = strict  # every input strict (the CLI's --strict)
        self.inputs: dict[str, ir.Input] = {}
        self.constants: dict[str, ir.Constant] = {}
        self.outputs: dict[str, ir.Node] = {}
        self._scopes = 0  # iterate scopes made so far: names their variables

    def input(self, name: str, schema: str, key: Optional[list[str]] = None,
              strict: bool = False) -> "Collection":
        """Declare an input collection with a Spark DDL record schema. With `key`, a table
        with upsert semantics (+1 replaces the key's row, -1 deletes it); with `strict`, a
        step that would make a record's multiplicity negative is refused."""
        if not name.isidentifier():
            raise PlanError(f"input '{name}': name must be an identifier")
        if name in self.inputs or name in self.constants:
            raise PlanError(f"input '{name}' is declared twice")
        columns = column_names(schema, f"input '{name}'")
        node = ir.Input(name, schema, _input_key(name, key, columns),
                        _flag(name, strict) or self.strict)
        self.inputs[name] = node
        return Collection(self, node)

    def constant(self, schema: str, rows) -> "Collection":
        """Fixed records (tuples in `schema`'s column order), present from time 0 on; the
        runner feeds them itself. Equal constants are one node."""
        columns = column_names(schema, "constant")
        rows = tuple(tuple(r) for r in rows)
        if any(len(r) != len(columns) for r in rows):
            raise PlanError(f"constant: every row has {len(columns)} values ({schema})")
        for node in self.constants.values():
            if (node.schema, node.rows) == (schema, rows):
                return Collection(self, node)
        name = f"_constant{len(self.constants)}"
        while name in self.inputs:
            name = "_" + name
        self.constants[name] = ir.Constant(name, schema, rows=rows)
        return Collection(self, self.constants[name])

    def output(self, name: str, collection: "Collection") -> None:
        if not isinstance(collection, Collection) or collection.flow is not self:
            raise PlanError(f"output '{name}': expects a Collection of this Dataflow")
        if name in self.outputs:
            raise PlanError(f"output '{name}' is declared twice")
        self.outputs[name] = collection.node

    def import_trace(self, name: str, handle) -> "Arrangement":
        """Attach to a live arrangement of another runner (`Runner.arrangement(name)`): it
        starts from the trace's compacted batches, then follows new ones, without a copy."""
        if not hasattr(handle, "keys") or not hasattr(handle, "schema"):
            raise PlanError(f"import_trace '{name}': expects a handle from Runner.arrangement()")
        return Arrangement(self, ir.Imported(name, handle))

    def query(self, text: str, order=None, plan: str = "delta",
              **relations: "Collection") -> "Collection":
        """A conjunctive query `head(x, ...) :- rel(x, ...), ..., x < y` over this flow's
        inputs by name; keyword Collections stand for relations of their name (and win over
        an input so named). Columns: the head variables. Run as a worst-case optimal join
        binding variables in `order` (planned when None; see plans/query.py). plan="naive"
        builds seed 001's plan of counts, joins and validating joins instead, for
        comparison (plans/naive.py; relations need known column names)."""
        q = cq.parse(text)
        where = f"query '{q.head_name}'"
        for name, c in relations.items():
            if not isinstance(c, Collection) or c.flow is not self:
                raise PlanError(f"{where}: {name}= must be a Collection of this Dataflow")
            if name not in q.relations():
                raise PlanError(f"{where}: {name}= is given but no atom reads it")
        nodes = {**self.inputs, **{r: c.node for r, c in relations.items()}}
        cq.validate(q, {r: _known_columns(n) for r, n in nodes.items()})
        order = cq.plan_order(q) if order is None else order
        cq.delta_rules(q, order)  # refuses an order some delta rule cannot follow
        if plan == "naive":
            return self._naive(q, order, nodes)
        if plan != "delta":
            raise PlanError(f"{where}: plan={plan!r} must be 'delta' or 'naive'")
        return Collection(self, ir.Query(tuple(nodes[r] for r in q.relations()),
                                         q.relations(), q, tuple(order)))

    def sql(self, text: str, **collections: "Collection") -> "Collection":
        """A Spark SQL query (SELECT, WITH, UNION) over this flow's inputs by name; keyword
        Collections stand for tables of their name (and win over an input so named).
        Lowered to the builder's operators when the plan is built (plans/sql.py)."""
        for name, c in collections.items():
            if not isinstance(c, Collection) or c.flow is not self:
                raise PlanError(f"sql: {name}= must be a Collection of this Dataflow")
        tables = {n.lower(): Collection(self, node) for n, node in self.inputs.items()}
        return Collection(self, sql_view(self, text, {**tables, **{n.lower(): c for n, c in
                                                              collections.items()}}).node)

    def _naive(self, q: cq.Query, order, nodes: dict) -> "Collection":
        from .naive import naive_query

        columns = {r: _known_columns(nodes[r]) for r in q.relations()}
        unknown = [r for r, cols in columns.items() if cols is None]
        if unknown:
            raise PlanError(f"query '{q.head_name}': plan='naive' needs relations with known "
                            f"column names; {unknown} are computed by SQL expressions "
                            f"(rule: give the naive plan inputs or their filters)")
        return naive_query(q, order, {r: Collection(self, n) for r, n in nodes.items()},
                           columns)

    def explain(self) -> str:
        return ir.explain(self.outputs)


def _input_key(name: str, key, columns: list[str]) -> tuple[str, ...]:
    """A keyed input's key: distinct columns of its schema, at least one."""
    if key is None:
        return ()
    if isinstance(key, str) or not isinstance(key, (list, tuple)) or not key:
        raise PlanError(f"input '{name}': key={key!r} must be a non-empty list of column names")
    for k in key:
        if k not in columns:
            raise PlanError(f"input '{name}': key column {k!r} is not in the schema "
                            f"(its columns: {', '.join(columns)})")
    if len(set(key)) != len(key):
        raise PlanError(f"input '{name}': key={list(key)} names a column twice")
    return tuple(key)


def _flag(name: str, strict) -> bool:
    if not isinstance(strict, bool):
        raise PlanError(f"input '{name}': strict={strict!r} must be True or False")
    return strict


def _known_columns(node: ir.Node) -> Optional[list[str]]:
    """Column names when the plan alone tells them; None where SQL expressions decide them
    (only the executor knows): a query's arity is then checked at run time."""
    if isinstance(node, ir.Input):
        return column_names(node.schema, f"input '{node.name}'")
    if isinstance(node, ir.Query):
        return list(node.query.head)
    if isinstance(node, (ir.Arrange, ir.Consolidate, ir.Concat)):
        return _known_columns(node.children()[0])
    same = (ir.Filter, ir.Negate, ir.TemporalFilter)
    if isinstance(node, ir.Linear) and all(isinstance(s, same) for s in node.stages):
        return _known_columns(node.input)
    return None


def _check_scope(node: ir.Iterate) -> None:
    """Refuse, when the plan is built, what an iteration scope cannot run: operators that
    move records to later epochs (their changes would outlive the step's rounds), worst-case
    optimal joins and nested scopes (their times are single epochs)."""
    inner, _ = ir.scope_of(node)
    for n in inner:
        stages = n.stages if isinstance(n, ir.Linear) else ()
        bad = [s for s in stages if isinstance(s, (ir.TemporalFilter, ir.JoinFunction))]
        if bad:
            raise PlanError(f"iterate: {bad[0].label()} inside the body; rule: operators that "
                            f"set times (temporal_filter, join_function) go outside iterate")
        if isinstance(n, (ir.Query, ir.Iterate)):
            raise PlanError(f"iterate: {n.label()} inside the body reads the variable; rule: "
                            f"queries and nested iterates over the variable are not supported")


def _expressions(stage: ir.Stage) -> list[str]:
    """The SQL expressions a linear stage evaluates over each record."""
    if isinstance(stage, ir.Map):
        return list(stage.exprs)
    if isinstance(stage, ir.TemporalFilter):
        return [e for e in (stage.lower, stage.upper) if e is not None]
    expr = getattr(stage, "expr", None)
    return [expr] if isinstance(expr, str) else []


def _names_arg(names, what: str) -> tuple[str, ...]:
    if isinstance(names, str):
        names = (names,)
    names = tuple(names)
    if not all(isinstance(n, str) and n for n in names):
        raise PlanError(f"{what}: column names must be non-empty strings, got {names!r}")
    if len(set(names)) != len(names):
        raise PlanError(f"{what}: repeated column in {names!r}")
    return names


class Collection:
    """A changing multiset of records: a handle on a plan node of a Dataflow."""

    def __init__(self, flow: Dataflow, node: ir.Node):
        self.flow = flow
        self.node = node

    def _then(self, stage: ir.Stage) -> "Collection":
        for expr in _expressions(stage):
            check_expression(expr, stage.label())
        return Collection(self.flow, ir.Linear(self.node, (stage,)))

    # ---- linear operators: each one a join_function instance
    def map(self, *exprs: str) -> "Collection":
        """Project with SQL expressions, like DataFrame.selectExpr."""
        if not exprs:
            raise PlanError("map: needs at least one expression")
        return self._then(ir.Map(tuple(exprs)))

    def filter(self, expr: str) -> "Collection":
        return self._then(ir.Filter(expr))

    def flat_map(self, expr: str) -> "Collection":
        return self._then(ir.FlatMap(expr))

    def explode(self, expr: str) -> "Collection":
        return self._then(ir.Explode(expr))

    def temporal_filter(self, lower: Optional[str] = None, upper: Optional[str] = None):
        if lower is None and upper is None:
            raise PlanError("temporal_filter: give lower, upper or both")
        return self._then(ir.TemporalFilter(lower, upper))

    def join_function(self, expr: Optional[str] = None, *, kernel: Optional[Callable] = None,
                      schema: Optional[str] = None) -> "Collection":
        """The general linear operator: an SQL expression yielding
        array<struct<..., time, diff>>, or a vectorised kernel with its output schema."""
        if (expr is None) == (kernel is None):
            raise PlanError("join_function: give exactly one of expr or kernel=")
        if kernel is not None:
            if not callable(kernel) or not schema:
                raise PlanError("join_function: kernel= must be callable and schema= a DDL string")
            column_names(schema, "join_function kernel schema")
            return self._then(ir.Kernel(kernel, schema))
        return self._then(ir.JoinFunction(expr))

    def negate(self) -> "Collection":
        return self._then(ir.Negate())

    def concat(self, *others: "Collection") -> "Collection":
        for o in others:
            if not isinstance(o, Collection) or o.flow is not self.flow:
                raise PlanError("concat: expects Collections of the same Dataflow")
        return Collection(self.flow, ir.Concat((self.node,) + tuple(o.node for o in others)))

    def consolidate(self) -> "Collection":
        return Collection(self.flow, ir.Consolidate(self.node))

    # ---- arrangements and joins
    def arrange_by_key(self, *keys: str) -> "Arrangement":
        """Index by `keys` (values = the other columns) as a shared trace."""
        keys = _names_arg(keys, "arrange_by_key")
        if not keys:
            raise PlanError("arrange_by_key: give at least one key column")
        return Arrangement(self.flow, ir.Arrange(self._collection_node(), keys))

    def arrange_by_self(self) -> "Arrangement":
        """Index by the whole record."""
        return Arrangement(self.flow, ir.Arrange(self._collection_node(), None))

    def _collection_node(self) -> ir.Node:
        return self.node

    def _arranged(self, keys: tuple[str, ...]) -> ir.Node:
        return ir.Arrange(self._collection_node(), keys)

    def join(self, other: "Collection", on, how: str = "inner") -> "Collection":
        """Equi-join: on columns, then this side's other columns, then the other's; a clash
        between the two sides' other columns is an error (rename with map). how="left",
        "right" or "full" also keeps that side's records without a match, the other side's
        columns NULL (plans/outer_join.py)."""
        on = self._check_join(other, on, "join")
        if how not in HOW:
            raise PlanError(f"join: how={how!r} must be one of {', '.join(map(repr, HOW))}")
        inner = Collection(self.flow, ir.Join(self._arranged(on), other._arranged(on), on))
        return inner if how == "inner" else outer_join(self, other, on, how, inner)

    def semijoin(self, other: "Collection", on) -> "Collection":
        """This side's records whose `on` key is present in `other` (multiplicity unchanged)."""
        on = self._check_join(other, on, "semijoin")
        keys = other.map(*(f"`{k}`" for k in on)).distinct()
        return Collection(self.flow, ir.Join(self._arranged(on), keys._arranged(on), on, True))

    def band_join(self, other: "Collection", on, column: str, op: str,
                  value: str) -> "Collection":
        """This side's records, each once per record of `other` with equal `on` keys whose
        `value` bounds the record's `column` by `op` (<, <=, >, >=, =; NULL on either side
        satisfies nothing): the output keeps this side's columns, diff times the other's
        diff. It is the form of a scalar subquery's condition, `x > (SELECT avg(y) ...)`:
        when the bound moves, a step costs the records between the old and the new bound,
        not every record. Both columns' types must be known: exact numbers (integers,
        decimals), or one of DATE, TIMESTAMP, TIMESTAMP_NTZ, DOUBLE, FLOAT on both sides."""
        on = self._check_join(other, on, "band_join")
        band = ir.Band(column, op, value)
        mine, theirs = columns_of(self.node), columns_of(other.node)
        types = []
        for side, cols, name in (("this side", mine, column), ("the other side", theirs,
                                                                   value)):
            found = [t for c, t in (cols or []) if c.lower() == name.lower()]
            if cols is not None and not found:
                raise PlanError(f"band_join: {side} has no column '{name}'")
            if not found or found[0] is None:
                raise PlanError(f"band_join: the type of {side}'s column '{name}' is not "
                                f"known; rule: CAST it where it is made")
            types.append(found[0])
        if column.lower() in {k.lower() for k in on}:
            raise PlanError(f"band_join: column '{column}' is one of the keys {list(on)}; "
                            f"rule: a band compares a column beyond the keys")
        if not band_comparable(*types):
            raise PlanError(f"band_join: '{column}' ({types[0]}) {op} '{value}' "
                            f"({types[1]}) compares other types; rule: exact numbers, or "
                            f"one of {', '.join(ORDERED_ALIKE)} on both sides")
        return Collection(self.flow, ir.Join(self._arranged(on + (column,)),
                                             other._arranged(on), on, True, band))

    def antijoin(self, other: "Collection", on) -> "Collection":
        """This side's records whose `on` key is absent from `other`."""
        return self.concat(self.semijoin(other, on).negate())

    def _check_join(self, other, on, what) -> tuple[str, ...]:
        if not isinstance(other, Collection) or other.flow is not self.flow:
            raise PlanError(f"{what}: expects a Collection or Arrangement of the same Dataflow")
        on = _names_arg(on, what)
        if not on:
            raise PlanError(f"{what}: on= needs at least one column")
        return on

    # ---- the reduce family: per key, re-evaluated at every time its input changes
    def _reduce(self, by, reduction: ir.Reduction, what: str) -> "Collection":
        by = _names_arg(by, what)
        return Collection(self.flow, ir.Reduce(self._arranged(by), by, reduction))

    def count(self, by=()) -> "Collection":
        """by columns + `count` BIGINT (sum of multiplicities), present while non-zero."""
        return self._reduce(by, ir.Reduction("count"), "count")

    def sum(self, column: str, by=()) -> "Collection":
        """by columns + the sum of `column` weighted by multiplicity (named like it),
        present while the key has records; of Spark's Sum type (integral: BIGINT,
        DECIMAL(p, s): DECIMAL(min(38, p + 10), s), a total beyond it refused as Spark's)."""
        return self._reduce(by, ir.Reduction("sum", column=column), "sum")

    def min(self, column: str, by=()) -> "Collection":
        """by columns + the least `column` among records of positive multiplicity."""
        return self._reduce(by, ir.Reduction("min", column=column), "min")

    def max(self, column: str, by=()) -> "Collection":
        return self._reduce(by, ir.Reduction("max", column=column), "max")

    def aggregate(self, by=(), **values: str) -> "Collection":
        """by columns + one column per keyword, all computed per key in one reduction:
        `n="count(*)"`, `"count(x)"` (records whose x is not null), `"sum(x)"`, `"min(x)"` or
        `"max(x)"`, each as its single-valued form computes it. A key is present while it has
        records; count(x) and sum(x) add up multiplicities as count and sum do, min(x) and
        max(x) read the records of positive multiplicity (NULL where none has a value)."""
        by = _names_arg(by, "aggregate")
        if not values:
            raise PlanError("aggregate: name at least one value, e.g. n=\"count(*)\"")
        parts = []
        for name, spec in values.items():
            found = _AGGREGATE.fullmatch(spec.strip()) if isinstance(spec, str) else None
            if found is None:
                raise PlanError(f"aggregate: value '{name}' is {spec!r}; rule: one of "
                                "count(*), count(col), sum(col), min(col), max(col)")
            kind, column = found.group(1).lower(), found.group(2).strip("`")
            if column == "*" and kind != "count":
                raise PlanError(f"aggregate: value '{name}' is {spec!r}; rule: only count "
                                "takes *")
            parts.append((name, kind, None if column == "*" else column))
        check_names([*by, *values], "aggregate")
        return self._reduce(by, ir.Reduction("aggregate", parts=tuple(parts)), "aggregate")

    def distinct(self) -> "Collection":
        """Records of positive multiplicity, with multiplicity 1."""
        return Collection(self.flow, ir.Reduce(ir.Arrange(self._collection_node(), None), (),
                                               ir.Reduction("distinct")))

    def threshold(self, expr: str) -> "Collection":
        """Each record's multiplicity replaced by `expr`, an SQL expression over `count`."""
        check_expression(expr, "threshold")
        return Collection(self.flow, ir.Reduce(ir.Arrange(self._collection_node(), None), (),
                                               ir.Reduction("threshold", expr=expr)))

    def top_k(self, k: int, order_by: str, by=()) -> "Collection":
        """Per key, the first k records by `order_by` ("total DESC, name": SQL expressions,
        each optionally ASC/DESC and NULLS FIRST/LAST; ties by the record), counting
        multiplicity."""
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise PlanError(f"top_k: k must be a positive integer, got {k!r}")
        check_expression(order_by, "top_k")
        if has_star(order_by):
            raise PlanError(f"top_k: order_by {order_by!r} reads * (rule: name the columns "
                            f"it orders by; ties are broken by the rest of the record)")
        return self._reduce(by, ir.Reduction("top_k", expr=order_by, k=k,
                                             order=sort_keys(order_by)), "top_k")


    # ---- iteration to a fixed point (times inside gain an iteration coordinate)
    def iterate(self, body: Callable[["Collection"], "Collection"]) -> "Collection":
        """The fixed point of `body` starting from this collection: a variable starts as
        this collection and becomes `body(variable)` each round until nothing changes.
        Collections and arrangements of the dataflow may be used inside `body` directly
        (they enter the scope at iteration 0; an arrangement enters without a copy)."""
        if not callable(body):
            raise PlanError(f"iterate: body must be a function of the variable, got {body!r}")
        self.flow._scopes += 1
        variable = ir.Variable(self.flow._scopes)
        result = body(Collection(self.flow, variable))
        if not isinstance(result, Collection) or result.flow is not self.flow:
            raise PlanError("iterate: body must return a Collection of this Dataflow")
        node = ir.Iterate(self._collection_node(), variable, result.node)
        _check_scope(node)
        return Collection(self.flow, node)

    def reduce(self, by, *, kernel: Callable, schema: str) -> "Collection":
        """A user reduction as a vectorised kernel: `kernel(xp, group, cols, count)` sees
        many (key, time) groups at once and returns `(group, cols)` or `(group, cols,
        count)` for its output rows; the output is the by columns + `schema`'s columns."""
        if not callable(kernel):
            raise PlanError(f"reduce: kernel= must be callable, got {kernel!r}")
        by = _names_arg(by, "reduce")
        if not by:
            raise PlanError("reduce: by= needs at least one column (rule: a reduction is per key)")
        names = column_names(schema, "reduce schema")
        clash = sorted(set(names) & set(by))
        if clash:
            raise PlanError(f"reduce: schema column {clash} repeats a by column "
                            f"(rule: output = by columns + schema columns, unique names)")
        return self._reduce(by, ir.Reduction("kernel", fn=kernel, schema=schema), "reduce")


class Arrangement(Collection):
    """A collection indexed by key: joins and reductions keyed alike reuse its trace."""

    def __init__(self, flow: Dataflow, node: ir.Node):
        super().__init__(flow, node)

    @property
    def keys(self):
        node = self.node
        return tuple(node.handle.keys) if isinstance(node, ir.Imported) else node.keys

    def _collection_node(self) -> ir.Node:
        return self.node if isinstance(self.node, ir.Imported) else self.node.input

    def _arranged(self, keys):
        if self.keys == keys:
            return self.node
        return ir.Arrange(self._collection_node(), keys)
