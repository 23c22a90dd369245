"""environment.yml (conda, GPU machines) agrees with the pip requirement files (CPU machines;
pyproject.toml reads them: runtime, [test] and [gpu])."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# pip name -> conda name, where they differ.
CONDA_NAMES: dict[str, str] = {"cupy-cuda12x": "cupy"}
REQUIREMENT_FILES = ("requirements.txt", "requirements-test.txt", "requirements-gpu.txt")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def split_spec(spec: str) -> tuple[str, str]:
    """("pandas", "==2.3.3") from "pandas==2.3.3", "pandas=2.3.3" or "pandas 2.3.3"."""
    match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*", spec)
    assert match, f"unparsable spec {spec!r}"
    name, constraint = match.group(1), match.group(2).replace(" ", "")
    if constraint and constraint[0].isdigit():  # conda "name 1.2"
        constraint = "=" + constraint
    return normalise(name), constraint


def exact_version(constraint: str) -> str | None:
    """The single version a pin names ("==1.2", conda "=1.2"), else None."""
    match = re.fullmatch(r"==?([0-9][0-9A-Za-z.+!]*)", constraint)
    return match.group(1) if match else None


def requirements() -> dict[str, str]:
    out = {}
    for file in REQUIREMENT_FILES:
        for line in (ROOT / file).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                name, constraint = split_spec(line)
                assert name not in out, f"{name} pinned twice ({file})"
                out[name] = constraint
    return out


def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def environment_packages() -> tuple[dict[str, str], dict[str, str]]:
    conda, pip = {}, {}
    for dep in environment()["dependencies"]:
        if isinstance(dep, dict):
            for spec in dep["pip"]:
                name, constraint = split_spec(spec)
                assert name not in pip, f"{name} twice in the pip section"
                pip[name] = constraint
        else:
            name, constraint = split_spec(dep)
            assert name not in conda, f"{name} twice in environment.yml"
            conda[name] = constraint
    return conda, pip


def test_requirements_are_exact_pins():
    for name, constraint in requirements().items():
        assert exact_version(constraint), f"{name}: pin it to one version"


def test_channels_and_name():
    env = environment()
    assert env["name"] == "diffspark"
    assert env["channels"] == ["rapidsai", "conda-forge", "nvidia"]


@pytest.mark.parametrize("name", sorted(requirements()))
def test_requirement_pinned_the_same_in_environment(name):
    conda, pip = environment_packages()
    wanted = exact_version(requirements()[name])
    conda_name = CONDA_NAMES.get(name, name)
    if conda_name in conda:
        got = conda[conda_name]
        where = "conda"
    else:
        assert name in pip, f"{name} from {REQUIREMENT_FILES} is missing in environment.yml"
        got = pip[name]
        where = "pip"
    assert exact_version(got) == wanted, (
        f"environment.yml ({where}) has {name}{got}, pip pins {name}=={wanted}"
    )


def test_no_package_in_both_sections():
    conda, pip = environment_packages()
    assert not set(conda) & set(pip)


def test_gpu_stack():
    conda, _ = environment_packages()
    assert exact_version(conda["python"]) == "3.11"
    assert exact_version(conda["openjdk"]) == "17"
    assert exact_version(conda["cudf"]) == "26.06"
    assert exact_version(conda["cuda-version"]).startswith("12.")
    cupy = tuple(int(p) for p in exact_version(conda["cupy"]).split("."))
    # cudf 26.06 requires cupy >=13.6 and excludes 14.0.0 and 14.1.0
    assert cupy >= (13, 6) and cupy[:3] not in {(14, 0, 0), (14, 1, 0)}


def test_pandas_below_3_everywhere():
    # PySpark 4.1 warns under pandas 3; cudf 26.06 wants pandas <2.4.
    conda, _ = environment_packages()
    for constraint in (requirements()["pandas"], conda["pandas"]):
        assert int(exact_version(constraint).split(".")[0]) < 3
