"""CLI plan: connected components by min-label propagation (plans/examples/graphs.py).

    python -m executor run plans/examples/components.py --input edges=edges.csv --output out/
"""
from plans.examples.graphs import EDGES, components


def build(flow):
    flow.output("components", components(flow.input("edges", EDGES)))
