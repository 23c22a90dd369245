"""Configuration profiles for diffspark: read a configs/*.conf file (spark-defaults.conf
format), apply `--conf key=value` overrides, expand ${VAR} from the environment and check
diffspark's own keys. Imports no Spark; executor.runtime.session turns the result into a session.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = [
    "BACKENDS",
    "CONFIGS_DIR",
    "ConfigError",
    "DEFAULT_BACKEND",
    "DEFAULT_PARTITIONS",
    "PROFILES",
    "kernel_backend",
    "load_conf",
    "host_mirror_rows",
    "host_step_rows",
    "local_query_rows",
    "max_rounds",
    "output_history",
    "partitions",
    "profile_path",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
# The profiles live in configs/ at the top of a checkout; an installed package (pip install .)
# carries them as executor/configs/ (pyproject.toml), which only an installed copy has.
_INSTALLED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIGS_DIR = _INSTALLED_CONFIGS if _INSTALLED_CONFIGS.is_dir() else REPO_ROOT / "configs"
MAX_ROUNDS_KEY = "diffspark.iterate.max_rounds"
DEFAULT_MAX_ROUNDS = 1000
PROFILES = {"cpu": CONFIGS_DIR / "cpu.conf", "gpu": CONFIGS_DIR / "gpu.conf"}

BACKEND_KEY = "diffspark.kernel.backend"
PARTITIONS_KEY = "diffspark.partitions"
SHUFFLE_PARTITIONS_KEY = "spark.sql.shuffle.partitions"
BACKENDS = ("numpy", "cupy", "auto")
DEFAULT_BACKEND = "auto"
DEFAULT_PARTITIONS = 8
LOCAL_QUERY_ROWS_KEY = "diffspark.query.local_rows"
DEFAULT_LOCAL_QUERY_ROWS = 2_000_000
HOST_STEP_ROWS_KEY = "diffspark.host.step_rows"
DEFAULT_HOST_STEP_ROWS = 5_000_000
HOST_MIRROR_ROWS_KEY = "diffspark.host.mirror_rows"
DEFAULT_HOST_MIRROR_ROWS = 20_000_000
HOST_LOOKUP_ROWS_KEY = "diffspark.host.lookup_rows"
HOST_THREADS_KEY = "diffspark.host.threads"
OUTPUT_HISTORY_KEY = "diffspark.output.history"
OUTPUT_HISTORIES = ("all", "current")

# What an environment variable named in a profile is for, to say so when it is missing.
ENV_HINTS = {
    "RAPIDS_PLUGIN_JAR": "path to rapids-4-spark jar",
    "SPARK_GPU_DISCOVERY_SCRIPT": "path to getGpusResources.sh",
}

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*\Z")
# `key value`, `key=value` or `key: value` (the separators java.util.Properties accepts).
_LINE = re.compile(r"(?P<key>[^\s=:]+)\s*[=:\s]\s*(?P<value>.*)\Z")
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


class ConfigError(ValueError):
    """A profile or override that cannot be used; the message names the file or flag and key."""


def profile_path(profile: str | os.PathLike[str]) -> Path:
    """The .conf file for a profile name ("cpu", "gpu") or a path to a .conf file."""
    if isinstance(profile, str) and profile in PROFILES:
        return PROFILES[profile]
    path = Path(profile)
    if path.is_file():
        return path
    raise ConfigError(
        f"unknown profile {str(profile)!r}: use {', '.join(PROFILES)} or a path to a .conf file"
    )


def load_conf(
    profile: str | os.PathLike[str] = "cpu",
    overrides: Iterable[str] | Mapping[str, object] = (),
) -> dict[str, str]:
    """Merged configuration: the profile's lines, then the overrides (later entries win).

    `overrides` are "key=value" strings (the CLI's repeated `--conf key=value`) or a mapping.
    ${VAR} and ${VAR:-default} in values expand from os.environ, only for the values that
    win, so an override can stand in for a line whose variable is unset. When an override
    sets diffspark.partitions and none sets spark.sql.shuffle.partitions, the latter follows
    it (arrangements and shuffles must agree on the partition count).
    """
    path = profile_path(profile)
    entries: dict[str, tuple[str, str]] = {}  # key -> (raw value, where it came from)
    for key, value, where in _read_conf_file(path):
        entries[key] = (value, where)

    overridden: set[str] = set()
    for key, value in _parse_overrides(overrides):
        entries[key] = (value, "--conf")
        overridden.add(key)
    if (
        PARTITIONS_KEY in overridden
        and SHUFFLE_PARTITIONS_KEY not in overridden
        and SHUFFLE_PARTITIONS_KEY in entries
    ):
        value, _ = entries[PARTITIONS_KEY]
        entries[SHUFFLE_PARTITIONS_KEY] = (value, f"--conf {PARTITIONS_KEY}")

    conf = {key: _expand(key, value, where) for key, (value, where) in entries.items()}
    if BACKEND_KEY in conf:
        kernel_backend(conf)
    if PARTITIONS_KEY in conf:
        partitions(conf)
    if OUTPUT_HISTORY_KEY in conf:
        output_history(conf)
    return conf


def kernel_backend(conf: Mapping[str, str]) -> str:
    """The per-partition kernel backend: "numpy", "cupy" or "auto" (default "auto")."""
    value = str(conf.get(BACKEND_KEY, DEFAULT_BACKEND)).strip().lower()
    if value not in BACKENDS:
        raise ConfigError(
            f"{BACKEND_KEY} must be one of {', '.join(BACKENDS)}, got {conf.get(BACKEND_KEY)!r}"
        )
    return value


def partitions(conf: Mapping[str, str]) -> int:
    """The number of hash partitions P of every arrangement (default 8)."""
    return _positive_int(conf, PARTITIONS_KEY, DEFAULT_PARTITIONS)


def local_query_rows(conf: Mapping[str, str]) -> int:
    """The most seed updates a step of a conjunctive query runs on the driver's array
    backend, against index rows fetched by key; larger steps run as Spark SQL."""
    return _positive_int(conf, LOCAL_QUERY_ROWS_KEY, DEFAULT_LOCAL_QUERY_ROWS)


def host_step_rows(conf: Mapping[str, str], local: bool = False) -> int:
    """The most updates per input (given as local rows) of a step that runs on the driver
    (executor/driver.py); 0 runs every step on Spark. Default: 5,000,000 with a cluster's
    executors; in local mode (`local`), whose executors share the driver's machine and so
    add no cores or memory to it, host_mirror_rows, the most a step's updates can add to
    a mirror anyway (a 6M-row TPC-H load: 19 s on the driver, 88 s on Spark here). The
    driver also leaves to Spark a step whose input would not fit its memory
    (executor/driver.py `_fits_memory`)."""
    if str(conf.get(HOST_STEP_ROWS_KEY, "")).strip() == "0":
        return 0
    default = host_mirror_rows(conf) if local else DEFAULT_HOST_STEP_ROWS
    return _positive_int(conf, HOST_STEP_ROWS_KEY, default)


def host_mirror_rows(conf: Mapping[str, str]) -> int:
    """The most records an arrangement may hold for the driver to mirror it."""
    return _positive_int(conf, HOST_MIRROR_ROWS_KEY, DEFAULT_HOST_MIRROR_ROWS)


def host_lookup_rows(conf: Mapping[str, str]) -> int:
    """The most records of an arrangement a driver step mirrors whole; a larger one stays
    in its Spark batches and the step reads the keys it touches (executor/arrange/mirror.py
    `Mirror.over`); default: host_mirror_rows, beyond which nothing is mirrored; 0 leaves
    every arranged Spark batch where it is."""
    if str(conf.get(HOST_LOOKUP_ROWS_KEY, "")).strip() == "0":
        return 0
    return _positive_int(conf, HOST_LOOKUP_ROWS_KEY, host_mirror_rows(conf))


def host_threads(conf: Mapping[str, str]) -> int:
    """Threads a driver step runs independent chunks of numpy kernels on (numpy releases
    the GIL in them); default: the driver machine's cores."""
    return _positive_int(conf, HOST_THREADS_KEY, os.cpu_count() or 1)


def output_history(conf: Mapping[str, str]) -> str:
    """What a runner keeps of each output's changes: "all" (default; every change at its
    time, so `snapshot` answers any past time) or "current" (older changes consolidated
    into the output's present contents, so memory follows the output's size, not the
    number of steps; `follow` keeps this unless told otherwise)."""
    value = str(conf.get(OUTPUT_HISTORY_KEY, "all")).strip().lower()
    if value not in OUTPUT_HISTORIES:
        raise ConfigError(f"{OUTPUT_HISTORY_KEY} must be one of {', '.join(OUTPUT_HISTORIES)}, "
                          f"got {conf.get(OUTPUT_HISTORY_KEY)!r}")
    return value


def max_rounds(conf: Mapping[str, str]) -> int:
    """The most rounds one step of an iterate may take before it is refused as divergent."""
    return _positive_int(conf, MAX_ROUNDS_KEY, DEFAULT_MAX_ROUNDS)


def _positive_int(conf: Mapping[str, str], key: str, default: int) -> int:
    raw = conf.get(key, default)
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{key} must be a positive integer, got {raw!r}")
    return value


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _read_conf_file(path: Path) -> list[tuple[str, str, str]]:
    name = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read: {exc.strerror or exc}") from exc
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        where = f"{name}:{number}"
        match = _LINE.match(line)
        if match is None or not match.group("value").strip():
            raise ConfigError(f"{where}: malformed line {raw.strip()!r}: expected `key value`")
        key, value = match.group("key"), match.group("value").strip()
        if not _KEY.match(key):
            raise ConfigError(f"{where}: malformed key {key!r} in line {raw.strip()!r}")
        if value.endswith("\\"):
            raise ConfigError(f"{where}: line continuations (trailing \\) are not supported")
        _check_placeholders(value, where)
        out.append((key, value, name))
    return out


def _parse_overrides(overrides: Iterable[str] | Mapping[str, object]) -> list[tuple[str, str]]:
    if isinstance(overrides, Mapping):
        items = [(str(k).strip(), _str_value(v)) for k, v in overrides.items()]
    else:
        if isinstance(overrides, str):  # one "key=value", not an iterable of characters
            overrides = [overrides]
        items = []
        for item in overrides:
            key, sep, value = str(item).partition("=")
            if not sep:
                raise ConfigError(f"--conf {item!r}: expected key=value")
            items.append((key.strip(), value.strip()))
    for key, value in items:
        if not _KEY.match(key):
            raise ConfigError(f"--conf {key}={value}: malformed key {key!r}")
        _check_placeholders(value, f"--conf {key}")
    return items


def _str_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_placeholders(value: str, where: str) -> None:
    rest = _VAR.sub("", value)
    if "${" in rest:
        raise ConfigError(f"{where}: malformed ${{...}} in {value!r}: use ${{VAR}} or ${{VAR:-default}}")


def _expand(key: str, value: str, where: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        name, default = match.group("name"), match.group("default")
        found = os.environ.get(name)
        if found:
            return found
        if default is not None:
            return default
        hint = ENV_HINTS.get(name)
        raise ConfigError(
            f"{where}: {key} needs environment variable {name}" + (f" ({hint})" if hint else "")
        )

    return _VAR.sub(substitute, value)
