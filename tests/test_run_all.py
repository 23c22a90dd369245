"""benchmarks/run_all.py on the shared test session: benchmarks run at --quick sizes, write
their JSON and plots, the README table between the markers is regenerated (in a copy), and
--report-only rebuilds the same tables from the saved JSON without running. The default
suite runs the kernels benchmark (seconds; the Spark benchmarks at the same --quick sizes
are smoke tested in test_benchmarks.py); the slow test runs all of them through run_all."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def run_quick(spark, tmp_path, only: str = ""):
    from benchmarks import run_all

    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{run_all.START}\nold table\n{run_all.END}\nrest\n")
    results = tmp_path / "results"
    argv = ["--quick", "--results", str(results), "--readme", str(readme)]
    ran = run_all.main(argv + (["--only", only] if only else []), spark=spark)
    names = [b.name for b in run_all.BENCHMARKS if not only or b.name in only.split(",")]
    assert sorted(ran["tables"]) == sorted(names)
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{run_all.END}\nrest\n")
    assert "old table" not in text
    assert "run_all.py --quick" in text and "none was taken on a GPU" in text
    for b in run_all.BENCHMARKS:
        if b.name in names:
            assert json.loads((results / f"{b.name}.json").read_text())["benchmark"] == b.name
            assert f"**{b.name}** (baseline: {b.baseline}; peers: {b.peers})" in text
            assert Path(ran["plots"][b.name]).stat().st_size > 0
            assert f"![{b.name}](results/{Path(ran['plots'][b.name]).name})" in text
            rows = ran["tables"][b.name]
            assert rows and all(r[1] > 0 for r in rows), b.name
    again = run_all.main(["--report-only", "--results", str(results), "--readme",
                          str(readme)] + (["--only", only] if only else []))
    assert json.loads(json.dumps(again["tables"])) == json.loads(json.dumps(ran["tables"]))
    assert readme.read_text() == text  # the same table, still marked as a --quick run
    return text


def test_run_all_quick_kernels(spark, tmp_path):
    text = run_quick(spark, tmp_path, "kernels")
    assert "| extend_as_of " in text and "H100 roofline us" in text  # measured vs roofline
    assert "**linear**" not in text


@pytest.mark.slow
def test_run_all_quick_every_benchmark(spark, tmp_path):
    text = run_quick(spark, tmp_path)
    assert "| 5-operator chain, fused SQL expressions" in text
    assert "| static triangle count, R-MAT 3,000 edges |" in text


def test_readme_without_markers_is_refused(tmp_path):
    from benchmarks import run_all

    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    with pytest.raises(SystemExit, match="needs the markers"):
        run_all.update_readme(readme, "table\n")
    assert readme.read_text() == "no markers here\n"
