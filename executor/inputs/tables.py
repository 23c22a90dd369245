"""Keyed (upsert) and strict inputs: each keeps its current rows on the driver, so a step's
updates are checked and, for a keyed input, translated into ordinary updates before either
placement runs the step (the operators downstream only ever see DD's updates).

A keyed input (`flow.input(..., key=[...])`) is a table with upsert semantics, like
Materialize's UPSERT envelope: diff +1 for a present key replaces its row (the old row's
retraction is emitted), diff -1 deletes the key's row (its other columns may be null). A
strict input (`strict=True`) refuses a step that would make a record's accumulated
multiplicity negative at any of the step's times; only the records the step touches are
checked. Other inputs keep DD's semantics and have no table here.

A broken rule refuses the whole step (InputError naming the input, the key or record, the
rule) before anything changes; the tables change only when the step has committed. Durable
runners commit each step's consolidated updates of these inputs as one batch (manifest
`input_rows`, executor/durability/state.py); a batch merges with the one before it while it is at
least half as large, so a restore reads O(log steps) batches and sums them.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import Optional

import pyarrow as pa
from pyspark.sql.types import LongType, StructField, StructType

from executor.arrange.encoding import arrow_schema
from executor.durability.state import arrow_digest
from executor.inputs.updates import normalise, read_source
from executor.runtime.errors import InputError
from executor.time import DIFF, TIME

_NAN = object()  # NaN as an identity: equal to itself, as Spark groups it


def _frozen(value):
    """A hashable identity of a value from Arrow's to_pylist (lists, structs, maps)."""
    if isinstance(value, float) and value != value:
        return _NAN
    if isinstance(value, (list, tuple)):
        return tuple(map(_frozen, value))
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    return value


class InputTable:
    """One keyed or strict input's current rows and its committed batches."""

    def __init__(self, name: str, schema: StructType, key: tuple, strict: bool):
        self.name, self.strict = name, strict
        self.width = len(schema.fields)
        self.key_names = list(key)
        self.key = [schema.fieldNames().index(k) for k in key]
        # a keyed input's NOT NULL columns outside the key: checked on the rows it keeps,
        # not on a delete, whose other columns may be null (updates_schema)
        self.required = [(i, f.name) for i, f in enumerate(schema.fields)
                         if key and not f.nullable and f.name not in key]
        # keyed: key identity -> record; strict: record identity -> (record, multiplicity)
        self.rows: dict = {}
        self.batches: list[tuple[pa.Table, int]] = []  # (records + diff, rows), committed
        diff = StructField(DIFF, LongType(), False)
        self.arrow = arrow_schema(StructType(schema.fields + [diff]))
        self.updates_arrow = arrow_schema(StructType(
            schema.fields + [StructField(TIME, LongType(), False), diff]))

    # ------------------------------------------------------------------ a step
    def step(self, table: pa.Table, durable: bool) -> tuple[pa.Table, "Change"]:
        """The step's ordinary updates for `table` (records, time, diff) and the change to
        apply once it commits; InputError when a rule is broken."""
        rows = list(zip(*[c.to_pylist() for c in table.columns])) if table.num_rows else []
        if self.key:
            out, touched = self._upsert(rows)
            table = pa.Table.from_pylist([dict(zip(self.updates_arrow.names, r)) for r in out],
                                         schema=self.updates_arrow)
        else:
            out, touched = rows, self._strict(rows)
        batches = self._merged(self._consolidated(out)) if durable else self.batches
        return table, Change(self, touched, batches)

    def _upsert(self, rows: list) -> tuple[list, dict]:
        n, first = self.width, {}
        for i, row in enumerate(rows):
            if row[n + 1] not in (1, -1):
                raise InputError(self.name, DIFF, "a keyed input's diff is +1 (upsert) or -1 "
                                 "(delete)", f"row {i + 1}: diff {row[n + 1]}")
            seen = first.setdefault((row[n], _frozen(self._key(row))), i)
            if seen != i:
                self._refuse("two updates for one key at one time", row,
                             f"rows {seen + 1} and {i + 1}")
        touched: dict = {}  # key identity -> its record after the step (None: deleted)
        out = []
        for i in sorted(range(len(rows)), key=lambda i: rows[i][n]):
            record, t, d = rows[i][:n], rows[i][n], rows[i][n + 1]
            k = _frozen(self._key(record))
            old = touched[k] if k in touched else self.rows.get(k)
            if d == -1:
                if old is None:
                    self._refuse("delete of an absent key", rows[i])
                out.append(old + (t, -1))
                touched[k] = None
            elif old is None or _frozen(old) != _frozen(record):
                for c, column in self.required:
                    if record[c] is None:
                        raise InputError(self.name, column, "null in a NOT NULL column (a "
                                         "keyed input's upsert)",
                                         f"key {self._shown_key(record)} at time {t}")
                if old is not None:
                    out.append(old + (t, -1))
                out.append(record + (t, 1))
                touched[k] = record
        return out, touched

    def _strict(self, rows: list) -> dict:
        n, touched = self.width, {}  # record identity -> (record, multiplicity after)
        order = sorted(range(len(rows)), key=lambda i: rows[i][n])
        for t, group in groupby(order, key=lambda i: rows[i][n]):
            changed = set()
            for i in group:
                record = rows[i][:n]
                r = _frozen(record)
                kept, m = touched.get(r) or self.rows.get(r) or (record, 0)
                touched[r] = (kept, m + rows[i][n + 1])
                changed.add(r)
            for r in changed:
                record, m = touched[r]
                if m < 0:
                    raise InputError(self.name, "-", "strict input: a record's multiplicity "
                                     "would become negative",
                                     f"record {_shown(record)} reaches {m} at time {t}")
        return touched

    def _key(self, row: tuple) -> tuple:
        return tuple(row[k] for k in self.key)

    def _shown_key(self, row: tuple) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in zip(self.key_names, self._key(row)))

    def _refuse(self, rule: str, row: tuple, detail: str = ""):
        raise InputError(self.name, ", ".join(self.key_names), rule,
                         f"key {self._shown_key(row)} at time {row[self.width]}" +
                         (f": {detail}" if detail else ""))

    # ------------------------------------------------------------------ batches (durable)
    def _consolidated(self, updates: list) -> pa.Table:
        """Updates (record..., [time,] diff) summed per record, zeros dropped, as Arrow
        (records + diff)."""
        n, sums = self.width, {}
        for u in updates:
            r = _frozen(u[:n])
            record, d = sums.get(r, (u[:n], 0))
            sums[r] = (record, d + u[-1])
        rows = [record + (d,) for record, d in sums.values() if d]
        return pa.Table.from_pylist([dict(zip(self.arrow.names, r)) for r in rows],
                                    schema=self.arrow)

    def _merged(self, batch: pa.Table) -> list[tuple[pa.Table, int]]:
        out = list(self.batches) + ([(batch, batch.num_rows)] if batch.num_rows else [])
        while len(out) >= 2 and 2 * out[-1][1] >= out[-2][1]:
            (a, _), (b, _) = out[-2], out[-1]
            merged = self._consolidated(_tuples(pa.concat_tables([a, b])))
            out[-2:] = [(merged, merged.num_rows)] if merged.num_rows else []
        return out

    def restore(self, batches: list[pa.Table]) -> None:
        """The rows of a committed state: its batches summed."""
        self.batches = [(b, b.num_rows) for b in batches]
        total = self._consolidated([u for b in batches for u in _tuples(b)])
        for u in _tuples(total):
            record, m = u[:-1], u[-1]
            if self.key:
                self.rows[_frozen(self._key(record))] = record
            else:
                self.rows[_frozen(record)] = (record, m)


