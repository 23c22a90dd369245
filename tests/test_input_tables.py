"""Keyed (upsert) and strict inputs (executor/inputs/tables.py) against a plain-Python model
of upsert tables and multiplicities, on both placements, across a durable restart; the plan
downstream against the reference interpreter fed the model's ordinary updates."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples, outputs_rows, updates_table
from executor import InputError, Runner
from executor.reference import reference
from plans import Dataflow, PlanError
from plans.semantics import consolidate

C = "c_id BIGINT, name STRING, region STRING"
SPARK_ONLY = {"diffspark.host.step_rows": "0"}
OUTPUTS = ["rows", "per_region"]


def keyed_flow() -> Dataflow:
    f = Dataflow()
    c = f.input("customers", C, key=["c_id"])
    f.output("rows", c)
    f.output("per_region", c.count(by=["region"]))
    return f


# ---------------------------------------------------------------------------- the model
def upsert_model(rows: dict, ops: list) -> list | None:
    """The ordinary updates of one step of keyed `ops` ((c_id, name, region, time, diff))
    against `rows` (c_id -> record; updated in place), or None when the step is refused
    (then `rows` is unchanged)."""
    if len({(o[0], o[3]) for o in ops}) < len(ops):
        return None  # two updates for one key at one time
    trial, out = dict(rows), []
    for k, name, region, t, d in sorted(ops, key=lambda o: o[3]):
        old = trial.get(k)
        if d == -1:
            if old is None:
                return None  # delete of an absent key
            out.append((old, t, -1))
            del trial[k]
        elif old != (k, name, region):
            if old is not None:
                out.append((old, t, -1))
            out.append(((k, name, region), t, 1))
            trial[k] = (k, name, region)
    rows.clear()
    rows.update(trial)
    return out


op = st.tuples(st.integers(0, 3), st.sampled_from(["ann", "bo", None]),
               st.sampled_from(["north", "south", None]), st.integers(0, 1),
               st.sampled_from([1, 1, -1]))
streams = st.lists(st.lists(op, max_size=5), min_size=1, max_size=4)


def run_keyed(spark, conf, stream, overrides=None, state=None, restart_at=None):
    """Feed `stream` (steps of ops at times lower + 0/1) and compare with the model: refused
    steps raise InputError naming the input and the key column, and change nothing."""
    flow = keyed_flow()
    runner = Runner(flow, conf=conf | (overrides or {}), spark=spark, state=state)
    rows, accepted, lower = {}, [], 0
    for i, ops in enumerate(stream):
        if i == restart_at:
            runner.release_state()
            runner = Runner(flow, conf=conf | (overrides or {}), spark=spark, state=state)
        ups = [((k, n, r), lower + t, d) for k, n, r, t, d in ops]
        want = upsert_model(rows, [(k, n, r, lower + t, d) for k, n, r, t, d in ops])
        given = {"customers": updates_table(C, [
            (rec if d == 1 else (rec[0], None, None), t, d) for rec, t, d in ups])}
        if want is None:
            with pytest.raises(InputError, match=r"input 'customers', column 'c_id': "
                                                 r"(two updates for one key at one time|"
                                                 r"delete of an absent key) \(key c_id="):
                runner.step(given, upto=lower + 2)
            continue
        runner.step(given, upto=lower + 2)
        accepted += want
        lower += 2
    got = outputs_rows(runner, OUTPUTS)
    assert got["rows"] == consolidate(accepted)
    assert got == reference(spark, flow.outputs, {"customers": accepted})
    if state is not None:
        runner.release_state()
    return rows


@settings(max_examples=examples(3, 30), suppress_health_check=list(HealthCheck))
@given(stream=streams)
def test_keyed_input_on_the_driver_equals_the_model(spark, conf, stream):
    run_keyed(spark, conf, stream)


@settings(max_examples=examples(1, 6), suppress_health_check=list(HealthCheck))
@given(stream=streams)
def test_keyed_input_on_spark_equals_the_model(spark, conf, stream):
    run_keyed(spark, conf, stream, SPARK_ONLY)


@settings(max_examples=examples(2, 10), suppress_health_check=list(HealthCheck))
@given(stream=st.lists(st.lists(op, max_size=5), min_size=3, max_size=4),
       spark_side=st.booleans())
def test_keyed_input_survives_a_durable_restart(spark, conf, tmp_path_factory, stream,
                                                spark_side):
    state = str(tmp_path_factory.mktemp("keyed"))
    run_keyed(spark, conf, stream, SPARK_ONLY if spark_side else None, state, restart_at=2)


def test_keyed_upsert_replaces_and_deletes_by_key(spark, conf):
    """The issue's example: an upsert of a present key retracts the old row; a delete names
    only the key; deleting it again, or two values at one time, refuses the step whole."""
    runner = Runner(keyed_flow(), conf=conf, spark=spark)
    runner.step({"customers": updates_table(C, [((1, "ann", "north"), 0, 1),
                                                ((2, "bo", "south"), 0, 1)])}, upto=1)
    done = runner.step({"customers": updates_table(C, [((1, "ann", "south"), 1, 1),
                                                       ((2, None, None), 1, -1)])}, upto=2)
    assert sorted(done.arrow("rows").to_pylist(), key=str) == sorted([
        {"c_id": 1, "name": "ann", "region": "north", "time": 1, "diff": -1},
        {"c_id": 1, "name": "ann", "region": "south", "time": 1, "diff": 1},
        {"c_id": 2, "name": "bo", "region": "south", "time": 1, "diff": -1}], key=str)
    with pytest.raises(InputError, match=r"input 'customers', column 'c_id': delete of an "
                                         r"absent key \(key c_id=2 at time 2\)"):
        runner.step({"customers": updates_table(C, [((3, "cy", None), 2, 1),
                                                    ((2, None, None), 2, -1)])}, upto=3)
    with pytest.raises(InputError, match=r"two updates for one key at one time \(key c_id=3 "
                                         r"at time 2: rows 1 and 2\)"):
        runner.step({"customers": updates_table(C, [((3, "cy", None), 2, 1),
                                                    ((3, "di", None), 2, 1)])}, upto=3)
    with pytest.raises(InputError, match=r"column 'diff': a keyed input's diff is \+1"):
        runner.step({"customers": updates_table(C, [((3, "cy", None), 2, 2)])}, upto=3)
    assert runner.frontier == 2
    runner.step({"customers": updates_table(C, [((3, "cy", None), 2, 1)])}, upto=3)
    assert sorted(tuple(r) for r in runner.snapshot("rows", at=2).collect()) == \
        [(1, "ann", "south", 1), (3, "cy", None, 1)]


# ---------------------------------------------------------------------------- strict
S = "item STRING, qty BIGINT"


def strict_flow(strict: bool) -> Dataflow:
    f = Dataflow()
    f.output("stock", f.input("stock", S, strict=strict).count(by=["item"]))
    return f


@settings(max_examples=examples(3, 30), suppress_health_check=list(HealthCheck))
@given(stream=st.lists(st.lists(st.tuples(st.sampled_from(["a", "b", None]),
                                          st.integers(0, 1), st.integers(0, 1),
                                          st.sampled_from([1, 2, -1, -2])), max_size=5),
                       min_size=1, max_size=4),
       spark_side=st.booleans())
def test_strict_input_refuses_negative_multiplicities(spark, conf, stream, spark_side):
    """A step is refused iff some record's accumulated multiplicity goes negative at one of
    its times (then nothing changes); a default input takes every step (DD's semantics)."""
    flow = strict_flow(True)
    runner = Runner(flow, conf=conf | (SPARK_ONLY if spark_side and len(stream) < 3 else {}),
                    spark=spark)
    plain = Runner(strict_flow(False), conf=conf, spark=spark)
    counts, accepted, every = Counter(), [], []
    for lower in range(0, 2 * len(stream), 2):
        ups = [((item, qty), lower + t, d) for item, qty, t, d in stream[lower // 2]]
        trial, ok = Counter(counts), True
        for t in (lower, lower + 1):
            for rec, _, d in (u for u in ups if u[1] == t):
                trial[rec] += d
            ok = ok and all(m >= 0 for m in trial.values())
        given = {"stock": updates_table(S, ups)}
        plain.step(given, upto=lower + 2)
        every += ups
        if ok:
            runner.step(given, upto=lower + 2)
            counts, accepted = trial, accepted + ups
            continue
        with pytest.raises(InputError, match=r"input 'stock', column '-': strict input: a "
                                             r"record's multiplicity would become negative "
                                             r"\(record \("):
            runner.step(given, upto=lower + 2)
        runner.step({}, upto=lower + 2)
    assert outputs_rows(runner, ["stock"]) == reference(spark, flow.outputs, {"stock": accepted})
    assert outputs_rows(plain, ["stock"]) == reference(spark, flow.outputs, {"stock": every})


def test_inputs_declare_their_semantics():
    f = Dataflow()
    with pytest.raises(PlanError, match="key column 'id' is not in the schema"):
        f.input("c", C, key=["id"])
    with pytest.raises(PlanError, match="must be a non-empty list"):
        f.input("c", C, key="c_id")
    with pytest.raises(PlanError, match="strict='yes' must be True or False"):
        f.input("c", C, strict="yes")
    assert "key=['c_id'] strict" in f.input("c", C, key=["c_id"], strict=True).node.label()
    assert f.input("d", C).node.label() == f"Input d ({C})"


# ---------------------------------------------------------------------------- SQL tables
CUSTOMERS_SQL = """CREATE TABLE customers (c_id BIGINT, name STRING NOT NULL COMMENT 'shown',
                                           region STRING, PRIMARY KEY (C_ID));
CREATE MATERIALIZED VIEW per_region AS
  SELECT region, count(*) AS n FROM customers GROUP BY region;
"""


@pytest.mark.parametrize("overrides", [{}, SPARK_ONLY], ids=["driver", "spark"])
def test_sql_primary_key_declares_a_keyed_input(spark, conf, overrides):
    """A .sql plan's CREATE TABLE ... PRIMARY KEY is a keyed input (upsert semantics; the
    key NOT NULL, as SQL has it). NOT NULL outside the key holds for the rows kept, while a
    delete names only the key. Steps against the upsert model and the reference."""
    from plans.sql import script
    flow = Dataflow()
    script(flow, CUSTOMERS_SQL)
    node = flow.inputs["customers"]
    assert node.key == ("c_id",)
    assert node.schema == "`c_id` BIGINT NOT NULL, `name` STRING NOT NULL, `region` STRING"
    runner = Runner(flow, conf=conf | overrides, spark=spark)
    rows, accepted = {}, []
    steps = [[(1, "ann", "north", 0, 1), (2, "bo", "south", 0, 1), (3, "cy", None, 1, 1)],
             [(1, "ann", "south", 2, 1), (2, None, None, 2, -1), (3, "cy", "north", 3, 1)],
             [(2, "bo", None, 4, 1), (1, None, None, 5, -1)]]
    for lower, ops in zip((0, 2, 4), steps):
        given = {"customers": updates_table(C, [((k, n, r), t, d) for k, n, r, t, d in ops])}
        runner.step(given, upto=lower + 2)
        accepted += upsert_model(rows, ops)
    refused = {"customers": updates_table(C, [((4, "di", "x"), 6, 1), ((3, None, "x"), 6, 1)])}
    with pytest.raises(InputError, match=r"input 'customers', column 'name': null in a NOT NULL "
                                         r"column \(a keyed input's upsert\) \(key c_id=3 at "
                                         r"time 6\)"):
        runner.step(refused, upto=7)
    nokey = {"customers": updates_table(C, [((None, "ed", "x"), 6, 1)])}
    with pytest.raises(InputError, match=r"input 'customers', column 'c_id': null in a NOT NULL"):
        runner.step(nokey, upto=7)
    runner.step({}, upto=7)  # the refused steps changed nothing
    assert outputs_rows(runner, ["per_region"]) == \
        reference(spark, flow.outputs, {"customers": accepted})
    assert rows == {2: (2, "bo", None), 3: (3, "cy", "north")}


@pytest.mark.parametrize("table, message", [
    ("(a BIGINT PRIMARY KEY, b BIGINT, PRIMARY KEY (b))", r"PRIMARY KEY \(b\) is a second "
     r"PRIMARY KEY \(rule: a table has one primary key\)"),
    ("(a BIGINT, PRIMARY KEY (z))", r"PRIMARY KEY column 'z' is not a column of the table "
     r"\(its columns: a\)"),
    ("(a BIGINT, b BIGINT UNIQUE)", r"constraint UNIQUE on column b is not supported"),
    ("(a BIGINT, b BIGINT CHECK (b > 0))", r"constraint CHECK \(b > 0\) on column b"),
    ("(a BIGINT, b BIGINT DEFAULT 1)", r"constraint DEFAULT 1 on column b"),
    ("(a BIGINT, FOREIGN KEY (a) REFERENCES t (a))", r"FOREIGN KEY \(a\) REFERENCES t \(a\) is "
     r"not supported; a table declares columns")])
def test_sql_tables_refuse_constraints_they_would_not_enforce(table, message):
    from plans.sql import script
    with pytest.raises(PlanError, match=r"sql: CREATE TABLE t: " + message):
        script(Dataflow(), f"CREATE TABLE t {table};\n"
                           "CREATE MATERIALIZED VIEW v AS SELECT a FROM t;")
