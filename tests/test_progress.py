"""executor.apps.progress: a bar on a terminal, nothing at all otherwise (tests, CI, logs)."""
from __future__ import annotations

import io
import sys

from executor.apps.progress import progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_no_bar_off_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    items = [1, 2, 3]
    assert progress(items, "steps") is items
    assert sys.stderr.getvalue() == ""


def test_bar_on_a_terminal(monkeypatch):
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    assert list(progress(iter("abc"), "steps", total=3)) == ["a", "b", "c"]
    assert "steps:" in screen.getvalue() and "/3 " in screen.getvalue()
