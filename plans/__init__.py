"""diffspark's logical layer: the builder API, the plan IR, fusion and the reference
interpreter. Imports neither Spark nor GPU code."""
from .builder import Collection, Dataflow
from .errors import PlanError

__all__ = ["Collection", "Dataflow", "PlanError"]
