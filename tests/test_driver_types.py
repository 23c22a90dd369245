"""The driver placement over every column type: the reduce family, joins, queries and linear
chains (plans/examples/families.py) on STRING, DATE, TIMESTAMP, DECIMAL, DOUBLE and BOOLEAN
columns with nulls, stepped on the driver, against the reference interpreter and against a
runner that steps on Spark."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import examples, updates_table
from executor import Runner
from executor.reference import reference, rows_of
from plans import Dataflow
from plans.examples import families
from plans.examples.families import CUSTOMERS, ORDERS

HORIZON = 5
SPARK_ONLY = {"diffspark.host.step_rows": "0"}


def relational_flow() -> Dataflow:
    flow = Dataflow()
    families.relational(flow)
    return flow


def _maybe(s):
    return st.one_of(st.none(), s)


order = st.tuples(
    st.integers(0, 5), st.integers(0, 3), _maybe(st.sampled_from(["new", "paid", "é"])),
    _maybe(st.sampled_from([Decimal("1.50"), Decimal("-2.25"), Decimal("0.00"),
                            Decimal("9999999999.99")])),
    _maybe(st.sampled_from([dt.date(2020, 1, 1), dt.date(1969, 12, 31)])),
    _maybe(st.sampled_from([dt.datetime(2021, 5, 6, 7, 8, 9, 123456),
                            dt.datetime(1970, 1, 1)])),
    _maybe(st.sampled_from([0.5, -1.25, 0.0, 3.0])), _maybe(st.booleans()))
customer = st.tuples(st.integers(0, 4), _maybe(st.sampled_from(["ann", "bob", ""])),
                     _maybe(st.sampled_from(["retail", "corp"])))


def _updates(records):
    return st.lists(st.tuples(records, st.integers(0, HORIZON - 1),
                              st.sampled_from([-1, 1, 1, 2])), max_size=14)


@settings(max_examples=examples(3, 3), deadline=None, suppress_health_check=list(HealthCheck))
@given(orders=_updates(order), customers=_updates(customer),
       cuts=st.sets(st.integers(1, HORIZON - 1), max_size=3).map(
           lambda s: sorted(s) + [HORIZON]))
def test_every_type_on_the_driver_matches_reference_and_spark(spark, conf, orders, customers,
                                                                cuts):
    flow = relational_flow()
    inputs = {"orders": (ORDERS, orders), "customers": (CUSTOMERS, customers)}
    expected = reference(spark, flow.outputs, {n: u for n, (_, u) in inputs.items()})
    ours, theirs = Runner(flow, conf=conf, spark=spark), \
        Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    lo = 0
    for upto in cuts:
        feed = {n: updates_table(ddl, [u for u in ups if lo <= u[1] < upto])
                for n, (ddl, ups) in inputs.items()}
        assert ours.step(feed, upto=upto).host
        theirs.step(feed, upto=upto)
        lo = upto
        for name in flow.outputs:
            got = rows_of(ours.output(name))
            assert got == [u for u in expected[name] if u[1] < upto], (name, upto)
            assert got == rows_of(theirs.output(name)), (name, upto)


LEFT_ON_SPARK = {"diffspark.host.lookup_rows": "0", "diffspark.host.step_rows": "15"}
# 16 orders: a step holding them runs on Spark (step_rows 15)
PAD = [((10 + i, i % 4, ["new", "paid", None][i % 3], Decimal("1.50") * (i - 5),
         dt.date(2020, 1, 1 + i), dt.datetime(2021, 5, 6, 7, 8, i), 0.5 * i, i % 2 == 0), 0, 1)
       for i in range(16)]


@settings(max_examples=examples(3, 3), deadline=None, suppress_health_check=list(HealthCheck))
@given(orders=_updates(order), customers=_updates(customer),
       cuts=st.sets(st.integers(2, HORIZON - 1), max_size=2).map(
           lambda s: [1] + sorted(s) + [HORIZON]))
def test_every_type_over_traces_left_on_spark(spark, conf, orders, customers, cuts):
    """diffspark.host.lookup_rows=0: a driver step leaves the traces Spark arranged in their
    Spark batches and reads only the keys it touches from them (Mirror.over); Spark steps
    before (the padded first) and after (the pad retracted in the last) read the driver's
    updates back. Every output equals the reference and a runner that steps on Spark."""
    flow = relational_flow()
    orders = PAD + orders + [(r, HORIZON - 1, -1) for r, _, _ in PAD]
    inputs = {"orders": (ORDERS, orders), "customers": (CUSTOMERS, customers)}
    expected = reference(spark, flow.outputs, {n: u for n, (_, u) in inputs.items()})
    ours, theirs = Runner(flow, conf=conf | LEFT_ON_SPARK, spark=spark), \
        Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    lo, placements = 0, []
    for upto in cuts:
        feed = {n: updates_table(ddl, [u for u in ups if lo <= u[1] < upto])
                for n, (ddl, ups) in inputs.items()}
        placements.append(ours.step(feed, upto=upto).placement)
        theirs.step(feed, upto=upto)
        lo = upto
        if placements[-1] == "driver":  # the Spark batches stayed where they were
            stored = {s["stored"] for s in ours.stats().values() if s["remote_records"]}
            assert stored and stored <= {"spark", "spark+driver"}, stored
        for name in flow.outputs:
            got = rows_of(ours.output(name))
            assert got == [u for u in expected[name] if u[1] < upto], (name, upto)
            assert got == rows_of(theirs.output(name)), (name, upto)
    assert placements[0] == placements[-1] == "spark"
    assert set(placements[1:-1]) <= {"driver"}


def test_a_sum_beyond_int64_steps_on_spark(spark, conf):
    """A DECIMAL sum the driver cannot hold in int64 is computed by Spark, exactly."""
    flow = Dataflow()
    flow.output("s", flow.input("o", "k BIGINT, x DECIMAL(18,0)").sum("x", by=["k"]))
    runner = Runner(flow, conf=conf, spark=spark)
    big = Decimal(10**17 * 9)
    table = updates_table("k BIGINT, x DECIMAL(18,0)", [((1, big), 0, 1), ((1, big), 0, 1)] * 4)
    result = runner.step({"o": table}, upto=1)
    assert not result.host
    assert rows_of(runner.output("s")) == [((1, big * 8), 0, 1)]


def test_float_null_and_compound_keys_over_traces_left_on_spark(spark, conf):
    """Lookups in Spark's batches by a DOUBLE and a STRING key together (-0.0 and 0.0 one
    key, NaN one key, nulls a key of their own for a reduction and none for a join) equal a
    runner that steps on Spark; so does a DECIMAL total that leaves int64 in the Spark
    aggregate that builds the driver's totals (that step runs on Spark)."""
    ddl, other = "x DOUBLE, s STRING, v BIGINT", "x DOUBLE, s STRING, w DECIMAL(18,0)"
    flow = Dataflow()
    a, b = flow.input("a", ddl), flow.input("b", other)
    flow.output("n", a.count(by=["x", "s"]))
    flow.output("j", a.arrange_by_key("x", "s").join(b.arrange_by_key("x", "s"), on=["x", "s"]))
    flow.output("total", b.sum("w", by=["s"]))
    keys = [(x, s) for x in (0.0, -0.0, float("nan"), 1.5, None) for s in ("p", None, "q")]
    big = Decimal(10**17 * 9)
    steps = [({"a": [((x, s, i), 0, 1) for i, (x, s) in enumerate(keys)] * 2,
               "b": [((x, s, Decimal(i)), 0, 1) for i, (x, s) in enumerate(keys)]}, "spark"),
             ({"a": [((-0.0, "p", 0), 1, -1), ((float("nan"), None, 7), 1, 1)],
               "b": [((0.0, "p", Decimal(5)), 1, 1), ((None, None, Decimal(1)), 1, 1)]},
              "driver"),
             ({"b": [((1.5, "q", big), 2, 1)] * 11}, "spark"),  # beyond int64 in the sum
             ({"a": [((None, "q", 3), 3, 1)], "b": [((1.5, "q", -big), 3, 1)]}, "spark")]
    ours = Runner(flow, conf=conf | LEFT_ON_SPARK, spark=spark)
    theirs = Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    for t, (feed, where) in enumerate(steps):
        tables = {n: updates_table({"a": ddl, "b": other}[n], ups) for n, ups in feed.items()}
        assert ours.step(tables, upto=t + 1).placement == where, t
        theirs.step(tables, upto=t + 1)
        for name in flow.outputs:
            assert _nan(rows_of(ours.output(name))) == _nan(rows_of(theirs.output(name))), \
                (name, t)


