"""`python -m executor ...`, and the script spark-submit runs:

    spark-submit executor/__main__.py run PLAN.py --input NAME=PATH --output DIR

Run as a script (spark-submit), Python puts executor/ itself first on sys.path, where its
module names (config, time, ...) could shadow others; the repository root goes there
instead, so `executor` and `plans` import as packages.
"""
import os
import sys

if not __package__:  # a script, not `python -m executor`
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    sys.path.insert(0, os.path.dirname(_here))

from executor.apps.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
