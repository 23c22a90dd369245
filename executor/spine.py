"""A spine: the batches of an append-only collection of updates, merged geometrically.

Like an LSM tree: once more than `slack` batches are held, a new batch merges with the last
while the last is no larger than twice it (sizes in records, or in steps where counting
would cost a job), so n appended units leave O(log n) batches and each unit is re-merged
O(log n) times; up to `slack` small batches stay unmerged because each merge is a Spark job.
Merging cuts lineage (localCheckpoint): without it, plans grow with every step until the
driver runs out of heap.
"""
from __future__ import annotations

from functools import reduce
from typing import Callable, Optional

from pyspark.sql import DataFrame


def materialise(df: DataFrame) -> DataFrame:
    """Compute `df` once and cut its lineage."""
    return df.localCheckpoint(eager=True)


def materialise_counted(df: DataFrame) -> tuple[DataFrame, int]:
    """materialise and count in the same single job (the count is what computes it)."""
    frame = df.localCheckpoint(eager=False)
    return frame, frame.count()


def materialise_all(frames: list[DataFrame]) -> list[DataFrame]:
    """Materialise several frames in ONE Spark job (a step's outputs): each frame becomes one
    struct column of a tagged union, checkpointed once, then unpacked by its tag."""
    if len(frames) == 1:
        return [materialise(frames[0])]
    from pyspark.sql import functions as F

    def packed(i, df):
        cols = [F.struct(*[F.col(f"`{c}`") for c in df.columns]).alias(f"__r{j}") if j == i
                else F.lit(None).cast(other.schema).alias(f"__r{j}")
                for j, other in enumerate(frames)]
        return df.select(F.lit(i).alias("__o"), *cols)

    together = materialise(reduce(DataFrame.union, [packed(i, f) for i, f in enumerate(frames)]))
    return [together.where(F.col("__o") == i).select(f"__r{i}.*") for i in range(len(frames))]


class Spine:
    def __init__(self, merge: Optional[Callable[[DataFrame], DataFrame]] = None,
                 slack: int = 8):
        self.batches: list[tuple[int, DataFrame]] = []
        self.merge = merge or (lambda df: df)  # e.g. consolidation or compaction
        self.slack = slack

    def appended(self, batch: DataFrame, size: int = 1) -> "Spine":
        """A new spine with `batch` added (the old one is left intact: steps commit whole)."""
        out = Spine(self.merge, self.slack)
        batches = self.batches + [(size, batch)]
        while len(batches) > self.slack and batches[-2][0] <= 2 * batches[-1][0]:
            (s1, b1), (s2, b2) = batches[-2:]
            batches[-2:] = [(s1 + s2, materialise(self.merge(b1.unionByName(b2))))]
        out.batches = batches
        return out

    def union(self) -> Optional[DataFrame]:
        frames = [b for _, b in self.batches]
        return reduce(DataFrame.unionByName, frames) if frames else None
