"""Progress bars (tqdm) for long loops: steps of the CLI, benchmark rows. Drawn on stderr
only when stderr is a terminal, so logs, tests and CI output stay as they are."""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Optional, TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, total: Optional[int] = None) -> Iterable[T]:
    """`items`, with a bar on a terminal; unchanged (no wrapper) otherwise."""
    if not sys.stderr.isatty():
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, total=total, leave=False, dynamic_ncols=True)
