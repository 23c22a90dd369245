"""Durable state (DESIGN.md section 10): a runner given a state directory survives its driver
dying at any moment, losing and duplicating nothing.

Layout of STATE_DIR (README "Durable state" documents the manifest):

    manifest.json   the last committed step; replaced atomically, never edited in place
    history.jsonl   one JSON line per committed step (its `history` record), appended; the
                    manifest names how many bytes of it are committed
    lock            {"pid", "host", "since"} of the runner that owns the directory
    data/<id>/      one Parquet folder per frame (trace batch, output log batch, pending
                    updates); written once, never changed, deleted when no manifest names it

Both placements commit through here: a Spark step's frames are Spark frames (trace batches
bucketed), a driver step's are Arrow tables written by pyarrow with no Spark job (its host
trace batches plain, merged geometrically on the driver: Trace.driver_appended;
executor/durability/layout.py).
A resumed runner reads both alike and steps on in either placement.

Commit protocol, once a step has computed everything in memory (before the runner's fields
change): write every frame the manifest will name that is not on disk yet, fsync it, write
append the step's history record to history.jsonl (cut first to the bytes the manifest
committed) and fsync it, write manifest.json.tmp, fsync, os.replace it over manifest.json,
fsync the directory, then delete unreferenced frames. The history is a file of its own
because it grows by a record a step: inside the manifest (version 1, still read; its
history moves to the file at the first commit) every commit rewrote all of it (issue 20). A crash before the rename leaves the previous step committed (its
frames untouched, history lines past its bytes ignored); after it, the new one. Nothing else
is ever read, so a half-written frame, history line or manifest is garbage, collected at the
next open or commit.

Resume: a runner opened on the directory restores frontier, steps, output logs and pending
updates from the manifest; traces and reductions' pending updates are read from Parquet the
first time the runner asks for them (`_LazyState`). Calls that repeat committed steps (same
upto, same content hash of every input: Spark's for an input a Spark step committed,
`arrow_digest` for one a driver step committed) are skipped, so a driver program or the CLI can
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema

from executor.arrange.spine import Spine, checkpoint, output_log
from executor.arrange.trace import Trace, batch_spine
from executor.durability import layout as state_layout
from executor.runtime.errors import InputError, StateError
from executor.time import TIME
from plans import ir

FORMAT, VERSION = "diffspark-state", 2
READS = (1, 2)  # version 1 kept the history inside the manifest
MANIFEST, HISTORY, LOCK, DATA = "manifest.json", "history.jsonl", "lock", "data"
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

    def _load(self, entry) -> None:
        if self.unloaded and not super().__contains__(entry):
            record = self.unloaded.pop(self.store.keys(entry), None)
            if record is not None:
                self[entry] = self.store.load_entry(record)

    def get(self, entry, default=None):
        self._load(entry)
        return super().get(entry, default)

    def __contains__(self, entry) -> bool:  # as a ChainMap over it asks (an iterate's rounds)
        self._load(entry)
        return super().__contains__(entry)

    def __missing__(self, entry):
        self._load(entry)
        if not super().__contains__(entry):
            raise KeyError(entry)
        return super().__getitem__(entry)


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
        self.backend = runner.backend
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
        self.committed = self.history()  # what a resumed driver repeats; [] once it steps on
        self.replayed = 0  # committed steps a resumed driver has repeated so far
        self.last = self.committed[-1] if self.committed else None  # the last step's record
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
        if m.get("version") not in READS:
            raise StateError(f"state {self.dir}: manifest version {m.get('version')} "
                             f"(rule: this diffspark reads versions {READS})")
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
        runner._logs = {n: self._spine(o["log"], runner.history) for n, o in m["outputs"].items()}
        for name, batches in m.get("input_rows", {}).items():  # executor/inputs/tables.py
            runner._tables[name].restore([self._table(fid) for fid, _ in batches])

    def history(self) -> list[dict]:
        """Every committed step's history record, in order."""
        m = self.manifest
        if m is None or m["version"] == 1:
            return list(m["history"]) if m else []
        with open(os.path.join(self.dir, HISTORY), "rb") as f:
            text = f.read(m["history"]["bytes"]).decode()
        return [json.loads(line) for line in text.splitlines()]

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

    def _table(self, fid: str) -> pa.Table:
        """A frame written from Arrow, read back as Arrow (known: never written again)."""
        import pyarrow.parquet as pq
        table = pq.read_table(os.path.join(self.dir, DATA, fid))
        self.frames[id(table)] = (table, fid)
        return table

    def _spine(self, batches: list, history: str) -> Spine:
        spine = output_log(history)
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

        spine = batch_spine()  # batches: [file id, records, buckets] (no buckets: plain)
        spine.batches = [(b[1], arranged(b[0], b[2] if len(b) > 2 else 0))
                         for b in record["batches"]]
        return Trace(keys, times, self.partitions, spine, record["since"], record["upper"],
                     backend=self.backend)

    # -------------------------------------------------------------- replay
    def replay(self, upto: Optional[int], frontier: int) -> Optional[dict]:
        """The committed step a call with this `upto` repeats, or None for a new step."""
        history = self.committed
        if self.replayed >= len(history):
            return None
        record = history[self.replayed]
        if record["upto"] == upto:
            return record
        if self.manifest["closed"]:
            raise self.closed()
        if upto is None or upto >= frontier:  # past the committed frontier: a new step
            self.committed, self.replayed = [], 0
            return None
        raise StateError(f"state {self.dir}: step {record['step']} was committed with "
                         f"upto={record['upto']}, this call has upto={upto} (rule: a resumed "
                         f"runner repeats its committed steps in order, then continues)")

    def closed(self) -> StateError:
        """The refusal of a step on a state that a close committed."""
        return StateError(f"state {self.dir}: the state is closed (step "
                          f"{self.manifest['steps']} closed it: frontier infinity; rule: a "
                          f"closed state accepts no more steps; `run` closes only with --close)")

    def skip(self, record: dict, digests: dict, arrow) -> None:
        """Accept a repeated step if its inputs are the ones committed (an empty input and
        an input not given are the same). `digests` are Spark's; `arrow(name)` gives an
        input's arrow_digest, compared where a driver step committed one."""
        digests = dict(digests)
        for name, d in record["inputs"].items():
            if _ARROW in d and digests.get(name, "").split(":")[0] == d.split(":")[0]:
                digests[name] = arrow(name)
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
               frontier: int, closed: bool, tables: Optional[dict] = None) -> None:
        """Make a computed step durable; raises (nothing committed) if any write fails.
        `tables`: keyed and strict inputs' batches (executor/inputs/tables.py)."""
        step = record["step"]
        # file id -> (what the runner holds, the frame to write: not on disk yet, trace or None)
        writes: dict[str, tuple] = {}
        fresh: dict[int, str] = {}
        used: list[str] = []
        buckets = dict(self.buckets)

        def fid(held, trace: Optional[Trace] = None) -> Optional[str]:
            """`held`: a Spark frame, an Arrow table, or a host trace batch's decoder."""
            if held is None:
                return None
            known = self.frames.get(id(held))
            if known is not None and known[0] is held:
                name = known[1]
            elif id(held) in fresh:
                name = fresh[id(held)]
            else:
                name = fresh[id(held)] = uuid.uuid4().hex[:16]
                frame = held if isinstance(held, (DataFrame, pa.Table)) else held()
                writes[name] = (held, frame, trace)
                buckets[name] = trace.partitions if isinstance(frame, DataFrame) and \
                    trace is not None and trace.keys else 0
            used.append(name)
            return name

        def batch(held, size, trace):  # a trace batch's manifest entry
            name = fid(held, trace)
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
                    "batches": [batch(b, s, value) for s, b in value.spine.counted().batches] +
                               [batch(decode, s, value) for s, decode in value.unsynced]}
            else:
                entries[self.keys(entry)] = {"kind": "pending", "frame": fid(value)}
        outputs = {name: {"log": [[fid(b), s] for s, b in logs[name].batches],
                          "pending": fid(pending[name])} for name in logs}
        input_rows = {name: [[fid(t), rows] for t, rows in batches]
                      for name, batches in (tables or {}).items()}
        schemas = {**self.schemas, **{n: _schema(frame) for n, (_, frame, _) in writes.items()}}
        frames = {f: schemas[f] for f in used}
        try:
            crash_point("commit:before-data", step)
            self._write(writes, buckets)
            crash_point("commit:after-data", step)
            history = self._append_history(record)
            manifest = {"format": FORMAT, "version": VERSION, "plan": self.plan,
                        "steps": step, "frontier": frontier, "closed": closed,
                        "history": history, "state": entries, "outputs": outputs,
                        "input_rows": input_rows, "frames": frames}
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
        self.manifest, self.schemas, self.last = manifest, frames, record
        self.committed, self.replayed = [], 0
        crash_point("commit:after-rename", step)
        self.frames = {i: (df, f) for i, (df, f) in self.frames.items() if f in frames}
        self.frames.update({id(held): (held, name) for name, (held, _, _) in writes.items()})
        self.buckets = {f: b for f, b in buckets.items() if f in frames}
        self.gc()

    def _append_history(self, record: dict) -> dict:
        """Append `record` to history.jsonl after the committed bytes (a version-1
        manifest's records first) and fsync; the manifest's `history` entry naming it."""
        m = self.manifest
        old = m["history"] if m else {"records": 0, "bytes": 0}
        lines = [record]
        if isinstance(old, list):  # a version-1 manifest: its records move to the file
            lines, old = old + lines, {"records": 0, "bytes": 0}
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines).encode()
        with open(os.path.join(self.dir, HISTORY), "ab") as f:
            f.truncate(old["bytes"])  # drops what a crashed commit appended
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return {"records": old["records"] + len(lines), "bytes": old["bytes"] + len(data)}

    def _write(self, writes: dict, buckets: dict) -> None:
        """Write new frames as Parquet (Spark frames by Spark, one job after another; Arrow
        tables by pyarrow; Spark's trace batches bucketed by their key,
        executor/durability/layout.py) and fsync them. Never as concurrent Spark jobs: a job's
        end checkpoints marked RDDs under Spark's global checkpoint lock while another job's
        planning holds an RDD's lock (the deadlock of spine.materialise_all)."""
        for name, (_, frame, trace) in writes.items():
            path = os.path.join(self.dir, DATA, name)
            keys, times = (trace.keys, trace.time_cols) if trace is not None else ([], [])
            state_layout.write(frame, path, keys, times, buckets[name])
            for root, _, files in os.walk(path):
                for f in files:
                    fsync_file(os.path.join(root, f))
                _fsync_dir(root)
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
        out += [b[0] for b in r["batches"]] if r["kind"] == "trace" else \
            [r["frame"]] if r["frame"] else []
    return out


