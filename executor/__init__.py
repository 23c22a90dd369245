"""diffspark's physical layer: runs plans on Spark (Runner, operators, traces, the CLI)."""
from .errors import InputError, PlanError, StepError
from .runner import Runner, StepResult

__all__ = ["InputError", "PlanError", "Runner", "StepError", "StepResult"]
