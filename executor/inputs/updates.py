"""Update batches at the boundary: read them (Spark, pandas or pyarrow frames, Parquet,
CSV), check every rule of DESIGN.md section 2, and hand the step a normalised stream (record
columns, time, diff).

All checks of one input run as ONE aggregate job; a broken rule raises InputError naming the
input, the column, the rule and one offending value with its row, before the step has
touched any state.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from pyspark.sql import DataFrame, SparkSession, functions as F
from pyspark.sql.types import (ByteType, DataType, DecimalType, DoubleType, FloatType, IntegerType,
                               LongType, NullType, ShortType, StringType, StructType,
                               TimestampNTZType, TimestampType)

from executor.arrange.encoding import INTEGRAL
from executor.durability.state import content_digest, digest_of
from executor.operators.linear.spark import q
from executor.runtime.errors import InputError, first_line
from executor.time import DIFF, TIME

INT64_MAX = 2**63 - 1
_WIDENS = {LongType: (ByteType, ShortType, IntegerType, LongType),
           IntegerType: (ByteType, ShortType, IntegerType),
           ShortType: (ByteType, ShortType),
           DoubleType: (FloatType, DoubleType, ByteType, ShortType, IntegerType, LongType),
           # naive timestamps (pandas writes them to Parquet as timestamp_ntz) are read in
           # the session time zone, as Spark reads naive pyarrow timestamps
           TimestampType: (TimestampNTZType,)}
ACCEPTED = ("a Spark DataFrame, a pandas DataFrame, a pyarrow Table, csv(path, ...) or a "
            "Parquet/CSV path")
DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}


@dataclass(frozen=True)
class CsvSource:
    """A CSV file or folder with its dialect; made by `csv(...)`."""

    path: str
    delimiter: str = ","
    header: bool = True
    null_value: str = ""
    quote: str = '"'
    escape: str = '"'


def csv(path, delimiter: str = ",", header: bool = True, null_value: str = "",
        quote: str = '"', escape: str = '"') -> CsvSource:
    """A CSV input for `step` with its options. The defaults read RFC 4180 files as Python's
    csv module and pandas write them (a quote inside a quoted field is doubled); without a
    header the columns are the schema's, then time and diff."""
    for key, value in (("delimiter", delimiter), ("quote", quote), ("escape", escape)):
        if not isinstance(value, str) or len(value) != 1:
            raise InputError("-", "-", f"csv {key} must be one character", repr(value))
    if not isinstance(header, bool):
        raise InputError("-", "-", "csv header must be True or False", repr(header))
    return CsvSource(os.fspath(path), delimiter, header, str(null_value), quote, escape)


def _widened(table):
    """Local rows with their DECIMAL columns at the widest precision: Arrow checks a
    decimal's precision only when it parses, so a column may hold more digits than its
    type declares, which Spark cannot read; widened, every value reaches the input's cast,
    whose rule refuses it with the value shown."""
    import pyarrow as pa

    fields = [f.with_type(pa.decimal128(38, f.type.scale))
              if pa.types.is_decimal128(f.type) and f.type.precision < 38 else f
              for f in table.schema]
    return table if fields == list(table.schema) else table.cast(pa.schema(fields))


