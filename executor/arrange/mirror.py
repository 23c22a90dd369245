"""Host mirrors of traces: an arrangement's updates as sorted integer arrays on the driver.

A small step touches a few keys of arrangements that hold millions of updates; reading them
through Spark costs jobs that scan every batch. A mirror holds the same updates as runs of
arrays (numpy, or cupy on a GPU) sorted by (keys, values, time), merged geometrically by the
trace's own Spine rule and compacted to the same `since`, so a lookup is a few binary
searches per run (executor/driver.py). While driver steps append to it, the mirror is the
trace's storage: Spark receives it (decoded, arranged once) only when a Spark step or a
reader of Spark batches next needs the trace (Trace.synced), so no second copy of the
driver's updates is kept for Spark.

A mirror may also leave its older updates on the executors (`remote`: the trace's arranged
Spark batches, when they hold more than diffspark.host.lookup_rows records): building it
then costs nothing, each lookup (`rows`) reads only the asked keys' updates of those batches
in one Spark job (executor/arrange/remote.py), and the step's own updates stay runs on the
driver until Spark next reads the trace (Trace.synced arranges only them). A small step
against a trace too big to hold on the driver thus costs its lookups, not the state
(DESIGN.md section 12).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial, reduce

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from executor.arrange.encoding import arrow_schema
from executor.arrange.remote import Remote, encoded
from executor.arrange.spine import Spine
from executor.time import DIFF, TIME
from gpu_kernels import (Directory, band_segments, between, build_directory, consolidate,
                         directory_ranges, distinct, equal_range, spans, to_numpy)

# A run is searched through a directory (gpu_kernels.build_directory) instead of binary searches
# once it holds DIRECTORY_ROWS rows or more, its searched column spans at most twice its rows, and
# the keys searched in it, SEARCH_ROWS times over, reach its rows: a binary search in a big run
# costs about what a pass over SEARCH_ROWS of its rows costs the build, so the build costs no
# more than the searches before it did, and each later lookup is two gathers a key.
DIRECTORY_ROWS, SEARCH_ROWS = 1 << 16, 64


@dataclass(frozen=True)
class Run:
    """Updates sorted by (columns, time), consolidated: `cols` follow Mirror.columns."""

    cols: tuple
    t: object
    d: object
    # per prefix width, the prefix packed into one int64 word (`prefix`), made at the
    # first lookup: a run is never changed, and the big ones are searched at every step
    packed: dict = field(default_factory=dict, compare=False, repr=False)
    # per searched column (the number of columns packed in it): the keys searched so far, then
    # its Directory, or None where its values span too wide a range for one (`ranges`)
    lookups: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def size(self) -> int:
        return int(self.t.shape[0])

    def taken(self, xp, rows) -> "Run":
        """The updates at `rows` (in their order)."""
        return Run(tuple(xp.take(c, rows) for c in self.cols), xp.take(self.t, rows),
                   xp.take(self.d, rows))

    def prefix(self, xp, width: int):
        """(word, lows, highs): the longest prefix of the first `width` columns whose ranges
        multiply below 2**63, as one int64 per row in mixed radix of offsets from each
        column's least value, so that words order and equal rows as the prefix does (its
        width is len(lows)); None where not even two columns pack."""
        if width not in self.packed:
            lows, highs, total = [], [], 1
            for c in self.cols[:width]:
                low, high = int(xp.min(c)), int(xp.max(c))
                total *= high - low + 1
                if total >= 2 ** 63:
                    break
                lows.append(low)
                highs.append(high)
            self.packed[width] = None if len(lows) < 2 else \
                (_packed(xp, self.cols[:len(lows)], lows, highs), lows, highs)
        return self.packed[width]

    def ranges(self, xp, packs: int, word, keys):
        """(lo, hi): the rows whose searched column `word` (the first column, or the prefix
        of `packs` columns packed) equals each key are lo:hi."""
        index = self.lookups.get(packs, 0)
        if isinstance(index, int) and self.size >= DIRECTORY_ROWS:
            index += int(keys.shape[0])
            if index * SEARCH_ROWS >= self.size:
                span = int(word[-1]) - int(word[0]) + 1
                index = build_directory(xp, word) if span <= 2 * self.size else None
            self.lookups[packs] = index
        if isinstance(index, Directory):
            return directory_ranges(xp, index, keys)
        return xp.searchsorted(word, keys, side="left"), xp.searchsorted(word, keys, side="right")


def run_of(xp, cols, t, d, since: int | None = None) -> Run:
    """The consolidated, sorted run of updates; times below `since` advance to it."""
    if since is not None:
        t = xp.maximum(t, xp.asarray(since, dtype=t.dtype))
    keys, d = consolidate(xp, [*cols, t], d)
    return Run(tuple(keys[:-1]), keys[-1], d)


class Mirror:
    """A trace's updates on the driver: `columns` are its record columns, keys first.
    `schema` (the trace's updates as Spark has them: records in their order, time, diff) and
    `encoder` decode the mirror back to Arrow (`table`). Reads see only times below `upper`
    (an importing runner's view, executor/driver.py)."""

    def __init__(self, xp, columns: list[str], nkeys: int, spine: Spine | None = None,
                 schema: StructType | None = None, encoder=None, upper: int | None = None,
                 remote: Remote | None = None):
        self.xp, self.columns, self.nkeys = xp, list(columns), nkeys
        self.spine = spine if spine is not None else Spine(slack=4, combine=partial(_concat, xp))
        self.schema, self.encoder, self.upper, self.remote = schema, encoder, upper, remote

    def _with(self, spine: Spine, upper: int | None = None) -> "Mirror":
        return Mirror(self.xp, self.columns, self.nkeys, spine, self.schema, self.encoder,
                      upper, self.remote)

    def keyed_by(self, nkeys: int) -> "Mirror":
        """The same updates searched by their first `nkeys` columns (runs are sorted by
        every column, so any prefix is a key)."""
        return Mirror(self.xp, self.columns, nkeys, self.spine, self.schema, self.encoder,
                      self.upper, self.remote)

    @classmethod
    def of(cls, xp, frames: list[DataFrame], columns: list[str], nkeys: int, encoder,
           schema: StructType) -> "Mirror":
        """The mirror of a trace's batches (updates with `schema`), read in one Spark job
        and encoded (executor/arrange/encoding.py; NoCode for what has no code)."""
        mirror = cls(xp, columns, nkeys, schema=schema, encoder=encoder)
        if not frames:
            return mirror
        frame = reduce(DataFrame.union, frames).select(*columns, TIME, DIFF)
        run = run_of(xp, *encoded(xp, frame.toArrow(), frame.schema, encoder))
        mirror.spine = mirror.spine.appended(run, run.size) if run.size else mirror.spine
        return mirror

    @classmethod
    def over(cls, xp, batches: list[tuple], columns: list[str], nkeys: int, encoder,
             schema: StructType, whole: int) -> "Mirror":
        """A mirror whose updates so far stay in the trace's Spark `batches` ((records,
        frame) each): no job now, one per lookup; `whole`: the most records a pass over
        every update (`all`) may bring to the driver."""
        remote = Remote(tuple(batches), whole) if batches else None
        return cls(xp, columns, nkeys, schema=schema, encoder=encoder, remote=remote)

    @property
    def size(self) -> int:
        return self.local_size + (self.remote.size if self.remote else 0)

    @property
    def local_size(self) -> int:
        """The updates held on the driver (the step's, since the trace was last arranged)."""
        return sum(r.size for _, r in self.spine.batches)

    @property
    def nbytes(self) -> int:
        """Bytes of the runs' arrays on the driver: (columns + time + diff) x 8 per update,
        and the packed prefixes and directories lookups made (Run.prefix, Run.ranges)."""
        return sum(int(a.nbytes) for _, r in self.spine.batches for a in (
            *r.cols, r.t, r.d, *(p[0] for p in r.packed.values() if p is not None),
            *(d.starts for d in r.lookups.values() if isinstance(d, Directory))))

    def appended(self, run: Run, since: int) -> "Mirror":
        """A new mirror with `run` added; merges advance times below `since`."""
        if not run.size:
            return self
        # the spine's functions hold no mirror: a new mirror referring to its predecessor
        # kept every mirror ever made alive, a chain growing with each step (issue 20)
        spine = Spine(partial(_compacted, self.xp, since), 4, partial(_concat, self.xp))
        spine.batches = list(self.spine.batches)
        return self._with(spine.appended(run, run.size))

    def reading(self, run: Run) -> "Mirror":
        """The mirror with `run` as one more run, unmerged: a step reads its own updates
        apart from the older ones, which a merge may advance to the step's times."""
        spine = Spine(slack=self.spine.slack, combine=partial(_concat, self.xp))
        spine.batches = self.spine.batches + ([(run.size, run)] if run.size else [])
        return self._with(spine)

    def table(self) -> pa.Table:
        """Every update held on the driver, decoded to Arrow in the trace's column order (an
        iterate scope's iteration is one of the mirror's columns); the remote batches are
        Spark's already."""
        run = self.local()
        raw = {TIME: run.t, DIFF: run.d}
        arrays = [pa.array(to_numpy(self.xp, raw[f.name]), type=pa.int64()) if f.name in raw
                  else self.encoder.decode(to_numpy(self.xp, run.cols[self.columns.index(f.name)]),
                                           f.dataType) for f in self.schema.fields]
        return pa.Table.from_arrays(arrays, schema=arrow_schema(self.schema))

    def below(self, upper: int) -> "Mirror":
        """The same runs, read only at times below `upper` (filtered per lookup: no copy)."""
        return self._with(self.spine, upper)

    def local(self) -> Run:
        """The updates held on the driver (below `upper`), without the remote ones."""
        return self._concat_all([r for _, r in self.spine.batches])

    def all(self) -> Run:
        """Every update (below `upper`): the remote ones fetched in one job."""
        runs = [r for _, r in self.spine.batches]
        if self.remote is not None:
            runs.insert(0, run_of(self.xp, *self.remote.fetched(self, None)))
        return self._concat_all(runs)

    def rows(self, asked: list, superset: bool = False) -> Run:
        """Every update whose first len(asked) columns equal one of the asked tuples
        (`asked`: one array per column, keys first; repeats allowed); all updates for a
        mirror without keys. Each run is searched (binary searches per asked tuple), so a
        lookup costs the rows found, not the rows that share a first column. With
        `superset`, for a caller that ignores rows it did not ask for, a run of which the
        asked tuples hold at least half comes whole: no gather (a big step asks for most of
        an arrangement), and a mirror asked for at least as many tuples as it holds updates
        comes whole without a search (the asked tuples are not even made distinct: a first
        step's prefixes ask for every key of an arrangement of the same size)."""
        xp = self.xp
        runs = [r for _, r in self.spine.batches]
        if self.nkeys == 0:
            return self.all()
        if asked[0].shape[0] == 0 or not (runs or self.remote):
            return self._concat_all([])
        if superset and self.remote is None and \
                asked[0].shape[0] >= sum(r.size for r in runs):
            return self._concat_all(runs)  # asks at least as many as it holds: all of it
        asked = _distinct(xp, asked)
        if self.remote is not None:  # a superset of the asked, searched as a run of its own
            runs.insert(0, run_of(xp, *self.remote.fetched(self, asked)))
        parts = []
        for run in runs:
            if not run.size:
                continue
            lo, hi = _found(xp, run, asked)
            found = int(xp.sum(hi - lo))
            if not found:
                continue
            if superset and 2 * found >= run.size:
                parts.append(run)
                continue
            _, rows = spans(xp, lo, hi)
            parts.append(run.taken(xp, rows))
        return self._concat_all(parts)

    def banded(self, asked: list, low, high, groups: list, weight) -> tuple[Run, list, object]:
        """Band lookups: the updates whose first len(asked) columns equal asked tuple j and
        whose next column lies in [low[j], high[j]], each weighted by the sum of `weight`
        over the bands of its group (`groups`: one array per group column) that cover it
        (gpu_kernels.band_segments): (the updates as a Run, each one's group columns, its
        weight). Bands of a group with opposite weights cancel where they overlap, so a
        bound that moves reads only the rows between its old and new value."""
        xp = self.xp
        runs = [r for _, r in self.spine.batches]
        if not asked[0].shape[0]:
            runs = []
        elif self.remote is not None:
            runs.insert(0, run_of(xp, *self.remote.fetched(self, _distinct(xp, asked))))
        parts = []
        for run in runs:
            if not run.size:
                continue
            lo, hi = _found(xp, run, asked)
            first, stop = between(xp, run.cols[len(asked)], lo, hi, low, high)
            at, first, stop, w = band_segments(xp, groups, first, stop, weight)
            parent, rows = spans(xp, first, stop)
            parts.append((run.taken(xp, rows), [xp.take(g, parent) for g in at],
                          xp.take(w, parent)))
        if not parts:  # nothing asked, or nothing found
            empty = xp.zeros(0, dtype=xp.int64)
            return self._concat_all([]), [empty for _ in groups], empty
        run = _concat(xp, *(p[0] for p in parts))
        at = [xp.concat([p[1][i] for p in parts]) for i in range(len(groups))]
        w = xp.concat([p[2] for p in parts])
        if self.upper is None:
            return run, at, w
        kept = xp.nonzero(run.t < self.upper)[0]
        return run.taken(xp, kept), [xp.take(g, kept) for g in at], xp.take(w, kept)

    def holds(self, asked: list):
        """Per asked tuple (one array per key column), whether some run holds an update of
        it at any time, `upper` or not: False proves the tuple had no update below `upper`.
        A mirror with remote batches answers True (only a job could tell)."""
        xp = self.xp
        if self.remote is not None:
            return xp.ones(asked[0].shape, dtype=xp.bool)
        held = xp.zeros(asked[0].shape, dtype=xp.bool)
        for _, run in self.spine.batches:
            if run.size:
                lo, hi = _found(xp, run, asked)
                held = xp.logical_or(held, hi > lo)
        return held

    def _concat_all(self, runs: list[Run]) -> Run:
        xp = self.xp
        if not runs:
            empty = xp.zeros(0, dtype=xp.int64)
            return Run(tuple(empty for _ in self.columns), empty, empty)
        run = _concat(xp, *runs)
        if self.upper is None:
            return run
        return run.taken(xp, xp.nonzero(run.t < self.upper)[0])


def _distinct(xp, asked: list) -> list:
    """The asked tuples (one array per column), each once."""
    return [distinct(xp, asked[0])] if len(asked) == 1 else \
        consolidate(xp, list(asked), xp.ones_like(asked[0]))[0]


def _found(xp, run: Run, asked: list):
    """(lo, hi): the rows of `run` whose first len(asked) columns equal each asked tuple.
    Over several columns, a search (Run.ranges) of the run's packed prefix (Run.prefix),
    else of its first column; a lockstep search column by column (equal_range) within
    those rows for the columns left."""
    width = len(asked)
    packed = run.prefix(xp, width) if width > 1 else None
    if packed is None:
        lo, hi = run.ranges(xp, 1, run.cols[0], asked[0])
        return (lo, hi) if width == 1 else \
            equal_range(xp, run.cols[1:width], lo, hi, tuple(asked[1:]))
    word, lows, highs = packed
    packs = len(lows)
    inside = xp.ones(asked[0].shape, dtype=xp.bool)
    for a, low, high in zip(asked, lows, highs):  # a tuple outside the ranges is in no row
        inside = xp.logical_and(inside, xp.logical_and(a >= low, a <= high))
    key = xp.where(inside, _packed(xp, asked[:packs], lows, highs), xp.zeros_like(asked[0]))
    lo, hi = run.ranges(xp, packs, word, key)
    hi = xp.where(inside, hi, lo)
    return (lo, hi) if packs == width else \
        equal_range(xp, run.cols[packs:width], lo, hi, tuple(asked[packs:]))


def _packed(xp, cols, lows: list, highs: list):
    """Columns as one int64 each row: offsets from `lows` in the mixed radix of the ranges
    (meaningful only for rows within them; others may wrap)."""
    word = None
    for c, low, high in zip(cols, lows, highs):
        offset = c - xp.asarray(low, dtype=xp.int64)
        word = offset if word is None else \
            word * xp.asarray(high - low + 1, dtype=xp.int64) + offset
    return word


def _compacted(xp, since: int, run: Run, _size: int) -> tuple[Run, int]:
    merged = run_of(xp, run.cols, run.t, run.d, since)
    return merged, merged.size


def _concat(xp, *runs: Run) -> Run:
    """The runs' updates one after another (each column concatenated once)."""
    if len(runs) == 1:
        return runs[0]
    return Run(tuple(xp.concat(list(c)) for c in zip(*(r.cols for r in runs))),
               xp.concat([r.t for r in runs]), xp.concat([r.d for r in runs]))
