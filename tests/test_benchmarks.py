"""Smoke tests for benchmarks/: each benchmark runs end to end at a tiny size on the shared
test session and writes its JSON. No timing is asserted here (speed targets live in the
benchmarks themselves); the benchmark's own checks (all variants give the same updates)
must pass."""
from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_linear_benchmark_smoke(spark, tmp_path):
    from benchmarks import linear

    out = tmp_path / "linear.json"
    payload = linear.main(["--rows", "20000", "--warmup-rows", "2000",
                           "--conf", "diffspark.partitions=2", "--out", str(out)], spark=spark)

    saved = json.loads(out.read_text())
    assert saved["rows"] == 20000 and saved["partitions"] == 2
    assert set(saved["measurements"]) == set(linear.ROWS)
    for m in saved["measurements"].values():
        assert m["repeat"] == 1 and m["best_s"] > 0
    assert saved["inputs"] == {"chain": 20000, "consolidation": 20000}
    # every variant agreed on the warm-up slice and at full size
    assert all(c["equal"] for c in saved["checks"].values())
    checks = {"warmup_chain", "warmup_consolidation", "chain", "consolidation"}
    assert checks <= set(saved["checks"])
    chain = saved["checks"]["chain"]["results"]
    assert chain["expr_fused"]["rows"] > 20000  # flat_map and temporal_filter expand
    # fusion is physical: one mapInArrow fused, five unfused, none on the expression path
    plans = saved["physical_plans"]
    assert plans["kernel_fused"]["MapInArrow"] == 1
    assert plans["kernel_unfused"]["MapInArrow"] == 5
    assert plans["expr_fused"]["MapInArrow"] == 0
    assert saved["faster_consolidation"] in ("sql", "kernel")
    assert set(payload["ratios"]) == set(saved["ratios"])
    assert all(v is not None and v > 0 for v in saved["ratios"].values())
    assert spark.sparkContext._jsc is not None  # the shared session was left running


def test_markdown_table_aligns_numbers():
    from benchmarks.common import markdown_table

    text = markdown_table(["row", "s", "vs"], [["a", 1.5, "2.00x"], ["bb", 12.25, ""]])
    lines = text.splitlines()
    assert lines[0] == "| row |     s |    vs |"
    assert lines[1] == "|-----|------:|------:|"
    assert lines[2] == "| a   |  1.50 | 2.00x |"
    assert lines[3] == "| bb  | 12.25 |       |"


@pytest.mark.slow
def test_arrangements_benchmark_smoke(spark, tmp_path):
    from benchmarks import arrangements

    out = tmp_path / "arrangements.json"
    arrangements.main(["--rows", "3000", "--sharing-rows", "3000", "--ks", "1,2",
                       "--sizes", "3000", "--changes", "100", "--conf", "diffspark.partitions=2",
                       "--parts", "a,b,c,d", "--arrange-sizes", "3000",
                       "--out", str(out), "--png"], spark=spark)
    saved = json.loads(out.read_text())
    assert [r["k"] for r in saved["sharing"]] == [1, 2]
    assert all(r["equal"] for r in saved["sharing"])
    # sharing is physical: k queries, one arrangement of the edges; each on its own, k
    assert [r["shared_arrangements"] for r in saved["sharing"]] == [2, 3]
    assert [r["own_arrangements"] for r in saved["sharing"]] == [2, 4]
    assert saved["attach"]["two_hop_rows"] > 0 and saved["attach"]["speedup"] > 0
    assert [r["records"] for r in saved["incremental"]] == [3000]
    assert saved["incremental"][0]["arranged_records"] > 0
    assert (tmp_path / "arrangements.png").stat().st_size > 0
    # (d): both ways arrange the same batch: integers, with a STRING, with DECIMAL and DATE
    assert [(r["updates"], r["columns"], r["equal"]) for r in saved["method"]] == \
        [(3000, "k, v", True), (3000, "k, s, v", True), (3000, "k, p, d", True)]


