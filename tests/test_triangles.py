"""The triangles verb and its dataflow: published counts of real SNAP graphs, and timed edge
streams (both directions, duplicates, loops, deletions) against a brute-force recount at
every input time."""
from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import pytest

from executor.apps import triangles

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def recount(updates, t):
    """Triangles of the undirected simple graph present at time t, by brute force."""
    acc = Counter()
    for (a, b), s, d in updates:
        if s <= t and a != b:
            acc[min(a, b), max(a, b)] += d
    edges = {e for e, m in acc.items() if m > 0}
    nodes = sorted({v for e in edges for v in e})
    return sum(1 for x, y, z in itertools.combinations(nodes, 3)
               if {(x, y), (y, z), (x, z)} <= edges)


@pytest.mark.parametrize("name, expected", [("facebook_combined.txt", 1_612_010),
                                            ("Wiki-Vote.txt", 608_389)])
def test_published_snap_counts(spark, conf, name, expected):
    if not (DATA / name).exists():
        pytest.skip(f"{DATA / name} not present (shared/ beside the clone)")
    lines = triangles.triangles_main(spark, conf, str(DATA / name), 1, None, "numpy")
    assert lines == [f"triangles={expected}"]


def test_timed_stream_matches_recount_at_every_time(spark, conf, tmp_path):
    rng = random.Random(5)
    updates = []
    for t in range(5):
        for _ in range(9):
            a, b = rng.randrange(6), rng.randrange(6)
            updates.append(((a, b), t, rng.choice([1, 1, 1, 2, -1])))
    path = tmp_path / "edges.csv"
    path.write_text("src,dst,time,diff\n" + "".join(f"{a},{b},{t},{d}\n"
                                                   for (a, b), t, d in updates))
    lines = triangles.triangles_main(spark, conf, str(path), 2, str(tmp_path / "out"), "numpy")
    times = sorted({t for _, t, _ in updates})
    assert lines == [f"time={t} triangles={recount(updates, t)}" for t in times]
    assert any(recount(updates, t) for t in times)  # the stream has triangles to find
    assert (tmp_path / "out" / "triangles").is_dir()


@pytest.mark.parametrize("kind", ["int64", "int32", "strings", "nulls", "timed"])
def test_a_parquet_edge_list_counts_alike_read_by_pyarrow_or_by_spark(spark, conf, tmp_path,
                                                                      kind):
    """The verb reads a local Parquet list of integer columns with pyarrow (static_edges) and
    anything else with Spark: the count is the brute-force one either way, and what Spark
    refuses (a null) is still refused in its words."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from executor.runtime.errors import InputError

    rng = random.Random(7)
    pairs = [(rng.randrange(12), rng.randrange(12)) for _ in range(60)]
    src, dst = [a for a, _ in pairs], [b for _, b in pairs]
    columns = {"Src": src, "DST": dst}  # names as Spark matches them: in any case
    if kind == "int32":
        columns = {k: pa.array(v, pa.int32()) for k, v in columns.items()}
    elif kind == "strings":
        columns = {k: [str(x) for x in v] for k, v in columns.items()}
    elif kind == "nulls":
        columns["DST"] = dst[:-1] + [None]
    elif kind == "timed":
        columns |= {"time": [0] * len(pairs), "diff": [1] * len(pairs)}
    path = tmp_path / "edges.parquet"
    pq.write_table(pa.table(columns), path)
    assert (triangles.static_edges(str(path)) is not None) == (kind in ("int64", "int32"))
    want = recount([(p, 0, 1) for p in pairs], 0)
    assert want  # the graph has triangles to find
    if kind == "nulls":
        with pytest.raises(InputError, match="never null"):
            triangles.triangles_main(spark, conf, str(path), 1, None, "numpy")
        return
    lines = triangles.triangles_main(spark, conf, str(path), 1, None, "numpy")
    assert lines == ([f"time=0 triangles={want}"] if kind == "timed" else [f"triangles={want}"])
    assert triangles.static_count(triangles.read_edges(spark, str(path))) == want


def test_bad_edge_lists_are_refused(spark, tmp_path):
    from executor.runtime.errors import InputError

    bad = tmp_path / "bad.csv"
    bad.write_text("a,dst\n1,2\n")
    with pytest.raises(InputError, match="src"):
        triangles.read_edges(spark, str(bad))
    text = tmp_path / "bad.txt"
    text.write_text("# comment\n1 2\n3 x\n")
    with pytest.raises(InputError, match="integers"):
        triangles.read_edges(spark, str(text))


def test_stream_writes_its_counts_to_output(spark, conf, tmp_path, capsys):
    """`triangles --stream` honours --output: the count's changes, as the other modes
    write them, accumulate to the final count the demo prints."""
    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 2\n2 0\n2 3\n3 1\n0 4\n4 1\n")
    triangles.stream_demo(spark, conf, str(path), 2, 4, 3, output=str(tmp_path / "out"))
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("time=")]
    final = int(printed[-1].split()[1].split("=")[1])
    rows = spark.read.parquet(str(tmp_path / "out" / "triangles")).collect()
    assert sorted(rows[0].asDict()) == ["count", "diff", "time"]
    assert sum(r["count"] * r["diff"] for r in rows) == final  # the one record `count`
