"""Change data capture: Debezium-style change records into a keyed input's updates.

A change record has `op` (c create, u update, d delete, r snapshot read), `before` and
`after` (the row before and after the change, objects or structs; either may be null as
the op allows), optionally `time` (the update's time; absent: the step's frontier), and
Debezium's other fields (`source`, `ts_ms`, ...), which are ignored. JSON lines (`.json`,
`.jsonl`, `.ndjson`; the `{"schema": ..., "payload": {...}}` envelope of Kafka Connect's
JSON converter is unwrapped; a `null` line, a Kafka tombstone, is skipped) or Parquet
(`before`/`after` struct columns).

A keyed input (`flow.input(..., key=[...])`, executor/inputs/tables.py) takes diff +1 for
an upsert and -1 for a delete, one update per key and time. So a key's records at one
time collapse to their net effect, in file order: the last record's row (+1) when it is
c, u or r; a delete (-1) when it is d, unless the key's first record there is a create
(the key was absent before: nothing). `after` must hold every column of the input's
schema (more are ignored: an input may project a table); a delete needs the key in
`before`. A malformed record refuses the whole batch (InputError naming the input, the
column, the rule, the row number and the offending value).
"""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.types import LongType, StructField, StructType

from executor.arrange.encoding import arrow_schema
from executor.inputs.tables import _frozen
from executor.runtime.errors import InputError
from executor.time import DIFF, TIME

OPS = {"c": "create", "u": "update", "d": "delete", "r": "snapshot read"}
JSON_LINES = (".json", ".jsonl", ".ndjson")
OP_RULE = "op is c (create), u (update), d (delete) or r (snapshot read)"


def read(name: str, path: str) -> list[tuple[int, object]]:
    """The change records of a file, or of a folder's files in name order (names starting
    with `.` or `_` skipped), as (row number in its file, record)."""
    if os.path.isdir(path):
        return [r for f in sorted(os.listdir(path)) if not f.startswith((".", "_"))
                for r in read(name, os.path.join(path, f))]
    if path.endswith(".parquet"):
        return list(enumerate(pq.read_table(path).to_pylist(), start=1))
    if not path.endswith(JSON_LINES):
        raise InputError(name, "-", "change records are JSON lines (.json, .jsonl, .ndjson) "
                         "or Parquet (.parquet)", path)
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                records.append((n, json.loads(line)))
            except ValueError as e:
                raise InputError(name, "-", "each line is one JSON change record",
                                 f"{os.path.basename(path)} line {n}: {e}: "
                                 f"{_shown(line.strip())}") from None
    return records


def updates(name: str, records: list[tuple[int, object]], schema: StructType,
            key: list[str]) -> pa.Table:
    """The keyed input's updates (record columns, [time,] diff) of change records (as
    `read` returns them)."""
    if not key:
        raise InputError(name, "-", "change records feed a keyed input "
                         "(flow.input(..., key=[...]))", "the input has no key")
    columns = schema.fieldNames()
    net: dict = {}  # (key, time) -> (first op, last op, row)
    timed = False
    for n, record in records:
        if isinstance(record, dict) and "op" not in record and \
                isinstance(record.get("payload"), dict):
            record = record["payload"]  # Kafka Connect's JSON envelope
        if record is None:
            continue  # a tombstone
        if not isinstance(record, dict):
            raise InputError(name, "-", "a change record is an object",
                             f"row {n}: {_shown(record)}")
        op = record.get("op")
        if op not in OPS:
            raise InputError(name, "op", OP_RULE, f"row {n}: op {_shown(op)}")
        side = "before" if op == "d" else "after"
        row = record.get(side)
        if not isinstance(row, dict):
            raise InputError(name, side, f"op {op!r} ({OPS[op]}) has a row in `{side}`",
                             f"row {n}: {side} {_shown(row)}")
        needed = key if op == "d" else columns
        missing = [c for c in needed if c not in row]
        if missing:
            raise InputError(name, f"{side}.{missing[0]}", f"the `{side}` row holds every "
                             f"{'key ' if op == 'd' else ''}column of the input",
                             f"row {n}: no {missing[0]!r} (it has {', '.join(row)})")
        k = tuple(row[c] for c in key)
        for c, v in zip(key, k):
            if v is None:
                raise InputError(name, f"{side}.{c}", "key columns are not null",
                                 f"row {n}: {c} null")
        before = record.get("before")
        if op == "u" and isinstance(before, dict) and all(c in before for c in key) and \
                tuple(before[c] for c in key) != k:
            raise InputError(name, f"before.{key[0]}", "an update keeps its key (Debezium "
                             "sends a key change as a delete and a create)",
                             f"row {n}: key {_shown(tuple(before[c] for c in key))} -> "
                             f"{_shown(k)}")
        timed = timed or TIME in record
        at = (_frozen(k), record.get(TIME))
        first = net[at][0] if at in net else op
        net[at] = (first, op, n, {c: row.get(c) for c in columns})
    rows = []
    for (_, t), (first, last, n, row) in net.items():
        if last == "d" and first == "c":
            continue  # created and deleted within the batch: it never was
        rows.append((n, {**row, **({TIME: t} if timed else {}), DIFF: -1 if last == "d" else 1}))
    return _table(name, rows, schema, timed)


def _table(name: str, rows: list, schema: StructType, timed: bool) -> pa.Table:
    extra = ([StructField(TIME, LongType(), True)] if timed else []) + \
        [StructField(DIFF, LongType(), False)]
    arrow = arrow_schema(StructType(schema.fields + extra))
    arrays = []
    for field in arrow:
        values = [r[field.name] for _, r in rows]
        try:
            arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            for n, r in rows:  # the first value that does not fit, for the message
                try:
                    pa.array([r[field.name]], type=field.type)
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError,
                        OverflowError):
                    raise InputError(name, field.name, f"values fit the column's type "
                                     f"({field.type})", f"row {n}: "
                                     f"{_shown(r[field.name])}") from None
            raise
    return pa.Table.from_arrays(arrays, schema=arrow)


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
