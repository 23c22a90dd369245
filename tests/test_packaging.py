"""`pip install .` gives a working diffspark: the wheel built from pyproject.toml holds every
package of the checkout, the Spark profiles and the `diffspark` command, with the pinned
requirements; installed apart from the checkout, it imports and runs from any directory."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = ("plans", "executor", "gpu_kernels")
# What a build reads: pyproject.toml and the files it names (checked below to exist).
SOURCES = ("pyproject.toml", "README.md", "requirements.txt", "requirements-test.txt",
           "requirements-gpu.txt", "benchmarks/requirements-peers.txt", "configs", *PACKAGES)


def pins(file: str) -> list[str]:
    lines = (ROOT / file).read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, target): a wheel built from a copy of the sources (so the checkout gets no
    build/ droppings) and installed without dependencies into a folder of its own."""
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    for name in SOURCES:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(tmp / "dist"), str(src)], check=True)
    (wheel,) = (tmp / "dist").glob("diffspark-*.whl")
    target = tmp / "target"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
                   check=True)
    return wheel, target


def test_pyproject_reads_the_requirement_files():
    dynamic = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]
    files = [dynamic["dependencies"]["file"]] + [
        extra["file"] for extra in dynamic["optional-dependencies"].values()]
    for names in files:
        for name in names:
            assert (ROOT / name).is_file(), f"pyproject.toml names {name}, which is missing"
            assert name in SOURCES, f"{name}: add it to SOURCES so the wheel test builds with it"
    assert set(dynamic["optional-dependencies"]) == {"gpu", "peers", "test"}


def test_wheel_holds_packages_profiles_script_and_pins(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            assert str(init.relative_to(ROOT)) in names, f"{init.relative_to(ROOT)} not in wheel"
        for module in (ROOT / package).rglob("*.py"):
            assert str(module.relative_to(ROOT)) in names, f"{module.relative_to(ROOT)} not in wheel"
    for conf in (ROOT / "configs").iterdir():
        assert f"executor/configs/{conf.name}" in names, f"configs/{conf.name} not in wheel"
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)

    dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    entry_points = zipfile.ZipFile(wheel).read(f"{dist}/entry_points.txt").decode()
    assert "diffspark = executor.apps.cli:main" in entry_points
    metadata = zipfile.ZipFile(wheel).read(f"{dist}/METADATA").decode().splitlines()
    requires = {line.split(": ", 1)[1] for line in metadata if line.startswith("Requires-Dist: ")}
    for pin in pins("requirements.txt"):
        assert pin in requires, f"wheel does not require {pin}"
    for extra, file in (("gpu", "requirements-gpu.txt"), ("test", "requirements-test.txt"),
                        ("peers", "benchmarks/requirements-peers.txt")):
        for pin in pins(file):
            assert f'{pin}; extra == "{extra}"' in requires, f"[{extra}] does not require {pin}"
    runtime = {r for r in requires if "extra ==" not in r}
    assert runtime == set(pins("requirements.txt")), "runtime requirements beyond requirements.txt"


def installed_env(target: Path) -> dict[str, str]:
    """The environment of a user who installed the wheel: the target folder on the path
    (standing in for site-packages), never the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    return env


def test_installed_package_imports_and_finds_its_profiles_from_any_directory(installed,
                                                                             tmp_path):
    _, target = installed
    code = ("import executor, plans, gpu_kernels, plans.optimizer\n"
            "from executor import Runner\n"
            "from plans import Dataflow\n"
            "from executor.runtime.config import load_conf, profile_path\n"
            "print(executor.__file__)\n"
            "print(profile_path('cpu'))\n"
            "print(load_conf('cpu')['spark.master'])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=installed_env(target),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    module, profile, master = done.stdout.splitlines()
    assert Path(module).is_relative_to(target), f"imported {module}, not the installed copy"
    assert Path(profile) == target / "executor" / "configs" / "cpu.conf"
    assert master == "local[*]"


def test_diffspark_command_runs_the_cli(installed, tmp_path):
    _, target = installed
    script = target / "bin" / "diffspark"
    env = installed_env(target)
    done = subprocess.run([str(script), "--help"], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: diffspark ")
    for verb in ("run", "explain", "demo", "triangles", "gpu-check"):
        assert verb in done.stdout
    plan = target / "plans" / "examples" / "linear_events.py"
    done = subprocess.run([str(script), "explain", str(plan)], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("== plan ==") and "== optimized ==" in done.stdout