@pytest.mark.slow
def test_triangles_benchmark_smoke(spark, tmp_path):
    """Static rows on a small R-MAT graph; peers are measured only where installed
    (benchmarks/requirements-peers.txt), and every count must equal the kernel's; so are
    the incremental rows, each side in a process of its own."""
    from benchmarks import triangles

    out = tmp_path / "triangles.json"
    payload = triangles.main(["--sizes", "3000", "--batches", "2", "--rows", "3000",
                              "--out", str(out), "--plans-rows", "2000", "--batch-size", "100",
                              "--conf", "diffspark.partitions=2",
                              "--incremental-conf", "spark.master=local[2]", "--png"],
                             spark=spark)
    saved = json.loads(out.read_text())
    systems = {r["system"] for r in saved["static"]}
    assert {"diffspark kernel", triangles.VERB, triangles.SPARK_SQL} <= systems
    assert all(r["correct"] for r in saved["static"])
    assert saved["static"][0]["triangles"] > 0
    for r in saved["static"]:  # kuzu: the query timed, its load apart
        assert r["timed"] == ("query only" if r["system"] == "kuzu" else "all")
        assert ("load_s" in r) == (r["system"] == "kuzu")
    # incremental: diffspark and the peers each in a process of their own, counts checked
    inc = payload["incremental"]
    assert inc["load_correct"] and len(inc["batches"]) == 2
    assert all(b["correct"] and b["duckdb_correct"] in (True, None) for b in inc["batches"])
    assert inc["batches_memory"]["peak_jvm_mib"] > 0  # the child's own Spark JVM
    assert inc["peers_memory"]["peak_jvm_mib"] == 0
    assert out.with_suffix(".png").stat().st_size > 0  # seconds per batch, each system
    delta, naive = saved["plans"]
    assert naive["agrees"] and delta["triangles"][0] > 0
    assert naive["records"] > delta["records"]  # the naive plan arranges its prefixes


@pytest.mark.slow  # two Spark sessions, each in a process of its own
def test_triangles_benchmark_first_step_on_the_spark_placement(spark, tmp_path):
    """The first step on the Spark placement per bucket and as Spark SQL: both counts equal
    the kernel's."""
    from benchmarks import triangles

    payload = triangles.main(["--sizes", "", "--batches", "0", "--plans-rows", "0",
                              "--spark-first", "2000", "--conf", "diffspark.partitions=2",
                              "--out", str(tmp_path / "t.json")], spark=spark)
    (row,) = payload["spark_first"]
    assert row["kernel_correct"] and row["sql_correct"] and row["triangles"] > 0
    assert "per bucket" in triangles.report(payload)


@pytest.mark.slow
def test_optimizer_benchmark_smoke(spark, tmp_path):
    from benchmarks import optimizer

    out = tmp_path / "optimizer.json"
    optimizer.main(["--rows", "400", "--edges", "60", "--changes", "10", "--warmup-rows", "50",
                    "--conf", "diffspark.partitions=2", "--out", str(out)], spark=spark)
    saved = json.loads(out.read_text())
    assert [r["part"] for r in saved["rows"]] == list(optimizer.PARTS)
    assert all(r["equal"] for r in saved["rows"])
    chain, shared, tri = saved["rows"]
    assert chain["optimized_operators"] < chain["written_operators"]
    assert shared["optimized_arrangements"] < shared["written_arrangements"]
    assert tri["optimized_state_records"] < tri["written_state_records"]


def test_kernels_benchmark_triangles_on_snap_graphs(tmp_path):
    """--graphs counts the SNAP graphs (their published counts are checked inside) and an
    R-MAT graph; no Spark is involved."""
    from benchmarks import kernels
    from conftest import SHARED

    if not (SHARED / "data" / "facebook_combined.txt").exists():
        pytest.skip("../shared/data not beside the checkout")
    out = tmp_path / "k.json"
    payload = kernels.main(["--rows", "100", "--repeat", "1", "--kernels", "add_diffs",
                            "--graphs", "snap,2000", "--out", str(out)])
    rows = {r["graph"]: r for r in payload["triangles"]}
    assert rows["facebook_combined"]["numpy"] == 1_612_010
    assert rows["Wiki-Vote"]["numpy"] == 608_389
    assert rows["rmat-2000"]["numpy"] > 0
    assert json.loads(out.read_text())["triangles"][0]["graph"] == "facebook_combined"


def test_duckdb_incremental_peer_equals_a_recount_every_batch():
    """DuckDB's fair incremental form (keyed table updated in place, three delta terms over
    the changed edges, deletions weighted -1) gives the change a kernel recount gives."""
    import argparse

    pytest.importorskip("duckdb")
    from benchmarks import triangles
    from benchmarks.rmat import rmat_edges

    src, dst = rmat_edges(5000, 3)
    args = argparse.Namespace(seed=3, batches=4, batch_size=400)
    peers = triangles._peers_run(src, dst, triangles.change_batches(src, dst, args))
    before = peers["before"]
    assert before == triangles.kernel_count(src, dst) > 0
    for b in peers["batches"]:
        assert b["duckdb_change"] != 0 and before + b["duckdb_change"] == b["recount"]
        before = b["recount"]


