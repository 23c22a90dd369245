"""diffspark's physical layer: runs plans on Spark (Runner, operators, traces, the CLI).

Runner is imported on first use, so the kernel-only modules (gpu_check's parity, progress)
load on a machine without pyspark, such as a bare GPU box.
"""
from .errors import InputError, PlanError, StateError, StepError

__all__ = ["InputError", "PlanError", "Runner", "StateError", "StepError", "StepResult", "csv"]


def __getattr__(name):
    if name in ("Runner", "StepResult"):
        from . import runner

        return getattr(runner, name)
    if name == "csv":
        from .updates import csv

        return csv
    raise AttributeError(f"module 'executor' has no attribute {name!r}")
