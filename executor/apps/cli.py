"""The command line: `python -m executor run|explain|demo` (also the spark-submit entry point).

    python -m executor run PLAN.py --input NAME=PATH ... --output DIR
           [--conf cpu|gpu|FILE] [--conf key=value ...] [--steps K] [--upto T] [--no-optimize]
           [--state STATE_DIR [--close]] [--strict] [--csv-option NAME.KEY=VALUE ...]
           [--cdc NAME ...]
    python -m executor follow PLAN.py --input NAME=DIR ... --output DIR --state STATE_DIR
           [--conf ...] [--poll SECONDS] [--until-idle SECONDS] [--strict] [--cdc NAME ...]
           [--metrics FILE]  (executor/apps/follow.py)
    python -m executor explain PLAN.py [--no-optimize]
    python -m executor demo [--events N] [--steps K] [--conf ...]
    python -m executor triangles --edges PATH [--output DIR] [--steps K] [--conf ...]
                                 [--stream K --batch B --seed S]
    python -m executor gpu-check [--conf KEY=VALUE ...]

PLAN.py is a Python file defining `build(flow)`, which declares inputs and outputs on a
`plans.Dataflow`. It is loaded from its path (it need not be importable); functions it defines
(kernels) are shipped to Spark's workers by value. A plan may instead be PLAN.sql, Spark SQL
statements (plans/sql.py): CREATE TABLE name (col type, ...) declares an input, CREATE VIEW
name AS SELECT ... an intermediate collection, CREATE MATERIALIZED VIEW name AS SELECT ... an
output; `explain` then prints the SQL too.

`run` reads every input file once (Parquet or CSV with a header; a file or a folder of them)
with the record columns of the input's declared schema plus optional `time` and `diff`
(BIGINT; absent: time 0, diff +1), checks every rule of DESIGN.md section 2, then feeds the
updates in `--steps K` steps: the distinct input times (of all inputs together) are split into
K consecutive groups, step i feeds group i with upto = the first time of group i+1 (the last
group: its last time + 1), and finally the inputs are closed, so every pending change (a
temporal filter's future retraction) is emitted. The output is the same for every K. A
durable run (`--state`) leaves its inputs open unless `--close` is given, so the state can
take the next day's steps (`follow`, or another `run`); its output then holds the changes
before the last step's upto. With
`--upto T` only updates at times < T are fed (later ones in the files are ignored), the last
step goes to upto=T, the inputs stay open, and the output holds the changes at times < T.
Each output is written to DIR/NAME/ as Parquet (overwritten): its record columns, `time` and
`diff`, consolidated.

With `--state STATE_DIR` every step is committed to the state directory (executor/durability/state.py)
before the next starts; a run started again on it (after a crash, say) recognises the steps
already committed, skips them (`step i/K upto=T seconds=S skipped (committed)`), runs the
rest and writes the outputs from the committed state, so the output directory is the same
as an uninterrupted run's.

Choices:
- A declared input given no `--input` is an empty input (a note says so on stdout): plans
  may have optional inputs. An `--input` name the plan does not declare is an error.
- K larger than the number of distinct input times runs one step per distinct time.
- Progress goes to stdout (`step i/K upto=T seconds=S`, then `close ...` and one line per
  output written). An error is exactly one line on stderr, `error: <message>`, and exit
  status 2; a usage error is argparse's (also status 2).
- The Spark JVM started here writes its own log (startup chatter, task failures with Java
  stack traces) to a file, named on stdout, so the terminal shows only diffspark's lines;
  `--spark-log -` keeps it on the terminal, `--spark-log FILE` picks the file. Under
  spark-submit the JVM already runs and its log stays where spark-submit put it.

Under spark-submit, run the script with the repository on the Python path of the workers
(e.g. `--py-files` with a zip of plans/ and executor/ on a cluster):

    spark-submit executor/__main__.py run PLAN.py --input ... --output DIR --conf gpu
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

from executor.apps.launch import (CliError, conf_from_args, describe, spark_errors, spark_log,
                                  starting_spark, stop)
from executor.apps.progress import progress
from executor.apps.steps import Frames, Tables, step_bounds, write_output
from executor.runtime.config import ConfigError, kernel_backend
from executor.runtime.errors import InputError, StateError, StepError
from plans import Dataflow, PlanError, ir
from plans.optimizer import optimize as optimize_plan
from plans.sql import script as sql_script

EXIT_ERROR = 2


# ---------------------------------------------------------------------------- arguments
def _parser() -> argparse.ArgumentParser:
    # `diffspark` is the installed console script (pyproject.toml), the same program.
    prog = "diffspark" if Path(sys.argv[0]).name == "diffspark" else "python -m executor"
    p = argparse.ArgumentParser(
        prog=prog,
        description="diffspark: differential dataflow on Apache Spark.")
    verbs = p.add_subparsers(dest="verb", required=True,
                             metavar="{run,follow,explain,demo,triangles,gpu-check}")

    conf_help = ("cpu (default), gpu or a .conf file; or key=value to override one setting "
                 "(repeatable)")
    log_help = "where the Spark JVM's log goes: a file (default: a new temp file) or - (stderr)"

    r = verbs.add_parser("run", help="run a plan file over input files, write its outputs",
                         description="Run PLAN.py's dataflow over input files in steps and "
                                     "write every output's changes to DIR/NAME/ (Parquet).")
    _plan_arguments(r, "NAME=PATH", "Parquet or CSV file or folder for the input NAME "
                    "(repeatable)", conf_help, log_help)
    r.add_argument("--csv-option", action="append", default=[], metavar="NAME.KEY=VALUE",
                   help="a CSV option of input NAME: delimiter, header (true|false), "
                        "null_value, quote, escape (repeatable; \\t is a tab)")
    r.add_argument("--steps", type=_positive_int, default=1, metavar="K",
                   help="feed the inputs in K steps over their distinct times (default 1)")
    r.add_argument("--upto", type=_time, default=None, metavar="T",
                   help="feed only times < T and leave the inputs open")
    r.add_argument("--state", default=None, metavar="STATE_DIR",
                   help="commit every step to STATE_DIR and resume from it (durable run)")
    r.add_argument("--close", action="store_true",
                   help="with --state: close the inputs at the end (a closed state takes no "
                        "more steps); without --state a run always closes")
    r.set_defaults(func=cmd_run)
    _follow_parser(verbs, conf_help, log_help)

    e = verbs.add_parser("explain", help="print a plan before and after optimization",
                         description="Print PLAN.py's plan as written and as run (no Spark).")
    e.add_argument("plan", metavar="PLAN.py")
    e.add_argument("--no-optimize", dest="optimize", action="store_false",
                   help="show the plan as written only")
    e.set_defaults(func=cmd_explain)

    t = verbs.add_parser("triangles", help="count triangles of an undirected edge list",
                         description="Without time/diff columns: one line triangles=N. With "
                         "them: time=T triangles=N for every distinct input time. With "
                         "--stream K: load the graph, then K steps of random changes, "
                         "maintained incrementally (the flagship demo).")
    t.set_defaults(func=cmd_triangles)
    t.add_argument("--edges", required=True, metavar="PATH",
                   help="Parquet, CSV with header src,dst[,time,diff], or SNAP text")
    t.add_argument("--output", default=None, metavar="DIR",
                   help="also write DIR/triangles/ (count, time, diff) as Parquet")
    t.add_argument("--steps", type=_positive_int, default=None, metavar="K",
                   help="split the distinct input times into K steps (default 1; not with "
                        "--stream)")
    t.add_argument("--stream", type=_positive_int, default=None, metavar="K",
                   help="after loading, K steps of random edge changes (demo)")
    t.add_argument("--batch", type=_positive_int, default=200, metavar="B",
                   help="changes per --stream step, half deletions (default 200)")
    t.add_argument("--seed", type=int, default=7, help="random seed of --stream (default 7)")
    t.add_argument("--conf", action="append", default=[], metavar="PROFILE|KEY=VALUE",
                   help="config profile (cpu, gpu, FILE) and/or key=value overrides")
    t.add_argument("--spark-log", default=None, metavar="FILE|-", help=log_help)

    d = verbs.add_parser("demo", help="run the built-in events demo on Spark",
                         description="Events with validity intervals through filter, map, "
                                     "explode and temporal_filter, fed in steps with "
                                     "retractions (see executor/apps/demo.py).")
    d.add_argument("--events", type=_positive_int, default=200_000, metavar="N",
                   help="number of events (default 200000)")
    d.add_argument("--steps", type=_positive_int, default=5, metavar="K",
                   help="number of steps (default 5)")
    d.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    d.add_argument("--conf", action="append", default=[], metavar="PROFILE|KEY=VALUE",
                   help=conf_help)
    d.add_argument("--spark-log", default=None, metavar="FILE|-", help=log_help)
    d.set_defaults(func=cmd_demo)

    g = verbs.add_parser("gpu-check", help="check the GPU path: kernel parity, RAPIDS fallbacks",
                         description="On a machine with a CUDA GPU: every kernel on cupy vs "
                         "numpy, the kernel tests on cupy, a small plan with --conf gpu, and "
                         "what the RAPIDS plugin left on the CPU. Without a GPU: says so, "
                         "exit status 2 (see executor/apps/gpu_check.py).")
    g.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="override a line of the gpu profile (repeatable)")
    g.add_argument("--spark-log", default=None, metavar="FILE",
                   help="where the Spark JVM's log (with the NOT_ON_GPU lines) goes")
    g.set_defaults(func=cmd_gpu_check)
    return p


STRICT_HELP = ("every input is strict: a step that would make a record's multiplicity "
               "negative is refused")
CDC_HELP = ("input NAME (keyed) is read as Debezium change records (op, before, after) from "
            "JSON lines or Parquet (executor/inputs/cdc.py; repeatable)")


def _follow_parser(verbs, conf_help: str, log_help: str) -> None:
    f = verbs.add_parser("follow", help="step a durable runner as files arrive in folders",
                         description="Poll input folders; the files new since the last step "
                         "are one step; write each step's output changes to "
                         "DIR/NAME/step-<step>.parquet exactly once (executor/apps/follow.py).")
    _plan_arguments(f, "NAME=DIR", "folder receiving Parquet or CSV files for input NAME "
                    "(repeatable)", conf_help, log_help)
    f.add_argument("--state", required=True, metavar="STATE_DIR",
                   help="durable state: steps committed here, resumed from here")
    f.add_argument("--poll", type=_seconds, default=1.0, metavar="SECONDS",
                   help="seconds between looks at the input folders (default 1)")
    f.add_argument("--until-idle", type=_seconds, default=None, metavar="SECONDS",
                   help="exit 0 after SECONDS without new files (default: run until a signal)")
    f.add_argument("--metrics", default=None, metavar="FILE",
                   help="append one JSON line of metrics per step to FILE "
                        "(executor/apps/metrics.py)")
    f.set_defaults(func=cmd_follow)


def _plan_arguments(p, input_metavar: str, input_help: str, conf_help: str,
                    log_help: str) -> None:
    """The arguments `run` and `follow` share: a plan file stepped over inputs."""
    p.add_argument("plan", metavar="PLAN.py", help="Python file defining build(flow)")
    p.add_argument("--input", action="append", default=[], metavar=input_metavar,
                   help=input_help)
    p.add_argument("--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--conf", action="append", default=[], metavar="PROFILE|KEY=VALUE",
                   help=conf_help)
    p.add_argument("--no-optimize", dest="optimize", action="store_false",
                   help="run the plan as written (no optimizer)")
    p.add_argument("--spark-log", default=None, metavar="FILE|-", help=log_help)
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.add_argument("--cdc", action="append", default=[], metavar="NAME", help=CDC_HELP)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected seconds (a number >= 0), got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _time(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**63 - 1:
        raise argparse.ArgumentTypeError(f"expected a time (integer >= 0), got {text!r}")
    return value


def parse_inputs(values: list[str], flow: Dataflow) -> dict[str, str]:
    """`--input NAME=PATH` values against the plan's declared inputs."""
    paths: dict[str, str] = {}
    for item in values:
        name, sep, path = item.partition("=")
        name = name.strip()
        if not sep or not name or not path:
            raise CliError(f"--input {item!r}: expected NAME=PATH")
        if name not in flow.inputs:
            declared = ", ".join(sorted(flow.inputs)) or "none"
            raise CliError(f"--input {name}: the plan declares no input '{name}' "
                           f"(its inputs: {declared})")
        if name in paths:
            raise CliError(f"--input {name}: given twice")
        paths[name] = path
    return paths


