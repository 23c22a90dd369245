"""CLI plan: the nodes reachable from the roots (plans/examples/graphs.py).

    python -m executor run plans/examples/reach.py \\
        --input edges=edges.csv --input roots=roots.csv --output out/
"""
from plans.examples.graphs import EDGES, ROOTS, reach, out_edges


def build(flow):
    edges, roots = flow.input("edges", EDGES), flow.input("roots", ROOTS)
    flow.output("reach", reach(roots, out_edges(edges)))
