"""What can be checked of the GPU path without a GPU: every public kernel runs on
array_api_strict (the 2023.12 standard cupy implements) and agrees with numpy, and
`python -m executor gpu-check` parses RAPIDS output, runs its plan on the CPU, and without a
GPU exits with its clear message. (The gpu profile and environment.yml are checked in
test_configs.py and test_environment.py.)"""
from __future__ import annotations

import subprocess
from collections import Counter
import sys

import array_api_strict
import numpy as np
import pytest

import gpu_kernels as gk
from conftest import ROOT
from executor.apps import gpu_check
from gpu_kernels import parity


@pytest.fixture
def strict():
    with array_api_strict.ArrayAPIStrictFlags(api_version="2023.12"):
        yield gk.namespace("strict")


def test_every_public_kernel_has_a_parity_case():
    missing = parity.public_kernels() - set(parity.CASES)
    assert not missing, f"add a case to gpu_kernels/parity.py CASES for {sorted(missing)}"
    assert set(parity.CASES) <= parity.public_kernels()


def test_every_kernel_on_array_api_strict_equals_numpy(strict):
    ok, lines = gpu_check.parity_report(strict, gk.namespace("numpy"), sizes=(0, 1, 17, 3000))
    assert ok, "\n".join(line for line in lines if "BAD" in line)
    assert len(lines) == len(parity.CASES)


def test_parity_names_a_kernel_that_differs_or_fails(strict, monkeypatch):
    numpy = gk.namespace("numpy")
    inputs = lambda rng, n: {"x": rng.integers(0, 9, n)}  # noqa: E731
    monkeypatch.setattr(parity, "CASES", {
        "drifts": parity.Case(inputs, lambda xp, a: a["x"] + int(xp is strict)),
        "breaks": parity.Case(inputs, lambda xp, a: xp.unique_all(a["x"]) if xp is strict
                              else np.unique(a["x"])),
        "agrees": parity.Case(inputs, lambda xp, a: a["x"] * 2),
    })
    report = {name: (ok, detail) for name, ok, detail in parity.compare(strict, numpy, (0, 5))}
    assert report["agrees"][0]
    assert report["drifts"] == (False, "n=5: results differ")  # n=0: equal (empty)
    assert not report["breaks"][0] and "n=0" in report["breaks"][1]


