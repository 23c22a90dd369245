"""Shared helpers for diffspark benchmarks: session, forcing, timing, memory, tables, JSON, PNG.

Conventions every benchmark follows (DESIGN.md section 11 has the machine facts behind them):

- Inputs are generated inside Spark, cached and counted BEFORE timing: generation is not
  measured. A warm-up pass on a small input runs every measured path once first (JIT, Python
  worker start-up, first-action costs are not measured either).
- A measurement is one Spark action that forces the whole result: `force(df)` writes it to
  the `noop` sink, which computes every row and column and writes nothing. Use it for every
  timed DataFrame so rows compare like with like.
- `--repeat R` runs each measurement R times; the table reports the best (minimum) time,
  the JSON keeps every time and the median too. On a shared 2-core machine the minimum is
  the least disturbed by other load.
- Results go to benchmarks/results/NAME.json (or --out PATH): the rows, the ratios, the
  machine, the library versions, the Spark settings and the command line. A PNG bar chart is
  written only with --png and only when matplotlib is importable (it is not a requirement).
- Speed targets live in benchmarks, never in timed tests: a benchmark reports whether a goal
  is met, it does not fail on a slow machine.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"


# --------------------------------------------------------------------------- command line
def base_parser(description: str, default_rows: int) -> argparse.ArgumentParser:
    """The flags every benchmark takes: --rows, --repeat, --conf, --out, --png."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=default_rows,
                   help=f"input update triples (default {default_rows:_})")
    p.add_argument("--repeat", type=int, default=1,
                   help="timed runs per measurement; the table shows the best (default 1)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="override a line of the cpu profile (repeatable); spark.* keys are "
                        "ignored when a running session is passed in")
    p.add_argument("--profile", default="cpu", help="config profile (default cpu)")
    p.add_argument("--out", default=None,
                   help="JSON path (default benchmarks/results/<name>.json)")
    p.add_argument("--png", action="store_true",
                   help="also write a bar chart next to the JSON (needs matplotlib)")
    return p


def command_line(argv: Optional[Sequence[str]], name: Optional[str] = None) -> str:
    """The command as typed (argv None: this process's own), or, for a call in-process with
    `argv`, the equivalent command of the benchmark `name`."""
    args = list(sys.argv[1:] if argv is None else argv)
    prog = sys.argv[0] if argv is None else (f"benchmarks/{name}.py" if name else "main")
    return " ".join(shlex.quote(a) for a in [prog, *args])


# --------------------------------------------------------------------------- Spark
def session(profile: str, overrides: Iterable[str], spark=None):
    """(spark, conf): the given session, or one built from the profile and overrides."""
    from executor.runtime.config import load_conf
    from executor.runtime.session import spark_session

    conf = load_conf(profile, list(overrides))
    return (spark if spark is not None else spark_session(conf)), conf


def force(df) -> None:
    """Compute every row and column of `df` and discard them (the `noop` sink)."""
    df.write.format("noop").mode("overwrite").save()


def persistent_rdd_ids(spark) -> set[int]:
    """Ids of the RDDs Spark holds in its block manager (cache, localCheckpoint)."""
    return {int(k) for k in spark.sparkContext._jsc.getPersistentRDDs().keySet().toArray()}


def release_rdds_since(spark, before: set[int]) -> int:
    """Unpersist every RDD persisted after `before` was taken (e.g. localCheckpoint blocks
    of an unfused run), so one measurement's memory does not weigh on the next."""
    held = spark.sparkContext._jsc.getPersistentRDDs()
    released = 0
    for key in held.keySet().toArray():
        if int(key) not in before:
            held.get(key).unpersist(True)
            released += 1
    return released


def plan_summary(df, names: Sequence[str] = ("MapInArrow", "Generate", "Exchange",
                                              "InMemoryTableScan")) -> dict:
    """How often each operator name occurs in the executed physical plan, plus the number of
    whole-stage-codegen pipelines (`codegen_stages`, the distinct `*(n)` markers)."""
    import re

    plan = df._jdf.queryExecution().executedPlan().toString()
    out = {n: plan.count(n) for n in names}
    out["codegen_stages"] = len(set(re.findall(r"\*\((\d+)\)", plan)))
    return out


