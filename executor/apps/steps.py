"""Feeding files in steps: the distinct input times split into K consecutive groups, one
step each (`run --steps K`, `triangles --steps K`).
"""
from __future__ import annotations

from typing import Optional


def distinct_times(frames, steps: int) -> list[int]:
    """The distinct input times in order (only the last one matters for one step)."""
    from functools import reduce

    from pyspark.sql import functions as F

    from executor.time import TIME
    if not frames:
        return []
    times = reduce(lambda a, b: a.unionByName(b), [df.select(TIME) for df in frames])
    if steps == 1:
        last = times.agg(F.max(TIME)).collect()[0][0]
        return [] if last is None else [last]
    return [r[0] for r in times.distinct().orderBy(TIME).collect()]


def step_bounds(times: list[int], steps: int, upto: Optional[int]) -> list[tuple[int, int]]:
    """(lower, upto) of each step: the distinct times split into `steps` consecutive groups;
    a step's upto is the first time of the next group (the last: its last time + 1, or
    `upto`). No times and no `upto`: no step (close alone emits nothing)."""
    k = max(1, min(steps, len(times)))
    groups = [times[len(times) * i // k: len(times) * (i + 1) // k] for i in range(k)]
    groups = [g for g in groups if g]
    bounds, lower = [], 0
    for i, group in enumerate(groups):
        hi = groups[i + 1][0] if i + 1 < len(groups) else (
            upto if upto is not None else group[-1] + 1)
        bounds.append((lower, hi))
        lower = hi
    if not bounds and upto is not None:
        bounds.append((0, upto))
    return bounds
