"""Triangles benchmark (issue 5): static counts and incremental maintenance, against peers.

Static: R-MAT graphs (Graph500 parameters, average degree ~16, seeded) counted by
- diffspark's array kernel (degree orientation, CSR, batched intersection) on the edge arrays,
  and the `triangles` verb's own path (triangles_main on a Parquet file: pyarrow reads it,
  the kernel counts);
- Spark SQL on the same session: the edges ordered by degree into a cached table, then two
  binary joins (DEGREE_ORDERED, SQL);
- DuckDB (the same SQL, temporary tables), networkit (TriangleEdgeScore), kuzu (a Cypher triangle pattern),
  each measured in the same run when installed (benchmarks/requirements-peers.txt).
Incremental: the first graph, then batches of changes (half deletions): diffspark's triangle
dataflow per batch vs DuckDB's delta SQL (indexed base table updated in place, the three
delta terms over the changed edges) vs a kernel recount. diffspark (with a Spark session of its own) and the peers each run in a spawned
process, one after the other, so each peak memory (the process tree: JVM and Python) is one
side's alone. Every system's count is checked against the kernel's.
Plans: the delta-query plan vs seed 001's naive plan (counts, joins, validating joins) on a
smaller graph: load time, one batch, and the state each keeps (arranged records and bytes).
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.rmat import rmat_edges  # noqa: E402

PEERS = ("duckdb", "networkit", "kuzu")  # their versions go into the JSON
# The SQL peers' form, as a skilled user writes it: the edges (distinct, src < dst) re-oriented
# from the lower to the higher (degree, id), which bounds every node's out-degree by
# sqrt(2|E|), into a table; then the triangle pattern as two binary joins over it. Ordered by
# id alone, R-MAT's hubs make the joins' wedges explode (DuckDB: 63 s and 14 GiB at 1M edges,
# against 18 s with this form, measured here under load).
DEGREE_ORDERED = (
    ("deg", "SELECT v, count(*) AS d FROM (SELECT src AS v FROM e UNION ALL "
            "SELECT dst AS v FROM e) GROUP BY v"),
    ("o", "SELECT CASE WHEN a.d < b.d OR (a.d = b.d AND e.src < e.dst) THEN e.src "
          "ELSE e.dst END AS src, CASE WHEN a.d < b.d OR (a.d = b.d AND e.src < e.dst) "
          "THEN e.dst ELSE e.src END AS dst FROM e JOIN deg AS a ON a.v = e.src "
          "JOIN deg AS b ON b.v = e.dst"))
SPARK_SQL = "Spark SQL degree-ordered joins"
SPARK_SQL_BEFORE = "Spark SQL binary joins"  # JSON before the degree-ordered form
SQL = """SELECT count(*) FROM o AS a JOIN o AS b ON a.dst = b.src
         JOIN o AS c ON a.src = c.src AND b.dst = c.dst"""


def parse_args(argv):
    p = common.base_parser(__doc__, default_rows=1_000_000)
    p.add_argument("--sizes", default="1000000,5000000", help="R-MAT edge counts (static)")
    p.add_argument("--batches", type=int, default=3, help="incremental batches")
    p.add_argument("--batch-size", type=int, default=1000, help="changes per batch")
    p.add_argument("--spark-timeout", type=float, default=300,
                   help="stop the Spark SQL and DuckDB join plans after this many s")
    p.add_argument("--plans-rows", type=int, default=100_000,
                   help="edges for the delta-query vs naive plan comparison (0: skip)")
    p.add_argument("--spark-first", default="",
                   help="R-MAT edge counts whose first step runs on the Spark placement, the "
                        "query's extensions per bucket and as Spark SQL joins")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip", default="", help="comma-separated rows to skip")
    p.add_argument("--incremental-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="profile overrides for the incremental run's own session only "
                        "(repeatable), e.g. spark.driver.memory=1500m")
    return p.parse_args(argv)


def kernel_count(src, dst) -> int:
    from gpu_kernels import count_triangles, namespace

    return count_triangles(namespace("numpy"), src, dst)


def spark_sql_count(spark, path: str, timeout: float) -> Optional[int]:
    """The degree-ordered binary-join plan in Spark SQL (each table cached); None when
    cancelled after `timeout` seconds."""
    sc = spark.sparkContext
    group = f"triangles-sql-{time.time()}"
    sc.setJobGroup(group, "spark sql triangles", interruptOnCancel=True)
    timer = threading.Timer(timeout, lambda: sc.cancelJobGroup(group))
    timer.start()
    try:
        spark.read.parquet(path).createOrReplaceTempView("e")
        for name, select in DEGREE_ORDERED:
            spark.sql(select).cache().createOrReplaceTempView(name)
        return spark.sql(SQL).collect()[0][0]
    except Exception as e:  # noqa: BLE001 - a cancelled job surfaces as any Spark error
        print(f"  spark sql: stopped ({str(e).splitlines()[0][:80]})", flush=True)
        return None
    finally:
        timer.cancel()
        sc.setJobGroup("", "")


def duckdb_count(src, dst, timeout: float) -> Optional[int]:
    """The same degree-ordered SQL in DuckDB (its tables as temporary tables); None when
    interrupted after `timeout` seconds."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    con.register("e", pa.table({"src": src, "dst": dst}))
    timer = threading.Timer(timeout, con.interrupt)
    timer.start()
    try:
        for name, select in DEGREE_ORDERED:
            con.execute(f"CREATE TEMP TABLE {name} AS {select}")
        return con.execute(SQL).fetchone()[0]
    except duckdb.InterruptException:
        print("  duckdb: stopped", flush=True)
        return None
    finally:
        timer.cancel()


