"""The STRING and BINARY dictionary (executor/arrange/dictionary.py): codes equal exactly where
values are equal, across batches, whatever the values' hashes do."""
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from executor.arrange import dictionary
from executor.arrange.dictionary import Dictionary, hashes
from executor.arrange.encoding import Encoder

texts = st.lists(st.lists(st.none() | st.text(max_size=6) | st.sampled_from(["", "a", "ab", "ba"]),
                          max_size=12), min_size=1, max_size=8)


def _check(batches, kind, to_value=lambda v: v):
    from pyspark.sql.types import BinaryType, StringType

    spark_kind = StringType() if kind == pa.string() else BinaryType()
    encoder, seen, codes = Encoder(), [], []
    for batch in batches:
        values = [None if v is None else to_value(v) for v in batch]
        codes.append(encoder.encode(pa.array(values, kind), spark_kind))
        seen += values
    flat = np.concatenate(codes + [np.zeros(0, np.int64)])
    by_value: dict = {}
    for value, code in zip(seen, flat.tolist()):
        assert by_value.setdefault(value, code) == code  # one value, one code
    assert len(set(by_value.values())) == len(by_value)  # two values, two codes
    assert encoder.size() == len({v for v in seen if v is not None})
    assert encoder.decode(flat, spark_kind).to_pylist() == seen


@settings(max_examples=60, deadline=None)
@given(texts)
def test_codes_are_equal_exactly_where_strings_are(batches):
    _check(batches, pa.string())


@settings(max_examples=30, deadline=None)
@given(texts)
def test_codes_are_equal_exactly_where_bytes_are(batches):
    _check(batches, pa.binary(), lambda v: v.encode())


@settings(max_examples=40, deadline=None)
@given(texts, st.sampled_from(["constant", "length"]))
def test_colliding_hashes_never_merge_or_split_values(batches, how):
    """Every value's hash equal (or equal per length): each lookup is settled by comparing
    values, and the codes are the same as ever."""
    real = dictionary.hashes
    dictionary.hashes = (lambda a: np.zeros(len(a), np.uint64)) if how == "constant" else \
        (lambda a: np.asarray(pa.compute.utf8_length(a) if a.type == pa.string()
                              else pa.compute.binary_length(a), dtype=np.uint64))
    try:
        _check(batches, pa.string())
    finally:
        dictionary.hashes = real


def test_hashes_read_a_slice_as_its_values():
    """A sliced array (an offset into its buffers) and empty values hash as a fresh copy."""
    values = pa.array(["", "x", "héllo", "", "hello", "olleh", "a" * 300])
    for start in range(len(values)):
        part = values.slice(start, 3)
        assert hashes(part).tolist() == hashes(pa.array(part.to_pylist())).tolist()
    assert hashes(pa.array(["hello"], pa.large_string())).tolist() == \
        hashes(pa.array(["hello"])).tolist()
    h = hashes(values)
    assert h[0] == h[3] and len(set(h.tolist())) == 6


def test_the_table_grows_and_keeps_every_code():
    """Values added a few at a time and many at once: the table doubles (at most half its
    slots taken) and every value keeps its code."""
    d = Dictionary(pa.string())
    for i in range(64):
        assert d.codes(pa.array([f"v{i}", f"w{i}"])).tolist() == [2 * i, 2 * i + 1]
    many = [f"x{i}" for i in range(5000)]
    assert d.codes(pa.array(many)).tolist() == list(range(128, 5128))
    assert 2 * d.size <= d._codes.shape[0] and int((d._codes >= 0).sum()) == d.size
    assert d.codes(pa.array(["w5", "v0", "x4999", "new"])).tolist() == [11, 0, 5127, 5128]


@pytest.mark.parametrize("n", [0, 1])
def test_an_empty_or_single_lookup(n):
    d = Dictionary(pa.string())
    assert d.taken(np.zeros(0, np.int64)).to_pylist() == []  # no chunk held yet
    assert d.codes(pa.array(["z"] * n)).tolist() == [0] * n
