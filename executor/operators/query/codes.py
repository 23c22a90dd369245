"""A conjunctive query put in terms of the driver's int64 codes (executor/arrange/encoding.py), so that
the delta rules (executor/operators/query/delta_rules.py) answer it exactly over any column type.

Codes are equal exactly where values are, within one type: a variable joining columns of
different types (a DATE with a BIGINT, a STRING with a BINARY) has no common code, and a
comparison needs codes that sort as the values do (not a STRING's dictionary code). Those,
and constants that do not convert to their column's type exactly, send the step to Spark
(Unsupported). Constants become codes of their column's type; null is the delta rules'
`null` argument.
"""
from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pyarrow as pa
from pyspark.sql.types import DataType, DecimalType

from executor.arrange.changes import Unsupported
from executor.arrange.encoding import INTEGRAL, Encoder, NoCode, arrow_type, ordered
from plans import query as cq


def coded(query: cq.Query, kinds: dict[str, list[DataType]], encoder: Encoder) -> cq.Query:
    """`query` with every constant replaced by its code; Unsupported where codes cannot
    answer it exactly. kinds[relation] are the relation's column types."""
    var_kinds = {}
    for atom in query.atoms:
        for k, term in enumerate(atom.terms):
            if isinstance(term, cq.Var):
                kind = var_kinds.setdefault(term.name, kinds[atom.relation][k])
                if _domain(kind) != _domain(kinds[atom.relation][k]):
                    raise Unsupported(f"a query variable {term.name} over columns of two types")
    atoms = tuple(replace(a, terms=tuple(
        cq.Const(_code(t.value, kinds[a.relation][k], encoder)) if isinstance(t, cq.Const)
        else t for k, t in enumerate(a.terms))) for a in query.atoms)
    comparisons = []
    for c in query.comparisons:
        compared = [var_kinds[t.name] for t in (c.left, c.right) if isinstance(t, cq.Var)]
        if len({_domain(kind) for kind in compared}) > 1 or (
                c.op not in ("=", "!=") and not all(ordered(kind) for kind in compared)):
            raise Unsupported(f"a comparison {c} over codes that do not sort as the values")
        left, right = (cq.Const(_code(t.value, compared[0], encoder))
                       if isinstance(t, cq.Const) and compared else t
                       for t in (c.left, c.right))
        comparisons.append(replace(c, left=left, right=right))
    return replace(query, atoms=atoms, comparisons=tuple(comparisons))


def _domain(kind: DataType) -> str:
    """Types whose codes compare with each other: integers of every width are one domain."""
    return "integral" if isinstance(kind, INTEGRAL) else kind.simpleString()


def _code(value, kind: DataType, encoder: Encoder) -> int:
    """The code of a constant in a column of `kind`, where it converts exactly."""
    if value is None:
        raise Unsupported("a null constant in a query")
    try:
        target = arrow_type(kind)
        if isinstance(kind, DecimalType):  # Arrow refuses a lossy rescale
            if not isinstance(value, (int, Decimal)):
                raise TypeError(value)
            return int(encoder.encode(pa.array([Decimal(value)], type=target), kind)[0])
        arr = pa.array([value])
        if arr.type != target:
            exact = arr.cast(target)  # safe casts: a lossy one raises
            if exact.cast(arr.type).to_pylist() != [value]:
                raise Unsupported(f"the constant {value!r} is not a {kind.simpleString()}")
            arr = exact
        return int(encoder.encode(arr, kind)[0])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, NoCode,
            OverflowError, TypeError) as e:
        raise Unsupported(f"the constant {value!r} in a {kind.simpleString()} column") from e
