"""A band join's comparison on codes (executor/arrange/encoding.py): each bound turned into the
range of the column's codes that satisfy it, so that the driver reads a band by range lookups
in the left arranged by (on, column) (join/driver.py).

An exact number's code is its unscaled value at its type's scale: a bound of another scale is
rescaled by a power of ten, rounded toward the comparison (x > 2.345 at scale 2 is x >= 2.35),
saturating where the rescaled value leaves int64. DATE, TIMESTAMP and floating codes sort as
their values (NaN last, -0.0 = 0.0, as Spark compares them) and compare as they are.
"""
from __future__ import annotations

import numpy as np
from pyspark.sql.types import DataType, DecimalType

from executor.arrange.encoding import NULL_CODE
from plans.errors import PlanError

LOWEST, HIGHEST = int(NULL_CODE) + 1, int(np.iinfo(np.int64).max)  # every non-null code
DIGITS = 18  # 10**18 is the largest power of ten in int64


def bounds(xp, op: str, value, column: DataType, kind: DataType):
    """(low, high): for each bound code in `value` (of type `kind`), the codes x of the
    `column` type with `x op bound` are low..high; none where low > high (a NULL bound)."""
    shift = _scale(kind) - _scale(column)
    null = value == NULL_CODE
    v = xp.where(null, xp.zeros_like(value), value)
    low = xp.full(v.shape, LOWEST, dtype=xp.int64)
    high = xp.full(v.shape, HIGHEST, dtype=xp.int64)
    none = null
    if shift >= 0:  # the bound is v / 10**shift: round down or up to the column's scale
        if shift > DIGITS:  # |v| < 10**shift: the quotient lies in (-1, 1)
            floor = xp.where(v < 0, -xp.ones_like(v), xp.zeros_like(v))
            ceil = xp.where(v > 0, xp.ones_like(v), xp.zeros_like(v))
        else:
            q = xp.asarray(10 ** shift, dtype=xp.int64)
            floor, ceil = v // q, -((-v) // q)
        above = below = xp.zeros(v.shape, dtype=xp.bool)
    else:  # the bound is v * 10**-shift, beyond int64 where |v| exceeds `limit`
        m = 10 ** -shift
        limit = HIGHEST // m
        above, below = v > limit, v < -limit
        fits = xp.logical_not(xp.logical_or(above, below))
        exact = xp.where(fits, v, xp.zeros_like(v)) * xp.asarray(min(m, HIGHEST), dtype=xp.int64)
        floor = ceil = exact
    if op in (">", ">="):
        top = floor == HIGHEST  # nothing is above int64's largest value
        start = ceil if op == ">=" else xp.where(top, floor, floor + 1)
        low = xp.where(below, low, xp.maximum(start, low))
        none = xp.logical_or(none, xp.logical_or(above, top if op == ">" else above))
    elif op in ("<", "<="):
        high = xp.where(above, high, ceil - 1 if op == "<" else floor)
        none = xp.logical_or(none, below)
    elif op == "=":
        low, high = xp.maximum(ceil, low), floor
        none = xp.logical_or(none, xp.logical_or(above, below))
    else:
        raise PlanError(f"band: op {op!r} has no range")
    return xp.where(none, xp.full(v.shape, HIGHEST, dtype=xp.int64), low), \
        xp.where(none, xp.full(v.shape, LOWEST, dtype=xp.int64), high)


def _scale(kind: DataType) -> int:
    return kind.scale if isinstance(kind, DecimalType) else 0