def _nan(rows):
    """Rows with NaN as a string, which equals itself, in one order."""
    return sorted([(tuple("NaN" if v != v else v for v in r), t, d) for r, t, d in rows],
                  key=repr)


@settings(max_examples=examples(30, 60), deadline=None)
@given(batches=st.lists(st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "é", "", "x" * 40])
                                            | st.text(max_size=3)), max_size=6), max_size=8))
def test_strings_decode_to_what_was_encoded_across_dictionary_chunks(batches):
    """STRING codes decode (executor/arrange/encoding.py) chunk by chunk of the growing
    dictionary, nulls and an empty dictionary included, to the values encoded."""
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.types import StringType

    from executor.arrange.encoding import Encoder

    encoder, seen, codes = Encoder(), [], []
    for batch in batches:
        codes.append(encoder.encode(pa.array(batch, pa.string()), StringType()))
        seen += batch
        order = np.random.default_rng(len(seen)).permutation(len(seen))
        got = encoder.decode(np.concatenate(codes + [np.zeros(0, np.int64)])[order],
                             StringType())
        assert got.type == pa.string() and got.to_pylist() == [seen[i] for i in order]


def test_a_chain_reads_input_values_as_given_and_unread_columns_are_never_encoded(spark, conf):
    """An input column no operator reads is never encoded (executor/arrange/changes.py
    `Coded`): its STRING values never enter the dictionary, and a value without a code
    (a BIGINT equal to int64 min) does not send the step to Spark. A chain over an input
    reads the values as given, not as decoded from codes: -0.0 stays -0.0, as Spark reads
    it."""
    from executor.arrange.encoding import NULL_CODE

    ddl = "k BIGINT, note STRING, big BIGINT, x DOUBLE"
    flow = Dataflow()
    o = flow.input("o", ddl)
    flow.output("shown", o.map("k", "CAST(x AS STRING) AS shown"))
    ours, theirs = Runner(flow, conf=conf, spark=spark), \
        Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    table = updates_table(ddl, [((1, f"note {i}", int(NULL_CODE), -0.0), 0, 1) for i in range(50)]
                          + [((2, None, 5, 1.5), 0, -1)])
    before = ours.encoder.size()
    assert ours.step({"o": table}, upto=1).host
    theirs.step({"o": table}, upto=1)
    assert ours.encoder.size() - before == 2  # "-0.0" and "1.5" only, not the notes
    got = rows_of(ours.output("shown"))
    assert got == rows_of(theirs.output("shown"))
    assert ((1, "-0.0"), 0, 50) in got


