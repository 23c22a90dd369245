"""Input files read on the driver with pyarrow, without Spark: a step from a small file then
costs no job (the driver placement, executor/driver.py), and its values are the ones Spark's
readers give.

Parquet is read as written; the driver keeps a table only where each column already has the
Arrow type Spark reads for the schema (driver.arrow_ready). CSV is read as text with the options
Spark's reader gets in updates._read_csv (RFC 4180 quoting, the null value, the header or
the schema's names), and a column becomes its declared type only where every value is in a
canonical form that Spark's cast and Arrow's parse read alike (digits with an optional minus,
plain decimals that fit, ISO dates, true/false); any other text stays text, and
updates.normalise parses it by Spark's rules and words the refusal of what does not parse. A
file pyarrow cannot read exactly as Spark would gives None: Spark reads it and words the
error (tests/test_local_inputs.py checks both readers agree on random files).
"""
from __future__ import annotations

import os
from functools import reduce
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from pyspark.sql.types import BooleanType, DataType, DateType, DecimalType, DoubleType, StructType

from executor.arrange.encoding import INTEGRAL, arrow_schema
from executor.inputs.updates import CsvSource, _format, check_header
from executor.runtime.errors import InputError
from executor.time import DIFF, TIME


def local_table(name: str, source, schema: StructType, parse: bool = True) -> Optional[pa.Table]:
    """A Parquet or CSV path, or csv(...), as Arrow read without Spark, or None where Spark
    must read it. Raises InputError only for what Spark's reader would refuse the same way
    (a header in another dialect). `parse` False: CSV columns stay text (`parsed` types a
    table of several files at once)."""
    if isinstance(source, CsvSource):
        return csv_table(name, source, schema, parse)
    if not isinstance(source, (str, os.PathLike)) or not os.path.exists(source):
        return None
    try:
        kind = _format(name, os.fspath(source))
    except InputError:
        return None
    if kind == "csv":
        return csv_table(name, CsvSource(os.fspath(source)), schema, parse)
    table = parquet_table(name, source)
    return table if table is not None and _as_spark_reads(table, schema) else None


def _as_spark_reads(table: pa.Table, schema: StructType) -> bool:
    """Whether each declared column (and time, diff) has the Arrow type Spark reads for it:
    any other type (nanosecond timestamps, narrower integers) is Spark's reader's to take
    or refuse."""
    arrow = {f.name.lower(): f.type for f in arrow_schema(schema)}
    arrow[TIME] = arrow[DIFF] = pa.int64()
    return all(arrow.get(f.name.lower(), f.type) == f.type for f in table.schema)


# Parquet key-value metadata that makes Spark's reader rebase dates and timestamps written by
# Spark 2's hybrid calendar: such a file is read by Spark, never by pyarrow.
_REBASED = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


def parquet_table(name: str, path) -> Optional[pa.Table]:
    """A Parquet file, or a flat folder of them, or None where Spark must read it
    (partition subfolders, files Spark would rebase, unreadable ones: Spark's reader then
    words the refusal)."""
    files = _files(path, ".parquet")
    if files is None:
        return None
    try:
        tables = []
        for f in files:
            meta = pq.read_metadata(f).metadata or {}
            if any(key in meta for key in _REBASED):
                return None
            tables.append(pq.read_table(f))
        return pa.concat_tables(tables)
    except (OSError, pa.ArrowException):
        return None


def csv_table(name: str, src: CsvSource, schema: StructType,
              parse: bool = True) -> Optional[pa.Table]:
    """A CSV file or flat folder as Arrow: text, with each column whose values are all
    canonical parsed to its declared type when `parse`. None for dialects pyarrow reads
    differently from Spark (a quote other than '"', an escape other than the quote) and for
    files it cannot read as Spark does (ragged rows; a line break inside a quoted value,
    which Spark's line-by-line reader breaks)."""
    files = _files(src.path, (".csv", ".csv.gz"))
    if files is None or src.quote != '"' or src.escape != '"':
        return None
    try:
        parts = [_read_csv_file(name, f, src, schema) for f in files]
    except (OSError, pa.ArrowException):
        return None
    if any(p is None for p in parts) or len({tuple(p.column_names) for p in parts}) > 1:
        return None
    table = pa.concat_tables(parts)
    return parsed(table, schema) if parse else table