def parse_cdc(names: list[str], paths: dict[str, str], flow: Dataflow) -> list[str]:
    """`--cdc NAME` values: inputs given by --input, declared with a key."""
    for name in names:
        if name not in paths:
            raise CliError(f"--cdc {name}: no --input {name}")
        if not flow.inputs[name].key:
            raise CliError(f"--cdc {name}: change records feed a keyed input; declare it "
                           f"with flow.input(..., key=[...])")
    return list(dict.fromkeys(names))


def parse_csv_options(values: list[str], paths: dict[str, str]) -> dict:
    """`--csv-option NAME.KEY=VALUE` values: each named input becomes csv(path, KEY=VALUE,
    ...) (executor.inputs.updates.csv); the others stay paths."""
    import inspect

    from executor.inputs.updates import csv
    keys = [k for k in inspect.signature(csv).parameters if k != "path"]
    options: dict[str, dict] = {}
    for item in values:
        target, sep, value = item.partition("=")
        name, dot, key = target.partition(".")
        if not sep or not dot:
            raise CliError(f"--csv-option {item!r}: expected NAME.KEY=VALUE")
        if name not in paths:
            raise CliError(f"--csv-option {item!r}: no --input {name}")
        if key not in keys:
            raise CliError(f"--csv-option {item!r}: unknown option {key!r} (options: "
                           f"{', '.join(keys)})")
        if key == "header":
            if value.lower() not in ("true", "false"):
                raise CliError(f"--csv-option {item!r}: header is true or false")
            value = value.lower() == "true"
        elif value == "\\t":
            value = "\t"
        options.setdefault(name, {})[key] = value
    return {name: csv(path, **options[name]) if name in options else path
            for name, path in paths.items()}


