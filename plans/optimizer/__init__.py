"""The plan optimizer: local rewrite rules explored together on an e-graph (egglog), the
cheapest equivalent plan extracted (after "Optimizing Stateful Dataflow with Local Rewrites").

`optimize(outputs)` encodes the plan (encode.py), runs the rulesets of rules.py under
iteration limits, extracts the cheapest plan by the cost model of cost.py (shared sub-plans
counted once) and decodes it (decode.py). Results are cached per plan: a Runner optimizes on
construction, and tests build many Runners over the same plans.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from egglog import EGraph, get_callable_args, run, unstable_combine_rulesets

from .. import ir
from .cost import CostModel, Terms, plan_cost
from .decode import Decoder
from .encode import encode
from .prune import pruned
from .share import shared
from .rules import RULESETS, WHY
from .terms import Root, colls

DEFAULT = ("pushdown", "sharing", "fusion", "incremental", "prune", "share")
PASSES = ("prune", "share")  # run on the extracted plan (prune.py, share.py), not on the e-graph
ITERATIONS = 12  # per schedule phase; fusion needs log2(chain length), the rest fewer
_CACHE: dict = {}
_CACHE_SIZE = 256


@dataclass(frozen=True)
class Optimized:
    plan: dict[str, ir.Node]
    fired: dict[str, int]  # rule name -> matches (applications) during the run
    before: Terms
    after: Terms
    seconds: float

    def report(self) -> str:
        """The rules that fired (with why each is correct) and the cost of both plans."""
        lines = ["== rules fired ==", "(times each rule matched while exploring; the cost "
                 "model picks the plan)"]
        lines += [f"{name} x{n}: {WHY[name]}" for name, n in sorted(self.fired.items())] or \
            ["(none)"]
        lines += ["== cost ==", f"as written: {self.before}", f"optimized:  {self.after}",
                  f"(optimizer: {self.seconds * 1000:.0f} ms)"]
        return "\n".join(lines)


def optimize(outputs: dict[str, ir.Node], rulesets=DEFAULT) -> Optimized:
    """The cheapest plan equivalent to `outputs` under the named rulesets."""
    key = (tuple(outputs.items()), tuple(rulesets))
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _optimize(dict(outputs), tuple(rulesets))
    return _CACHE[key]


def _optimize(outputs: dict[str, ir.Node], rulesets: tuple[str, ...]) -> Optimized:
    started = time.perf_counter()
    unknown = [r for r in rulesets if r not in RULESETS and r not in PASSES]
    if unknown:
        raise ValueError(f"optimize: unknown rulesets {unknown}; "
                         f"known: {sorted([*RULESETS, *PASSES])}")
    egraph = EGraph()
    enc, terms = encode(outputs, egraph, incremental="incremental" in rulesets)
    root = Root.outputs(colls(terms))
    egraph.register(root)
    fired: Counter = Counter()
    moves = [RULESETS[r] for r in ("pushdown", "sharing") if r in rulesets]
    phases = [unstable_combine_rulesets(*moves)] if moves else []
    phases += [RULESETS[r] for r in ("fusion", "incremental") if r in rulesets]
    for ruleset in phases:  # moving single stages first, then fusing: fewer chains to move
        report = egraph.run(run(ruleset) * ITERATIONS)
        for decl, n in report.num_matches_per_rule.items():
            name = getattr(decl, "name", None)
            if n and name in WHY:
                fired[name] += n
    try:
        best = egraph.extract(root, cost_model=CostModel(enc.table))
    except BaseException as e:  # egglog's extraction panics on some e-graphs (a Rust unwrap
        if type(e).__name__ != "PanicException":  # of None): the plan as written is right
            raise
        before = plan_cost(outputs)
        return Optimized(dict(outputs), dict(fired), before, before,
                         time.perf_counter() - started)
    plan = dict(zip(outputs, Decoder(enc.table).items(get_callable_args(best)[0])))
    before, after = plan_cost(outputs), plan_cost(plan)
    if after.total > before.total and "pushdown" in rulesets:
        # Greedy extraction weighs one consumer at a time: pushing into a join that several
        # outputs read can duplicate it. Then try without pushdown, then the plan as written.
        fallback = optimize(outputs, tuple(r for r in rulesets if r != "pushdown"))
        plan, after = fallback.plan, fallback.after
    if after.total > before.total:
        plan, after = dict(outputs), before
    if "prune" in rulesets:
        plan, narrowed = pruned(plan)
        if narrowed:
            fired["prune"] = narrowed
            after = plan_cost(plan)
    if "share" in rulesets:  # after prune: arrangements narrowed alike are equal alike
        plan, dropped = shared(plan)
        if dropped:
            fired["share"] = dropped
            after = plan_cost(plan)
    return Optimized(plan, dict(fired), before, after, time.perf_counter() - started)