def test_a_filter_carries_the_codes_of_the_columns_it_keeps(spark, conf, monkeypatch):
    """A chain that filters and maps the output of a join (whose columns are codes) takes the
    codes of each column it keeps as it is by row, instead of decoding and encoding its
    values again: no STRING is looked up in the dictionary downstream. A computed column
    is still encoded from its values. Equal to a runner on Spark."""
    from executor.arrange.encoding import Encoder

    ddl_o, ddl_c = "k BIGINT, amount BIGINT, note STRING", "k BIGINT, name STRING"
    flow = Dataflow()
    joined = flow.input("o", ddl_o).map("k", "amount", "note", "1 AS one").join(
        flow.input("c", ddl_c), on=["k"])
    kept = joined.filter("amount > 1").map("name", "note", "upper(name) AS shout", "amount")
    flow.output("by_name", kept.sum("amount", by=["name", "note", "shout"]))
    flow.output("kept", joined.filter("amount > 2"))  # keeps `one` NOT NULL, unread
    ours, theirs = Runner(flow, conf=conf, spark=spark), \
        Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    first = {"o": updates_table(ddl_o, [((k % 3, k, f"n{k % 2}"), 0, 1) for k in range(9)]),
             "c": updates_table(ddl_c, [((0, "ann"), 0, 1), ((1, None), 0, 1),
                                        ((2, "bob"), 0, 1)])}
    later = {"o": updates_table(ddl_o, [((1, 5, "n1"), 1, 1), ((2, 7, None), 1, 1),
                                         ((0, 1, "n0"), 1, 1)]),
             "c": updates_table(ddl_c, [((2, "bob"), 1, -1), ((2, "cy"), 1, 1)])}
    for runner in (ours, theirs):
        runner.step(first, upto=1)
    looked_up = []
    encode = Encoder._dictionary
    monkeypatch.setattr(Encoder, "_dictionary", lambda self, arr, kind: (
        looked_up.append(frozenset(arr.to_pylist())) if self is ours.encoder else None)
        or encode(self, arr, kind))
    assert ours.step(later, upto=2).host
    theirs.step(later, upto=2)
    # each input's STRING where its arrangement for the join reads it, and the computed
    # column; the names and notes the filter keeps are never encoded again
    assert sorted(looked_up, key=sorted_key) == sorted(
        [frozenset({"n1", None, "n0"}), frozenset({"bob", "cy"}),
         frozenset({None, "BOB", "CY"})], key=sorted_key)
    for name in ("by_name", "kept"):
        assert rows_of(ours.output(name)) == rows_of(theirs.output(name))


def sorted_key(values: frozenset) -> list:
    return sorted("" if v is None else v for v in values)
