"""TPC-H as a stream of changes, shared by tests/test_tpch.py and benchmarks/tpch.py: the
tables from tpchgen-cli (Parquet), the 22 queries (benchmarks/tpch_sql/, the spec's text with
its validation parameters) as SQL views, and seeded refresh steps in the spirit of RF1 (new
orders with their lineitems) and RF2 (orders deleted with their lineitems), plus updates
(retract + insert) of customer and part rows.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders",
          "lineitem")
SQL_DIR = Path(__file__).resolve().parent / "tpch_sql"


def generate(scale: float, directory: Path) -> dict[str, pa.Table]:
    """The tables at `scale` (tpchgen-cli's Parquet, generated once into `directory`), with
    plain strings (Spark reads no string_view)."""
    directory = Path(directory)
    if not all((directory / f"{t}.parquet").exists() for t in TABLES):
        cli = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
        subprocess.run([cli, "parquet", "-s", str(scale), "-o", str(directory), "-q",
                        "--overwrite"], check=True)
    return {t: _plain_strings(pq.read_table(directory / f"{t}.parquet")) for t in TABLES}


def _plain_strings(table: pa.Table) -> pa.Table:
    fields = [pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type)
              for f in table.schema]
    return table.cast(pa.schema(fields))


def ddl(table: pa.Table) -> str:
    """The Spark DDL of a generated table."""
    def spark(t):
        if pa.types.is_decimal(t):
            return f"DECIMAL({t.precision},{t.scale})"
        return {pa.int64(): "BIGINT", pa.int32(): "INT", pa.date32(): "DATE",
                pa.string(): "STRING"}[t]
    return ", ".join(f"{f.name} {spark(f.type)}" for f in table.schema)


def queries() -> dict[str, str]:
    """Each query's text as a view: a final ORDER BY without LIMIT dropped (a view is a
    multiset; ORDER BY ... LIMIT k stays, as top_k)."""
    import sqlglot

    out = {}
    for path in sorted(SQL_DIR.glob("q*.sql")):
        q = sqlglot.parse_one(path.read_text(), read="spark")
        if q.args.get("order") is not None and q.args.get("limit") is None:
            q.set("order", None)
        out[path.stem] = q.sql(dialect="spark")
    return out


def views(flow, tables: dict[str, pa.Table], names=None):
    """Declare the tables as inputs of `flow` and each query that lowers as an output:
    ({name: text} of those, {name: the PlanError's line} of the refused)."""
    from plans import PlanError

    for t in TABLES:
        flow.input(t, ddl(tables[t]))
    built, refused = {}, {}
    for name, text in queries().items():
        if names is not None and name not in names:
            continue
        try:
            flow.output(name, flow.sql(text))
            built[name] = text
        except PlanError as e:
            refused[name] = str(e)
    return built, refused


def with_diff(table: pa.Table, diff: int, time: int) -> pa.Table:
    n = table.num_rows
    return table.append_column("time", pa.array(np.full(n, time, np.int64))).append_column(
        "diff", pa.array(np.full(n, diff, np.int64)))


class Refreshes:
    """Seeded refresh steps over the accumulated tables (`self.tables`, kept current):
    each step inserts `orders` new orders (copies of random ones under new keys, for random
    customers) with their lineitems, deletes as many present orders with theirs, and
    updates `orders // 2` customers (balance, segment) and as many parts (price, brand,
    container)."""

    def __init__(self, tables: dict[str, pa.Table], seed: int = 7):
        self.tables = dict(tables)
        self.rng = np.random.default_rng(seed)
        self.next_key = int(pc.max(tables["orders"]["o_orderkey"]).as_py()) + 1

    def step(self, orders: int) -> dict[str, tuple[pa.Table, pa.Table]]:
        """{table: (deleted rows, inserted rows)} of the next step."""
        rng, t = self.rng, self.tables
        o, li = t["orders"], t["lineitem"]
        picked = o.take(pa.array(rng.choice(o.num_rows, 2 * orders, replace=False)))
        gone, model = picked.slice(0, orders), picked.slice(orders)
        keys = np.arange(self.next_key, self.next_key + orders, dtype=np.int64)
        self.next_key += orders
        custs = t["customer"]["c_custkey"].to_numpy()
        new_orders = _set(_set(model, "o_orderkey", keys), "o_custkey",
                          rng.choice(custs, orders))
        lines = li.filter(pc.is_in(li["l_orderkey"], model["o_orderkey"]))
        remap = dict(zip(model["o_orderkey"].to_pylist(), keys.tolist()))
        new_lines = _set(lines, "l_orderkey",
                         np.array([remap[k] for k in lines["l_orderkey"].to_pylist()],
                                  np.int64))
        gone_lines = li.filter(pc.is_in(li["l_orderkey"], gone["o_orderkey"]))
        changes = {"orders": (gone, new_orders), "lineitem": (gone_lines, new_lines),
                   "customer": self._updated("customer", max(1, orders // 2), {
                       "c_acctbal": lambda old: _cents(rng, len(old), -99999, 999999),
                       "c_mktsegment": lambda old: rng.choice(
                           pc.unique(t["customer"]["c_mktsegment"]).to_pylist(), len(old))}),
                   "part": self._updated("part", max(1, orders // 2), {
                       "p_retailprice": lambda old: _cents(rng, len(old), 90000, 200000),
                       "p_brand": lambda old: rng.choice(
                           [f"Brand#{i}{j}" for i in range(1, 6) for j in range(1, 6)],
                           len(old)),
                       "p_container": lambda old: rng.choice(
                           pc.unique(t["part"]["p_container"]).to_pylist(), len(old))})}
        for name, (deleted, inserted) in changes.items():
            key = _key(name)
            kept = t[name].filter(pc.invert(pc.is_in(t[name][key], deleted[key])))
            t[name] = pa.concat_tables([kept, inserted])
        return changes

    def _updated(self, name: str, n: int, columns: dict) -> tuple[pa.Table, pa.Table]:
        old = self.tables[name].take(pa.array(self.rng.choice(self.tables[name].num_rows, n,
                                                              replace=False)))
        new = old
        for col, fresh in columns.items():
            new = _set(new, col, fresh(old))
        return old, new


def _key(name: str) -> str:
    return {"orders": "o_orderkey", "lineitem": "l_orderkey", "customer": "c_custkey",
            "part": "p_partkey"}[name]


def _set(table: pa.Table, column: str, values) -> pa.Table:
    i = table.schema.get_field_index(column)
    return table.set_column(i, table.schema.field(i), pa.array(values,
                                                              table.schema.field(i).type))


def _cents(rng, n: int, lo: int, hi: int):
    from decimal import Decimal
    return [Decimal(int(c)).scaleb(-2) for c in rng.integers(lo, hi, n)]


def step_updates(changes: dict, time: int) -> dict[str, pa.Table]:
    """A step's changes as update tables (record columns, time, diff) per input, one chunk
    per column as a refresh file read by pyarrow arrives (the filters that pick the rows
    leave a piece per row group of the tables; a runner combines such pieces itself, at
    ~1 ms a lineitem refresh: executor/driver.py `arrow_ready`)."""
    return {name: pa.concat_tables([with_diff(deleted, -1, time),
                                    with_diff(inserted, 1, time)]).combine_chunks()
            for name, (deleted, inserted) in changes.items()}


def duckdb_answers(tables: dict[str, pa.Table], texts: dict[str, str],
                   con=None) -> dict[str, list]:
    """Each query's rows by DuckDB over `tables` (queries translated from Spark SQL)."""
    import duckdb
    import sqlglot

    con = con or duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return {name: con.execute(sqlglot.transpile(text, read="spark", write="duckdb")[0])
            .fetchall() for name, text in texts.items()}


def default_dir(scale: float, root: Optional[str] = None) -> Path:
    return Path(root or os.environ.get("TMPDIR", "/tmp")) / f"diffspark-tpch-sf{scale}"
