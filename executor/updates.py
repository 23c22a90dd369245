"""Update batches at the boundary: read them (DataFrame, Parquet, CSV), check every rule of
DESIGN.md section 2, and hand the step a normalised stream (record columns, time, diff).

All checks of one input run as ONE aggregate job; a broken rule raises InputError naming the
input, the column and the rule, before the step has touched any state.
"""
from __future__ import annotations

import os
from typing import Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (ByteType, DataType, DoubleType, FloatType, IntegerType, LongType,
                               ShortType, StructType)

from .errors import InputError
from .linear import q
from .state import content_digest, digest_of
from .time import DIFF, TIME

INT64_MAX = 2**63 - 1
_WIDENS = {LongType: (ByteType, ShortType, IntegerType, LongType),
           IntegerType: (ByteType, ShortType, IntegerType),
           ShortType: (ByteType, ShortType),
           DoubleType: (FloatType, DoubleType, ByteType, ShortType, IntegerType, LongType)}


def read_source(spark: SparkSession, name: str, source, schema: StructType) -> DataFrame:
    """A DataFrame of updates from a DataFrame, a pyarrow Table (local rows: a small step
    reads them without a Spark job) or a Parquet/CSV path (file or folder)."""
    import pyarrow as pa

    if isinstance(source, DataFrame):
        return source
    if isinstance(source, pa.Table):
        return spark.createDataFrame(source)
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(name, "-", "expects a DataFrame, a pyarrow Table or a Parquet/CSV path",
                         type(source).__name__)
    path = os.fspath(source)
    if not os.path.exists(path):
        raise InputError(name, "-", "file not found", path)
    fmt = _format(name, path)
    try:
        if fmt == "csv":
            return spark.read.csv(path, header=True, inferSchema=False,
                                  mode="FAILFAST", enforceSchema=False)
        return spark.read.parquet(path)
    except Exception as e:  # Spark's reader errors are long; keep the first line
        raise InputError(name, "-", f"not a readable {fmt} file", _first_line(e)) from None


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


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__


def normalise(name: str, df: DataFrame, schema: StructType, frontier: int,
              upto: int, digest: Optional[dict] = None, local: bool = False) -> DataFrame:
    """`df` as (record columns in schema order, time, diff) after checking every rule.

    Absent `time` means the step's frontier (time 0 in a first step); absent `diff` means +1.
    Given a dict `digest`, the same job also sets digest[name] to a content hash of the
    normalised rows (durable state recognises a repeated step by it). `local`: `df` is a
    few local rows, checked on the driver (executor/host.py), no digest.
    """
    given = {f.name.lower(): f for f in df.schema.fields}
    wanted = {f.name.lower() for f in schema.fields} | {TIME, DIFF}
    for extra in given.keys() - wanted:
        raise InputError(name, given[extra].name, "unexpected column (not in the input schema)")
    cols, checks = [], []
    for f in schema.fields:
        if f.name.lower() not in given:
            raise InputError(name, f.name, "missing column", f"expected {f.dataType.simpleString()}")
        value = _typed(name, given[f.name.lower()], f.dataType, checks)
        cols.append(value.alias(f.name))
        if not f.nullable:
            checks.append((f.name, "null in a NOT NULL column", value.isNull()))
    for special, default in ((TIME, F.lit(frontier)), (DIFF, F.lit(1))):
        if special in given:
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
    if local:
        _check_rows(name, df, checks, mass)
        return df.select(*cols)
    row = _run_checks(name, df, checks, mass, [] if digest is None else content_digest(cols))
    if digest is not None:
        digest[name] = digest_of(row)
    return df.select(*cols)


def _typed(name, field, want: DataType, checks):
    """The column cast to `want` when that loses nothing; CSV text is parsed with try_cast
    and a value that does not parse is an error (this also catches diffs beyond int64)."""
    col = F.col(q(field.name))
    have = field.dataType
    if type(have) is type(want):
        return col
    if type(have).__name__ == "StringType":
        parsed = F.expr(f"try_cast({q(field.name)} AS {want.simpleString()})")
        checks.append((field.name, f"value is not a {want.simpleString().upper()}",
                       col.isNotNull() & parsed.isNull()))
        return parsed
    if isinstance(have, _WIDENS.get(type(want), ())):
        return col.cast(want)
    raise InputError(name, field.name, "wrong type",
                     f"{have.simpleString()}, expected {want.simpleString()}")


def _run_checks(name: str, df: DataFrame, checks, mass, extra=()):
    """One aggregate job: a count of violations per rule, and sum |diff| (as DECIMAL) so no
    consolidation of this batch can overflow int64 (plus `extra` aggregates); its row."""
    aggs = [F.sum(F.when(cond, 1).otherwise(0)).alias(f"c{i}") for i, (_, _, cond) in
            enumerate(checks)]
    aggs.append(F.sum(mass).alias("mass"))
    aggs += list(extra)
    row = df.agg(*aggs).collect()[0]
    _refuse(name, checks, [row[f"c{i}"] for i in range(len(checks))], row["mass"])
    return row


def _check_rows(name: str, df: DataFrame, checks, mass) -> None:
    """The same rules over local rows: a projection of one flag per rule, which Catalyst
    evaluates on the driver (no job); the counts are summed here."""
    flags = [F.when(cond, 1).otherwise(0).alias(f"c{i}") for i, (_, _, cond) in
             enumerate(checks)]
    rows = df.select(*flags, mass.alias("mass")).collect()
    counts = [sum(r[i] for r in rows) for i in range(len(checks))]
    _refuse(name, checks, counts, sum((r["mass"] for r in rows if r["mass"] is not None), 0))


def _refuse(name: str, checks, counts: list, mass) -> None:
    """InputError for the first rule with violations, or for a diff mass beyond int64."""
    for (column, rule, _), n in zip(checks, counts):
        if n:
            raise InputError(name, column, rule, f"{n} rows")
    if mass is not None and mass > INT64_MAX:
        raise InputError(name, DIFF, "diff overflow: the sum of |diff| exceeds int64", str(mass))
