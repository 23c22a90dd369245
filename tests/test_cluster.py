"""A real multi-process Spark cluster: a standalone master and two workers on 127.0.0.1 from
the pinned pip pyspark, jobs sent with `spark-submit --master spark://...` and the project's
code shipped as `--py-files` (a zip of executor/, plans/, gpu_kernels/; the executors have no
other copy of it). Results must equal local mode and a count known independently.

The daemons and everything they start (executor JVMs, Python workers) run in their own
process groups, which the fixture's finalizer stops whatever happens.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = ("executor", "plans", "gpu_kernels")
WORKERS = ("worker1", "worker2")
EXAMPLE_PLAN = ROOT / "plans" / "examples" / "copies.py"  # an array kernel (mapInArrow)
SUBMIT_TIMEOUT = 300  # a loaded 2-core machine: JVM starts take tens of seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ship_zip(dest: Path) -> Path:
    """The project's Python packages as one zip for --py-files (sources only)."""
    with zipfile.ZipFile(dest, "w") as z:
        for pkg in PACKAGES:
            for path in sorted((ROOT / pkg).rglob("*.py")):
                z.write(path, path.relative_to(ROOT).as_posix())
    return dest


class Cluster:
    """A standalone master and two workers started with spark-class; stop() ends every
    group."""

    def __init__(self, base: Path):
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.base = base
        self.procs: list[subprocess.Popen] = []
        (base / "conf").mkdir()  # an empty SPARK_CONF_DIR: no stray spark-defaults.conf
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.env.update(SPARK_HOME=str(self.home), SPARK_CONF_DIR=str(base / "conf"),
                        SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
                        SPARK_LOG_DIR=str(base / "logs"), SPARK_WORKER_DIR=str(base / "work"),
                        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                        PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        self.url = f"spark://127.0.0.1:{free_port()}"

    def _daemon(self, name: str, args: list[str], ready: str) -> None:
        log = self.base / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.procs.append(proc)
        deadline = time.monotonic() + 120
        while ready not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"standalone {name} did not start:\n{tail}")
            time.sleep(0.5)

    def start(self) -> "Cluster":
        port = self.url.rsplit(":", 1)[1]
        self._daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                "--port", port, "--webui-port", str(free_port())],
                     "I have been elected leader")
        for worker in WORKERS:
            self._daemon(worker, ["org.apache.spark.deploy.worker.Worker", "--host",
                                  "127.0.0.1", "--cores", "2", "--memory", "2g",
                                  "--webui-port", str(free_port()),
                                  "--work-dir", str(self.base / "work"), self.url],
                         "Successfully registered with master")
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):  # jobs, then the worker (and executors), master
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue

    def submit(self, *args: str, cores: int = 1) -> subprocess.Popen:
        """Start `spark-submit executor/__main__.py ARGS` against this cluster, from a folder
        outside the repository, with the code shipped as --py-files; `cores` executors of
        one core each (the master spreads them over the workers), so that jobs of one core
        run side by side."""
        cmd = [str(self.home / "bin" / "spark-submit"), "--master", self.url,
               "--driver-memory", "1g", "--executor-memory", "768m",
               "--conf", f"spark.cores.max={cores}", "--conf", "spark.executor.cores=1",
               "--conf", "spark.ui.enabled=false",
               "--py-files", str(self.base / "diffspark.zip"),
               str(ROOT / "executor" / "__main__.py"), *args,
               "--conf", "diffspark.partitions=2", "--spark-log", "-"]
        name = f"job{len(self.procs)}"
        logs = (self.base / f"{name}.out", self.base / f"{name}.err")
        with open(logs[0], "w") as out, open(logs[1], "w") as err:
            proc = subprocess.Popen(cmd, cwd=self.base, env=self.env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        proc.logs = logs
        self.procs.append(proc)
        return proc


def finished(proc: subprocess.Popen, timeout: int = SUBMIT_TIMEOUT) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a submitted job (logs in files: no pipe to fill)."""
    proc.wait(timeout=timeout)
    out, err = (path.read_text(errors="replace") for path in proc.logs)
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster")
    ship_zip(base / "diffspark.zip")
    c = Cluster(base)
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.fixture(scope="module")
def graph(cluster):
    """An R-MAT graph of 3,000 edges as a SNAP text file: (path, edge list)."""
    from benchmarks.rmat import rmat_edges, write_edges

    src, dst = rmat_edges(3000, seed=1)
    write_edges(src, dst, cluster.base / "rmat3k.txt")
    return cluster.base / "rmat3k.txt", list(zip(src.tolist(), dst.tolist()))


@pytest.fixture(scope="module")
def jobs(cluster, graph):
    """Both jobs submitted at once (the JVM starts overlap); each test waits for its own."""
    (cluster.base / "xs.csv").write_text(
        "n,time,diff\n" + "".join(f"{r[0]},{t},{d}\n" for r, t, d in KERNEL_UPDATES))
    return {
        "triangles": cluster.submit("triangles", "--edges", str(graph[0])),
        "kernel": cluster.submit("run", str(EXAMPLE_PLAN),
                                 "--input", f"xs={cluster.base / 'xs.csv'}",
                                 "--output", str(cluster.base / "out"), "--steps", "2"),
    }


def brute_force_triangles(edges: list[tuple[int, int]]) -> int:
    """Triangles of an undirected simple graph by neighbour sets, for a known answer."""
    adj: dict[int, set[int]] = {}
    for a, b in edges:
        if a != b:
            adj.setdefault(a, set()).add(b)
            adj.setdefault(b, set()).add(a)
    return sum(1 for a in adj for b in adj[a] if a < b for c in adj[a] & adj[b] if b < c)


def test_zip_holds_every_package(tmp_path):
    names = zipfile.ZipFile(ship_zip(tmp_path / "d.zip")).namelist()
    assert {f"{pkg}/__init__.py" for pkg in PACKAGES} <= set(names)
    assert "executor/apps/cli.py" in names and "gpu_kernels/wcoj.py" in names
    assert all(n.endswith(".py") for n in names)


@pytest.mark.slow  # a standalone cluster: five JVMs or more
def test_flagship_triangles_on_the_cluster_equal_local_mode(graph, jobs, spark, conf):
    """`triangles --edges` on an R-MAT graph of 3,000 edges: the executors read the file,
    the driver counts; the printed count equals local mode and a brute-force count."""
    from executor.apps.triangles import triangles_main

    status, out, err = finished(jobs["triangles"])
    assert status == 0, err[-3000:]
    local = triangles_main(spark, conf, str(graph[0]), 1, None, "numpy")
    known = brute_force_triangles(graph[1])
    assert out.splitlines()[-1] == local[-1] == f"triangles={known}"
    assert known > 1000


KERNEL_UPDATES = [((1,), 0, 1), ((2,), 0, 1), ((0,), 0, 3), ((3,), 1, 2), ((2,), 2, -1),
                  ((5,), 2, 1), ((1,), 3, 1), ((3,), 3, -2)]


@pytest.mark.slow  # a standalone cluster: five JVMs or more
def test_kernel_plan_runs_on_the_executors_from_the_shipped_zip(cluster, jobs, spark, conf):
    """`run` of a plan with an array kernel in 2 steps: mapInArrow runs in Python workers on
    the executor, which import executor/ and gpu_kernels/ from the --py-files zip only. The
    output equals local mode (same plan, this session) and the reference interpreter."""
    from executor import Runner
    from executor.apps.cli import load_plan, run_plan
    from executor.reference import reference, rows_of

    status, out, err = finished(jobs["kernel"])
    assert status == 0, err[-3000:]
    assert "step 2/2" in out

    data = cluster.base / "xs.csv"
    flow = load_plan(str(EXAMPLE_PLAN))
    run_plan(Runner(flow, conf=conf, spark=spark), {"xs": str(data)},
             str(cluster.base / "local"), steps=2)
    on_cluster = rows_of(spark.read.parquet(str(cluster.base / "out" / "copies")))
    local = rows_of(spark.read.parquet(str(cluster.base / "local" / "copies")))
    want = reference(spark, flow.outputs, {"xs": KERNEL_UPDATES})["copies"]
    assert on_cluster == local == want
    assert any(d < 0 for _, _, d in want)  # retractions made it through


def _counts(lines: list[str]) -> list[str]:
    """The stream demo's lines without latency and memory (which differ run to run)."""
    return [line.split(" seconds=")[0] for line in lines
            if line.startswith(("time=", "check:"))]


@pytest.mark.slow
def test_flagship_stream_on_the_cluster_equals_local_mode(cluster, graph, spark, conf, capsys):
    """`triangles --stream 1`: the graph loaded, then one step of 40 random changes through
    the incremental dataflow on the executors; every printed count equals local mode."""
    from executor.apps.triangles import stream_demo

    path = graph[0]
    status, out, err = finished(cluster.submit("triangles", "--edges", str(path),
                                               "--stream", "1", "--batch", "40"))
    assert status == 0, err[-3000:]
    capsys.readouterr()
    stream_demo(spark, conf, str(path), 1, 40, 7)
    local = _counts(capsys.readouterr().out.splitlines())
    assert _counts(out.splitlines()) == local
    assert len(local) == 3 and local[-1].endswith("(OK)")


FAMILIES = ROOT / "plans" / "examples" / "families.py"


def family_updates(seed: int = 7) -> dict:
    """Orders and customers at times 0 and 1 with every column type, nulls and retractions
    (a third of time 1's updates retract a record of time 0)."""
    import datetime as dt
    import random
    from decimal import Decimal

    from plans.examples.families import CUSTOMERS, ORDERS

    rng = random.Random(seed)

    def maybe(values):
        return rng.choice([None, *values])

    def order():
        return (rng.randrange(40), rng.randrange(12), maybe(["new", "paid", "é"]),
                maybe([Decimal("1.50"), Decimal("-2.25"), Decimal("0.00"), Decimal("123.45")]),
                maybe([dt.date(2020, 1, 1), dt.date(1969, 12, 31), dt.date(2024, 2, 29)]),
                maybe([dt.datetime(2021, 5, 6, 7, 8, 9, 123456), dt.datetime(1970, 1, 1)]),
                maybe([0.5, -1.25, 0.0, 3.0]), maybe([True, False]))

    def customer():
        return (rng.randrange(14), maybe(["ann", "bob", ""]), maybe(["retail", "corp"]))

    out = {}
    for name, ddl, make, per_time in (("orders", ORDERS, order, 150),
                                      ("customers", CUSTOMERS, customer, 20)):
        updates, live = [], []
        for t in range(2):
            for _ in range(per_time):
                if live and rng.random() < (0.33 if t else 0):
                    updates.append((live.pop(rng.randrange(len(live))), t, -1))
                else:
                    live.append(make())
                    updates.append((live[-1], t, 1))
        out[name] = (ddl, updates)
    return out


def tasks_by_executor(app: Path) -> dict[str, int]:
    """Per executor of a standalone application (work/APP/EXECUTOR/stderr), the tasks its
    log says it ran (at spark.log.level INFO, which the executors follow)."""
    return {d.name: (d / "stderr").read_text(errors="replace").count("Running task ")
            for d in app.iterdir() if (d / "stderr").is_file()}


@pytest.mark.slow  # a standalone cluster: five JVMs or more
def test_every_operator_family_steps_on_the_executors_and_equals_the_driver_placement(
        cluster, spark, conf, tmp_path):
    """`run` of plans/examples/families.py (linear chains, join, semijoin, antijoin, count,
    sum, min, max, distinct, threshold, top_k, a user kernel, conjunctive queries and an
    iterate, over every column type with nulls) in 2 steps with retractions and
    diffspark.host.step_rows=0: every step on the Spark placement, with two executors, one on
    each worker (each worker's log names the one it launched), both of which ran tasks
    (their logs count them; the driver runs none in a standalone application).
    Every output equals a local run of the same files on the driver placement and the
    reference interpreter."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from conftest import updates_table
    from executor import Runner
    from executor.apps.cli import load_plan
    from executor.reference import reference, rows_of

    data = family_updates()
    paths = {}
    for name, (ddl, updates) in data.items():
        paths[name] = str(tmp_path / f"{name}.parquet")
        pq.write_table(updates_table(ddl, updates), paths[name])
    apps = cluster.base / "work"
    before = set(apps.iterdir()) if apps.exists() else set()
    status, out, err = finished(cluster.submit(
        "run", str(FAMILIES), *[f"--input={n}={p}" for n, p in paths.items()],
        "--output", str(tmp_path / "cluster"), "--steps", "2",
        "--conf", "diffspark.host.step_rows=0", "--conf", "spark.log.level=INFO", cores=2),
        timeout=3 * SUBMIT_TIMEOUT)
    assert status == 0, err[-3000:]
    assert "step 2/2" in out
    (app,) = set(apps.iterdir()) - before
    ran = tasks_by_executor(app)
    assert len(ran) == 2 and all(n > 0 for n in ran.values()), ran
    launched = {w: (cluster.base / f"{w}.log").read_text(errors="replace").count(
        f"Asked to launch executor {app.name}/") for w in WORKERS}
    assert launched == {w: 1 for w in WORKERS}, launched

    flow = load_plan(str(FAMILIES))
    runner = Runner(flow, conf=conf, spark=spark)
    tables = {n: updates_table(ddl, u) for n, (ddl, u) in data.items()}
    for t in range(2):
        feed = {n: table.filter(pc.equal(table["time"], t)) for n, table in tables.items()}
        assert runner.step(feed, upto=t + 1).host
    want = reference(spark, flow.outputs, {n: u for n, (_, u) in data.items()})
    for name in flow.outputs:
        on_cluster = rows_of(spark.read.parquet(str(tmp_path / "cluster" / name)))
        assert on_cluster == rows_of(runner.output(name)) == want[name], name
    assert any(d < 0 for name in want for _, _, d in want[name])
    assert want["linked"] and want["revenue"]