def read_source(spark: SparkSession, name: str, source, schema: StructType) -> DataFrame:
    """A DataFrame of updates from a Spark DataFrame, a pandas DataFrame or pyarrow Table
    (local rows: a small step reads them without a Spark job), csv(...) or a Parquet/CSV
    path (file or folder)."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(source, DataFrame):
        return source
    if isinstance(source, pd.DataFrame):
        source = pa.Table.from_pandas(source, preserve_index=False)
    if isinstance(source, pa.Table):
        return spark.createDataFrame(_widened(source))
    if isinstance(source, CsvSource):
        return _read_csv(spark, name, source, schema)
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(name, "-", f"expects {ACCEPTED}", f"got {type(source).__name__}")
    path = os.fspath(source)
    if not os.path.exists(path):
        raise InputError(name, "-", "file not found", path)
    if _format(name, path) == "csv":
        return _read_csv(spark, name, CsvSource(path), schema)
    try:
        return spark.read.parquet(path)
    except Exception as e:  # Spark's reader errors are long; keep the first line
        hint = ("; Spark reads timestamps to the microsecond: write them so (pandas: "
                "to_parquet(..., coerce_timestamps='us', allow_truncated_timestamps=True))"
                if "TIMESTAMP(NANOS" in str(e) else "")
        raise InputError(name, "-", "not a readable parquet file",
                         first_line(e) + hint) from None


def _read_csv(spark: SparkSession, name: str, src: CsvSource, schema: StructType) -> DataFrame:
    """Every field as text (the checks parse it); a header that is one field holding another
    dialect's delimiter is refused with the delimiter to use."""
    if not os.path.exists(src.path):
        raise InputError(name, "-", "file not found", src.path)
    try:
        df = spark.read.csv(src.path, header=src.header, sep=src.delimiter,
                            nullValue=src.null_value, quote=src.quote, escape=src.escape,
                            inferSchema=False, mode="FAILFAST", enforceSchema=False)
        columns = df.columns
    except Exception as e:  # Spark's reader errors are long; keep the first line
        raise InputError(name, "-", "not a readable csv file", first_line(e)) from None
    if src.header:
        check_header(name, columns, src, schema)
        return df
    names = [f.name for f in schema.fields] + [TIME, DIFF]
    if len(columns) > len(names):
        raise InputError(name, "-", "more fields than the schema's columns + time + diff",
                         f"{len(columns)} fields, expected at most {len(names)}")
    return df.toDF(*names[:len(columns)])


def check_header(name: str, columns: list[str], src: CsvSource, schema: StructType) -> None:
    """Refuse a header that is one field holding another dialect's delimiter, naming the
    delimiter to use (both readers: here and executor/inputs/local.py)."""
    declared = {f.name.lower() for f in schema.fields}
    other = [d for d in DELIMITERS if d != src.delimiter and len(columns) == 1
             and d in columns[0]]
    if other and columns[0].lower() not in declared:
        d = other[0]
        raise InputError(name, "-", f"the header is one field holding {DELIMITERS[d]}s "
                                    f"({columns[0][:80]!r})",
                         f"a {DELIMITERS[d]}-separated file? set the delimiter: "
                         f"csv(path, delimiter={d!r}) or --csv-option "
                         f"{name}.delimiter={d!r}")


def probe_file(name: str, path: str) -> str:
    """The file whose name tells the format: `path`, or a folder's first data file."""
    if not os.path.isdir(path):
        return path
    files = [f for f in sorted(os.listdir(path)) if not f.startswith((".", "_"))]
    if not files:
        raise InputError(name, "-", "empty input folder", path)
    return files[0]


def _format(name: str, path: str) -> str:
    probe = probe_file(name, path)
    if probe.endswith(".parquet") or (os.path.isdir(path) and ".parquet" in probe):
        return "parquet"
    if probe.endswith((".csv", ".csv.gz")):
        return "csv"
    raise InputError(name, "-", "input files must be Parquet (.parquet) or CSV (.csv)", path)