def test_gpu_check_without_a_gpu_says_so_and_exits_2():
    try:
        gpu_check.gpu_device()
        pytest.skip("a GPU is visible here: gpu-check runs for real")
    except gpu_check.NoGpu:
        pass
    done = subprocess.run([sys.executable, "-m", "executor", "gpu-check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: gpu-check: no GPU on this machine: ")
    assert "nothing was checked" in done.stderr


LOG = """26/11/22 10:00:01 WARN GpuOverrides:
!Exec <MapInArrowExec> cannot run on GPU because the Python worker is not GPU enabled
  @Expression <AttributeReference> n#1L could run on GPU
    !Expression <ScalaUDF> f(n#1L) cannot run on GPU because ScalaUDF is not supported
!Exec <MapInArrowExec> cannot run on GPU because the Python worker is not GPU enabled
!NOT_FOUND <LocalTableScanExec> cannot run on GPU because no GPU enabled version could be found
*Exec <SortExec> will run on GPU
"""

PLAN = """GpuColumnarToRow false
+- GpuHashAggregate(keys=[n#1L], functions=[gpusum(diff#3L)])
   +- GpuShuffleCoalesce 2147483647
      +- GpuColumnarExchange gpuhashpartitioning(n#1L, 2)
         +- GpuRowToColumnar targetsize(1073741824)
            +- *(1) MapInArrow copies(n#1L), [n#4L]
               :- *(2) Project [n#1L, time#2L]
               +- Scan ExistingRDD[n#1L,time#2L,diff#3L]
"""


def test_not_on_gpu_lines_are_counted_with_their_reasons():
    got = gpu_check.not_on_gpu(LOG)
    assert got == {
        ("Exec", "MapInArrowExec", "the Python worker is not GPU enabled"): 2,
        ("Expression", "ScalaUDF", "ScalaUDF is not supported"): 1,
        ("NOT_FOUND", "LocalTableScanExec", "no GPU enabled version could be found"): 1,
    }


def test_plan_operators_split_gpu_and_cpu():
    gpu, cpu = gpu_check.plan_operators(PLAN)
    assert gpu == {"GpuHashAggregate": 1, "GpuShuffleCoalesce": 1, "GpuColumnarExchange": 1}
    assert cpu == {"MapInArrow": 1, "Project": 1, "Scan": 1}
    lines = gpu_check.fallback_lines(LOG, [PLAN])
    assert lines[0] == "  executed plans: 3 GPU operators, 3 CPU"
    assert "  NOT_ON_GPU explain lines: 4" in lines


# The formatted form the SQL status store keeps: the tree, a blank line, each node's details;
# adaptive execution shows the final plan and the initial one.
FORMATTED = """== Physical Plan ==
AdaptiveSparkPlan (14)
+- == Final Plan ==
   * HashAggregate (9)
   +- ShuffleQueryStage (8)
      +- Exchange (7)
         +- * HashAggregate (6)
            +- * Project (5)
               +- * BroadcastHashJoin Inner BuildRight (4)
                  :- * Scan ExistingRDD (1)
                  +- BroadcastQueryStage (3)
                     +- GpuHashAggregate (2)
+- == Initial Plan ==
   HashAggregate (13)
   +- Exchange (12)
      +- SortMergeJoin (11)
         +- Scan ExistingRDD (10)


(1) Scan ExistingRDD [codegen id : 1]
Output [2]: [k#1L, v#2L]

(4) BroadcastHashJoin [codegen id : 2]
Left keys [1]: [k#1L]
"""


def test_plan_operators_of_a_formatted_adaptive_plan():
    """The final plan's operators only: not the initial plan's, not the details' lines, not
    the adaptive wrappers."""
    gpu, cpu = gpu_check.plan_operators(FORMATTED)
    assert gpu == {"GpuHashAggregate": 1}
    assert cpu == {"HashAggregate": 2, "Exchange": 1, "Project": 1, "BroadcastHashJoin": 1,
                   "Scan": 1}


def _operators(plans):
    gpu, cpu = Counter(), Counter()
    for plan in plans:
        g, c = gpu_check.plan_operators(plan)
        gpu.update(g)
        cpu.update(c)
    return gpu, cpu


def test_executed_plans_are_those_of_the_work_in_the_block(spark):
    """A join + count run inside the block: its executed plan, with the join and the
    aggregation, is collected; what ran before the block is not."""
    spark.range(10).count()
    a = spark.range(500).selectExpr("id % 7 AS k", "id AS v")
    b = spark.range(50).selectExpr("id % 7 AS k", "id AS w")
    with gpu_check.executed_plans(spark) as plans:
        got = a.join(b, "k").groupBy("k").count().collect()
    assert len(got) == 7 and len(plans) >= 1
    gpu, cpu = _operators(plans)
    assert not gpu
    assert cpu["HashAggregate"] >= 2 and any("Join" in name for name in cpu), cpu
    with gpu_check.executed_plans(spark) as nothing:
        pass
    assert nothing == []


def test_end_to_end_plan_on_the_cpu_equals_the_reference(spark, conf):
    """The gpu-check plan with numpy kernels on this (CPU) session: equal to the reference
    interpreter; the plans it reports are those of the steps' work (the kernel through
    mapInArrow, the count's aggregation), all CPU operators, not merely the scan of a
    checkpointed output."""
    ok, lines, plans = gpu_check.end_to_end(spark, conf, "numpy", rows=300)
    assert ok, "\n".join(lines)
    assert len(lines) == 3 and all(line.startswith("  ok ") for line in lines)
    gpu, cpu = _operators(plans)
    assert not gpu
    assert cpu["MapInArrow"] >= 1 and cpu["HashAggregate"] >= 1, cpu
    scans = {"InMemoryTableScan", "Scan", "LocalTableScan"}
    assert set(cpu) - scans, cpu
