"""`python -m executor follow`: keep a durable runner stepping as files arrive.

    python -m executor follow PLAN --input NAME=DIR ... --output DIR --state DIR
                                  [--conf ...] [--poll SECONDS] [--until-idle SECONDS] [--strict]

A watcher of our own polls the input folders rather than Spark's file source. Why: the
file source runs every micro-batch as Spark jobs (20-28 s a batch here, so files 8 s apart
merged), keeps its own checkpoint beside ours (two commits to agree after a crash), and its
stream thread can die with `q.exception()` None. Polling with os.listdir costs
microseconds, a step of small Parquet files runs on the driver (no Spark job), and the
files read are recorded in the very manifest that commits the step, so one atomic rename
decides both.

Each poll, every file new since the last step (all inputs together) is one step; names
starting with `.` or `_` are ignored (writers rename finished files in), and a file is read
once: the files of each step are recorded in its history record (`files`), so a restart
resumes exactly after the last committed step. Rows without `time` get the step's lower
bound (the frontier); the step goes to upto = max(frontier, the files' latest time) + 1.

Outputs: after a step commits, each output's changes of that step (if any) are written to
OUTPUT/NAME/step-<step>.parquet (record columns, time, diff) through a hidden temporary
file, fsynced and renamed, so a reader never sees a partial file. A crash between the
commit and the renames is repaired when follow starts again: the last committed step's
missing files are written from the committed output log (its changes are exactly the
log's updates at times in the step's [lower, upto)). So every change is written exactly
once, across any crash.

SIGINT/SIGTERM: the step in flight finishes (committed, outputs written) and follow exits
0; a second signal abandons it (the state stays at the last commit). `--until-idle S`
exits 0 after S seconds without new files.
"""
from __future__ import annotations

import os
import signal
import time as clock
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from executor.errors import InputError
from executor.time import DIFF, TIME

OUTPUT_FILE = "step-{:012d}.parquet"


class Follower:
    """One runner (durable) fed from input folders, writing each step's changes once."""

    def __init__(self, runner, folders: dict[str, str], output: str, say=print):
        self.runner, self.folders, self.output, self.say = runner, folders, output, say
        self.read = set()  # (input, file name) of every committed step
        for record in self._history():
            for name, files in record.get("files", {}).items():
                self.read.update((name, f) for f in files)
        self.stopping = 0

    def _history(self) -> list:
        manifest = self.runner._store.manifest
        return manifest["history"] if manifest else []

    # ------------------------------------------------------------------ outputs
    def recover(self) -> None:
        """Write the last committed step's output files that a crash left unwritten."""
        history = self._history()
        if not history or "files" not in history[-1]:
            return
        record = history[-1]
        from pyspark.sql import functions as F
        for name in self.runner.plan:
            if os.path.exists(self._path(name, record["step"])):
                continue
            log = self.runner.output(name)
            changes = log.where((F.col(TIME) >= record["lower"]) &
                                (F.col(TIME) < record["upto"])).toArrow()
            self._write(name, record["step"], changes)

    def _path(self, name: str, step: int) -> str:
        return os.path.join(self.output, name, OUTPUT_FILE.format(step))

    def _write(self, name: str, step: int, table: pa.Table) -> None:
        if not table.num_rows:
            return
        path = self._path(name, step)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
        pq.write_table(table, tmp)
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(os.path.dirname(path))

    # ------------------------------------------------------------------ inputs
    def new_files(self) -> dict[str, list[str]]:
        """Per input, the finished files no committed step has read, by name."""
        out = {}
        for name, folder in self.folders.items():
            files = sorted(f for f in os.listdir(folder) if not f.startswith((".", "_"))
                           and (name, f) not in self.read
                           and os.path.isfile(os.path.join(folder, f)))
            if files:
                out[name] = files
        return out

    def _table(self, name: str, file: str) -> pa.Table:
        """One file's rows as Arrow, with `time` (the frontier) and `diff` (+1) when absent."""
        path = os.path.join(self.folders[name], file)
        if file.endswith(".parquet"):
            table = pq.read_table(path)
        elif file.endswith((".csv", ".csv.gz")):
            from executor.updates import read_source
            table = read_source(self.runner.spark, name, path,
                                self.runner.input_schemas[name]).toArrow()
        else:
            raise InputError(name, "-", "input files must be Parquet (.parquet) or CSV (.csv)",
                             path)
        lower = {c.lower() for c in table.column_names}
        for column, value in ((TIME, self.runner.frontier), (DIFF, 1)):
            if column not in lower:
                table = table.append_column(column, pa.array([value] * table.num_rows,
                                                             pa.int64()))
        return table

    # ------------------------------------------------------------------ steps
    def step(self, files: dict[str, list[str]]):
        """One step of these files; returns its StepResult."""
        started = clock.perf_counter()
        tables = {}
        for name, names in files.items():
            parts = [self._table(name, f) for f in names]
            try:
                tables[name] = pa.concat_tables(parts, promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise InputError(name, "-", "the step's files have different columns",
                                 f"{', '.join(names)}: {e}") from None
        upto = max([self.runner.frontier] + [_latest(t) for t in tables.values()]) + 1
        result = self.runner.step(tables, upto=upto, note={"files": files})
        for name in self.runner.plan:
            self._write(name, result.step, result.arrow(name))
        self.read.update((name, f) for name, names in files.items() for f in names)
        changes = {name: result.arrow(name).num_rows for name in self.runner.plan}
        self.say(f"step {result.step} upto={upto} files={sum(map(len, files.values()))} "
                 f"changes={sum(changes.values())} seconds="
                 f"{clock.perf_counter() - started:.2f}", flush=True)
        return result

    def run(self, poll: float, until_idle: Optional[float]) -> None:
        """Step on new files until a signal (the step in flight finishes) or idleness."""
        previous = {s: signal.signal(s, self._signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.recover()
            idle_since = clock.monotonic()
            while not self.stopping:
                files = self.new_files()
                if files:
                    self.step(files)
                    idle_since = clock.monotonic()
                    continue
                if until_idle is not None and clock.monotonic() - idle_since >= until_idle:
                    self.say(f"idle for {until_idle:g} seconds: stopping", flush=True)
                    return
                clock.sleep(poll)
            self.say("stopped by a signal after the step in flight", flush=True)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _signal(self, signum, frame) -> None:
        self.stopping += 1
        if self.stopping > 1:  # a second signal: abandon the step in flight
            raise KeyboardInterrupt


def _latest(table: pa.Table) -> int:
    """The latest time of a file's rows (-1 when none, or when a time is not an integer:
    the step's checks then refuse it by name)."""
    column = table.column(next(c for c in table.column_names if c.lower() == TIME))
    try:
        latest = pc.max(column.cast(pa.int64())).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return -1
    return -1 if latest is None else latest


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
