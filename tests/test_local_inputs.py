"""The driver's file readers (executor/inputs/local.py) against Spark's (executor/inputs/updates.py)
on random files: pyarrow reads a CSV file as Spark's reader does or not at all, and a column
it parses from text holds the values Spark's rules give. A reader that declines is never
wrong (Spark reads the file), so each test also shows that the ordinary files are read."""
from __future__ import annotations

import csv
import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from py4j.protocol import Py4JJavaError
from pyspark.sql.types import LongType, StringType, StructField, StructType

from conftest import examples
from executor.arrange.spine import local_rows
from executor.inputs.local import csv_table, local_table, parsed
from executor.inputs.updates import CsvSource, _read_csv, csv as csv_source, normalise
from executor.runtime.errors import InputError

TEXT = st.text(alphabet=list('ab é,;|\t"\'\\NUL0\n\r'), max_size=6)


def spark_rows(spark, name, src, schema):
    """Spark's reading of the file as text rows, or "refused"."""
    try:
        return [tuple(r) for r in _read_csv(spark, name, src, schema).collect()]
    except (InputError, Py4JJavaError):
        return "refused"


@settings(max_examples=examples(25, 60), suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.lists(TEXT | st.none(), min_size=3, max_size=3), max_size=6),
       delimiter=st.sampled_from([",", ";", "\t", "|"]), header=st.booleans(),
       null_value=st.sampled_from(["", "NULL", "\\N"]), quote_all=st.booleans())
def test_csv_text_reads_as_spark_reads_it_or_not_at_all(spark, tmp_path_factory, rows,
                                                        delimiter, header, null_value,
                                                        quote_all):
    """Files as Python's csv module writes them (RFC 4180: doubled quotes, quoted delimiters
    and line breaks), in four dialects, with and without a header, nulls written as the null
    value: pyarrow's rows equal Spark's wherever it reads the file, and it reads every file
    whose values hold no line break (nor an empty string where the null value is not
    empty, nor, under a tab, a row of only blanks and nulls)."""
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter=delimiter,
                       quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL)
        if header:
            w.writerow(["a", "b", "c"])
        w.writerows([[null_value if v is None else v for v in r] for r in rows])
    schema = StructType.fromDDL("a STRING, b STRING, c STRING")
    src = csv_source(path, delimiter=delimiter, header=header, null_value=null_value)
    ours = csv_table("t", src, schema)
    theirs = spark_rows(spark, "t", src, schema)
    values = [v for r in rows for v in r if v is not None]
    breaks = any("\n" in v or "\r" in v for v in values)
    empty = null_value != "" and "" in values  # Spark reads "" as "" and an empty field as null
    # a line of blanks under a tab is skipped by Spark's reader: such a file is left to Spark
    blank = delimiter.isspace() and any(
        all(v is None or all(ord(ch) <= 32 for ch in v) for v in r) for r in rows)
    if ours is None:
        assert breaks or empty or blank or not rows, (rows, theirs)
        return
    assert not breaks and not empty
    assert [tuple(r.values()) for r in ours.to_pylist()] == theirs


CANONICAL = {
    "BIGINT": st.integers(-2**63, 2**63 - 1).map(str),
    "INT": st.integers(-2**31, 2**31 - 1).map(str),
    "DOUBLE": st.floats(allow_nan=False, allow_infinity=False).map(repr)
    | st.decimals(allow_nan=False, allow_infinity=False, places=4).map(str),
    "DECIMAL(6,2)": st.decimals(-99999, 99999, places=3).map(str),
    "DATE": st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)).map(str),
    "BOOLEAN": st.sampled_from(["true", "false", "True", "FALSE"]),
}
OTHER = st.sampled_from([" 5", "+5", "5.0", "1e5", "0x1F", "t", "yes", "2024-1-5",
                         "2023-02-30", "12.555", "1,5", "", "NaN", "-0", "007", "-.5",
                         "9" * 20, "1.50", "0001.00", "2147483648",
                         "1e999"])


