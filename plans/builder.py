"""The user API: a `Dataflow` of named inputs and outputs, and chainable `Collection`s.

Nothing runs here: each method returns a new Collection wrapping a new immutable IR node, so
the same description runs on the reference interpreter, on Spark, or through the optimizer.
"""
from __future__ import annotations

from typing import Callable, Optional

from . import ir
from .ir import PlanError
from .schema import column_names


class Dataflow:
    """A dataflow description: inputs (name -> schema) and outputs (name -> collection)."""

    def __init__(self):
        self.inputs: dict[str, ir.Input] = {}
        self.outputs: dict[str, ir.Node] = {}

    def input(self, name: str, schema: str) -> "Collection":
        """Declare an input collection with a Spark DDL record schema."""
        if not name.isidentifier():
            raise PlanError(f"input '{name}': name must be an identifier")
        if name in self.inputs:
            raise PlanError(f"input '{name}' is declared twice")
        column_names(schema, f"input '{name}'")
        node = ir.Input(name, schema)
        self.inputs[name] = node
        return Collection(self, node)

    def output(self, name: str, collection: "Collection") -> None:
        if not isinstance(collection, Collection) or collection.flow is not self:
            raise PlanError(f"output '{name}': expects a Collection of this Dataflow")
        if name in self.outputs:
            raise PlanError(f"output '{name}' is declared twice")
        self.outputs[name] = collection.node

    def explain(self) -> str:
        return ir.explain(self.outputs)


class Collection:
    """A changing multiset of records: a handle on a plan node of a Dataflow."""

    def __init__(self, flow: Dataflow, node: ir.Node):
        self.flow = flow
        self.node = node

    def _then(self, stage: ir.Stage) -> "Collection":
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
