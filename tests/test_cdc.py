"""Debezium change records (executor/inputs/cdc.py) into a keyed input, through `follow`: random
create/update/delete/snapshot-read streams (JSON lines, the Kafka Connect envelope,
tombstones, Parquet) against a plain-Python table replaying the records one by one, the
plan's outputs against the reference interpreter; malformed records refused by name."""
from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StructType
from test_cli import assert_ok, cli
from test_input_tables import C, keyed_flow

from executor import InputError, Runner
from executor.apps.cli import main
from executor.apps.follow import Follower
from executor.inputs import cdc
from executor.reference import reference
from plans.semantics import consolidate

REGIONS = ["north", "south", "east"]


def random_stream(rng: random.Random, steps: int) -> list[list[dict]]:
    """Steps of valid change records over keys 0..4 (a table replayed as they are made)."""
    table, out = {}, []
    for _ in range(steps):
        records = []
        for _ in range(rng.randrange(1, 7)):
            k = rng.randrange(5)
            row = {"c_id": k, "name": rng.choice(["ann", "bo", None]),
                   "region": rng.choice(REGIONS), "extra": 1}
            if k not in table:
                op, before, after = rng.choice("cr"), None, row
            else:
                op = rng.choice("udr")
                before, after = table[k], (None if op == "d" else row)
            records.append({"op": op, "before": before, "after": after, "ts_ms": 1})
            if after is None:
                del table[k]
            else:
                table[k] = after
        out.append(records)
    return out


def replayed(stream: list[list[dict]]) -> list:
    """The ordinary updates the records make, one record at a time: at the end of step t,
    each changed key's old row out and new row in, at time t."""
    table, updates = {}, []
    for t, records in enumerate(stream):
        before = dict(table)
        for r in records:
            k = (r["after"] or r["before"])["c_id"]
            if r["op"] == "d":
                table.pop(k)
            else:
                table[k] = tuple(r["after"][c] for c in ("c_id", "name", "region"))
        for k in set(before) | set(table):
            if before.get(k) != table.get(k):
                updates += [(row, t, d) for row, d in ((before.get(k), -1), (table.get(k), 1))
                            if row is not None]
    return updates


def write(folder, t: int, records: list[dict], rng: random.Random) -> None:
    if t % 3 == 2:  # Parquet with struct columns
        rows = [{"op": r["op"], "before": r["before"], "after": r["after"]} for r in records]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{t:04d}.parquet")
        return
    lines = []
    for r in records:
        lines.append(json.dumps({"schema": {}, "payload": r} if rng.random() < 0.3 else r))
        if r["op"] == "d" and rng.random() < 0.5:
            lines.append("null")  # the tombstone Kafka writes after a delete
    (folder / f"{t:04d}.jsonl").write_text("\n".join(lines) + "\n")


def test_change_records_through_follow_equal_the_reference(spark, conf, tmp_path):
    rng = random.Random(5)
    stream = random_stream(rng, 9)
    folder = tmp_path / "customers"
    folder.mkdir()
    flow = keyed_flow()
    runner = Runner(flow, conf=conf, spark=spark, state=str(tmp_path / "state"))
    follower = Follower(runner, {"customers": str(folder)}, str(tmp_path / "out"),
                        say=lambda *a, **k: None, cdc=["customers"])
    for t, records in enumerate(stream):
        write(folder, t, records, rng)
        assert follower.step(follower.new_files()).upper == t + 1
    runner.release_state()
    got = {}
    for name in flow.outputs:
        rows = [r for f in sorted((tmp_path / "out" / name).iterdir())
                for r in pq.read_table(f).to_pylist()]
        got[name] = consolidate([(tuple(v for c, v in r.items() if c not in ("time", "diff")),
                                  r["time"], r["diff"]) for r in rows])
    assert got == reference(spark, flow.outputs, {"customers": replayed(stream)})


def test_a_key_created_and_deleted_within_a_batch_never_was(spark):
    schema = StructType.fromDDL(C)
    row = {"c_id": 7, "name": "x", "region": "north"}
    records = [(1, {"op": "c", "before": None, "after": row}),
               (2, {"op": "u", "before": row, "after": {**row, "name": "y"}}),
               (3, {"op": "d", "before": {"c_id": 7}, "after": None}),
               (4, {"op": "d", "before": {"c_id": 8}, "after": None, "time": 3}),
               (5, {"op": "r", "before": None, "after": {**row, "c_id": 8}, "time": 4})]
    table = cdc.updates("customers", records, schema, ["c_id"])
    assert table.to_pylist() == [
        {"c_id": 8, "name": None, "region": None, "time": 3, "diff": -1},
        {"c_id": 8, "name": "x", "region": "north", "time": 4, "diff": 1}]