# ---------------------------------------------------------------------------- plan files
def load_plan(path: str, strict: bool = False) -> Dataflow:
    """The Dataflow that PLAN.py's `build(flow)` declares (every input strict if `strict`)."""
    file = Path(path)
    if not file.is_file():
        raise CliError(f"plan file {path}: not found")
    if file.suffix.lower() == ".sql":
        return _sql_plan(file, strict)
    name = "diffspark_plan_" + "".join(c if c.isalnum() else "_" for c in file.stem)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise CliError(f"plan file {path}: cannot be loaded as Python (expects a .py file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # any error in user code: one line, no traceback
        raise CliError(f"plan file {path}: {describe(e)}") from None
    build = getattr(module, "build", None)
    if not callable(build):
        raise CliError(f"plan file {path}: defines no build(flow) function")
    flow = Dataflow(strict=strict)
    try:
        build(flow)
    except Exception as e:
        raise CliError(f"plan file {path}: build(flow) raised {describe(e)}") from None
    if not flow.outputs:
        raise CliError(f"plan file {path}: build(flow) declares no outputs")
    _ship_by_value(module)
    return flow


def _sql_plan(file: Path, strict: bool) -> Dataflow:
    """The Dataflow of a .sql plan's CREATE statements."""
    flow = Dataflow(strict=strict)
    try:
        sql_script(flow, file.read_text())
    except PlanError as e:
        raise CliError(f"plan file {file}: {e}") from None
    if not flow.outputs:
        raise CliError(f"plan file {file}: declares no outputs (rule: CREATE MATERIALIZED "
                       f"VIEW name AS SELECT ...)")
    return flow


def _ship_by_value(module) -> None:
    """Kernels defined in the plan file travel to Spark's workers by value: the workers
    cannot import a module loaded from a path."""
    try:
        from pyspark import cloudpickle
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return
    cloudpickle.register_pickle_by_value(module)


def explain_text(flow: Dataflow, optimize: bool = True, sql: str = "") -> str:
    """The plan's SQL (a .sql plan), the plan as written and as optimized (as
    `Runner.explain` prints them), then the rules that fired and the cost of both plans
    (plans/optimizer); no Spark."""
    text = (f"== sql ==\n{sql.strip()}\n" if sql else "") + "== plan ==\n" + \
        ir.explain(flow.outputs)
    if optimize:
        done = optimize_plan(flow.outputs)
        text += "\n== optimized ==\n" + ir.explain(done.plan) + "\n" + done.report()
    return text


# ---------------------------------------------------------------------------- verbs
def cmd_explain(args) -> int:
    flow = load_plan(args.plan)
    sql = Path(args.plan).read_text() if args.plan.lower().endswith(".sql") else ""
    print(explain_text(flow, args.optimize, sql))
    return 0


def cmd_run(args) -> int:
    conf = conf_from_args(args.conf)
    if args.close and args.upto is not None:
        raise CliError("run: --upto T leaves the inputs open; --close closes them (give one)")
    flow = load_plan(args.plan, args.strict)
    paths = parse_inputs(args.input, flow)
    cdc_inputs = parse_cdc(args.cdc, paths, flow)
    for name, path in paths.items():  # fail fast, before a JVM starts
        if name in cdc_inputs and not os.path.exists(path):
            raise InputError(name, "-", "file not found", path)
        if name not in cdc_inputs:
            _check_path(name, path)
    sources = parse_csv_options(args.csv_option, paths)
    for name in flow.inputs:
        if name not in paths:
            print(f"note: input '{name}' has no --input; it is empty", flush=True)

    with spark_log(args.spark_log), starting_spark():
        from executor import Runner  # imports pyspark: only for verbs that run
        runner = Runner(flow, conf=conf, optimize=args.optimize, state=args.state)
    try:
        from executor.inputs import cdc
        for name in cdc_inputs:
            sources[name] = cdc.updates(name, cdc.read(name, paths[name]),
                                        runner.input_schemas[name], list(flow.inputs[name].key))
        with spark_errors(lambda e: StepError(f"run refused: {e}")):
            run_plan(runner, sources, args.output, args.steps, args.upto,
                     close=args.upto is None and (args.state is None or args.close))
    finally:
        stop(runner.spark)
    return 0


def cmd_follow(args) -> int:
    from executor.apps.follow import Follower, follow_conf
    from executor.apps.metrics import Sink
    conf = follow_conf(conf_from_args(args.conf))
    flow = load_plan(args.plan, args.strict)
    folders = parse_inputs(args.input, flow)
    cdc_inputs = parse_cdc(args.cdc, folders, flow)
    for name, folder in folders.items():
        if not os.path.isdir(folder):
            raise CliError(f"--input {name}: {folder} is not a folder (follow watches folders)")
    try:
        sink = Sink(args.metrics)
    except OSError as e:
        raise CliError(f"--metrics {args.metrics}: cannot be opened ({e.strerror})") from None
    with spark_log(args.spark_log), starting_spark():
        from executor import Runner
        runner = Runner(flow, conf=conf, optimize=args.optimize, state=args.state)
    try:
        with spark_errors(lambda e: StepError(f"follow: step refused: {e}")):
            Follower(runner, folders, args.output, metrics=sink,
                     cdc=cdc_inputs).run(args.poll, args.until_idle)
    except KeyboardInterrupt:
        print(f"abandoned the step in flight; the state is at step {runner.steps}", flush=True)
        return 130
    finally:
        sink.close()
        stop(runner.spark)
    return 0


def cmd_demo(args) -> int:
    conf = conf_from_args(args.conf)
    from executor.apps import demo
    with spark_log(args.spark_log), starting_spark():
        from executor.runtime.session import spark_session
        spark = spark_session(conf)
    try:
        with spark_errors(lambda e: StepError(f"demo failed: {e}")):
            demo.run_demo(spark, conf, events=args.events, steps=args.steps, seed=args.seed)
    finally:
        stop(spark)
    return 0


def cmd_triangles(args) -> int:
    if args.stream and args.steps is not None:
        raise CliError("triangles: --steps splits the input's times into steps; with "
                       "--stream K the run is the load and K steps of random changes "
                       "(give --steps or --stream, not both)")
    conf = conf_from_args(args.conf)
    if not os.path.exists(args.edges):
        raise InputError("edges", "-", "file not found", args.edges)
    from executor.apps import triangles
    with spark_log(args.spark_log), starting_spark():
        from executor.runtime.session import spark_session
        spark = spark_session(conf)
    try:
        with spark_errors(lambda e: StepError(f"triangles failed: {e}")):
            if args.stream:
                triangles.stream_demo(spark, conf, args.edges, args.stream, args.batch,
                                      args.seed, kernel_backend(conf), args.output)
            else:
                for line in triangles.triangles_main(spark, conf, args.edges, args.steps or 1,
                                                     args.output, kernel_backend(conf)):
                    print(line, flush=True)
    finally:
        stop(spark)
    return 0


def cmd_gpu_check(args) -> int:
    from executor.apps.gpu_check import NoGpu, run
    try:
        return run(args)
    except NoGpu as e:
        raise CliError(f"gpu-check: no GPU on this machine: {e}; nothing was checked "
                       "(run it where `nvidia-smi` lists a GPU)") from None


def _check_path(name: str, path: str) -> None:
    """The checks of executor.inputs.updates.read_source that need no Spark: the file exists and is
    Parquet or CSV."""
    from executor.inputs.updates import _format
    if not os.path.exists(path):
        raise InputError(name, "-", "file not found", path)
    _format(name, path)


# ---------------------------------------------------------------------------- running
def run_plan(runner, paths: dict, output: str, steps: int = 1,
             upto: Optional[int] = None, close: bool = True) -> None:
    """Read the inputs (paths or csv(...) sources) once, feed them in `steps` steps over
    their distinct times (up to `upto` when given), close when `close`, write every output
    to `output`/NAME/. Inputs the driver may hold (executor/inputs/local.py reads them as
    Spark would, none over diffspark.host.step_rows) are read and checked on Arrow, with no
    Spark job; others as Spark frames."""
    from executor.durability.state import crash_point

    inputs = Tables.read(runner, paths, upto) or Frames.read(runner, paths, upto, steps)
    bounds = step_bounds(inputs.times(steps), steps, upto)
    for i, (lower, hi) in progress(enumerate(bounds, start=1), "steps", len(bounds)):
        result = runner.step(inputs.between(lower, hi), upto=hi)
        print(f"step {i}/{len(bounds)} upto={hi} seconds={result.seconds:.2f}"
              f"{' skipped (committed)' if result.skipped else ''}", flush=True)
    if close:
        result = runner.close()
        print(f"close upto=inf seconds={result.seconds:.2f}"
              f"{' skipped (committed)' if result.skipped else ''}", flush=True)
    inputs.release()

    for name in runner.plan:
        target = output.rstrip("/") + "/" + name
        with spark_errors(lambda e: CliError(f"output {name}: cannot write {target}: {e}")):
            count = write_output(runner, name, target)
        print(f"wrote {target} ({count} changes)", flush=True)
        crash_point("output:after-write", list(runner.plan).index(name) + 1)


# ---------------------------------------------------------------------------- entry point
ERRORS = (CliError, ConfigError, InputError, PlanError, StateError, StepError)


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except ERRORS as e:
        return _fail(str(e))


def _fail(message: str) -> int:
    line = " ".join(message.split())  # exactly one line
    print(f"error: {line}", file=sys.stderr, flush=True)
    return EXIT_ERROR