def normalise(name: str, df: DataFrame, schema: StructType, frontier: int,
              upto: int, digest: Optional[dict] = None, local: bool = False) -> DataFrame:
    """`df` as (record columns in schema order, time, diff) after checking every rule.

    Absent `time` means the step's frontier (time 0 in a first step); absent `diff` means +1.
    Given a dict `digest`, the same job also sets digest[name] to a content hash of the
    normalised rows (durable state recognises a repeated step by it). `local`: `df` is a
    few local rows, checked on the driver (executor/driver.py), no digest.
    """
    given = {f.name.lower(): f for f in df.schema.fields}
    wanted = {f.name.lower() for f in schema.fields} | {TIME, DIFF}
    for extra in given.keys() - wanted:
        raise InputError(name, given[extra].name, "unexpected column (not in the input schema)")
    cols, checks = [], []
    for f in schema.fields:
        if f.name.lower() not in given:
            raise InputError(name, f.name, "missing column", f"expected {f.dataType.simpleString()}")
        _all_null(name, given[f.name.lower()],
                  None if f.nullable else "null in a NOT NULL column")
        value = _typed(name, given[f.name.lower()], f.dataType, checks)
        cols.append(value.alias(f.name))
        if not f.nullable:
            checks.append((f.name, "null in a NOT NULL column", value.isNull()))
    for special, default in ((TIME, F.lit(frontier)), (DIFF, F.lit(1))):
        if special in given:
            _all_null(name, given[special], f"null {special}")
            value = _typed(name, given[special], LongType(), checks)
            checks.append((special, f"null {special}", value.isNull()))
        else:
            value = default.cast("bigint")
        cols.append(value.alias(special))
        if special == TIME:
            bad = (value < frontier) if upto is None else (value < frontier) | (value >= upto)
            checks.append((TIME, f"time outside the step's interval [{frontier}, "
                                 f"{'inf' if upto is None else upto})", bad))
        else:
            mass = F.abs(value.cast("decimal(38,0)"))
    raw = {column: f.name for column, f in given.items()}
    if local:
        _check_rows(name, df, checks, mass, raw)
        return df.select(*cols)
    row = _run_checks(name, df, checks, mass, raw,
                      [] if digest is None else content_digest(cols))
    if digest is not None:
        digest[name] = digest_of(row)
    return df.select(*cols)


def _all_null(name: str, field, rule: Optional[str]) -> None:
    """A column of no type (an all-null pyarrow or pandas column) casts to the declared
    type; where nulls are refused it is refused by `rule`, saying why it had no type."""
    if isinstance(field.dataType, NullType) and rule is not None:
        raise InputError(name, field.name, rule, "all values are null, type unknown")


def _typed(name, field, want: DataType, checks):
    """The column cast to `want` when that loses nothing; CSV text is parsed with try_cast
    and a value that does not parse is an error (this also catches diffs beyond int64)."""
    col = F.col(q(field.name))
    have = field.dataType
    if isinstance(have, NullType):
        return col.cast(want)
    if isinstance(want, DecimalType):
        return _decimal(name, field, want, checks)
    if type(have) is type(want):
        return col
    if isinstance(have, StringType):
        parsed = F.expr(f"try_cast({q(field.name)} AS {want.simpleString()})")
        checks.append((field.name, f"value is not a {want.simpleString().upper()}",
                       col.isNotNull() & parsed.isNull()))
        return parsed
    if isinstance(have, _WIDENS.get(type(want), ())):
        return col.cast(want)
    hint = ""
    if isinstance(want, TimestampNTZType) and isinstance(have, TimestampType):
        hint = ("; drop the time zone before writing (pandas: s.dt.tz_localize(None)) "
                "or declare the column TIMESTAMP")
    raise InputError(name, field.name, "wrong type",
                     f"{_type_name(have)}, expected {want.simpleString()}{hint}")


def _type_name(t: DataType) -> str:
    return "all values are null, type unknown" if isinstance(t, NullType) else t.simpleString()


