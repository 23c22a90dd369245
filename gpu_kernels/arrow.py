"""Arrow <-> array glue for mapInArrow kernels: record batch columns to `xp` arrays and back.

Only null-free numeric and boolean columns cross; anything else is refused with the column's
name, so a kernel never sees a type it cannot compute on.
"""
import pyarrow as pa

from .backend import to_numpy

_NUMERIC = (pa.types.is_integer, pa.types.is_float32, pa.types.is_float64, pa.types.is_boolean)


def batch_to_arrays(batch, xp):
    """{column name: xp array} for a pyarrow.RecordBatch; zero-copy into numpy where Arrow can.

    Numeric arrays from Arrow are read-only views: kernels must not write in place.
    """
    cols = {}
    for field, col in zip(batch.schema, batch.columns):
        if not any(is_type(field.type) for is_type in _NUMERIC):
            raise TypeError(
                f"column {field.name!r} has type {field.type}: kernels take only integer, "
                "float32/float64 and boolean columns"
            )
        if col.null_count:
            raise TypeError(f"column {field.name!r} has {col.null_count} nulls: kernels take none")
        host = col.to_numpy(zero_copy_only=not pa.types.is_boolean(field.type))
        cols[field.name] = xp.asarray(host)
    return cols


def arrays_to_batch(cols, schema, xp):
    """RecordBatch with `schema` from {name: xp array}, cast (range-checked) to its types."""
    missing = [f.name for f in schema if f.name not in cols]
    extra = sorted(set(cols) - set(schema.names))
    if missing or extra:
        raise ValueError(f"columns do not match the schema: missing {missing}, unexpected {extra}")
    arrays = [pa.array(to_numpy(xp, cols[f.name]), type=f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
