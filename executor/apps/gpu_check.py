"""`python -m executor gpu-check`: is this machine's GPU path right, and what stays on the CPU?

On a machine with a CUDA GPU (cupy installed, a device visible) it
1. runs every public kernel on cupy and on numpy with the same inputs and compares
   (gpu_kernels.parity), then the kernel test suites with DIFFSPARK_KERNEL_BACKENDS=cupy;
2. runs a small end-to-end plan (an array kernel through mapInArrow, counted per key) with the
   gpu profile (RAPIDS plugin, cupy kernels) and compares it with the reference interpreter,
   and counts triangles of an R-MAT graph on cupy and numpy;
3. reads the plugin's NOT_ON_GPU explain lines from the Spark log and the executed plans, and
   prints which operators fell back to the CPU and why.
Exit status: 0 all equal, 1 a mismatch, 2 it could not run (no GPU, no plugin jar): without a
GPU it checks nothing and says so.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
KERNEL_TESTS = ("tests/test_kernels.py", "tests/test_triangle_kernels.py")
# A RAPIDS explain line for something kept on the CPU: `!Exec <SortExec> cannot run on GPU
# because ...`, `!Expression <ScalaUDF> ...`, `!NOT_FOUND <...> ...`.
_NOT_ON_GPU = re.compile(r"^\s*!(?P<kind>\w+)\s+<(?P<op>[^>]+)>(?P<rest>.*)$")
# A plan tree's node line, in toString form (`+- *(2) Project [...]`) or in the formatted
# form the SQL status store keeps (`+- * Project (7)`).
_PLAN_NODE = re.compile(r"^[\s:|+\-]*(?:\*\(\d+\)\s*|\*\s+)?(?P<name>[A-Za-z][A-Za-z0-9_]*)")
TRANSITIONS = {"GpuColumnarToRow", "GpuRowToColumnar", "ColumnarToRow", "RowToColumnar",
               "GpuColumnarToRowTransition"}
# Adaptive execution's wrappers around the operators (not operators themselves).
WRAPPERS = {"AdaptiveSparkPlan", "ResultQueryStage", "ShuffleQueryStage",
            "BroadcastQueryStage", "TableCacheQueryStage"}


class NoGpu(RuntimeError):
    """This machine cannot run the GPU path; the message says what is missing."""


def gpu_device() -> str:
    """Name of CUDA device 0, or NoGpu naming what is missing (cupy, driver, device)."""
    try:
        import cupy
    except ImportError:
        raise NoGpu("cupy is not installed (GPU machines use environment.yml: conda env "
                    "create -f environment.yml)") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - no driver or no device: both mean no GPU
        raise NoGpu(f"no CUDA device visible ({type(e).__name__}: {e})") from None
    if count == 0:
        raise NoGpu("no CUDA device visible (cupy found 0 devices)")
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def parity_report(xp, baseline, sizes=(0, 1, 17, 1000, 100_000)) -> tuple[bool, list[str]]:
    """(all equal, one line per kernel) comparing `xp` with `baseline` (gpu_kernels.parity)."""
    from gpu_kernels.parity import compare

    rows = compare(xp, baseline, sizes)
    lines = [f"  {'ok ' if ok else 'BAD'} {name}: {detail}" for name, ok, detail in rows]
    return all(ok for _, ok, _ in rows), lines


def kernel_suite(backend: str = "cupy") -> tuple[bool, str]:
    """The kernel test files re-run on `backend` (pytest in a subprocess): (passed, summary)."""
    files = [f for f in KERNEL_TESTS if (REPO_ROOT / f).is_file()]
    if not files:
        return True, "kernel tests not found (not a repository checkout): skipped"
    env = {**os.environ, "DIFFSPARK_KERNEL_BACKENDS": backend}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", *files], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True)
    tail = [line for line in done.stdout.splitlines() if line.strip()]
    return done.returncode == 0, tail[-1] if tail else f"pytest exit status {done.returncode}"


def not_on_gpu(log_text: str) -> Counter:
    """(kind, operator, reason) -> occurrences, from the plugin's NOT_ON_GPU explain lines."""
    out: Counter = Counter()
    for line in log_text.splitlines():
        match = _NOT_ON_GPU.match(line)
        if match:
            rest = match.group("rest")
            reason = rest.split("because", 1)[1].strip() if "because" in rest else rest.strip()
            out[(match.group("kind"), match.group("op"), reason)] += 1
    return out


def plan_operators(plan: str) -> tuple[Counter, Counter]:
    """(GPU operators, CPU operators) named in a physical plan's text (its tree alone, the
    final plan of an adaptive one); row/columnar transitions and adaptive wrappers are in
    neither."""
    gpu, cpu = Counter(), Counter()
    for line in plan_tree(plan).splitlines():
        match = _PLAN_NODE.match(line)
        if not match or match.group("name") in TRANSITIONS | WRAPPERS:
            continue
        name = match.group("name")
        (gpu if name.startswith("Gpu") else cpu)[name] += 1
    return gpu, cpu


def plan_tree(plan: str) -> str:
    """The operator tree of a plan's text: a formatted plan (`== Physical Plan ==`, a tree, a
    blank line, then each node's details) keeps its tree; an adaptive plan keeps its final
    plan (not also its initial one); a plain toString tree is kept whole."""
    lines = plan.splitlines()
    if lines and lines[0].strip() == "== Physical Plan ==":
        lines = lines[1:]
        lines = lines[:lines.index("")] if "" in lines else lines
    marks = [i for i, line in enumerate(lines) if "== Final Plan ==" in line]
    if marks:
        rest = lines[marks[0] + 1:]
        ends = [i for i, line in enumerate(rest) if "== Initial Plan ==" in line]
        lines = rest[:ends[0]] if ends else rest
    return "\n".join(lines)


