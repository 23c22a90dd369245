"""Per-step cost of a linear chain on the driver: executor/operators/linear/expressions.py on Arrow against
Catalyst on the same local rows (createDataFrame(arrow) + selectExpr/where + toArrow, which
runs no Spark job but pays py4j and an analysis per call).

    PYTHONPATH=. .venv/bin/python benchmarks/expressions.py [--sizes 1000 100000]
        [--repeat 20] [--conf key=value ...] [--out PATH]

The chain (3 stages) over updates (user BIGINT, amount DECIMAL(10,2), name STRING with nulls,
day DATE, time, diff): filter `user > 100 AND name IS NOT NULL`; map `user, amount * 1.5 AS
amount, upper(name) AS name, day, CASE WHEN amount > 50 THEN 'big' ELSE 'small' END AS size`;
negate.
Compiling is timed once (cold, sqlglot parse) and then hits the cache; evaluation is the
median of --repeat runs. Both sides' outputs are checked equal on every size.
"""
from __future__ import annotations

import datetime as dt
import statistics
import time
from decimal import Decimal

import numpy as np
import pyarrow as pa

from benchmarks import common
from executor.operators.linear.expressions import compile_stages
from plans import ir

STAGES = (ir.Filter("user > 100 AND name IS NOT NULL"),
          ir.Map(("user", "amount * 1.5 AS amount", "upper(name) AS name", "day",
                  "CASE WHEN amount > 50 THEN 'big' ELSE 'small' END AS size")),
          ir.Negate())


def updates(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    names = np.array(["ann", "bob", "cy", "dee", None], dtype=object)
    return pa.table({
        "user": pa.array(rng.integers(0, 1_000_000, n), pa.int64()),
        "amount": pa.array([Decimal(int(v)).scaleb(-2) for v in rng.integers(0, 10_000, n)],
                           pa.decimal128(10, 2)),
        "name": pa.array(names[rng.integers(0, len(names), n)].tolist(), pa.string()),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(d))
                         for d in rng.integers(0, 365, n)], pa.date32()),
        "time": pa.array(rng.integers(0, 100, n), pa.int64()),
        "diff": pa.array(rng.choice([1, -1], n), pa.int64()),
    })


def catalyst(spark, table: pa.Table) -> pa.Table:
    """The same chain by Catalyst on local rows (what the driver path did before)."""
    from executor.operators.linear import spark as linear
    return linear.apply(spark.createDataFrame(table), STAGES, ["time"], "numpy").toArrow()


def _median(run, repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main(argv=None, spark=None):
    p = common.base_parser(__doc__, 100_000)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000])
    p.set_defaults(repeat=20)
    args = p.parse_args(argv)
    own_session = spark is None
    spark, conf = common.session(args.profile, args.conf, spark)
    payload = {**common.header("expressions", argv, spark, conf),
               "stages": [s.label() for s in STAGES], "sizes": {}}
    try:
        for n in args.sizes:
            table = updates(n)
            start = time.perf_counter()
            compiled = compile_stages(STAGES, table.schema)
            first_compile = time.perf_counter() - start
            cached, _ = _median(lambda: compile_stages(STAGES, table.schema), args.repeat)
            ours = compiled(table)
            theirs = catalyst(spark, table)  # warm-up and check
            equal = ours.to_pylist() == theirs.to_pylist() and ours.schema.types == [
                pa.string() if t == pa.large_string() else t for t in theirs.schema.types]
            arrow_s, arrow_all = _median(lambda: compiled(table), args.repeat)
            spark_s, spark_all = _median(lambda: catalyst(spark, table), args.repeat)
            payload["sizes"][n] = {
                "rows_out": ours.num_rows, "equal": equal, "first_compile_s": first_compile,
                "cached_compile_s": cached, "arrow_s": arrow_s, "catalyst_local_s": spark_s,
                "speedup": common.ratio(spark_s, arrow_s), "arrow_all_s": arrow_all,
                "catalyst_all_s": spark_all}
            print(f"{n:>8} rows: arrow {arrow_s * 1e3:.2f} ms, catalyst-local {spark_s * 1e3:.1f} ms "
                  f"(x{common.ratio(spark_s, arrow_s)}), first compile {first_compile * 1e3:.1f} ms, "
                  f"cached {cached * 1e6:.1f} us, equal={equal}", flush=True)
    finally:
        if own_session:
            spark.stop()
    payload["machine"]["load_average_end"] = common.load_average()
    path = common.save_json(common.results_path("expressions", args.out), payload)
    print("saved", path)
    return payload


def report(payload: dict) -> str:
    """The README's table for this benchmark."""
    rows = [[f"{int(n):,}", m["rows_out"], round(m["arrow_s"] * 1e3, 2),
             round(m["catalyst_local_s"] * 1e3, 1), m["speedup"], m["equal"]]
            for n, m in payload["sizes"].items()]
    return common.markdown_table(["rows in", "rows out", "Arrow ms", "Catalyst-local ms",
                                  "Catalyst / Arrow", "equal"], rows)


if __name__ == "__main__":
    main()