def networkit_count(src, dst) -> int:
    import networkit as nk

    n = int(max(src.max(), dst.max())) + 1
    g = nk.GraphFromCoo((np.ones(len(src)), (src.astype(np.uint64), dst.astype(np.uint64))),
                        n=n, directed=False, weighted=False)
    g.indexEdges()
    score = nk.sparsification.TriangleEdgeScore(g)
    score.run()
    return int(round(sum(score.scores()) / 3))


def kuzu_load(src, dst, folder: Path):
    """A kuzu database holding the graph (node and rel tables COPY'd from Parquet): its
    connection. Timed apart from the query (the row's `load_s`)."""
    import shutil

    import kuzu
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.rmtree(folder, ignore_errors=True)  # the warm-up may have loaded the same size
    folder.mkdir(parents=True)
    nodes = np.unique(np.concatenate([src, dst]))
    pq.write_table(pa.table({"id": nodes}), folder / "nodes.parquet")
    pq.write_table(pa.table({"from": src, "to": dst}), folder / "edges.parquet")
    con = kuzu.Connection(kuzu.Database(str(folder / "db")))
    con.execute("CREATE NODE TABLE V(id INT64, PRIMARY KEY (id))")
    con.execute("CREATE REL TABLE E(FROM V TO V)")
    con.execute(f"COPY V FROM '{folder / 'nodes.parquet'}'")
    con.execute(f"COPY E FROM '{folder / 'edges.parquet'}'")
    return con


def kuzu_count(con) -> int:
    """The Cypher triangle pattern on a loaded database (the query alone)."""
    result = con.execute("MATCH (a:V)-[:E]->(b:V)-[:E]->(c:V), (a)-[:E]->(c) RETURN count(*)")
    return int(result.get_next()[0])


