"""Linear fusion alone: adjacent Linear nodes compose into one (`followed_by`).

The rule and why it is correct live in plans/optimizer/rules.py (`fuse`); this runs only
that ruleset. A node read by several consumers is swallowed only where the cost model
(plans/optimizer/cost.py) says the duplicated work is cheaper than the extra pass.
"""
from __future__ import annotations

from . import ir


def fuse(outputs: dict[str, ir.Node]) -> dict[str, ir.Node]:
    from .optimizer import optimize  # the optimizer imports the IR; keep plans light
    return optimize(outputs, rulesets=("fusion",)).plan
