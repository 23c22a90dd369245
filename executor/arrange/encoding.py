"""Record columns as int64 codes, so the driver's array kernels handle every column type.

The kernels (gpu_kernels: consolidate, sort, search, intersect) work on int64 arrays. A column
of any type the builder accepts is encoded to one int64 code per value, equal iff the values
are equal under Spark's grouping and join semantics (-0.0 = 0.0, NaN = NaN):
- integers, booleans, DATE (days), TIMESTAMP (microseconds) and DECIMAL (the unscaled value
  at the column's scale) as themselves, so their codes also sort as the values do;
- DOUBLE and FLOAT as their IEEE bits turned into an order-preserving integer (NaN last, as
  Spark orders it);
- STRING and BINARY as codes of a dictionary (executor/arrange/dictionary.py) kept for the
  runner's lifetime (one per kind, so two columns of a join share codes); these codes do not
  follow the values' order, and the ordered reductions rank the decoded values instead
  (`order_keys`).
Null is NULL_CODE (int64 min) in every column, so nulls group together and sort first. A
value that has no code (a BIGINT equal to int64 min, a DECIMAL beyond int64, a nested type)
raises NoCode: the step then runs on Spark, never with a wrong code.
"""
from __future__ import annotations

from functools import lru_cache, wraps
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import (BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType,
                               DoubleType, FloatType, IntegerType, LongType, ShortType, StringType,
                               StructType, TimestampNTZType, TimestampType)

from executor.arrange.dictionary import Dictionary
from plans import ir
from plans.errors import PlanError

NULL_CODE = np.iinfo(np.int64).min
_SIGN = np.int64(np.iinfo(np.int64).max)
INTEGRAL = (ByteType, ShortType, IntegerType, LongType)  # Spark integer types
_TEMPORAL = (DateType, TimestampType, TimestampNTZType)


def check_collations(plan, schemas: dict) -> None:
    """Refuse, when the runner is built, a STRING of a collation other than UTF8_BINARY
    anywhere in a node's records (schemas: each node's resolved update schema), naming the
    node and the column: both placements group, join, order and consolidate strings by
    their bytes (the dictionary's codes, the arrangements' hashes), where Spark holds
    UTF8_LCASE's 'a' and 'A' one value."""
    for node in ir.topological(plan.values()):
        for f in getattr(schemas.get(node), "fields", ()):
            collated = _collated(f.dataType)
            if collated:
                raise PlanError(
                    f"{node.label()}: column '{f.name}' is {f.dataType.simpleString()} "
                    f"(rule: strings compare by their bytes, UTF8_BINARY; collation "
                    f"{collated} is not supported)")


def _collated(kind: DataType) -> Optional[str]:
    """The first collation other than UTF8_BINARY in `kind` (nested types too), or None."""
    if isinstance(kind, StringType):
        collation = getattr(kind, "collation", "UTF8_BINARY")
        return None if collation.upper() == "UTF8_BINARY" else collation
    nested = (getattr(kind, a, None) for a in ("elementType", "keyType", "valueType"))
    children = [f.dataType for f in kind.fields] if isinstance(kind, StructType) else \
        [k for k in nested if k is not None]
    return next((c for c in map(_collated, children) if c), None)


@lru_cache(maxsize=4096)
def arrow_type(kind: DataType) -> pa.DataType:
    """Spark's Arrow type for `kind` (pyspark's mapping, remembered: a step asks per column)."""
    return to_arrow_type(kind)


def per_schema(work):
    """`work(schema, *rest)` remembered per schema (Spark's StructType or Arrow's) and the
    other arguments (hashable): by the schema object first (a dict lookup; the entry holds
    the object, so its id is not reused while cached), then by value (a schema built afresh
    per call, such as updates_schema(...)'s, costs hashing its fields: about 14 us for 16
    of a StructType, 24 us for the 18 of TPC-H's lineitem as Arrow)."""
    by_value, seen = lru_cache(maxsize=1024)(work), {}

    @wraps(work)
    def remembered(schema, *rest):
        key = (id(schema), *rest)
        hit = seen.get(key)
        if hit is not None and hit[0] is schema:
            return hit[1]
        out = by_value(schema, *rest)
        if len(seen) >= 1024:
            seen.clear()
        seen[key] = (schema, out)
        return out

    return remembered


@per_schema
def arrow_schema(schema: StructType) -> pa.Schema:
    """Spark's Arrow schema for `schema`, remembered: pyspark builds it field by field, about
    10 us a field, and a driver step asks for the same few schemas at every operator."""
    return to_arrow_schema(schema)


