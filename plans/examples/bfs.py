"""CLI plan: bfs distance labels (node, dist) from the roots (plans/examples/graphs.py).

    python -m executor run plans/examples/bfs.py \\
        --input edges=edges.csv --input roots=roots.csv --output out/
"""
from plans.examples.graphs import EDGES, ROOTS, bfs, out_edges


def build(flow):
    edges, roots = flow.input("edges", EDGES), flow.input("roots", ROOTS)
    flow.output("bfs", bfs(roots, out_edges(edges)))