# --------------------------------------------------------------------------- memory
def _memory_bytes(pid: int, page: int) -> int:
    """Proportional set size of a process (shared pages split among their sharers, so forked
    Python workers are not counted many times over); resident set size where PSS is not
    readable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * page
    except (OSError, ValueError, IndexError):
        return 0


def _proc_tree_memory(root_pid: int) -> tuple[int, int]:
    """(bytes of JVM processes, bytes of the others) in the process tree of root_pid, read
    from /proc (Linux); (0, 0) where /proc is unavailable."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0, 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        tail = stat[stat.rfind(")") + 2:].split()
        if len(tail) < 2 or not tail[1].isdigit():
            continue
        children.setdefault(int(tail[1]), []).append(pid)
        names[pid] = stat[stat.find("(") + 1: stat.rfind(")")]
    page = os.sysconf("SC_PAGE_SIZE")
    jvm = other = 0
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        if pid in names:
            size = _memory_bytes(pid, page)
            if names[pid] == "java":
                jvm += size
            else:
                other += size
        stack.extend(children.get(pid, ()))
    return jvm, other


class PeakMemory:
    """Samples, in a background thread, the memory (PSS, else RSS) of this process and
    everything it started (the Spark JVM and its Python workers) and keeps the peaks.

    `jvm_mib` is the driver/executor JVM (local mode: one process); `python_mib` is this
    interpreter plus the Python workers that run mapInArrow kernels. A JVM rarely returns
    heap to the OS, so its peak within a measurement is at least its peak from earlier ones.
    """

    def __init__(self, interval: float = 0.5):
        self.interval = interval
        self.jvm = self.other = self.total = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _sample(self):
        jvm, other = _proc_tree_memory(os.getpid())
        self.jvm, self.other = max(self.jvm, jvm), max(self.other, other)
        self.total = max(self.total, jvm + other)

    def _run(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        return False

    def as_dict(self) -> dict:
        mib = 1 << 20
        return {"peak_total_mib": round(self.total / mib), "peak_jvm_mib": round(self.jvm / mib),
                "peak_python_mib": round(self.other / mib)}


# --------------------------------------------------------------------------- timing
@dataclass
class Measurement:
    name: str
    description: str
    seconds: list[float] = field(default_factory=list)
    memory: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(best_s=round(self.best, 3), median_s=round(self.median, 3),
                 repeat=len(self.seconds), seconds=[round(s, 3) for s in self.seconds])
        return d


def measure(name: str, description: str, run: Callable[[], object], repeat: int = 1,
            cleanup: Optional[Callable[[], object]] = None, verbose: bool = True) -> Measurement:
    """Time `run()` `repeat` times (wall clock around the whole call), sampling memory;
    `cleanup()` runs after each repeat, untimed."""
    m = Measurement(name, description)
    with PeakMemory() as mem:
        for _ in range(max(1, repeat)):
            start = time.perf_counter()
            run()
            m.seconds.append(time.perf_counter() - start)
            if cleanup is not None:
                cleanup()
    m.memory = mem.as_dict()
    if verbose:
        times = ", ".join(f"{s:.2f}" for s in m.seconds)
        print(f"  {name}: {times} s", flush=True)
    return m


def isolated(fn, *args):
    """fn(*args) in a fresh Python process (spawned: nothing of this one is inherited), the
    way each peer runs: no shared heap, JIT or session with diffspark or another peer."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_reported, fn, *args).result()


class PeerFailed(RuntimeError):
    """A peer's process failed: its traceback as text (a Py4J error cannot be pickled back,
    and would arrive as "cannot pickle '_thread.RLock' object" instead)."""


def _reported(fn, *args):
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - re-raised in the parent with its traceback
        import traceback
        raise PeerFailed(f"{getattr(fn, '__name__', fn)} failed:\n"
                         f"{traceback.format_exc()}") from None


def ratio(num: float, den: float) -> Optional[float]:
    return round(num / den, 3) if den > 0 else None


# --------------------------------------------------------------------------- reporting
def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain markdown table; numbers right-aligned, floats with 2 decimals."""
    def cell(v):
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    body = [[cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(headers)]

    def number(c: str) -> bool:
        c = c[:-1] if c.endswith("x") else c
        return c.replace(",", "").replace(".", "", 1).lstrip("-").isdigit()

    # a column is right-aligned when every non-empty cell is a number (or a ratio like 3.2x)
    align = [all(c == "" or number(c) for c in (r[i] for r in body)) for i in range(len(headers))]
    fmt = lambda cells: "| " + " | ".join(  # noqa: E731
        c.rjust(w) if a else c.ljust(w) for c, w, a in zip(cells, widths, align)) + " |"
    sep = "|" + "|".join(("-" * (w + 1) + ":") if a else ("-" * (w + 2))
                         for w, a in zip(widths, align)) + "|"
    return "\n".join([fmt(headers), sep] + [fmt(r) for r in body])


def _versions(dists: Sequence[str]) -> dict:
    """Installed versions of the packages named (None: absent), read from the package
    metadata, so nothing is imported."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in dists:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def _java_version(spark=None) -> Optional[str]:
    """The JVM's version: the running session's, else `java -version`'s first line."""
    if spark is not None:
        try:
            return str(spark.sparkContext._jvm.System.getProperty("java.version"))
        except Exception:  # noqa: BLE001 - a remote or stopped session: ask the binary
            pass
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0].strip() if lines else None


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _mem_total_gib() -> Optional[float]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    return None