def run_static(spark, args, sizes, skip, tmp: Path) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from executor.apps import triangles

    rows = []
    for n in sizes:
        with common.phase(f"R-MAT {n:,} edges: generate"):
            src, dst = rmat_edges(n, args.seed)
            path = tmp / f"rmat-{n}.parquet"
            pq.write_table(pa.table({"src": src, "dst": dst}), path)
        got: dict = {}

        def row(name, fn, load=None):
            """Time fn() (with load: fn(load()), the load timed apart as `load_s`)."""
            if name in skip:
                return
            timed = {}
            with common.PeakMemory() as mem:
                if load is not None:
                    start = time.perf_counter()
                    loaded = load()
                    timed["load_s"] = round(time.perf_counter() - start, 3)
                    run = lambda: fn(loaded)  # noqa: E731
                else:
                    run = fn
                start = time.perf_counter()
                got[name] = run()
                seconds = time.perf_counter() - start
            rows.append({"edges": n, "system": name, "seconds": round(seconds, 3),
                         "timed": "query only" if load is not None else "all",
                         **timed, "triangles": got[name], **mem.as_dict()})
            extra = f" (load {timed['load_s']:.2f} s apart)" if timed else ""
            print(f"  {name}: {seconds:.2f} s{extra} -> {got[name]}", flush=True)

        row("diffspark kernel", lambda: kernel_count(src, dst))
        row(VERB, lambda: int(triangles.triangles_main(spark, {}, str(path), 1, None,
                                                       "numpy")[0].split("=")[1]))
        row(SPARK_SQL, lambda: spark_sql_count(spark, str(path),
                                                               args.spark_timeout))
        for name, fn in (("DuckDB degree-ordered joins", lambda: duckdb_count(src, dst, args.spark_timeout)),
                         ("networkit", lambda: networkit_count(src, dst))):
            try:
                row(name, fn)
            except ImportError:
                print(f"  {name}: not installed (benchmarks/requirements-peers.txt)")
        try:
            row("kuzu", kuzu_count, load=lambda: kuzu_load(src, dst, tmp / f"kuzu-{n}"))
        except ImportError:
            print("  kuzu: not installed (benchmarks/requirements-peers.txt)")
        truth = got["diffspark kernel"]
        for r in rows:
            if r["edges"] == n:
                r["correct"] = r["triangles"] == truth if r["triangles"] is not None else None
                r["vs_kernel"] = common.ratio(r["seconds"], next(
                    x["seconds"] for x in rows if x["edges"] == n
                    and x["system"] == "diffspark kernel"))
    return rows


def run_incremental(args) -> dict:
    """diffspark's dataflow vs DuckDB's delta SQL vs a kernel recount, per batch. Each side
    runs in a process of its own (diffspark with its own Spark session), one after the other,
    so a peak memory is one system's alone and no run slows another."""
    src, dst = rmat_edges(args.rows, args.seed)
    batches = change_batches(src, dst, args)
    peers = common.isolated(_peers_run, src, dst, batches)
    ours = common.isolated(_diffspark_run, args.profile, args.conf + args.incremental_conf,
                    src, dst, batches)
    rows = []
    before = peers["before"]
    for t, (mine, theirs) in enumerate(zip(ours["batches"], peers["batches"]), start=1):
        recount = theirs["recount"]
        rows.append({"time": t, "diffspark_s": mine["seconds"],
                     "duckdb_delta_s": theirs["duckdb_delta_s"],
                     "kernel_recount_s": theirs["kernel_recount_s"],
                     "triangles": mine["triangles"], "duckdb_change": theirs["duckdb_change"],
                     "recount": recount, "correct": mine["triangles"] == recount,
                     "duckdb_correct": None if theirs["duckdb_change"] is None else
                     before + theirs["duckdb_change"] == recount})
        before = recount
    med = lambda k: float(np.median([b[k] for b in rows]))  # noqa: E731
    p90 = lambda k: float(np.percentile([b[k] for b in rows], 90))  # noqa: E731
    keys = [k for k in ("diffspark_s", "duckdb_delta_s", "kernel_recount_s")
            if all(b[k] is not None for b in rows)]
    return {"edges": args.rows, "batch_size": args.batch_size, "load_s": ours["load_s"],
            "duckdb_first": _checked(peers.get("duckdb_first"), peers["before"]),
            "duckdb_form": DUCKDB_FORM,
            "conf": args.incremental_conf, "load_correct": ours["before"] == peers["before"],
            "load_memory": ours["load_memory"], "batches_memory": ours["batches_memory"],
            "peers_memory": peers["memory"], "state": ours["state"], "batches": rows,
            "median": {k: round(med(k), 3) for k in keys},
            "p90": {k: round(p90(k), 3) for k in keys}}