@contextmanager
def executed_plans(spark):
    """Collects the executed physical plans of every Spark SQL execution that runs inside the
    block (a list, filled when the block ends), from the session's SQL status store: the plans
    of the jobs that did the work, not the scan of a checkpointed output read afterwards. The
    store is kept with the UI disabled too; the listener bus is drained first, since the
    store learns of an execution (and of adaptive execution's final plan) by its events."""
    store = spark._jsparkSession.sharedState().statusStore()
    bus = spark.sparkContext._jsc.sc().listenerBus()
    bus.waitUntilEmpty()
    before = {e.executionId() for e in _executions(store)}
    plans: list[str] = []
    yield plans
    bus.waitUntilEmpty()
    plans.extend(e.physicalPlanDescription() for e in _executions(store)
                 if e.executionId() not in before)


def _executions(store) -> list:
    """The SQL executions the status store holds (up to spark.sql.ui.retainedExecutions)."""
    out, it = [], store.executionsList().iterator()
    while it.hasNext():
        out.append(it.next())
    return out


def fallback_lines(log_text: str, plans: list[str]) -> list[str]:
    """The report's fallback section: operators per side, then each NOT_ON_GPU reason."""
    gpu, cpu = Counter(), Counter()
    for plan in plans:
        g, c = plan_operators(plan)
        gpu.update(g)
        cpu.update(c)
    lines = [f"  executed plans: {sum(gpu.values())} GPU operators, {sum(cpu.values())} CPU"]
    lines += [f"    cpu {name} x{n}" for name, n in sorted(cpu.items())]
    reasons = not_on_gpu(log_text)
    lines.append(f"  NOT_ON_GPU explain lines: {sum(reasons.values())}")
    lines += [f"    !{kind} <{op}> x{n}: {why}" for (kind, op, why), n in sorted(reasons.items())]
    return lines


def end_to_end(spark, conf: dict, backend: str, seed: int = 1,
               rows: int = 2000) -> tuple[bool, list[str], list[str]]:
    """The small plan on `spark` with `backend` kernels: (equal to the reference and to a
    numpy recount, report lines, executed plans of the Spark SQL executions its steps ran)."""
    import numpy as np

    from executor import Runner
    from executor.reference import reference, rows_of
    from gpu_kernels import count_triangles, namespace
    from plans import Dataflow
    from plans.examples.copies import copies

    flow = Dataflow()
    xs = flow.input("xs", "n BIGINT")
    repeated = xs.join_function(kernel=copies, schema="n BIGINT")
    flow.output("copies", repeated)
    flow.output("per_n", repeated.count(by=["n"]))
    rng = np.random.default_rng(seed)
    updates = [((int(n),), int(t), int(d)) for n, t, d in zip(
        rng.integers(0, 4, rows), rng.integers(0, 4, rows), rng.choice([-1, 1, 2], rows))]
    want = reference(spark, flow.outputs, {"xs": updates})
    # every step on Spark (not the driver's small-step path): its operators are the check
    runner = Runner(flow, conf={**conf, "diffspark.kernel.backend": backend,
                                "diffspark.host.step_rows": "0"}, spark=spark)
    with executed_plans(spark) as plans:
        for upto in (2, 4):
            batch = [(*r, t, d) for r, t, d in updates if upto - 2 <= t < upto]
            runner.step({"xs": spark.createDataFrame(batch,
                                                     "n BIGINT, time BIGINT, diff BIGINT")},
                        upto=upto)
    runner.close()
    ok, lines = True, []
    for name in flow.outputs:
        got = rows_of(runner.output(name))
        same = got == want[name]
        ok &= same
        lines.append(f"  {'ok ' if same else 'BAD'} plan output {name}: {len(got)} changes"
                     f"{'' if same else f', reference has {len(want[name])}'}")
    src, dst = rng.integers(0, 1500, 20_000), rng.integers(0, 1500, 20_000)
    xp = namespace(backend)
    got = count_triangles(xp, xp.asarray(src), xp.asarray(dst))
    known = count_triangles(namespace("numpy"), src, dst)
    ok &= got == known
    lines.append(f"  {'ok ' if got == known else 'BAD'} triangles of a random graph (20,000 "
                 f"edges) on {backend}: {got} (numpy {known})")
    return ok, lines, plans


def run(args) -> int:
    """The verb: print the report; 0 all equal, 1 a mismatch; NoGpu propagates (status 2)."""
    device = gpu_device()
    print(f"gpu-check: device 0 is {device}", flush=True)
    import gpu_kernels as gk

    ok, lines = parity_report(gk.namespace("cupy"), gk.namespace("numpy"))
    print("kernel parity, cupy vs numpy:", *lines, sep="\n", flush=True)
    suite_ok, summary = kernel_suite("cupy")
    print(f"kernel test suites on cupy: {summary}", flush=True)
    ok &= suite_ok

    from executor.apps.launch import conf_from_args, spark_log
    from executor.runtime.session import spark_session

    conf = conf_from_args(["gpu", "spark.log.level=WARN", *args.conf])
    log = Path(args.spark_log or Path(tempfile.gettempdir()) / "diffspark-gpu-check.log")
    with spark_log(str(log)):
        spark = spark_session(conf)
    try:
        e2e_ok, lines, plans = end_to_end(spark, conf, "cupy")
    finally:
        spark.stop()
    print("end to end, gpu profile:", *lines, sep="\n", flush=True)
    print("fallback to CPU:", *fallback_lines(log.read_text(errors="replace"), plans),
          sep="\n", flush=True)
    ok &= e2e_ok
    print(f"gpu-check: {'all equal' if ok else 'MISMATCH'} (Spark log: {log})", flush=True)
    return 0 if ok else 1