ROW = {"c_id": 1, "name": "ann", "region": "north"}
MALFORMED = [
    ({"op": "x", "after": ROW}, r"column 'op': op is c \(create\), u \(update\), d "
                                r"\(delete\) or r \(snapshot read\) \(row 2: op 'x'\)"),
    ({"before": ROW}, r"column 'op': op is .* \(row 2: op None\)"),
    ({"op": "c", "after": None}, r"column 'after': op 'c' \(create\) has a row in `after` "
                                 r"\(row 2: after None\)"),
    ({"op": "d", "before": 3}, r"column 'before': op 'd' \(delete\) has a row in `before` "
                               r"\(row 2: before 3\)"),
    ({"op": "u", "after": {"c_id": 1, "name": "a"}}, r"column 'after.region': the `after` "
                                                     r"row holds every column of the input "
                                                     r"\(row 2: no 'region'"),
    ({"op": "c", "after": {**ROW, "c_id": None}}, r"column 'after.c_id': key columns are not "
                                                  r"null \(row 2: c_id null\)"),
    ({"op": "u", "before": ROW, "after": {**ROW, "c_id": 2}},
     r"column 'before.c_id': an update keeps its key .* \(row 2: key \(1,\) -> \(2,\)\)"),
    ({"op": "c", "after": {**ROW, "c_id": "one"}}, r"column 'c_id': values fit the column's "
                                                   r"type \(int64\) \(row 2: 'one'\)"),
    ([1, 2], r"column '-': a change record is an object \(row 2: \[1, 2\]\)"),
]


@pytest.mark.parametrize("record, message", MALFORMED)
def test_malformed_change_records_are_refused_by_name(spark, tmp_path, record, message):
    path = tmp_path / "batch.jsonl"
    good = {"op": "c", "before": None, "after": {**ROW, "c_id": 9}}
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(InputError, match=r"input 'customers', " + message):
        cdc.updates("customers", cdc.read("customers", str(path)), StructType.fromDDL(C),
                    ["c_id"])


def test_unreadable_change_files_and_cli_misuse(spark, tmp_path, capsys):
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"op": "c"}\n{oops\n')
    with pytest.raises(InputError, match=r"input 'customers', column '-': each line is one "
                                         r"JSON change record \(b.jsonl line 2: "):
        cdc.read("customers", str(bad))
    with pytest.raises(InputError, match=r"change records are JSON lines"):
        cdc.read("customers", str(tmp_path / "x.csv"))
    with pytest.raises(InputError, match=r"change records feed a keyed input"):
        cdc.updates("customers", [], StructType.fromDDL(C), [])
    plan = tmp_path / "plan.py"
    plan.write_text("def build(flow):\n    flow.output('o', flow.input('plain', 'a BIGINT'))\n")
    for argv, error in [(["--cdc", "plain"], "--cdc plain: change records feed a keyed input"),
                        (["--cdc", "other"], "--cdc other: no --input other")]:
        assert main(["follow", str(plan), "--input", f"plain={tmp_path}", "--output",
                     str(tmp_path / "o"), "--state", str(tmp_path / "s")] + argv) == 2
        assert error in capsys.readouterr().err


def test_run_reads_change_records_into_a_keyed_input(tmp_path):
    """`run --cdc NAME`: a file of random change records is one step; the output is the
    table the records leave, as replaying them one by one gives it."""
    rng = random.Random(11)
    stream = random_stream(rng, 4)
    records = [r for step in stream for r in step]
    (tmp_path / "changes.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    plan = tmp_path / "plan.py"
    plan.write_text("def build(flow):\n"
                    f"    c = flow.input('customers', {C!r}, key=['c_id'])\n"
                    "    flow.output('rows', c)\n"
                    "    flow.output('per_region', c.count(by=['region']))\n")
    out = tmp_path / "out"
    assert_ok(cli("run", plan, "--input", f"customers={tmp_path / 'changes.jsonl'}",
                  "--cdc", "customers", "--output", out, tmp=tmp_path))
    final = consolidate([(row, 0, d) for row, _, d in replayed([records])])
    assert final  # the records leave some rows
    rows = pq.read_table(out / "rows").to_pylist()
    assert consolidate([(tuple(r[c] for c in ("c_id", "name", "region")), r["time"],
                         r["diff"]) for r in rows]) == final
