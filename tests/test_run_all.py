"""benchmarks/run_all.py: benchmarks run as subprocesses at --quick sizes and write their JSON
(with the commit, machine and versions); the README's generated blocks are exactly what the
committed JSON gives (a hand edit of a generated figure fails here); --report-only rebuilds
them without running. The default suite runs the kernels benchmark (seconds); the slow test
runs two Spark benchmarks through run_all (every benchmark at a tiny size is smoke tested in
test_benchmarks.py)."""
from __future__ import annotations

import json
import re

import pytest

from benchmarks import common, run_all


def run_quick(tmp_path, only: str = ""):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{run_all.START}\nold table\n{run_all.END}\nmiddle\n"
                      + "".join(f"{a}\nold {b.name}\n{z}\n" for b in run_all.BENCHMARKS
                                for a, z in [run_all.block_markers(b.name)]) + "rest\n")
    results = tmp_path / "results"
    argv = ["--quick", "--results", str(results), "--readme", str(readme)]
    ran = run_all.main(argv + (["--only", only] if only else []))
    names = [b.name for b in run_all.BENCHMARKS if (not only or b.name in only.split(","))
             and (not b.gpu or run_all.gpu_visible())]
    assert sorted(ran["blocks"]) == sorted(names)
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("rest\n") and "\nmiddle\n" in text
    assert "old table" not in text
    assert "run_all.py --quick" in text and "none was taken on a GPU" in text
    for b in run_all.BENCHMARKS:
        start, end = run_all.block_markers(b.name)
        block = text.split(start, 1)[1].split(end, 1)[0]
        if b.name not in names:
            assert block == f"\nold {b.name}\n"
            continue
        payload = json.loads((results / f"{b.name}.json").read_text())
        assert payload["benchmark"] == b.module
        assert f"From `benchmarks/results/{b.name}.json`, written by " in block
        assert payload["command"] in block and common.commit_label(payload["machine"]) in block
        if b.summary:
            assert f"**{b.name}** (baseline: {b.baseline}; peers: {b.peers}; commit " in text
            rows = ran["tables"][b.name]
            assert rows and all(r[1] > 0 for r in rows), b.name
    again = run_all.main(["--report-only", "--results", str(results), "--readme",
                          str(readme)])
    assert json.loads(json.dumps(again["tables"])) == json.loads(json.dumps(ran["tables"]))
    assert readme.read_text() == text  # the same tables, still marked as a --quick run
    return text, results


def test_run_all_quick_kernels(tmp_path):
    text, results = run_quick(tmp_path, "kernels")
    assert "| extend_as_of " in text and "H100 roofline us" in text  # measured vs roofline
    assert "**linear**: not measured yet" in text
    machine = json.loads((results / "kernels.json").read_text())["machine"]
    assert re.fullmatch(r"[0-9a-f]{40}", machine["git"]["commit"])
    assert isinstance(machine["git"]["dirty"], bool)
    for key in ("python", "pyspark", "numpy", "pyarrow", "java"):
        assert machine["versions"][key], key
    assert machine["nproc"] > 0 and machine["mem_total_gib"] > 0 and machine["cpu_model"]
    assert len(machine["load_average"]) == 3


@pytest.mark.slow
def test_run_all_quick_two_spark_benchmarks(tmp_path):
    """run_all's plumbing over more than one benchmark, Spark ones with peers among them:
    each runs in its subprocess, writes its JSON and its README block, and the summary table
    has a row per benchmark. Every benchmark's own run at a tiny size is smoke tested in
    test_benchmarks.py; running all of them here again cost 10 minutes of CI."""
    text, results = run_quick(tmp_path, "relational,optimizer")
    assert "| diffspark " in text.split("results:relational:start", 1)[1]
    payload = json.loads((results / "relational.json").read_text())
    assert payload["machine"]["peers"], "the relational benchmark's peers ran"


def test_gpu_benchmarks_are_skipped_without_a_gpu(tmp_path, monkeypatch, capsys):
    """A GPU entry runs nothing where cupy sees no GPU (no failure), and its block is still
    made from its saved JSON, so the H100 figures in the README stay generated."""
    monkeypatch.setattr(run_all, "gpu_visible", lambda: False)
    monkeypatch.setattr(run_all, "run_one", lambda *a: pytest.fail("ran a GPU benchmark"))
    (gpu,) = [b for b in run_all.BENCHMARKS if b.gpu]
    results = tmp_path / "results"
    results.mkdir()
    saved = common.RESULTS_DIR / f"{gpu.name}.json"
    (results / saved.name).write_text(saved.read_text())
    readme = tmp_path / "README.md"
    start, end = run_all.block_markers(gpu.name)
    readme.write_text(f"{run_all.START}\n{run_all.END}\n{start}\nold\n{end}\n")
    ran = run_all.main(["--only", gpu.name, "--results", str(results), "--readme", str(readme)])
    assert "skipped, no GPU visible" in capsys.readouterr().out
    assert "| extend_as_of " in ran["blocks"][gpu.name] and "cupy ms" in ran["blocks"][gpu.name]
    assert "| rmat-5000000 " in readme.read_text() and "\nold\n" not in readme.read_text()


def test_readme_blocks_are_generated_from_the_committed_json(tmp_path):
    """Regenerating every README block from benchmarks/results/ changes nothing, and every
    benchmark has its block: a figure typed into a generated table by hand fails here."""
    readme = tmp_path / "README.md"
    committed = run_all.README.read_text()
    readme.write_text(committed)
    run_all.main(["--report-only", "--readme", str(readme)])
    assert readme.read_text() == committed, (
        "README.md's generated blocks differ from benchmarks/results/*.json: run "
        "`PYTHONPATH=. .venv/bin/python benchmarks/run_all.py --report-only`")
    for b in run_all.BENCHMARKS:
        start, end = run_all.block_markers(b.name)
        assert start in committed and end in committed, b.name


def test_a_hand_edited_block_is_regenerated(tmp_path):
    """The check above can fail: one digit changed inside a block is undone."""
    readme = tmp_path / "README.md"
    committed = run_all.README.read_text()
    start, end = run_all.block_markers("triangles")
    head, rest = committed.split(start, 1)
    block, tail = rest.split(end, 1)
    edited = re.sub(r"\d\.\d\d", "9.99", block, count=1)
    assert edited != block
    readme.write_text(head + start + edited + end + tail)
    run_all.main(["--report-only", "--readme", str(readme)])
    assert readme.read_text() == committed


def test_readme_without_markers_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    with pytest.raises(SystemExit, match="needs the markers"):
        run_all.update_readme(readme, "table\n")
    assert readme.read_text() == "no markers here\n"


def test_every_benchmark_script_is_run():
    """run_all covers every benchmark script in benchmarks/ (helpers excepted)."""
    helpers = {"common", "rmat", "run_all", "tpch_workload", "__init__"}
    scripts = {p.stem for p in (common.ROOT / "benchmarks").glob("*.py")} - helpers
    assert scripts <= {b.module for b in run_all.BENCHMARKS}
    assert len({b.name for b in run_all.BENCHMARKS}) == len(run_all.BENCHMARKS)