def _schema(frame) -> str:
    """A frame's Spark schema as JSON (an Arrow table's as Spark reads it back)."""
    if isinstance(frame, pa.Table):
        return from_arrow_schema(frame.schema, prefer_timestamp_ntz=True).json()
    return frame.schema.json()


_ARROW = ":arrow:"  # marks a digest made by arrow_digest (Spark's: rows:h1:h2)
_NULL = np.uint64(0x9E3779B97F4A7C15)


def arrow_digest(table: pa.Table) -> str:
    """The content hash of an input a driver step commits, computed on Arrow (no Spark): the
    row count and the wrapping sum of 64-bit row hashes (order-free). Values are hashed by
    what they mean, not their Arrow type, so the same rows read back through Spark on a
    replay (`toArrow`, other time zone or string types) hash alike."""
    rows = np.zeros(table.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in table.columns:
            rows = _mix(rows * np.uint64(0x100000001B3) + _value_hashes(column))
        total = int(rows.sum(dtype=np.uint64))
    return f"{table.num_rows}{_ARROW}{total}"


def _value_hashes(column) -> np.ndarray:
    """A uint64 per value: integers, booleans, dates and timestamps as their integer,
    floats as their bits, decimals and strings through blake2b of their text."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = column.type
    if pa.types.is_floating(kind):
        values = column.cast(pa.float64()).fill_null(0).to_numpy().view(np.uint64)
    elif pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        width = pa.int32() if pa.types.is_date32(kind) else pa.int64()
        values = column.view(width).cast(pa.int64()).fill_null(0).to_numpy().view(np.uint64)
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        values = column.cast(pa.int64()).fill_null(0).to_numpy().view(np.uint64)
    else:
        if pa.types.is_decimal(kind):
            column = column.cast(pa.string())
        coded = column.dictionary_encode()
        words = np.array([int.from_bytes(hashlib.blake2b(
            v.as_py().encode() if isinstance(v.as_py(), str) else v.as_py(),
            digest_size=8).digest(), "little") for v in coded.dictionary], dtype=np.uint64)
        values = words[coded.indices.fill_null(0).to_numpy()] if len(words) else \
            np.zeros(len(column), dtype=np.uint64)
    return np.where(pc.is_null(column).to_numpy(zero_copy_only=False), _NULL, _mix(values))


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches every output bit."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def content_digest(columns) -> list:
    """Aggregates whose values identify a multiset of rows (order-free): the row count and
    two sums of 64-bit row hashes, as DECIMAL so they never overflow."""
    from pyspark.sql import functions as F
    return [F.count(F.lit(1)).alias("_rows"),
            F.sum(F.xxhash64(*columns).cast("decimal(38,0)")).alias("_h1"),
            F.sum(F.xxhash64(F.lit("diffspark"), *columns).cast("decimal(38,0)")).alias("_h2")]


def digest_of(row) -> str:
    return f"{row['_rows']}:{row['_h1'] or 0}:{row['_h2'] or 0}"


def fsync_file(path: str) -> None:
    """A file's (or a folder's entries') data to disk: what a rename then commits."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fsync_file(path)