def _decimal(name, field, want: DecimalType, checks):
    """Text, integers or another DECIMAL into DECIMAL(p, s), exactly: a value with more
    fraction digits than s (scale exceeded) or more integer digits than p - s (precision
    exceeded) is refused, never rounded."""
    col, have = F.col(q(field.name)), field.dataType
    if have == want:
        return col
    p, s = want.precision, want.scale
    if isinstance(have, StringType):
        number = F.expr(f"try_cast({q(field.name)} AS DOUBLE)")
        checks.append((field.name, f"value is not a {want.simpleString().upper()}",
                       col.isNotNull() & (number.isNull() | F.isnan(number))))
        # p - s integer digits and as many fraction digits as fit: null when too large
        wide = F.expr(f"try_cast({q(field.name)} AS DECIMAL(38, {38 - (p - s)}))")
        is_number = number.isNotNull() & ~F.isnan(number)
    elif isinstance(have, (DecimalType, *INTEGRAL)):
        scale = have.scale if isinstance(have, DecimalType) else 0
        wide = F.expr(f"try_cast({q(field.name)} AS DECIMAL({min(38, p - s + scale)}, {scale}))")
        is_number = col.isNotNull()
    else:
        raise InputError(name, field.name, "wrong type",
                         f"{_type_name(have)}, expected {want.simpleString()}")
    fitted = wide.try_cast(want)
    checks.append((field.name, f"precision exceeded: more than {p - s} digits before the "
                               f"point for {want.simpleString().upper()}",
                   is_number & wide.isNull()))
    longer = wide.isNotNull() & ~fitted.eqNullSafe(wide)
    if isinstance(have, StringType):  # plain text with more fraction digits than `wide` keeps
        digits = F.regexp_extract(F.trim(col), r"^[+-]?[0-9]*\.([0-9]*?)0*$", 1)
        longer = longer | (wide.isNotNull() & (F.length(digits) > s))
    checks.append((field.name, f"scale exceeded: more than {s} digits after the point for "
                               f"{want.simpleString().upper()}", longer))
    return fitted


def _run_checks(name: str, df: DataFrame, checks, mass, raw: dict, extra=()):
    """One aggregate job: a count of violations per rule, and sum |diff| (as DECIMAL) so no
    consolidation of this batch can overflow int64 (plus `extra` aggregates); its row."""
    aggs = [F.sum(F.when(cond, 1).otherwise(0)).alias(f"c{i}") for i, (_, _, cond) in
            enumerate(checks)]
    aggs.append(F.sum(mass).alias("mass"))
    aggs += list(extra)
    row = df.agg(*aggs).collect()[0]
    _refuse(name, df, checks, [row[f"c{i}"] for i in range(len(checks))], row["mass"], raw)
    return row


def _check_rows(name: str, df: DataFrame, checks, mass, raw: dict) -> None:
    """The same rules over local rows: a projection of one flag per rule, which Catalyst
    evaluates on the driver (no job); the counts are summed here."""
    flags = [F.when(cond, 1).otherwise(0).alias(f"c{i}") for i, (_, _, cond) in
             enumerate(checks)]
    rows = df.select(*flags, mass.alias("mass")).collect()
    counts = [sum(r[i] for r in rows) for i in range(len(checks))]
    _refuse(name, df, checks, counts,
            sum((r["mass"] for r in rows if r["mass"] is not None), 0), raw)


def _refuse(name: str, df: DataFrame, checks, counts: list, mass, raw: dict) -> None:
    """InputError for the first rule with violations (with its first offending row), or for
    a diff mass beyond int64."""
    for (column, rule, cond), n in zip(checks, counts):
        if n:
            detail = f"{n} row{'' if n == 1 else 's'}"
            hit = _first_offender(df, cond, raw.get(column.lower()))
            if hit is not None:
                detail += f", first at row {hit[0]}: {_shown(hit[1])}"
            raise InputError(name, column, rule, detail)
    if mass is not None and mass > INT64_MAX:
        raise InputError(name, DIFF, "diff overflow: the sum of |diff| exceeds int64", str(mass))


ROW = "__diffspark_row"


def _first_offender(df: DataFrame, cond, column: Optional[str]):
    """(row number from 1, in the order the rows were given, and the value as text) of the
    first row breaking a rule. Only a refused step pays its two small jobs."""
    indexed = df.withColumn(ROW, F.monotonically_increasing_id())
    shown = F.col(q(column)).cast("string") if column else F.lit(None).cast("string")
    hit = indexed.where(cond).orderBy(ROW).select(ROW, shown).limit(1).collect()
    if not hit:
        return None
    return indexed.where(F.col(ROW) < hit[0][0]).count() + 1, hit[0][1]


def _shown(value) -> str:
    if value is None:
        return "null"
    return repr(value if len(value) <= 80 else value[:77] + "...")
