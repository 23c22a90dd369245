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
import pyarrow.parquet as pq

from executor.apps.metrics import step_record
from executor.durability.state import fsync_file
from executor.inputs.arrivals import completed, step_tables
from executor.inputs.local import local_table, parsed
from executor.runtime.config import OUTPUT_HISTORY_KEY
from executor.runtime.errors import InputError
from executor.time import TIME

OUTPUT_FILE = "step-{:012d}.parquet"


def follow_conf(conf: dict) -> dict:
    """`conf` under follow's defaults: the output files hold every change, so the runner
    keeps only its outputs' present contents (diffspark.output.history=current)."""
    return {OUTPUT_HISTORY_KEY: "current", **conf}


class Follower:
    """One runner (durable) fed from input folders, writing each step's changes once."""

    def __init__(self, runner, folders: dict[str, str], output: str, say=print,
                 metrics=None, cdc=()):
        """`metrics`: called with each step's record (executor/apps/metrics.py); `cdc`:
        inputs whose files are Debezium change records (executor/inputs/cdc.py)."""
        self.runner, self.folders, self.output, self.say = runner, folders, output, say
        self.metrics, self.cdc = metrics, set(cdc)
        self.read = set()  # (input, file name) of every committed step
        for record in self.runner._store.history():
            for name, files in record.get("files", {}).items():
                self.read.update((name, f) for f in files)
        self.stopping = 0

    # ------------------------------------------------------------------ outputs
    def recover(self) -> None:
        """Write the last committed step's output files that a crash left unwritten."""
        record = self.runner._store.last
        if record is None or "files" not in record:
            return
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
        fsync_file(tmp)
        os.replace(tmp, path)
        fsync_file(os.path.dirname(path))

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
        """One file's rows as Arrow (a change-record file's as the keyed input's updates),
        with `time` (the frontier) and `diff` (+1) when absent."""
        path = os.path.join(self.folders[name], file)
        if name in self.cdc:
            from executor.inputs import cdc
            table = cdc.updates(name, cdc.read(name, path), self.runner.input_schemas[name],
                                list(self.runner.flow.inputs[name].key))
        elif file.endswith((".parquet", ".csv", ".csv.gz")):
            from executor.inputs.updates import read_source
            schema = self.runner.input_schemas[name]
            # pyarrow where it reads as Spark does; text parsed once the step's files are one
            table = local_table(name, path, schema, parse=False)
            if table is None:
                table = read_source(self.runner.spark, name, path, schema).toArrow()
        else:
            raise InputError(name, "-", "input files must be Parquet (.parquet) or CSV (.csv)",
                             path)
        return completed(table, self.runner.frontier)

    # ------------------------------------------------------------------ steps
    def step(self, files: dict[str, list[str]]):
        """One step of these files; returns its StepResult."""
        started = clock.perf_counter()
        arrived = [os.stat(os.path.join(self.folders[name], f)).st_mtime
                   for name, names in files.items() for f in names]
        tables = {}
        for name, names in files.items():
            parts = [self._table(name, f) for f in names]
            try:
                tables[name] = pa.concat_tables(parts, promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
                raise InputError(name, "-", "the step's files have different columns",
                                 f"{', '.join(names)}: {e}") from None
            tables[name] = parsed(tables[name], self.runner.input_schemas[name])
        rounds = dict(self.runner.rounds)
        result = step_tables(self.runner, tables, {"files": files})
        for name in self.runner.plan:
            self._write(name, result.step, result.arrow(name))
        written = clock.time()
        self.read.update((name, f) for name, names in files.items() for f in names)
        total = clock.perf_counter() - started
        changes = {name: result.arrow(name).num_rows for name in self.runner.plan}
        self.say(f"step {result.step} upto={result.upper} files={len(arrived)} "
                 f"changes={sum(changes.values())} seconds={total:.2f}", flush=True)
        if self.metrics is not None:
            self.metrics(step_record(self.runner, result,
                                     {name: t.num_rows for name, t in tables.items()},
                                     len(arrived), total, arrived, written, rounds))
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