def run_spark_first(args, sizes: list[int]) -> list[dict]:
    """The triangle count's first step with every step on the Spark placement
    (diffspark.host.step_rows=0, and no rule's seeds fetched to the driver's arrays:
    diffspark.query.local_rows=1), its query's extensions by the kernel per bucket and as
    Spark SQL joins (the rule at executor/operators/query/buckets.py set either way), each in
    a process of its own; counts checked against the kernel's."""
    rows = []
    for edges in sizes:
        src, dst = rmat_edges(edges, args.seed)
        want = kernel_count(src, dst)
        row = {"edges": edges, "triangles": want}
        for method in ("kernel", "sql"):
            got = common.isolated(_spark_first, args.profile, args.conf, src, dst, method)
            row[f"{method}_s"], row[f"{method}_correct"] = got["seconds"], got["count"] == want
            print(f"  {edges:,} edges, {method}: {got['seconds']:.1f} s", flush=True)
        rows.append(row)
    return rows


def _spark_first(profile, overrides, src, dst, method: str) -> dict:
    import pyarrow as pa

    from executor.apps import triangles
    from executor.operators.query import buckets
    from executor.runner import Runner

    buckets.KERNEL_ROWS = 0 if method == "kernel" else 1 << 62
    spark, conf = common.session(profile, [*overrides, "diffspark.host.step_rows=0",
                                           "diffspark.query.local_rows=1"])
    runner = Runner(triangles.triangle_flow(), conf=conf, spark=spark)
    load = pa.table({"src": src, "dst": dst, "time": np.zeros(len(src), np.int64),
                     "diff": np.ones(len(src), np.int64)})
    start = time.perf_counter()
    result = runner.step({triangles.NAME: load}, upto=1)
    count = triangles.count_change(result)
    seconds = time.perf_counter() - start
    spark.stop()
    return {"seconds": round(seconds, 3), "count": count}


def _checked(first: Optional[dict], count: int) -> Optional[dict]:
    """DuckDB's whole count of the first step, marked against the kernel's count."""
    return None if first is None else {**first, "correct": first["triangles"] == count}


def change_batches(src, dst, args) -> list[tuple[list, list]]:
    """(deleted, inserted) oriented edges per batch: half of each batch deletes present
    edges, half inserts new ones between random nodes (seeded)."""
    rng = np.random.default_rng(args.seed)
    present = oriented(src, dst)
    nodes = int(max(src.max(), dst.max())) + 1
    out = []
    for _ in range(args.batches):
        ordered = sorted(present)
        gone = [ordered[i] for i in rng.choice(len(ordered), args.batch_size // 2,
                                               replace=False)]
        new = set()
        while len(new) < args.batch_size - len(gone):
            x, y = sorted(int(v) for v in rng.integers(0, nodes, 2))
            if x != y and (x, y) not in present:
                new.add((x, y))
        present.difference_update(gone)
        present.update(new)
        out.append((gone, sorted(new)))
    return out


def oriented(src, dst) -> set[tuple[int, int]]:
    """The undirected edges as (least, greatest) pairs, self loops dropped."""
    return {(min(a, b), max(a, b)) for a, b in zip(src.tolist(), dst.tolist()) if a != b}