class NoCode(Exception):
    """A value or type without an int64 code: the step runs on Spark."""


class Encoder:
    """Encodes and decodes record columns; holds the dictionaries of STRING and BINARY values
    (append-only: a code once given never changes meaning)."""

    def __init__(self):
        self._dictionaries = {"string": Dictionary(arrow_type(StringType())),
                              "binary": Dictionary(arrow_type(BinaryType()))}

    def size(self) -> int:
        """Distinct STRING and BINARY values held (the dictionaries only grow)."""
        return sum(d.size for d in self._dictionaries.values())

    # ------------------------------------------------------------------ encode
    def encode(self, column: pa.Array | pa.ChunkedArray, kind: DataType) -> np.ndarray:
        """int64 codes of an Arrow column holding values of Spark type `kind`."""
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if arr.type != arrow_type(kind):
            arr = arr.cast(arrow_type(kind))
        if isinstance(kind, (*INTEGRAL, BooleanType, *_TEMPORAL)):
            codes = _integers(arr)
            if isinstance(kind, LongType) and arr.null_count < len(arr) and \
                    pc.min(arr).as_py() == NULL_CODE:
                raise NoCode("a BIGINT equal to the null code (int64 min)")
        elif isinstance(kind, DecimalType):
            codes = unscaled(arr)
        elif isinstance(kind, (DoubleType, FloatType)):
            codes = float_codes(arr.cast(pa.float64()).fill_null(0.0)
                                .to_numpy(zero_copy_only=False))
        elif isinstance(kind, (StringType, BinaryType)):
            codes = self._dictionary(arr, _dict_kind(kind))
        else:
            raise NoCode(f"a column of type {kind.simpleString()}")
        if arr.null_count:
            codes[np.asarray(arr.is_null())] = NULL_CODE
        return codes

    def _dictionary(self, arr: pa.Array, kind: str) -> np.ndarray:
        encoded = arr.dictionary_encode()  # each distinct value looked up once
        known = self._dictionaries[kind].codes(encoded.dictionary)
        index = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return known[index] if known.shape[0] else np.zeros(len(arr), dtype=np.int64)

    # ------------------------------------------------------------------ decode
    def decode(self, codes: np.ndarray, kind: DataType) -> pa.Array:
        """The Arrow column (Spark's Arrow type for `kind`) the codes stand for."""
        codes = np.asarray(codes, dtype=np.int64)
        null = codes == NULL_CODE
        mask = null if null.any() else None
        target = arrow_type(kind)
        if isinstance(kind, (StringType, BinaryType)):
            if null.all():  # no value (the dictionary may still be empty)
                return pa.nulls(len(codes), type=target)
            return self._dictionaries[_dict_kind(kind)].taken(np.where(null, 0, codes), mask)
        if isinstance(kind, DecimalType):
            values = np.where(null, 0, codes)
            return decimal_array(values, values >> 63, target, None if mask is None else ~mask)
        if isinstance(kind, (DoubleType, FloatType)):
            values = float_values(np.where(null, 0, codes))
            return pa.array(values, mask=mask).cast(target)
        if isinstance(kind, BooleanType):
            return pa.array(codes != 0, mask=mask)
        if isinstance(kind, _TEMPORAL):
            base = pa.array(codes, mask=mask)
            return (base.cast(pa.int32()) if pa.types.is_date32(target) else base).cast(target)
        return pa.array(codes, mask=mask).cast(target)


def ordered(kind: DataType) -> bool:
    """Whether codes of this type sort as the values do (Spark's order, nulls first)."""
    return not isinstance(kind, (StringType, BinaryType))


def order_keys(encoder: Encoder, codes: np.ndarray, kind: DataType) -> np.ndarray:
    """int64 keys that sort as the coded values do in Spark's ascending order, nulls first."""
    if ordered(kind):
        return np.asarray(codes, dtype=np.int64)
    return rank(encoder.decode(codes, kind), descending=False, nulls_first=True)


def rank(values: pa.Array, descending: bool, nulls_first: bool) -> np.ndarray:
    """Dense int64 ranks of Arrow values in the given order (equal values, equal ranks)."""
    if descending:
        nulls_first = not nulls_first  # ranked ascending, then negated
    ranks = pc.rank(values, sort_keys="ascending", null_placement=
                    "at_start" if nulls_first else "at_end", tiebreaker="dense")
    out = ranks.to_numpy(zero_copy_only=False).astype(np.int64)
    return -out if descending else out


