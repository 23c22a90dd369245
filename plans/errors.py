"""What every module of plans/ may refuse a plan with: PlanError, and the column names that
update triples reserve. It imports nothing, so the IR, the schema checks and the query front
end all import it one way.
"""
from __future__ import annotations

RESERVED = ("time", "diff")


class PlanError(ValueError):
    """A plan that cannot be built or run: names the operator and the rule it breaks."""
