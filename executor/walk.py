"""The graph walk of a step, one for both placements (DESIGN.md section 12).

A step, and each round of an iterate scope, evaluates every node of the plan once, in
dependency order, by its family's *form* for the placement the step runs on: the driver's
(executor/driver.py: array kernels in this process) or Spark's (executor/spark.py: Catalyst
jobs). A placement is a subclass that holds its forms, one per operator family, in a table
keyed by the plan's node classes. What both share lives here: each node's value (memo), the
arrangements' views, the traces to commit, the updates held for later times, the readers'
holds on imported traces, the iterate scope a round belongs to, and each operator's own
seconds.
"""
from __future__ import annotations

import time as clock
from dataclasses import dataclass, field
from typing import Callable, Optional

from executor.time import INFINITY
from plans import ir
from plans.errors import PlanError


class Walk:
    """One step's (or one round's) evaluation of the plan on one placement."""

    placement = ""  # the word StepResult.placement and Runner.explain show
    forms: dict[type, Callable] = {}  # node class -> form(walk, node), the node's changes

    def __init__(self, runner, upto: Optional[int], state=None, lower: Optional[int] = None):
        self.runner = runner
        self.upto = upto  # the step's end (None: close, on Spark; the driver says INFINITY)
        self.lower = runner.frontier if lower is None else lower
        self.state = runner._state if state is None else state  # traces and held updates
        self.memo: dict = {}  # node -> its changes this step (or round)
        self.views: dict = {}  # arrangement -> what operators read of it
        self.commits: dict = {}  # state key -> its new value once the step commits
        self.pending: dict = {}  # state key -> its updates at times >= upto (None: none)
        self.holds: list = []  # (TraceHandle, since) per import read (Runner._advance)
        self.scope = None  # the iterate scope whose round this walk is
        self.clock = Clock()  # shared by an iterate's rounds (copies of this walk)

    @property
    def upper(self) -> int:
        return INFINITY if self.upto is None else self.upto

    @property
    def since(self) -> int:
        """How far traces may compact when this step appends: past the step's interval,
        except in an iterate's rounds, which still tell the step's epochs apart."""
        return self.lower - 1 if self.scope is not None else self.upper - 1

    def value(self, node: ir.Node):
        """The node's changes this step: evaluated once, however many operators read it.
        Inside a scope a join's or reduction's changes at later iterations wait for their
        round (the scope's `admit`)."""
        if node not in self.memo:
            value = self.clock.timed(operator_name(node), lambda: self.evaluate(node))
            if self.scope is not None and isinstance(node, (ir.Join, ir.Reduce)):
                value = self.scope.admit(self, node, value)
            self.memo[node] = value
        return self.memo[node]

    def evaluate(self, node: ir.Node):
        """The node's changes by its family's form on this placement."""
        return self.form(node)(self, node)

    def form(self, node: ir.Node) -> Callable:
        for kind in type(node).__mro__:
            if kind in self.forms:
                return self.forms[kind]
        raise self.unsupported(node)

    def unsupported(self, node: ir.Node) -> Exception:
        """The error for a node this placement has no form for."""
        return PlanError(f"{node.label()}: no executor for this operator")


def operator_name(node: ir.Node) -> str:
    """An operator as users read it: its label, and for an arrangement what it arranges
    (runner.stats() names traces so). Kept on the node: every step names every operator it
    times, and formatting a plan's labels costs ~0.6 us a node."""
    return ir.kept(node, "_operator_name", _named)


def _named(node: ir.Node) -> str:
    if isinstance(node, ir.Arrange):
        source = node.input
        return f"{node.label()} of " + (source.name if isinstance(source, ir.Input)
                                        else source.label())
    return node.label()


@dataclass
class Clock:
    """Each operator's own seconds in a step (the time of the inputs it asks for excluded),
    summed over an iterate's rounds: StepResult.operators."""
    seconds: dict = field(default_factory=dict)
    nested: list = field(default_factory=list)  # the inputs' seconds, per open operator

    def timed(self, name: str, evaluate):
        started = clock.perf_counter()
        self.nested.append(0.0)
        try:
            return evaluate()
        finally:
            spent = clock.perf_counter() - started
            self.seconds[name] = self.seconds.get(name, 0.0) + spent - self.nested.pop()
            if self.nested:
                self.nested[-1] += spent
