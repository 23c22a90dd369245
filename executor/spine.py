"""A spine: the batches of an append-only collection of updates, merged geometrically.

Like an LSM tree, a new batch merges with the last while the last is no larger than twice it
(sizes in records, or in steps where counting would cost a job), so n appended units leave
O(log n) batches and each unit is re-merged O(log n) times. Merging cuts Spark lineage
(localCheckpoint): without it, plans grow with every step until the driver runs out of heap.
"""
from __future__ import annotations

from functools import reduce
from typing import Callable, Optional

from pyspark.sql import DataFrame


def materialise(df: DataFrame) -> DataFrame:
    """Compute `df` once and cut its lineage."""
    return df.localCheckpoint(eager=True)


class Spine:
    def __init__(self, merge: Optional[Callable[[DataFrame], DataFrame]] = None):
        self.batches: list[tuple[int, DataFrame]] = []
        self.merge = merge or (lambda df: df)  # e.g. consolidation or compaction

    def appended(self, batch: DataFrame, size: int = 1) -> "Spine":
        """A new spine with `batch` added (the old one is left intact: steps commit whole)."""
        out = Spine(self.merge)
        batches = self.batches + [(size, batch)]
        while len(batches) >= 2 and batches[-2][0] <= 2 * batches[-1][0]:
            (s1, b1), (s2, b2) = batches[-2:]
            batches[-2:] = [(s1 + s2, materialise(self.merge(b1.unionByName(b2))))]
        out.batches = batches
        return out

    def union(self) -> Optional[DataFrame]:
        frames = [b for _, b in self.batches]
        return reduce(DataFrame.unionByName, frames) if frames else None