def git_revision() -> dict:
    """{"commit": HEAD's full hash, "dirty": uncommitted changes to tracked or untracked
    files}; both None outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=10)
    try:
        rev = git("rev-parse", "HEAD")
        status = git("status", "--porcelain")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    if rev.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": rev.stdout.strip(), "dirty": bool(status.stdout.strip())}


def commit_label(machine: dict) -> str:
    """A JSON's commit as the README shows it: short hash, "+dirty" when the tree was; older
    JSON kept "git" as that text already."""
    git = machine.get("git")
    if isinstance(git, dict):
        if not git.get("commit"):
            return "unknown commit"
        return git["commit"][:7] + ("+dirty" if git.get("dirty") else "")
    return git or "unknown commit"


def load_average() -> Optional[list[float]]:
    """1, 5 and 15 minute load averages: above nproc, other work shared the CPUs."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return None


def header(name: str, argv: Optional[Sequence[str]], spark=None, conf: Optional[dict] = None,
           peers: Sequence[str] = ()) -> dict:
    """What every benchmark JSON opens with: its name, the exact command, and the machine,
    commit and versions it ran with (the peers' versions too: the packages named in `peers`)."""
    return {"benchmark": name, "command": command_line(argv, name), "argv": list(sys.argv),
            "machine": machine_info(spark, conf, peers)}


def machine_info(spark=None, conf: Optional[dict] = None, peers: Sequence[str] = ()) -> dict:
    """Cores, memory, CPU model, load average now, commit (hash, dirty), library and peer
    versions, Java's, and the Spark and diffspark settings of the session used."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        affinity = None
    info = {
        "nproc": affinity or os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_total_gib": _mem_total_gib(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "load_average": load_average(),
        "versions": {"python": platform.python_version(),
                     **_versions(("pyspark", "numpy", "pyarrow", "pandas")),
                     "java": _java_version(spark)},
        "peers": _versions(peers),
        "git": git_revision(),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if "cupy" in peers:
        info["gpu"] = _gpu()
    if spark is not None:
        info["versions"]["spark"] = spark.version
        sc = spark.sparkContext
        info["spark"] = {"master": sc.master, "default_parallelism": sc.defaultParallelism}
        for key in ("spark.driver.memory", "spark.sql.shuffle.partitions",
                    "spark.sql.execution.arrow.maxRecordsPerBatch",
                    "spark.sql.adaptive.enabled"):
            info["spark"][key] = spark.conf.get(key, None)
    if conf is not None:
        info["diffspark"] = {k: v for k, v in conf.items() if k.startswith("diffspark.")}
    return info


def _gpu() -> Optional[dict]:
    """The CUDA device cupy runs on (name, memory, CUDA runtime), None where it sees none."""
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        return {"name": props["name"].decode(),
                "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
                "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion()}
    except Exception:  # not installed, no driver, no device
        return None


def results_path(name: str, out: Optional[str]) -> Path:
    return Path(out) if out else RESULTS_DIR / f"{name}.json"


def save_json(path: Path, payload: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    tmp.replace(path)
    return path


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend; None (and a note) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; no PNG written", file=sys.stderr)
        return None
    return plt


def save_png(path: Path, labels: Sequence[str], seconds: Sequence[float],
             title: str) -> Optional[Path]:
    """A horizontal bar chart of seconds per label; None (and a note) without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(labels) + 1.5))
    ax.barh(list(labels)[::-1], list(seconds)[::-1])
    ax.set_xlabel("seconds (best)")
    ax.set_title(title)
    return save_figure(fig, path)


def save_figure(fig, path: Path) -> Path:
    """Lay out, write as PNG (folders made) and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


@contextmanager
def phase(label: str, verbose: bool = True):
    """Print a phase's label and how long it took (setup, checks: untimed in the results)."""
    start = time.perf_counter()
    if verbose:
        print(f"{label} ...", flush=True)
    yield
    if verbose:
        print(f"{label}: {time.perf_counter() - start:.1f} s", flush=True)