def test_kuzu_peer_load_and_query_apart(tmp_path):
    pytest.importorskip("kuzu")
    from benchmarks import triangles
    from benchmarks.rmat import rmat_edges

    src, dst = rmat_edges(3000, 2)
    con = triangles.kuzu_load(src, dst, tmp_path / "kuzu")
    assert triangles.kuzu_count(con) == triangles.kernel_count(src, dst) > 0


@pytest.mark.slow
def test_iterate_benchmark_smoke(spark, tmp_path):
    """bfs on a small R-MAT graph: every diffspark answer is checked against the peer inside."""
    from benchmarks import iterate

    out = tmp_path / "iterate.json"
    payload = iterate.main(["--rows", "200", "--changes", "4", "--warm-up-rows", "0",
                            "--conf", "diffspark.partitions=2", "--out", str(out)], spark=spark)
    r = payload["bfs"]
    assert r["edges"] == 200 and r["first_step_rounds"] and r["incremental_rounds"]
    assert isinstance(r["goal_first_step_10x_peer_met"], bool)
    assert json.loads(out.read_text())["bfs"]["reached"] == r["reached"] > 0


def test_relational_benchmark_smoke(tmp_path):
    """The relational view on the driver, and DuckDB recomputing it, agree after every step
    (the benchmark fails otherwise); every step after the load ran on the driver, each fed
    as a frame Spark reads from a Parquet file (run_all's quick run feeds tables and files)."""
    pytest.importorskip("duckdb")
    from benchmarks import relational

    out = tmp_path / "relational.json"
    payload = relational.main(["--rows", "2000", "--steps", "2", "--changes", "60",
                               "--feed", "frame", "--peers", "duckdb", "--conf", "diffspark.partitions=2",
                               "--conf", "spark.master=local[2]", "--out", str(out)])
    assert payload["correct"] == {"diffspark": True, "duckdb": True}
    assert payload["summary"]["steps_on_driver"] == 2
    assert len(payload["results"]["duckdb"]["digests"]) == 3
    assert "median step ms" in relational.report(payload)


@pytest.mark.slow
def test_tpch_benchmark_smoke(tmp_path):
    """Two TPC-H views at a tiny scale agree with DuckDB recomputing them after every refresh
    step (the benchmark fails otherwise), and the JSON lists no refused query."""
    pytest.importorskip("duckdb")
    from benchmarks import tpch

    out = tmp_path / "tpch.json"
    payload = tpch.main(["--scale", "0.01", "--steps", "1", "--queries", "q06,q13",
                         "--peers", "duckdb", "--data", str(tmp_path), "--conf",
                         "diffspark.partitions=2", "--conf", "spark.master=local[2]",
                         "--out", str(out)])
    assert payload["correct"] and set(payload["queries"]) == {"q06", "q13"}
    assert payload["queries"]["q13"]["duckdb_equal"] and payload["refused"] == {}
    q06 = payload["queries"]["q06"]  # the floor's steps of one order, checked as the others
    assert payload["params"]["floor_steps"] == 3 and q06["floor_step_s"] > 0
    assert (q06["refresh_steps_on_driver"], q06["floor_steps_on_driver"]) == (1, 3)
    assert "1-order step ms" in tpch.report(payload)
    q13 = payload["queries"]["q13"]  # its count per customer of orders is derived state
    assert 0 < q13["derived_records"] < q13["state_records"]


@pytest.mark.slow
def test_big_steps_benchmark_smoke(tmp_path):
    """One big count step on both placements and both peers: every system's counts agree
    (the benchmark fails otherwise), the driver placement's step ran on the driver and the
    Spark placement's did not."""
    pytest.importorskip("duckdb")
    from benchmarks import big_steps

    out = tmp_path / "big_steps.json"
    payload = big_steps.main(["--rows", "3000", "--keys", "50", "--conf",
                              "diffspark.partitions=2", "--conf", "spark.master=local[2]",
                              "--out", str(out)])
    res = payload["results"]
    assert payload["correct"] and res["DuckDB GROUP BY"]["groups"] == 50
    assert res["diffspark (driver placement)"]["on_driver"]
    assert not res["diffspark (Spark placement)"]["on_driver"]
    assert "updates/s" in big_steps.report(payload)
