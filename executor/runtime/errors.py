"""Errors a user sees. Each names what was wrong (input, column, rule) in one line, so the CLI
can print it as is; raising one means the step was refused and nothing changed (except
SubscriberError: the step committed, then a subscriber's callback raised)."""
from __future__ import annotations

import difflib
import re

from plans.errors import PlanError

__all__ = ["InputError", "PlanError", "StateError", "StepError", "SubscriberError"]


class InputError(ValueError):
    """An update batch broke a rule: the whole step is refused."""

    def __init__(self, input: str, column: str, rule: str, detail: str = ""):
        self.input, self.column, self.rule, self.detail = input, column, rule, detail
        msg = f"input '{input}', column '{column}': {rule}"
        super().__init__(msg + (f" ({detail})" if detail else ""))


class StepError(RuntimeError):
    """Spark failed while running a step (e.g. a diff product overflowed int64): the step was
    refused and state and outputs are as they were before it."""


class SubscriberError(RuntimeError):
    """A subscriber's callback raised (executor/subscriptions.py). Unlike the others, the
    step HAS committed: `result` is its StepResult, `errors` every (output, exception)."""

    def __init__(self, message: str, result, errors: list):
        super().__init__(message)
        self.result, self.errors = result, errors


class StateError(RuntimeError):
    """A state directory that cannot be used as asked (locked by another runner, written by
    another plan, repeated steps with different inputs): nothing was read or changed."""


def first_line(e: BaseException) -> str:
    """The informative line of an error, at most 500 characters: for a Python worker's failure,
    the exception line that closes its traceback; for a Java exception seen through py4j, the
    Java exception's own line (py4j's first line only names the method that was called);
    otherwise the first line."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if "Traceback (most recent call last)" in text:
        python = [ln for ln in lines if not ln.startswith(("at ", "File ", "Traceback"))
                  and ":" in ln and not ln.startswith("org.apache")]
        if python:
            return python[-1][:500]
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        return lines[1].lstrip(": ")[:500]
    return lines[0][:500]


INTERNAL = re.compile(r"^__|^(time|diff)$")  # the executor's columns, never the user's


def analysis_message(e, columns: list[str]) -> str:
    """Spark's analysis error (an AnalysisException) in the user's words. An unknown column
    lists the operator's input columns and the closest ones; Spark's own suggestions would
    name the executor's internal columns (`__gt`, `__m`)."""
    mine = [c for c in columns if not INTERNAL.search(c)]
    condition = e.getCondition() or ""
    if condition.startswith("UNRESOLVED_COLUMN"):
        wanted = e.getMessageParameters().get("objectName", "?")
        close = difflib.get_close_matches(wanted.strip("`").split(".")[-1], mine, n=3)
        return (f"no column {wanted}" + (f"; did you mean {', '.join(close)}?" if close else "")
                + f" (the input's columns: {', '.join(mine)})")
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    first = lines[0][:500] if lines else type(e).__name__
    return re.sub(r",?\s*`__\w+`", "", first)