@dataclass
class Change:
    """What a step does to an input table, applied once the step has committed."""

    table: InputTable
    touched: dict
    batches: list

    def apply(self) -> None:
        rows = self.table.rows
        for k, value in self.touched.items():
            if value is None or (not self.table.key and value[1] == 0):
                rows.pop(k, None)
            else:
                rows[k] = value
        self.table.batches = self.batches


def _tuples(table: pa.Table) -> list[tuple]:
    return list(zip(*[c.to_pylist() for c in table.columns])) if table.num_rows else []


def _shown(record: tuple) -> str:
    text = repr(record)
    return text if len(text) <= 120 else text[:117] + "..."


# ---------------------------------------------------------------------------- the runner's
def updates_schema(node, schema: StructType) -> StructType:
    """The schema an input's updates are read and checked against: a keyed input's columns
    outside its key may be null in a delete (InputTable checks NOT NULL on the rows it
    keeps); any other input's is its declared schema."""
    if not node.key:
        return schema
    return StructType([f if f.nullable or f.name in node.key else
                       StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def tables(flow) -> dict[str, InputTable]:
    """A table per keyed or strict input of the dataflow."""
    from pyspark.sql.types import StructType as Struct
    return {name: InputTable(name, Struct.fromDDL(node.schema), node.key, node.strict)
            for name, node in flow.inputs.items() if node.key or node.strict}


@dataclass
class Ruled:
    """A step's changes to the input tables, and the content hashes of those inputs as
    given (a resumed runner recognises a repeated step by them, not by the translation)."""

    changes: dict
    digests: dict

    def batches(self, tables: dict) -> dict[str, list]:
        return {name: self.changes[name].batches if name in self.changes else t.batches
                for name, t in tables.items()}

    def apply(self) -> None:
        for change in self.changes.values():
            change.apply()


def translate(runner, updates: dict, lower: int, upto: Optional[int]) -> tuple[dict, Ruled]:
    """`updates` with each keyed or strict input's replaced by its ordinary updates (an
    Arrow table either placement reads), and what the step does to the tables."""
    from executor.driver import arrow_ready
    out, changes, digests = dict(updates), {}, {}
    for name, table in runner._tables.items():
        if name not in updates:
            continue
        schema = runner.input_schemas[name]
        source = updates[name]
        raw = arrow_ready(source, schema, lower, upto)
        if raw is None:
            raw = normalise(name, read_source(runner.spark, name, source, schema), schema,
                            lower, upto).toArrow()
        out[name], changes[name] = table.step(raw, runner._store is not None)
        digests[name] = arrow_digest(raw)
    return out, Ruled(changes, digests)