@settings(max_examples=examples(20, 50), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kind=st.sampled_from(sorted(CANONICAL)))
def test_text_parsed_on_arrow_is_what_sparks_rules_give(spark, data, kind):
    """A text column parsed by `parsed` holds exactly the values Spark's casts give (the
    checks in updates.normalise); one that is not all canonical stays text, and a column of
    canonical values is always parsed."""
    values = data.draw(st.lists(CANONICAL[kind] | st.none(), min_size=1, max_size=8))
    odd = data.draw(st.lists(OTHER, max_size=2))
    schema = StructType.fromDDL(f"v {kind}")
    text = pa.table({"v": pa.array(values + odd, pa.string())})
    ours = parsed(text, schema)
    typed = not pa.types.is_string(ours.schema.field("v").type)
    if not odd and kind != "DECIMAL(6,2)":
        assert typed, values
    if not typed:
        return
    try:
        theirs = local_rows(normalise("t", spark.createDataFrame(text), schema, 0, None,
                                      local=True))
    except InputError as e:
        pytest.fail(f"parsed on Arrow what Spark refuses: {e}")
    assert ours.column("v").to_pylist() == theirs.column("v").to_pylist()


def test_decimal_text_that_spark_refuses_stays_text():
    schema = StructType.fromDDL("v DECIMAL(6,2)")
    for bad in ("12.555", "123456.5", "1e3"):
        table = parsed(pa.table({"v": pa.array(["1.5", bad])}), schema)
        assert pa.types.is_string(table.schema.field("v").type), bad
    table = parsed(pa.table({"v": pa.array(["1.500", "-0001.5", None])}), schema)
    assert table.column("v").to_pylist() == [decimal.Decimal("1.50"), decimal.Decimal("-1.50"),
                                             None]


def test_files_pyarrow_leaves_to_spark(tmp_path):
    """Ragged rows, another quote character, duplicate names, partition folders and a
    header in another dialect: None (Spark reads them and words the refusal), or the same
    refusal Spark's reader gives."""
    schema = StructType.fromDDL("a STRING, b STRING")
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,b\n1,2,3\n")
    assert local_table("t", str(ragged), schema) is None
    quoted = tmp_path / "q.csv"
    quoted.write_text("a,b\n'x,y',2\n")
    assert csv_table("t", csv_source(quoted, quote="'"), schema) is None
    dup = tmp_path / "dup.csv"
    dup.write_text("a,A\n1,2\n")
    assert local_table("t", str(dup), schema) is None
    parts = tmp_path / "parts"
    (parts / "k=1").mkdir(parents=True)
    pq.write_table(pa.table({"a": ["x"], "b": ["y"]}), parts / "k=1" / "p.parquet")
    assert local_table("t", str(parts), schema) is None
    semi = tmp_path / "semi.csv"
    semi.write_text("a;b\n1;2\n")
    with pytest.raises(InputError, match="semicolon"):
        local_table("t", str(semi), schema)


def test_a_folder_of_csv_files_and_no_header(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "1.csv").write_text("5,x,3,1\n")
    (folder / "2.csv").write_text("6,,4,-1\n")
    (folder / "_SUCCESS").write_text("")
    schema = StructType([StructField("k", LongType()), StructField("s", StringType())])
    table = csv_table("t", CsvSource(str(folder), header=False), schema)
    assert table.column_names == ["k", "s", "time", "diff"]
    assert table.to_pylist() == [{"k": 5, "s": "x", "time": 3, "diff": 1},
                                 {"k": 6, "s": None, "time": 4, "diff": -1}]


def test_updates_of_many_small_chunks_are_one_chunk_and_big_chunks_stay():
    """A refresh put together from slices reaches the kernels as one array per column (each
    reading would otherwise concatenate its chunks); a file's big row groups are not copied."""
    from executor.driver import _SMALL_CHUNK, arrow_ready

    schema = StructType([StructField("k", LongType()), StructField("s", StringType())])
    small = pa.Table.from_batches([pa.record_batch({"k": [i], "s": [str(i)]})
                                   for i in range(50)])
    ready = arrow_ready(small, schema, frontier=0, upto=1)
    assert ready.num_rows == 50 and all(c.num_chunks == 1 for c in ready.columns)
    assert ready.column("k").to_pylist() == list(range(50))
    big = pa.concat_tables([pa.table({"k": list(range(_SMALL_CHUNK)),
                                      "s": ["x"] * _SMALL_CHUNK})] * 2)
    ready = arrow_ready(big, schema, 0, 1)
    assert ready.column("k").num_chunks == ready.column("s").num_chunks == 2
