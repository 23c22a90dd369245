"""Binary joins of arrangements: dA x (B_old + dB) + A_old x dB, on the driver placement
(driver.py) and on Spark (spark.py).
"""
from __future__ import annotations

from executor.arrange.encoding import INTEGRAL
from plans import ir
from plans.errors import PlanError


def comparable(a, b) -> bool:
    """Whether key columns of Spark types a and b compare alike on both placements: the
    driver compares values as stored (a DECIMAL as its unscaled integer, a DATE as days),
    Spark in a type it casts both to. One type does; so do two integer types (int64 on
    the driver, and Spark's cast to the wider one is exact)."""
    return a.simpleString() == b.simpleString() or \
        isinstance(a, INTEGRAL) and isinstance(b, INTEGRAL)


def check_keys(plan, schemas: dict) -> None:
    """Refuse, when the runner is built, a join whose key columns' types are not
    `comparable` (schemas: each node's resolved update schema), naming the join, the column
    and both types. The SQL front end casts both sides to Spark's common type itself."""
    for node in ir.topological(plan.values()):
        if not isinstance(node, ir.Join):
            continue
        left, right = schemas[node.left], schemas[node.right]
        for k in node.on:
            a, b = left[k].dataType, right[k].dataType
            if not comparable(a, b):
                raise PlanError(
                    f"{node.label()}: key column '{k}' is {a.simpleString().upper()} on the "
                    f"left and {b.simpleString().upper()} on the right (rule: join keys are "
                    f"of one type, or both integers; CAST one side to the other's type)")