def _read_csv_file(name: str, path: str, src: CsvSource, schema: StructType):
    parse = pcsv.ParseOptions(delimiter=src.delimiter, quote_char='"', double_quote=True,
                              escape_char=False, newlines_in_values=True,
                              ignore_empty_lines=True)
    if src.header:
        with pcsv.open_csv(path, parse_options=parse) as reader:
            columns = reader.schema.names
        check_header(name, columns, src, schema)
        if len({c.lower() for c in columns}) < len(columns):
            return None  # Spark refuses duplicate names in its words
        read = pcsv.ReadOptions(use_threads=False)
    else:
        with pcsv.open_csv(path, read_options=pcsv.ReadOptions(autogenerate_column_names=True),
                           parse_options=parse) as reader:
            width = len(reader.schema.names)
        names = [f.name for f in schema.fields] + [TIME, DIFF]
        if width > len(names):
            return None  # refused by updates._read_csv
        columns = names[:width]
        read = pcsv.ReadOptions(use_threads=False, column_names=columns)
    convert = pcsv.ConvertOptions(column_types={c: pa.string() for c in columns},
                                  null_values=[src.null_value], strings_can_be_null=True,
                                  quoted_strings_can_be_null=True)
    table = pcsv.read_csv(path, read_options=read, parse_options=parse, convert_options=convert)
    if any(pc.any(pc.match_substring_regex(c, "[\r\n]")).as_py() for c in table.columns):
        return None  # Spark reads a file by lines (no multiLine): it breaks such a value
    if src.null_value and any(pc.any(pc.equal(c, "")).as_py() for c in table.columns):
        return None  # Spark reads an unquoted empty field as null, a quoted one as ""
    if (src.delimiter.isspace() or table.num_columns == 1) and _blank_rows(table):
        return None  # a line of only blanks (a tab is one) is skipped by Spark's reader
    return table


def _blank_rows(table: pa.Table) -> bool:
    """Whether some row's fields are all null or blank (characters up to the space, which
    Spark's CSV parser trims as whitespace)."""
    blank = [pc.fill_null(pc.match_substring_regex(c, r"^[\x00-\x20]*$"), True)
             for c in table.columns]
    return bool(blank) and pc.any(reduce(pc.and_, blank)).as_py()


def _files(path, suffixes) -> Optional[list[str]]:
    """The file, or a flat folder's data files (names not starting with . or _), when every
    one ends with a suffix; else None."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return None
    files = [path] if not os.path.isdir(path) else [
        os.path.join(path, f) for f in sorted(os.listdir(path)) if not f.startswith((".", "_"))]
    if not files or not all(os.path.isfile(f) and f.endswith(suffixes) for f in files):
        return None
    return files


# ---------------------------------------------------------------------------- canonical text
_INTEGER = r"^-?[0-9]+$"
_FORMS = {DoubleType: r"^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]{1,3})?$",
          DateType: r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
          BooleanType: r"(?i)^(true|false)$"}


def parsed(table: pa.Table, schema: StructType) -> pa.Table:
    """`table` with each text column of a declared (or the time and diff) column parsed to its
    Arrow type where every value is canonical; other columns as they were."""
    arrow = {f.name.lower(): (f.dataType, t.type) for f, t in zip(schema.fields,
                                                                   arrow_schema(schema))}
    arrow[TIME] = arrow[DIFF] = (None, pa.int64())
    columns = []
    for field, column in zip(table.schema, table.columns):
        want = arrow.get(field.name.lower())
        if want is not None and pa.types.is_string(field.type):
            column = _canonical(column, *want) or column
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


def _canonical(column: pa.ChunkedArray, kind: Optional[DataType], target: pa.DataType):
    """The column as `target` when every non-null value is canonical text of `kind` (None:
    time and diff, integers); else None."""
    if kind is None or isinstance(kind, INTEGRAL):
        form = _INTEGER
    elif isinstance(kind, DecimalType):
        return _decimal(column, kind, target)
    else:
        form = _FORMS.get(type(kind))
    if form is None or not _all_match(column, form):
        return None
    try:
        if isinstance(kind, BooleanType):
            return pc.equal(pc.utf8_lower(column), "true")
        return column.cast(pa.int64()).cast(target) if target != pa.int64() and \
            pa.types.is_integer(target) else column.cast(target)
    except pa.ArrowException:  # beyond the type's range, or no such date
        return None


def _decimal(column: pa.ChunkedArray, kind: DecimalType, target: pa.DataType):
    """Plain decimals with at most p - s integer digits (leading zeros aside) and s fraction
    digits (trailing zeros aside): Spark's exact rules (updates._decimal) refuse the rest."""
    if not _all_match(column, r"^-?[0-9]+(\.[0-9]+)?$"):
        return None
    parts = pc.extract_regex(column, r"^-?0*(?P<i>[0-9]*?)(?:\.(?P<f>[0-9]*?)0*)?$")
    digits = [pc.max(pc.utf8_length(pc.struct_field(parts, k))).as_py() or 0
              for k in ("i", "f")]
    if digits[0] > kind.precision - kind.scale or digits[1] > kind.scale:
        return None
    try:
        return column.cast(target)
    except pa.ArrowException:
        return None


def _all_match(column: pa.ChunkedArray, form: str) -> bool:
    valid = column.drop_null()
    return len(valid) == 0 or pc.all(pc.match_substring_regex(valid, form)).as_py()
