"""Iterate on the driver placement: the rule of spark.py (rounds in the iteration coordinate,
all of a step's epochs together) with each round a walk of the driver's evaluator over the
body (a shallow copy of the step's walk, with the scope's traces over the runner's)."""
from __future__ import annotations

import copy
import time as clock
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Optional

from executor.arrange.changes import Changes, Unsupported, updates_schema
from executor.arrange.driver import View
from executor.operators.iterate import spark as iterate
from executor.runtime.config import max_rounds
from plans import ir


def run(step, node: ir.Iterate) -> Changes:
    """The scope's rounds (the rule is spark.py's): round i walks the body with this same
    evaluator over the variable's changes at iteration i, all of the step's
    epochs together; the result at i less the input at iteration 0 is the variable's
    change at i + 1. Done when nothing changes and nothing is held back; the output is
    the result summed over iterations, per epoch."""
    xp, schema = step.xp, step.runner.node_schemas[node]
    _, outer = ir.scope_of(node)
    x = step.changes(node.input)
    entering = [step.changes(o) for o in outer]  # evaluated before the rounds
    if any(bool(xp.any(c.t >= step.upto)) for c in [x, *entering]):
        raise Unsupported(f"{node.label()}: its inputs hold updates for later times")
    entering = [c.size for c in entering]
    if not x.size and not any(entering):
        return step.empty(schema)  # nothing entered: the fixed point stays
    limit = max_rounds(step.runner.conf)
    scope = Scope(node, xp)
    start = _entered(xp, x)
    var, leave, seconds = start, [x], []
    while True:
        if scope.round >= limit:
            raise iterate.divergence(node, limit)
        began = clock.perf_counter()
        result = _round(step, scope, var, outer).changes(node.body)
        if scope.round == 0:  # the variable was the input at iteration 0
            result = step.concat([result, Changes.of(result.schema, start.cols,
                                                     start.times, -start.d)])
        var = step.consolidated(result)  # may be the body's own value: not changed in place
        var = Changes.of(var.schema, var.cols, [var.t, *var.inner[:-1], var.inner[-1] + 1],
                         var.d, canonical=True)
        leave.append(Changes(x.schema, var.cols, var.t, var.d))
        seconds.append(clock.perf_counter() - began)
        waiting = scope.waiting()
        if not var.size and waiting is None:
            break
        scope.round = scope.round + 1 if var.size else waiting
    step.commits.update(scope.traces)
    step.runner.rounds[node.label()] = seconds
    out = step.concat(leave)
    return step.consolidated(Changes(schema, out.cols, out.t, out.d))


def _round(step, scope: "Scope", var: Changes, outer):
    """The walk of one round: the variable's changes; outer collections entered at
    iteration 0 without copying, their changes in round 0 only; outer arrangements'
    mirrors read in place (at iteration 0); the scope's traces over the runner's."""
    xp = step.xp
    rs = copy.copy(step)
    rs.memo, rs.views, rs.commits = {scope.node.variable: var}, {}, scope.traces
    rs.state, rs.scope = ChainMap(scope.traces, step.runner._state), scope
    for o in outer:
        c = step.changes(o)
        rs.memo[o] = _entered(xp, c if scope.round == 0 else
                              c.take(xp, xp.zeros(0, dtype=xp.int64)))
        view = step.views.get(o)
        if view is not None:
            rs.views[o] = View(view.trace, view.old if scope.round == 0 else view.read,
                                rs.memo[o], view.read)
    return rs


@dataclass
class Scope:
    """One step of one iterate on the driver: the round, the traces its rounds append to,
    the joins' and reductions' changes held for later iterations, and what each reduction
    emitted this step at iterations a later round may still correct."""

    node: ir.Iterate
    xp: object
    round: int = 0
    traces: dict = field(default_factory=dict)
    held: dict = field(default_factory=dict)
    emitted: dict = field(default_factory=dict)

    def admit(self, step, node: ir.Node, value: Changes) -> Changes:
        """A join's or reduction's changes at later iterations wait for their round; what
        waited for this one joins in."""
        xp = self.xp
        if isinstance(node, ir.Reduce):
            self.emitted[node] = step.concat([self.emitted[node], value]) \
                if node in self.emitted else value
        held = self.held.pop(node, None)
        if held is not None:
            value = step.concat([value, held])
        later = value.inner[-1] > self.round
        if bool(xp.any(later)):
            self.held[node] = value.take(xp, xp.nonzero(later)[0])
            value = value.take(xp, xp.nonzero(xp.logical_not(later))[0])
        return value

    def emitted_since(self, node: ir.Reduce) -> Optional[Changes]:
        """The reduction's changes of this step's rounds at iterations from this round on
        (the only ones a round corrects; the rest are dropped)."""
        xp, c = self.xp, self.emitted.get(node)
        if c is not None:
            c = self.emitted[node] = c.take(xp, xp.nonzero(c.inner[-1] >= self.round)[0])
        return c

    def waiting(self) -> Optional[int]:
        """The least iteration of a held change (None when nothing is held)."""
        least = [int(self.xp.min(c.inner[-1])) for c in self.held.values()]
        return min(least) if least else None


def _entered(xp, c: Changes) -> Changes:
    """Outer changes at iteration 0 of a scope: the same arrays, a time coordinate more."""
    return Changes.of(updates_schema(c.schema.fields[:len(c.names)], True), c.cols,
                      [c.t, xp.zeros_like(c.t)], c.d)