def _diffspark_run(profile, overrides, src, dst, batches) -> dict:
    """Load, then step each batch through the triangle dataflow, with its own session."""
    import pyarrow as pa

    from executor.apps import triangles
    from executor.runner import Runner

    spark, conf = common.session(profile, overrides)
    runner = Runner(triangles.triangle_flow(), conf=conf, spark=spark)
    with common.PeakMemory() as load_mem:
        start = time.perf_counter()
        load = pa.table({"src": src, "dst": dst, "time": np.zeros(len(src), np.int64),
                         "diff": np.ones(len(src), np.int64)})
        runner.step({triangles.NAME: load}, upto=1)
        load_s = time.perf_counter() - start
        del load
    count = before = triangles.running_counts(triangles.count_changes(runner), [0])[0]
    out = []
    with common.PeakMemory() as mem:
        for t, (gone, new) in enumerate(batches, start=1):
            rows = [(x, y, t, -1) for x, y in gone] + [(x, y, t, 1) for x, y in new]
            started = time.perf_counter()
            result = runner.step({triangles.NAME: triangles.change_table(rows)}, upto=t + 1)
            count += triangles.count_change(result)
            out.append({"seconds": round(time.perf_counter() - started, 3),
                        "triangles": count, "host": result.host})
            print(f"  batch {t}: diffspark {out[-1]['seconds']:.2f} s -> {count}", flush=True)
    payload = {"load_s": round(load_s, 3), "before": before, "batches": out,
               "load_memory": load_mem.as_dict(), "batches_memory": mem.as_dict(),
               "state": _state(runner)}
    spark.stop()
    return payload


def _peers_run(src, dst, batches) -> dict:
    """DuckDB's delta SQL (where installed) and a kernel recount over the same batches."""
    import pyarrow as pa

    try:
        import duckdb
    except ImportError:
        duckdb = None
    present = oriented(src, dst)
    first = None
    if duckdb is not None:  # the first step's peer: the same graph loaded and counted whole
        started = time.perf_counter()
        first = {"triangles": duckdb_count(src, dst, 600),
                 "seconds": round(time.perf_counter() - started, 3)}
    with common.PeakMemory() as mem:
        edges = np.array(sorted(present), dtype=np.int64)
        if duckdb is not None:
            con = duckdb.connect()
            con.register("init", pa.table({"src": edges[:, 0], "dst": edges[:, 1]}))
            con.execute(DUCKDB_BASE)
            con.unregister("init")
        before = kernel_count(edges[:, 0], edges[:, 1])
        out = []
        for gone, new in batches:
            duck_s, duck = _duckdb_delta(con, gone, new) if duckdb else (None, None)
            present.difference_update(gone)
            present.update(new)
            arr = np.array(sorted(present), dtype=np.int64)
            started = time.perf_counter()
            recount = kernel_count(arr[:, 0], arr[:, 1])
            out.append({"duckdb_delta_s": None if duck_s is None else round(duck_s, 3), "duckdb_change": duck,
                        "kernel_recount_s": round(time.perf_counter() - started, 3),
                        "recount": recount})
            duck_text = "-" if duck_s is None else f"{duck_s:.2f}"
            print(f"  batch {len(out)}: duckdb delta {duck_text} s, recount "
                  f"{out[-1]['kernel_recount_s']:.2f} s -> {recount}", flush=True)
    return {"before": before, "batches": out, "memory": mem.as_dict(), "duckdb_first": first}


def _state(runner) -> dict:
    """Records and bytes held in the runner's arrangements."""
    stats = runner.stats().values()
    return {"records": sum(s["records"] for s in stats),
            "mib": round(sum(s["bytes"] for s in stats) / 2**20, 1)}


