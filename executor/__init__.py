"""diffspark's physical layer: runs plans on Spark (Runner, operators, traces). The
applications built on it (the CLI, the demos, gpu-check) are in executor/apps/.

Runner is imported on first use, so the modules that need no Spark (apps.gpu_check up to its
Spark part, apps.progress) load on a machine without pyspark, such as a bare GPU box.
"""
from executor.runtime.errors import InputError, PlanError, StateError, StepError, SubscriberError

__all__ = ["InputError", "PlanError", "Runner", "StateError", "StepError", "StepResult",
           "SubscriberError", "cdc", "csv"]


def __getattr__(name):
    if name in ("Runner", "StepResult"):
        from executor import runner

        return getattr(runner, name)
    if name == "csv":
        from executor.inputs.updates import csv

        return csv
    if name == "cdc":  # `from executor import cdc`, as the README shows
        from executor.inputs import cdc

        return cdc
    raise AttributeError(f"module 'executor' has no attribute {name!r}")
