"""Durable state (DESIGN.md section 10): a runner given a state directory survives its driver
dying at any moment, losing and duplicating nothing.

Layout of STATE_DIR (README "Durable state" documents the manifest):

    manifest.json   the last committed step; replaced atomically, never edited in place
    lock            {"pid", "host", "since"} of the runner that owns the directory
    data/<id>/      one Parquet folder per frame (trace batch, output log batch, pending
                    updates); written once, never changed, deleted when no manifest names it

Commit protocol, once a step has computed everything in memory (before the runner's fields
change): write every frame the manifest will name that is not on disk yet, fsync it, write
manifest.json.tmp, fsync, os.replace it over manifest.json, fsync the directory, then delete
unreferenced frames. A crash before the rename leaves the previous step committed (its
frames untouched); after it, the new one. Nothing else is ever read, so a half-written frame
or manifest is garbage, collected at the next open or commit.

Resume: a runner opened on the directory restores frontier, steps, output logs and pending
updates from the manifest; traces and reductions' pending updates are read from Parquet the
first time the runner asks for them (`_LazyState`). Calls that repeat committed steps (same
upto, same content hash of every input) are skipped, so a driver program or the CLI can
simply start over from its first step.

The lock is an advisory `flock` on `lock`: the kernel drops it when its process dies, so a
lock left by a dead runner is taken over by the next one; the file's pid and host are only
for the error message. (On a network file system flock must be supported, e.g. NFSv4.)
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import time as clock
import uuid
import weakref
from typing import Optional

from plans import ir

from . import state_layout
from .errors import InputError, StateError
from .spine import Spine, checkpoint, output_log
from .time import TIME
from .trace import Trace

FORMAT, VERSION = "diffspark-state", 1
MANIFEST, LOCK, DATA = "manifest.json", "lock", "data"
CRASH_ENV = "DIFFSPARK_CRASH_AT"  # test hook: POINT or POINT@STEP (see crash_point)


# ---------------------------------------------------------------------------- test hook
def crash_point(point: str, step: int) -> None:
    """Die here (SIGKILL, like a power cut for this process) when DIFFSPARK_CRASH_AT names
    this point, e.g. `commit:before-rename` or `commit:after-data@3` (only at step 3)."""
    want = os.environ.get(CRASH_ENV)
    if not want:
        return
    name, _, at = want.partition("@")
    if name == point and (not at or int(at) == step):
        _die()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------- lock
class Lock:
    """The state directory's owner: an exclusive flock on STATE/lock held while this runner
    lives (released by release() or by the process ending)."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, LOCK)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = _read_json(self.path) or {}
            os.close(fd)
            raise StateError(
                f"state {directory}: locked by pid {owner.get('pid', '?')} on host "
                f"{owner.get('host', '?')} (rule: one runner per state directory; a lock "
                f"whose process has died is taken over)") from None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": clock.time()}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(me).encode())
        os.fsync(fd)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------- identities
def plan_fingerprint(runner) -> str:
    """What must not change between a run and its resume: the plan as run and the inputs'
    schemas."""
    text = ir.explain(runner.plan) + "\n" + json.dumps(
        {n: s.simpleString() for n, s in sorted(runner.input_schemas.items())})
    return hashlib.sha256(text.encode()).hexdigest()


class _Keys:
    """Stable names of a runner's state entries across processes: a hash of the operator's
    label and its inputs' names (nodes are rebuilt from PLAN.py, so object ids differ)."""

    def __init__(self):
        self.memo: dict = {}

    def node(self, node: ir.Node) -> str:
        if node not in self.memo:
            text = node.label() + "(" + ",".join(map(self.node, node.children())) + ")"
            self.memo[node] = hashlib.sha1(text.encode()).hexdigest()[:20]
        return self.memo[node]

    def __call__(self, entry) -> str:
        if isinstance(entry, tuple):  # (Query node, relation): a query's pending updates
            return self.node(entry[0]) + "/" + entry[1]
        return self.node(entry)


