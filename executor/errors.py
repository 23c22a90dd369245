"""Errors a user sees. Each names what was wrong (input, column, rule) in one line, so the CLI
can print it as is; raising one always means the step was refused and nothing changed."""
from __future__ import annotations

from plans.ir import PlanError

__all__ = ["InputError", "PlanError", "StateError", "StepError"]


class InputError(ValueError):
    """An update batch broke a rule: the whole step is refused."""

    def __init__(self, input: str, column: str, rule: str, detail: str = ""):
        self.input, self.column, self.rule, self.detail = input, column, rule, detail
        msg = f"input '{input}', column '{column}': {rule}"
        super().__init__(msg + (f" ({detail})" if detail else ""))


class StepError(RuntimeError):
    """Spark failed while running a step (e.g. a diff product overflowed int64): the step was
    refused and state and outputs are as they were before it."""


class StateError(RuntimeError):
    """A state directory that cannot be used as asked (locked by another runner, written by
    another plan, repeated steps with different inputs): nothing was read or changed."""
