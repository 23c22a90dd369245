"""Subscriptions: `runner.subscribe(name, callback)` hands each step's final changes of an
output to a callback as an Arrow table (record columns, time, diff).

Contract (README "Running continuously"):
- A callback is called after its step has committed (a durable runner's manifest renamed
  in) and the runner has advanced, so it never sees changes that a crash could take back.
- Every step returned by `step`/`close` is delivered, an empty table when the output did
  not change, with the StepResult as second argument. A committed step that a resumed
  driver repeats (`result.skipped`) is delivered again: across a crash between commit and
  callback delivery is at least once, and `result.step` lets a subscriber drop repeats.
- Callbacks run in the order they subscribed. One that raises does not stop the others:
  when all have run, `step` raises SubscriberError (the first exception as its cause,
  every one in `errors`, the committed StepResult in `result`). The step stays committed:
  the caller may step on.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa

from executor.runtime.errors import SubscriberError


class Subscription:
    """A callback on one output; `cancel()` unsubscribes it (idempotent)."""

    def __init__(self, registry: "Subscriptions", name: str, callback: Callable):
        self.registry, self.name, self.callback = registry, name, callback

    def cancel(self) -> None:
        if self in self.registry.live:
            self.registry.live.remove(self)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


class Subscriptions:
    """A runner's callbacks, called in subscription order after each committed step."""

    def __init__(self):
        self.live: list[Subscription] = []

    def add(self, name: str, callback: Callable) -> Subscription:
        if not callable(callback):
            raise TypeError(f"subscribe('{name}'): the callback must be callable, got "
                            f"{type(callback).__name__}")
        subscription = Subscription(self, name, callback)
        self.live.append(subscription)
        return subscription

    def deliver(self, result) -> None:
        """Call every callback with its output's changes of `result`; SubscriberError after
        all have run when any raised."""
        tables: dict[str, pa.Table] = {}
        errors = []
        for s in list(self.live):
            if s.name not in tables:
                tables[s.name] = result.arrow(s.name)
            try:
                s.callback(tables[s.name], result)
            except Exception as e:  # surfaced below, once every callback has had its turn
                errors.append((s.name, e))
        if errors:
            name, first = errors[0]
            raise SubscriberError(
                f"step {result.step} committed, but {len(errors)} subscriber callback(s) "
                f"raised; first, on output '{name}': {type(first).__name__}: {first}",
                result, errors) from first