class _LazyState(dict):
    """Runner._state restored from a manifest: an entry is read from Parquet the first time
    the runner asks for it; entries never asked for stay as their manifest records."""

    def __init__(self, store: "Store", records: dict):
        super().__init__()
        self.store, self.unloaded = store, dict(records)

    def get(self, entry, default=None):
        if entry not in self and self.unloaded:
            record = self.unloaded.pop(self.store.keys(entry), None)
            if record is not None:
                self[entry] = self.store.load_entry(record)
        return super().get(entry, default)

    def __missing__(self, entry):
        value = self.get(entry)
        if entry not in self:
            raise KeyError(entry)
        return value


# ---------------------------------------------------------------------------- the store
class Store:
    """One runner's state directory: lock, manifest, frames, commit, resume, GC."""

    def __init__(self, runner, directory: str):
        if any(isinstance(n, ir.Imported) for n in ir.topological(runner.plan.values())):
            raise StateError(f"state {directory}: the dataflow imports a live arrangement "
                             f"(rule: only self-contained dataflows can be made durable)")
        self.dir = os.fspath(directory)
        os.makedirs(os.path.join(self.dir, DATA), exist_ok=True)
        self.lock = Lock(self.dir)
        self._finalizer = weakref.finalize(self, self.lock.release)
        self.spark, self.partitions = runner.spark, runner.partitions
        self.keys = _Keys()
        self.plan = plan_fingerprint(runner)
        self.frames: dict[int, tuple[object, str]] = {}  # id(DataFrame) -> (frame, file id)
        self.buckets: dict[str, int] = {}  # file id of a trace batch -> buckets (0: plain)
        self.schemas: dict[str, str] = {}  # file id -> schema JSON
        try:
            self.manifest = self._read_manifest()
        except StateError:
            self.release()
            raise
        self.replayed = 0  # committed steps a resumed driver has repeated so far
        self.gc()

    def release(self) -> None:
        self._finalizer()

    # -------------------------------------------------------------- reading
    def _read_manifest(self) -> Optional[dict]:
        path = os.path.join(self.dir, MANIFEST)
        if not os.path.exists(path):
            return None
        m = _read_json(path)
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise StateError(f"state {self.dir}: {MANIFEST} is not a diffspark manifest")
        if m.get("version") != VERSION:
            raise StateError(f"state {self.dir}: manifest version {m.get('version')} "
                             f"(rule: this diffspark reads version {VERSION})")
        if m.get("plan") != self.plan:
            raise StateError(f"state {self.dir}: written by a different plan (rule: resume "
                             f"with the plan and input schemas that wrote the state)")
        self.schemas = dict(m["frames"])
        return m

    def restore(self, runner) -> None:
        """Set a new runner's fields to the committed state (lazily for traces)."""
        m = self.manifest
        if m is None:
            return
        runner.frontier, runner.steps, runner.closed = m["frontier"], m["steps"], m["closed"]
        runner._state = _LazyState(self, m["state"])
        runner._pending = {n: self._frame(o["pending"]) for n, o in m["outputs"].items()}
        runner._logs = {n: self._spine(o["log"]) for n, o in m["outputs"].items()}

    def _read(self, fid: str):
        from pyspark.sql.types import StructType
        return self.spark.read.schema(StructType.fromJson(json.loads(self.schemas[fid]))) \
            .parquet(os.path.join(self.dir, DATA, fid))

    def _frame(self, fid: Optional[str]):
        """A restored frame, checkpointed (on first use) as live frames are, so plans over
        restored and live frames have one shape."""
        if fid is None:
            return None
        df = checkpoint(self._read(fid), eager=False)
        self.frames[id(df)] = (df, fid)
        return df

    def _spine(self, batches: list) -> Spine:
        spine = output_log()
        spine.batches = [(size, self._frame(fid)) for fid, size in batches]
        return spine

    def load_entry(self, record: dict):
        if record["kind"] == "pending":
            return self._frame(record["frame"])
        keys = record["keys"]
        times = record.get("time_cols", [TIME])  # manifests before iterate had one time

        def arranged(fid, buckets):  # the arranged layout back (partitioned by the key, sorted)
            out = state_layout.read(self.spark, os.path.join(self.dir, DATA, fid),
                                    self.schemas[fid], keys, times, self.partitions, buckets)[0]
            self.frames[id(out)], self.buckets[fid] = (out, fid), buckets
            return out

        spine = Spine(slack=4)  # batches: [file id, records, buckets] (no buckets: plain)
        spine.batches = [(b[1], arranged(b[0], b[2] if len(b) > 2 else 0))
                         for b in record["batches"]]
        return Trace(keys, times, self.partitions, spine, record["since"], record["upper"])

    # -------------------------------------------------------------- replay
    def replay(self, upto: Optional[int], frontier: int) -> Optional[dict]:
        """The committed step a call with this `upto` repeats, or None for a new step."""
        history = self.manifest["history"] if self.manifest else []
        if self.replayed >= len(history):
            return None
        record = history[self.replayed]
        if record["upto"] == upto:
            return record
        if upto is None or upto >= frontier:  # past the committed frontier: a new step
            self.replayed = len(history)
            return None
        raise StateError(f"state {self.dir}: step {record['step']} was committed with "
                         f"upto={record['upto']}, this call has upto={upto} (rule: a resumed "
                         f"runner repeats its committed steps in order, then continues)")

    def skip(self, record: dict, digests: dict) -> None:
        """Accept a repeated step if its inputs are the ones committed (an empty input and
        an input not given are the same)."""
        given = {n: d for n, d in digests.items() if not d.startswith("0:")}
        committed = {n: d for n, d in record["inputs"].items() if not d.startswith("0:")}
        for name in sorted(set(committed) | set(given)):
            if committed.get(name) != given.get(name):
                raise InputError(
                    name, "-", f"differs from the input committed at step {record['step']} "
                    f"(rule: a resumed run repeats committed steps with the same inputs)",
                    f"content hash {committed.get(name)} committed, {given.get(name)} given")
        self.replayed += 1

    # -------------------------------------------------------------- commit
    def commit(self, runner, new_state: dict, pending: dict, logs: dict, record: dict,
               frontier: int, closed: bool) -> None:
        """Make a computed step durable; raises (nothing committed) if any write fails."""
        step = record["step"]
        writes: dict[str, tuple] = {}  # file id -> (frame not on disk yet, trace or None)
        fresh: dict[int, str] = {}
        used: list[str] = []
        buckets = dict(self.buckets)

        def fid(df, trace: Optional[Trace] = None) -> Optional[str]:
            if df is None:
                return None
            known = self.frames.get(id(df))
            if known is not None and known[0] is df:
                name = known[1]
            elif id(df) in fresh:
                name = fresh[id(df)]
            else:
                name = fresh[id(df)] = uuid.uuid4().hex[:16]
                writes[name] = (df, trace)
                buckets[name] = trace.partitions if trace is not None and trace.keys else 0
            used.append(name)
            return name

        def batch(df, size, trace):  # a trace batch's manifest entry
            name = fid(df, trace)
            return [name, size, buckets.get(name, 0)]

        entries = {}
        if isinstance(runner._state, _LazyState):
            entries.update(runner._state.unloaded)
            used += _record_frames(runner._state.unloaded.values())
        for entry, value in new_state.items():
            if isinstance(value, Trace):
                entries[self.keys(entry)] = {
                    "kind": "trace", "keys": list(value.keys),
                    "time_cols": list(value.time_cols), "since": value.since,
                    "upper": value.upper,
                    "batches": [batch(b, s, value) for s, b in value.synced().spine.batches]}
            else:
                entries[self.keys(entry)] = {"kind": "pending", "frame": fid(value)}
        outputs = {name: {"log": [[fid(b), s] for s, b in logs[name].batches],
                          "pending": fid(pending[name])} for name in logs}
        schemas = {**self.schemas, **{n: df.schema.json() for n, (df, _) in writes.items()}}
        frames = {f: schemas[f] for f in used}
        try:
            crash_point("commit:before-data", step)
            self._write(writes, buckets)
            crash_point("commit:after-data", step)
            history = (self.manifest["history"] if self.manifest else [])[:step - 1] + [record]
            manifest = {"format": FORMAT, "version": VERSION, "plan": self.plan,
                        "steps": step, "frontier": frontier, "closed": closed,
                        "history": history, "state": entries, "outputs": outputs,
                        "frames": frames}
            tmp = os.path.join(self.dir, MANIFEST + ".tmp")
            with open(tmp, "w") as f:
                json.dump(manifest, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            crash_point("commit:before-rename", step)
            os.replace(tmp, os.path.join(self.dir, MANIFEST))
            _fsync_dir(self.dir)
        except OSError as e:
            raise StateError(f"state {self.dir}: step {step} not committed, nothing changed: "
                             f"{e}") from None
        self.manifest, self.replayed, self.schemas = manifest, len(history), frames
        crash_point("commit:after-rename", step)
        self.frames = {i: (df, f) for i, (df, f) in self.frames.items() if f in frames}
        self.frames.update({id(df): (df, name) for name, (df, _) in writes.items()})
        self.buckets = {f: b for f, b in buckets.items() if f in frames}
        self.gc()

    def _write(self, writes: dict, buckets: dict) -> None:
        """Write new frames as Parquet (concurrent Spark jobs; trace batches bucketed by
        their key, executor/state_layout.py) and fsync them."""
        from concurrent.futures import ThreadPoolExecutor

        def one(item):
            name, (df, trace) = item
            path = os.path.join(self.dir, DATA, name)
            if trace is None:
                df.write.parquet(path)
            else:
                state_layout.write(df, path, trace.keys, trace.time_cols, buckets[name])
            for root, _, files in os.walk(path):
                for f in files:
                    _fsync_file(os.path.join(root, f))
                _fsync_dir(root)

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(writes)))) as pool:
            list(pool.map(one, writes.items()))
        _fsync_dir(os.path.join(self.dir, DATA))

    # -------------------------------------------------------------- garbage collection
    def gc(self) -> list[str]:
        """Delete every frame no committed manifest names (leftovers of a crashed commit,
        batches merged away) and a stray temporary manifest; returns what was deleted."""
        keep = set(self.manifest["frames"]) if self.manifest else set()
        data = os.path.join(self.dir, DATA)
        gone = sorted(f for f in os.listdir(data) if f not in keep)
        for f in gone:
            shutil.rmtree(os.path.join(data, f), ignore_errors=True)
        tmp = os.path.join(self.dir, MANIFEST + ".tmp")
        if os.path.exists(tmp):
            os.remove(tmp)
        return gone


def _record_frames(records) -> list[str]:
    out = []
    for r in records:
        out += [f for f, _ in r["batches"]] if r["kind"] == "trace" else \
            [r["frame"]] if r["frame"] else []
    return out


def content_digest(columns) -> list:
    """Aggregates whose values identify a multiset of rows (order-free): the row count and
    two sums of 64-bit row hashes, as DECIMAL so they never overflow."""
    from pyspark.sql import functions as F
    return [F.count(F.lit(1)).alias("_rows"),
            F.sum(F.xxhash64(*columns).cast("decimal(38,0)")).alias("_h1"),
            F.sum(F.xxhash64(F.lit("diffspark"), *columns).cast("decimal(38,0)")).alias("_h2")]


def digest_of(row) -> str:
    return f"{row['_rows']}:{row['_h1'] or 0}:{row['_h2'] or 0}"


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    _fsync_file(path)