def order_words(arr: pa.Array) -> list[np.ndarray]:
    """int64 words of one batch's Arrow column, in Spark's ascending order with nulls first
    and equal exactly where Spark groups the values together, with no dictionary to keep
    (a bucket's sort on the executors, executor/arrange/buckets.py): integers, booleans,
    dates, timestamps and DECIMALs within int64 as their values, floats as `float_codes`,
    strings, binaries and wider DECIMALs as dense ranks (Arrow compares strings bytewise,
    as Spark's default collation does). A column with nulls gets a first word, 0 for null."""
    kind = arr.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or \
            pa.types.is_date32(kind) or pa.types.is_timestamp(kind):
        values = _integers(arr)
    elif pa.types.is_floating(kind):
        values = float_codes(arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False))
    elif pa.types.is_decimal(kind):
        try:
            values = unscaled(arr)
        except NoCode:  # beyond int64 (or int64's least value): ranked
            values = rank(arr, descending=False, nulls_first=True)
    elif pa.types.is_string(kind) or pa.types.is_binary(kind):
        encoded = arr.dictionary_encode()  # each distinct value ranked once
        ranks = rank(encoded.dictionary, descending=False, nulls_first=True)
        index = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
        values = ranks[index] if len(ranks) else np.zeros(len(arr), dtype=np.int64)
    else:
        values = rank(arr, descending=False, nulls_first=True)
    if not arr.null_count:
        return [values]
    valid = np.asarray(arr.is_valid()).astype(np.int64)
    return [valid, np.where(valid == 1, values, 0)]


def _dict_kind(kind: DataType) -> str:
    return "binary" if isinstance(kind, BinaryType) else "string"


def _integers(arr: pa.Array) -> np.ndarray:
    if pa.types.is_boolean(arr.type):
        arr = arr.cast(pa.int8())
    elif pa.types.is_date32(arr.type):
        arr = arr.view(pa.int32())
    elif pa.types.is_timestamp(arr.type):
        arr = arr.view(pa.int64())
    return arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def unscaled(arr: pa.Array) -> np.ndarray:
    """The unscaled values of a decimal128 array as int64 (NoCode beyond int64)."""
    if not pa.types.is_decimal128(arr.type):
        raise NoCode(f"a decimal stored as {arr.type}")
    low, high = decimal_words(arr)
    low = low.copy()
    valid = np.ones(len(arr), dtype=bool) if not arr.null_count else \
        ~np.asarray(arr.is_null())
    if np.any(valid & (high != (low >> 63))):
        raise NoCode("a DECIMAL beyond the int64 range")
    low[~valid] = 0
    if np.any(valid & (low == NULL_CODE)):
        raise NoCode("a DECIMAL equal to the null code (int64 min)")
    return low


def decimal_words(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A decimal128 array's rows as (low, high) int64 words, views of its buffer: the
    unscaled value in two's complement, as Arrow stores it (low word first)."""
    words = np.frombuffer(arr.buffers()[1], dtype=np.int64)[2 * arr.offset:
                                                            2 * (arr.offset + len(arr))]
    return words[0::2], words[1::2]


def decimal_array(low: np.ndarray, high: np.ndarray, kind: pa.DataType,
                  valid: Optional[np.ndarray] = None) -> pa.Array:
    """The decimal128 array of type `kind` whose rows' words are (low, high), decimal_words'
    inverse; null where the boolean mask `valid` is False (None: no nulls)."""
    words = np.empty(2 * len(low), dtype=np.int64)
    words[0::2], words[1::2] = low, high
    validity = None if valid is None else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(kind, len(low), [validity, pa.py_buffer(words)],
                                 null_count=0 if valid is None else -1)


def float_codes(x: np.ndarray) -> np.ndarray:
    """Order-preserving int64 codes of float64 values."""
    x = np.asarray(x, dtype=np.float64)
    x = np.where(x == 0.0, 0.0, x)  # -0.0 groups with 0.0, as Spark normalises it
    x = np.where(np.isnan(x), np.float64("nan"), x)  # one NaN
    bits = x.view(np.int64)
    return np.where(bits < 0, bits ^ _SIGN, bits)


def float_values(codes: np.ndarray) -> np.ndarray:
    """The float64 values of float_codes."""
    bits = np.where(codes < 0, codes ^ _SIGN, codes)
    return bits.view(np.float64)
