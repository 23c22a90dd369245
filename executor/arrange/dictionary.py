"""The dictionary of STRING (or BINARY) values: each distinct value's int64 code, given in the
order values are first seen and never changed, so a code held in a trace keeps its meaning for
the runner's life.

A step looks up every distinct value it encodes. Keyed by Python objects (a dict), a lookup
cost a fresh object, its hash and a few cache misses: about 1 us a value in a dictionary of a
million strings, a quarter of a TPC-H q10 step of 15,000 orders at SF 1. Here the values
stay Arrow arrays (the chunks decoding reads), and a lookup hashes the asked values' bytes
with numpy (`hashes`) and probes an open-addressing table of the held values' hashes, all
lookups in lockstep (a sorted array of hashes cost a binary search's ~20 cache misses a
value). A value found by its hash is compared with the held value (Arrow's equal), so a
collision of hashes costs a slower path (`_settled`), never a wrong code. Those numpy calls
cost ~0.1 ms a lookup whatever its size, more than a dict for a few values (a computed
prefix of 25 distinct values a step): a lookup of at most FEW values first asks a small
dict of the values such lookups met lately.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpu_kernels import distinct

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class Dictionary:
    """Values of one Arrow type (pa.string() or pa.binary()) and their codes 0, 1, 2, ..."""

    def __init__(self, kind: pa.DataType):
        self.kind = kind
        self.size = 0
        self._chunks: list[pa.Array] = []  # the values in code order
        self._bounds = np.zeros(1, dtype=np.int64)  # where each chunk starts, then the size
        self._recent: dict = {}  # values of small lookups and their codes (at most RECENT)
        # an open-addressing table of the values' hashes: slot (hash & mask), else the next
        # free one; a code of -1 marks a free slot, and at most half the slots are taken
        self._hashes = np.zeros(64, dtype=np.uint64)
        self._codes = np.full(64, -1, dtype=np.int64)

    def codes(self, values: pa.Array) -> np.ndarray:
        """The int64 code of each of `values` (of the dictionary's type, each once, no null);
        values not held yet are added, in their order."""
        n = len(values)
        if not n:
            return np.zeros(0, dtype=np.int64)
        listed = values.to_pylist() if n <= FEW else None
        if listed is not None:  # a few values (a computed prefix): seen lately, most often
            known = [self._recent.get(v) for v in listed]
            if None not in known:
                return np.asarray(known, dtype=np.int64)
        codes = self._coded(values)
        if listed is not None:
            if len(self._recent) > RECENT:
                self._recent.clear()
            self._recent.update(zip(listed, codes.tolist()))
        return codes

    def _coded(self, values: pa.Array) -> np.ndarray:
        """`codes` by the hash table."""
        n = len(values)
        h = hashes(values)
        first, slot = self._probed(h)
        codes = np.full(n, -1, dtype=np.int64)
        seen = np.nonzero(first >= 0)[0]
        if seen.shape[0]:  # the first value held with that hash: is it this one?
            same = pc.equal(values.take(pa.array(seen)), self.taken(first[seen]))
            same = same.to_numpy(zero_copy_only=False).astype(bool)
            found = seen[same]
            codes[found] = first[found]
            for i in seen[~same]:  # a collision: the values held after it, one by one
                codes[i] = self._settled(values[int(i)].as_py(), h[i], slot[i])
        new = np.nonzero(codes < 0)[0]
        if new.shape[0]:
            codes[new] = np.arange(self.size, self.size + new.shape[0], dtype=np.int64)
            self.size += new.shape[0]
            self._appended(values.take(pa.array(new)))
            self._placed(h[new], codes[new])
        return codes

    def taken(self, codes: np.ndarray, mask=None) -> pa.Array:
        """The values of `codes` (null where `mask`), chunk by chunk: Arrow's take over a
        chunked array concatenates its chunks first, a copy of the whole dictionary for a
        few values."""
        if not codes.shape[0]:  # the dictionary may hold no chunk yet
            return pa.array([], type=self.kind)
        bounds = self._bounds
        chunk = np.searchsorted(bounds, codes, side="right") - 1
        if chunk.min() == chunk.max():  # one chunk: one take
            c = int(chunk[0])
            return self._chunks[c].take(pa.array(codes - bounds[c], mask=mask))
        order = np.argsort(chunk, kind="stable")
        in_order = chunk[order]
        parts = []
        for c in distinct(np, in_order):
            rows = order[np.searchsorted(in_order, c):np.searchsorted(in_order, c, side="right")]
            parts.append(self._chunks[int(c)].take(pa.array(codes[rows] - bounds[c])))
        back = np.empty_like(order)
        back[order] = np.arange(order.shape[0])
        return pa.concat_arrays(parts).take(pa.array(back, mask=mask))

    def _appended(self, values: pa.Array) -> None:
        """`values` as the last chunk, the last two combined while the older is at most
        twice the newer: O(log n) chunks, each value copied O(log n) times."""
        chunks = self._chunks
        chunks.append(values)
        while len(chunks) > 1 and len(chunks[-2]) <= 2 * len(chunks[-1]):
            chunks[-2:] = [pa.concat_arrays(chunks[-2:])]
        self._bounds = np.cumsum([0] + [len(c) for c in chunks])

    def _probed(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per hash, the code of the first held value with it (-1: none) and its slot: every
        hash probes its slots in lockstep, a round per slot, until its own or a free one."""
        mask = np.uint64(self._codes.shape[0] - 1)
        slot = (h & mask).astype(np.int64)
        first = np.full(h.shape[0], -1, dtype=np.int64)
        pending = np.arange(h.shape[0])
        while pending.shape[0]:
            at = slot[pending]
            code = self._codes[at]
            hit = (code >= 0) & (self._hashes[at] == h[pending])
            first[pending[hit]] = code[hit]
            pending = pending[(code >= 0) & ~hit]
            slot[pending] = (slot[pending] + 1) & int(mask)
        return first, slot

    def _settled(self, value, h, slot: int) -> int:
        """The code of `value` among the held values of hash `h` after `slot` (whose value is
        not it), -1 where none is it."""
        size = self._codes.shape[0]
        slot = (int(slot) + 1) % size
        while self._codes[slot] >= 0:
            if self._hashes[slot] == h and \
                    self.taken(self._codes[slot:slot + 1])[0].as_py() == value:
                return int(self._codes[slot])
            slot = (slot + 1) % size
        return -1

    def _placed(self, h: np.ndarray, codes: np.ndarray) -> None:
        """New values' hashes in free slots (the table doubled first where they would fill
        more than half of it): in rounds, each hash takes its slot if free and no earlier
        hash of the round takes it, else tries the next."""
        if (self.size * LOAD_DENOMINATOR) > self._codes.shape[0] * LOAD_NUMERATOR:
            held = np.nonzero(self._codes >= 0)[0]
            h, codes = np.concatenate([self._hashes[held], h]), \
                np.concatenate([self._codes[held], codes])
            size = self._codes.shape[0]
            while self.size * LOAD_DENOMINATOR > size * LOAD_NUMERATOR:
                size *= 2
            self._hashes = np.zeros(size, dtype=np.uint64)
            self._codes = np.full(size, -1, dtype=np.int64)
        mask = self._codes.shape[0] - 1
        slot = (h & np.uint64(mask)).astype(np.int64)
        if h.shape[0] <= FEW:  # one by one: a round of numpy costs more than a probe
            table = self._codes
            for s, hash_, code in zip(slot.tolist(), h, codes.tolist()):
                while table[s] >= 0:
                    s = (s + 1) & mask
                self._hashes[s], table[s] = hash_, code
            return
        pending = np.arange(h.shape[0])
        while pending.shape[0]:
            at = slot[pending]
            free = self._codes[at] < 0
            taken, first = np.unique(at[free], return_index=True)
            winners = pending[free][first]
            self._hashes[taken], self._codes[taken] = h[winners], codes[winners]
            placed = np.zeros(h.shape[0], dtype=bool)
            placed[winners] = True
            pending = pending[~placed[pending]]
            slot[pending] = (slot[pending] + 1) & mask


FEW = 64  # a lookup of this many values asks `_recent` first; new values placed one by one
RECENT = 4096
LOAD_NUMERATOR, LOAD_DENOMINATOR = 1, 2  # at most half the slots taken: ~1.5 probes a hit


def hashes(values: pa.Array) -> np.ndarray:
    """A uint64 hash of each value's bytes (no null among them): the bytes weighted by a
    fixed odd number per position, summed, mixed with the length. Computed on the Arrow
    buffers, one pass of numpy per step, no Python object a value."""
    large = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    _, offsets_buffer, data = values.buffers()[:3]
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if large else np.int32)[
        values.offset:values.offset + len(values) + 1].astype(np.int64)
    start, lengths = int(offsets[0]), np.diff(offsets)
    total = int(offsets[-1]) - start
    summed = np.zeros(total + 1, dtype=np.uint64)  # the terms' running sum (wrapping)
    if total:
        raw = np.frombuffer(data, dtype=np.uint8)[start:start + total].astype(np.uint64)
        position = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1] - start, lengths)
        terms = _weights(int(lengths.max()))[position] * (raw + np.uint64(1))
        summed[1:] = np.cumsum(terms, dtype=np.uint64)
    ends = summed[offsets - start]
    return _mixed((ends[1:] - ends[:-1]) ^ (lengths.astype(np.uint64) * _GOLDEN))


_WEIGHTS = np.zeros(0, dtype=np.uint64)


def _weights(n: int) -> np.ndarray:
    """At least n odd 64-bit weights, one per byte position (grown as values get longer)."""
    global _WEIGHTS
    if len(_WEIGHTS) < n:
        size = max(n, 2 * len(_WEIGHTS), 64)
        _WEIGHTS = _mixed(np.arange(1, size + 1, dtype=np.uint64) * _GOLDEN) | np.uint64(1)
    return _WEIGHTS


def _mixed(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
