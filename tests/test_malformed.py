"""One hypothesis strategy draws malformed input of every class (as a DataFrame, a CSV or
Parquet file, or a path that is not a data file) for a durable runner: each is refused with
one error naming the input, the column and the rule, and the state directory and the
outputs are byte-identical before and after."""
from __future__ import annotations

import hashlib
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import outputs_rows, updates_df
from executor import InputError, Runner
from plans import Dataflow

DDL = "k BIGINT NOT NULL, v BIGINT"
FRONTIER, UPTO = 2, 5
COLS = ["k", "v", "time", "diff"]


def good_rows(draw, n):
    return [[draw(st.integers(0, 9)), draw(st.one_of(st.none(), st.integers(-5, 5))),
             draw(st.integers(FRONTIER, UPTO - 1)), draw(st.sampled_from([-1, 1, 2]))]
            for _ in range(n)]


@st.composite
def malformed(draw):
    """(input name, source spec, column, rule fragment): one fault among good rows."""
    rows = good_rows(draw, draw(st.integers(1, 5)))
    i = draw(st.integers(0, len(rows) - 1))
    kind = draw(st.sampled_from(["dataframe", "csv", "parquet"]))
    fault = draw(st.sampled_from([
        "missing column", "unexpected column", "wrong type", "null key", "null time",
        "null diff", "time below the frontier", "time at upto", "diff overflow",
        "text not a number", "diff not an integer", "diff beyond int64", "unknown input",
        "not a data file", "empty file", "missing file"]))
    cols, types = list(COLS), ["bigint"] * 4
    name, column, rule = "xs", None, None
    if fault == "missing column":
        gone = draw(st.sampled_from(["k", "v"]))
        j = cols.index(gone)
        cols, types = cols[:j] + cols[j + 1:], types[:j] + types[j + 1:]
        rows = [r[:j] + r[j + 1:] for r in rows]
        column, rule = gone, "missing column"
    elif fault == "unexpected column":
        extra = draw(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
            lambda s: s not in COLS))
        cols, types, rows = cols + [extra], types + ["bigint"], [r + [1] for r in rows]
        column, rule = extra, "unexpected column"
    elif fault == "wrong type":
        types[1], column, rule = "double", "v", "wrong type"
        rows = [r[:1] + [None if r[1] is None else r[1] + 0.5] + r[2:] for r in rows]
        kind = draw(st.sampled_from(["dataframe", "parquet"]))  # CSV has no types
    elif fault.startswith("null "):
        column = {"null key": "k", "null time": "time", "null diff": "diff"}[fault]
        rows[i][COLS.index(column)] = None
        rule = "null"
    elif fault == "time below the frontier":
        rows[i][2], column, rule = draw(st.integers(0, FRONTIER - 1)), "time", "interval"
    elif fault == "time at upto":
        rows[i][2], column, rule = draw(st.integers(UPTO, UPTO + 9)), "time", "interval"
    elif fault == "diff overflow":
        rows[i][3], column, rule = 2**63 - 1, "diff", "overflow"
        rows.append([1, 1, FRONTIER, draw(st.integers(1, 9))])
    elif fault in ("text not a number", "diff not an integer", "diff beyond int64"):
        kind, types = "csv", ["string"] * 4
        column = "v" if fault == "text not a number" else "diff"
        rows[i][COLS.index(column)] = {"text not a number": draw(st.sampled_from(
            ["x", "1e3", "--1", "0x10"])), "diff not an integer": "1.5",
            "diff beyond int64": "99999999999999999999"}[fault]
        rule = "is not a BIGINT"
    elif fault == "unknown input":
        name, column, rule = draw(st.sampled_from(["ys", "x", "XS2"])), "-", "unknown input"
    else:  # the source itself is bad
        kind = fault
        column, rule = "-", {"not a data file": "Parquet (.parquet) or CSV",
                             "empty file": "", "missing file": "file not found"}[fault]
        if fault == "empty file":
            kind = draw(st.sampled_from(["empty csv", "empty parquet"]))
            column, rule = ("k", "missing column") if kind == "empty csv" else \
                ("-", "not a readable parquet file")
    return name, (kind, cols, types, rows), column, rule


def build_source(spark, tmp, spec):
    kind, cols, types, rows = spec
    if kind == "dataframe":
        ddl = ", ".join(f"`{c}` {t}" for c, t in zip(cols, types))
        return spark.createDataFrame([tuple(r) for r in rows], ddl)
    path = os.path.join(tmp, hashlib.sha1(repr(spec).encode()).hexdigest()[:12])
    if kind == "csv":
        with open(path + ".csv", "w") as f:
            f.write(",".join(cols) + "\n")
            f.writelines(",".join("" if v is None else str(v) for v in r) + "\n" for r in rows)
        return path + ".csv"
    if kind == "parquet":
        arrow = {"bigint": pa.int64(), "double": pa.float64()}
        pq.write_table(pa.table({c: pa.array([r[j] for r in rows], type=arrow[t])
                                 for j, (c, t) in enumerate(zip(cols, types))}),
                       path + ".parquet")
        return path + ".parquet"
    if kind == "not a data file":
        with open(path + ".json", "w") as f:
            f.write("{}")
        return path + ".json"
    if kind in ("empty csv", "empty parquet"):
        target = path + (".csv" if kind == "empty csv" else ".parquet")
        open(target, "w").close()
        return target
    return path + ".parquet"  # missing file


def snapshot(where: str, runner) -> tuple:
    """Every byte of the state directory (but the lock) and every output row."""
    files = {}
    for root, _, names in os.walk(where):
        for n in names:
            p = os.path.join(root, n)
            if n != "lock":
                with open(p, "rb") as f:
                    files[os.path.relpath(p, where)] = hashlib.sha256(f.read()).hexdigest()
    return files, runner.frontier, runner.steps, outputs_rows(runner, ["out", "count"])


@pytest.fixture(scope="module")
def durable(spark, conf, tmp_path_factory):
    flow = Dataflow()
    xs = flow.input("xs", DDL)
    flow.output("out", xs.map("k", "v * 2 AS v2"))
    flow.output("count", xs.count(by=["k"]))
    where = str(tmp_path_factory.mktemp("state"))
    runner = Runner(flow, conf=conf, spark=spark, state=where)
    runner.step({"xs": updates_df(spark, DDL, [((1, 2), 0, 1), ((2, 3), 1, 1)])}, upto=FRONTIER)
    yield runner, where, snapshot(where, runner), str(tmp_path_factory.mktemp("inputs"))
    runner.release_state()


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=malformed())
def test_malformed_input_is_refused_and_changes_nothing(spark, durable, case):
    runner, where, before, tmp = durable
    name, spec, column, rule = case
    with pytest.raises(InputError) as err:
        runner.step({name: build_source(spark, tmp, spec)}, upto=UPTO)
    assert (err.value.input, err.value.column) == (name, column), str(err.value)
    assert rule in str(err.value) and f"input '{name}', column '{column}'" in str(err.value)
    assert snapshot(where, runner) == before
