"""diffspark's physical layer: runs plans on Spark (Runner, operators, traces, the CLI)."""
from .errors import InputError, PlanError, StateError, StepError
from .runner import Runner, StepResult

__all__ = ["InputError", "PlanError", "Runner", "StateError", "StepError", "StepResult"]