def run_plans(spark, conf, args) -> list[dict]:
    """The delta-query plan vs the naive plan on oriented edges u (src < dst): load, one
    batch of changes, state kept. Both read the same input and must agree."""
    from executor.apps import triangles
    from executor.runner import Runner
    from plans import Dataflow

    src, dst = rmat_edges(args.plans_rows, args.seed)
    edges = sorted(oriented(src, dst))
    rng = np.random.default_rng(args.seed)
    gone = [edges[i] for i in rng.choice(len(edges), args.batch_size // 2, replace=False)]
    nodes = int(max(src.max(), dst.max())) + 1
    new = {tuple(sorted(int(v) for v in rng.integers(0, nodes, 2)))
           for _ in range(args.batch_size - len(gone))} - set(edges)
    batch = [(x, y, 1, -1) for x, y in gone] + [(x, y, 1, 1) for x, y in sorted(new) if x != y]
    schema = "src BIGINT, dst BIGINT, time BIGINT, diff BIGINT"

    def runner_of(plan: str) -> Runner:
        flow = Dataflow()
        u = flow.input("u", "src BIGINT, dst BIGINT")
        flow.output("triangles", flow.query(triangles.TRIANGLES, plan=plan, u=u).count())
        # as written: the optimizer would turn the naive plan's joins into the Query node
        return Runner(flow, conf=conf, spark=spark, optimize=False)

    for plan in ("delta", "naive"):  # warm-up: the first plan timed must not pay first calls
        runner_of(plan).step({"u": spark.createDataFrame(
            [(x, y, 0, 1) for x, y in edges[:100]], schema)}, upto=1)
    rows = []
    for plan in ("delta", "naive"):
        runner = runner_of(plan)
        with common.PeakMemory() as mem:
            start = time.perf_counter()
            runner.step({"u": spark.createDataFrame([(x, y, 0, 1) for x, y in edges], schema)},
                        upto=1)
            load_s = time.perf_counter() - start
            start = time.perf_counter()
            runner.step({"u": spark.createDataFrame(batch, schema)}, upto=2)
            step_s = time.perf_counter() - start
        counts = triangles.running_counts(triangles.count_changes(runner), [0, 1])
        rows.append({"plan": plan, "edges": len(edges), "load_s": round(load_s, 2),
                     "batch_s": round(step_s, 2), "triangles": counts, **_state(runner),
                     "peak_total_mib": mem.as_dict()["peak_total_mib"]})
        print(f"  {plan}: load {load_s:.1f} s, batch {step_s:.1f} s, state "
              f"{rows[-1]['records']:,} records / {rows[-1]['mib']} MiB", flush=True)
    rows[1]["agrees"] = rows[0]["triangles"] == rows[1]["triangles"]
    return rows


VERB = "diffspark verb (read + kernel)"
VERB_BEFORE = "diffspark verb (Spark read + kernel)"  # JSON from before pyarrow read Parquet

DUCKDB_FORM = "keyed table updated in place, three delta terms over the changed edges"
# JSON from before this form (no "duckdb_form") measured a copy and rebuild of the whole table
# every batch; its reports say so.
DUCKDB_OLD_FORM = "the whole table copied and rebuilt every batch"
# The key is an ART index; DuckDB 1.4.1 joins by hash, not by index, so a second index on
# (dst, src) only slowed the updates (measured).
DUCKDB_BASE = """CREATE TABLE e (src BIGINT, dst BIGINT, PRIMARY KEY (src, dst));
INSERT INTO e SELECT src, dst FROM init"""
# The change in oriented triangles (a<b<c: e(a,b), e(b,c), e(a,c)) from the batch d (w = +1
# insert, -1 delete), by the delta rule dT = dE.E.E (old) + E'.dE.E (new, new, old) +
# E'.E'.dE (new): the first term runs before d is applied in place, the other two after, the
# old E of the second term written as E' - dE. Each term is driven from the small d.
DUCKDB_OLD = """SELECT coalesce(sum(d.w), 0) FROM d
  JOIN e b ON b.src = d.dst JOIN e c ON c.src = d.src AND c.dst = b.dst"""
DUCKDB_APPLY = """DELETE FROM e USING d WHERE d.w < 0 AND e.src = d.src AND e.dst = d.dst;
INSERT INTO e SELECT src, dst FROM d WHERE w > 0"""
DUCKDB_NEW = ("""SELECT coalesce(sum(d.w), 0) FROM d
  JOIN e a ON a.dst = d.src JOIN e c ON c.src = a.src AND c.dst = d.dst""",
              """SELECT -coalesce(sum(s.w * t.w), 0) FROM d s
  JOIN e a ON a.dst = s.src JOIN d t ON t.src = a.src AND t.dst = s.dst""",
              """SELECT coalesce(sum(d.w), 0) FROM d
  JOIN e a ON a.src = d.src JOIN e b ON b.src = a.dst AND b.dst = d.dst""")
# One statement per term, each committed on its own: inside an explicit transaction, after its
# own DELETE/INSERT, DuckDB 1.4.1 runs these joins ~70x slower (measured).


def _duckdb_delta(con, gone, new) -> tuple[float, int]:
    """DuckDB's incremental answer as a skilled user writes it: the edges in a base table
    keyed (src, dst), the batch's edges deleted and inserted in place, the change in triangles
    from the three delta terms over the changed edges."""
    import pyarrow as pa

    d = pa.table({"src": [x for x, _ in gone] + [x for x, _ in new],
                  "dst": [y for _, y in gone] + [y for _, y in new],
                  "w": [-1] * len(gone) + [1] * len(new)})
    start = time.perf_counter()
    con.register("d", d)
    before = con.execute(DUCKDB_OLD).fetchone()[0]
    con.execute(DUCKDB_APPLY)
    after = sum(con.execute(term).fetchone()[0] for term in DUCKDB_NEW)
    con.unregister("d")
    return time.perf_counter() - start, int(before + after)


def main(argv: Optional[Sequence[str]] = None, spark=None) -> dict:
    import tempfile

    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    skip = set(filter(None, args.skip.split(",")))
    own_session = spark is None
    spark, conf = common.session(args.profile, args.conf, spark)
    payload = common.header("triangles", argv, spark, conf, peers=PEERS)
    try:
        with tempfile.TemporaryDirectory(prefix="diffspark-tri-") as tmp:
            if sizes:
                with common.phase("warm-up on a small graph"):
                    small = parse_args(["--sizes", "20000"])
                    small.spark_timeout = args.spark_timeout
                    run_static(spark, small, [20000], skip, Path(tmp))
            with common.phase("static counts"):
                payload["static"] = run_static(spark, args, sizes, skip, Path(tmp))
        if args.batches and "incremental" not in skip:
            with common.phase("incremental"):
                payload["incremental"] = run_incremental(args)
        firsts = [int(x) for x in args.spark_first.split(",") if x]
        if firsts:
            with common.phase("first steps on the Spark placement"):
                payload["spark_first"] = run_spark_first(args, firsts)
        if args.plans_rows and "plans" not in skip:
            with common.phase("delta-query plan vs naive plan"):
                payload["plans"] = run_plans(spark, conf, args)
    finally:
        if own_session:
            spark.stop()
    path = common.results_path("triangles", args.out)
    if args.png and payload.get("incremental"):
        payload["png"] = str(save_plot(path.with_suffix(".png"), payload["incremental"]))
    common.save_json(path, payload)
    print(report(payload))
    return payload


def duckdb_form(inc: dict) -> str:
    """How the incremental JSON's DuckDB peer was written."""
    return inc.get("duckdb_form", DUCKDB_OLD_FORM)


def seconds_text(row: dict, unit: str = "") -> str:
    """A static row's seconds and what they time: a run stopped at the limit has no count;
    kuzu's query is timed apart from its load (JSON from before that timed both, the load
    also given apart: said so)."""
    if row["triangles"] is None:
        return f"stopped at {row['seconds']:.0f}{unit}"
    text = f"{row['seconds']:.2f}{unit}"
    if row.get("timed") == "query only":
        return f"{text} query (+ {row['load_s']:.2f}{unit} load)"
    if "load_s" in row:
        return f"{text} (load {row['load_s']:.2f}{unit} included)"
    return text


def save_plot(path: Path, inc: dict) -> Optional[Path]:
    """Seconds per batch of each incremental system, batch by batch (needs matplotlib)."""
    plt = common.pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    times = [b["time"] for b in inc["batches"]]
    for name, key in (("diffspark dataflow", "diffspark_s"), ("DuckDB delta SQL",
                      "duckdb_delta_s"), ("kernel recount", "kernel_recount_s")):
        if key in inc["median"]:
            ax.plot(times, [b[key] for b in inc["batches"]], label=name, linewidth=1)
    ax.set_xlabel("batch")
    ax.set_ylabel("seconds")
    ax.set_title(f"triangles: {inc['batch_size']:,} changes per batch on {inc['edges']:,} edges")
    ax.legend()
    return common.save_figure(fig, path)


def report(payload: dict) -> str:
    out = []
    if payload.get("static"):
        out += ["static triangle counts (seconds; the count is checked against the kernel's; "
                "kuzu: the query alone, its load from Parquet apart)",
                common.markdown_table(
                    ["edges", "system", "s", "load s", "vs kernel", "triangles", "correct",
                     "peak MiB"],
                    [[r["edges"], r["system"], seconds_text(r), r.get("load_s"),
                      f"{r['vs_kernel']}x", r["triangles"], r["correct"], r["peak_total_mib"]]
                     for r in payload["static"]])]
    inc = payload.get("incremental")
    if inc:
        conf = f" ({', '.join(inc['conf'])})" if inc.get("conf") else ""
        out.append(f"incremental: {inc['edges']:,} edges loaded in {inc['load_s']} s, then "
                   f"{len(inc['batches'])} batches of {inc['batch_size']} changes; each side "
                   f"in its own process, peak memory of that process tree{conf}")
        first = inc.get("duckdb_first")
        if first:
            out.append(f"first step (the whole graph at one time): diffspark {inc['load_s']} s; "
                       f"DuckDB loading the edges and counting them whole (degree-ordered "
                       f"joins, as in the static table) {first['seconds']} s, "
                       f"(DuckDB / diffspark {first['seconds'] / inc['load_s']:.2f}x); "
                       "counts equal: "
                       f"{'yes' if first['correct'] else 'NO'}")
        mem, peers = inc["batches_memory"], inc["peers_memory"]["peak_total_mib"]
        out.append(common.markdown_table(
            ["system", "median s", "p90 s", "peak MiB"],
            [[name, inc["median"][key], inc["p90"][key],
              mem["peak_total_mib"] if key == "diffspark_s" else peers]
             for name, key in (("diffspark dataflow", "diffspark_s"),
                               (f"DuckDB delta SQL ({duckdb_form(inc)})", "duckdb_delta_s"),
                               ("kernel recount", "kernel_recount_s"))
             if key in inc["median"]]))
        ok = lambda key: all(b.get(key) for b in inc["batches"])  # noqa: E731
        out.append(f"every batch's count equals the kernel recount: diffspark "
                   f"{'yes' if ok('correct') else 'NO'}, DuckDB "
                   f"{'yes' if ok('duckdb_correct') else 'NO'}")
        load = inc["load_memory"]
        out.append(f"diffspark peak memory: {mem['peak_total_mib']} MiB over the batches (JVM "
                   f"{mem['peak_jvm_mib']}, Python {mem['peak_python_mib']}), "
                   f"{load['peak_total_mib']} MiB during the load (JVM {load['peak_jvm_mib']}, "
                   f"Python {load['peak_python_mib']}); state {inc['state']['records']:,} "
                   f"arranged records, {inc['state']['mib']} MiB; DuckDB and the recount share "
                   f"one process")
    if payload.get("spark_first"):
        out.append("the first step (the whole graph at one time) on the Spark placement: the "
                   "query's extensions by one kernel per bucket of prefixes vs as Spark SQL "
                   "joins, each in its own process; counts checked against the kernel's")
        out.append(common.markdown_table(
            ["edges", "per bucket s", "Spark SQL joins s", "SQL / per bucket", "triangles",
             "correct"],
            [[r["edges"], r["kernel_s"], r["sql_s"], f"{r['sql_s'] / r['kernel_s']:.2f}x",
              r["triangles"], "yes" if r["kernel_correct"] and r["sql_correct"] else "NO"]
             for r in payload["spark_first"]]))
    if payload.get("plans"):
        out.append("delta-query plan vs naive plan (seed 001), same input and batch")
        out.append(common.markdown_table(
            ["plan", "edges", "load s", "batch s", "state records", "state MiB", "peak MiB"],
            [[r["plan"], r["edges"], r["load_s"], r["batch_s"], r["records"], r["mib"],
              r["peak_total_mib"]] for r in payload["plans"]]))
    return "\n\n".join(out)


if __name__ == "__main__":
    main()
