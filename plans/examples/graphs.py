"""Iterative graph dataflows (the iterate examples): reachability, bfs distance labels and
connected components, each kept exact as edges and roots come and go.

Each `build_*` declares inputs `edges (src, dst)` (directed; components read them both
ways) and, for reach and bfs, `roots (node)`. The CLI plan files `reach.py`, `bfs.py` and
`components.py` beside this one wrap them:

    python -m executor run plans/examples/bfs.py \\
        --input edges=edges.csv --input roots=roots.csv --output out/
"""

EDGES = "src BIGINT NOT NULL, dst BIGINT NOT NULL"
ROOTS = "node BIGINT NOT NULL"


def out_edges(edges):
    """Edges arranged by their source as `node`: every iterate below reads this one trace."""
    return edges.map("src AS node", "dst").arrange_by_key("node")


def reach(roots, arranged):
    """Nodes reachable from a root: the issue's own formulation."""
    return roots.iterate(lambda r: roots.concat(
        r.join(arranged, on=["node"]).map("dst AS node")).distinct())


def bfs(roots, arranged):
    """(node, dist): the fewest edges from any root."""
    start = roots.map("node", "0L AS dist")
    return start.iterate(lambda d: start.concat(
        d.join(arranged, on=["node"]).map("dst AS node", "dist + 1 AS dist")
    ).min("dist", by=["node"]))


def components(edges):
    """(node, label): the least node id of the node's connected component (edges read as
    undirected), by min-label propagation."""
    both = edges.concat(edges.map("dst AS src", "src AS dst"))
    arranged = out_edges(both)
    labels = both.map("src AS node", "src AS label").distinct()
    return labels.iterate(lambda lab: labels.concat(
        lab.join(arranged, on=["node"]).map("dst AS node", "label")
    ).min("label", by=["node"]))


def build_all(flow):
    """reach, bfs and components over one edges input (tests and benchmarks)."""
    edges, roots = flow.input("edges", EDGES), flow.input("roots", ROOTS)
    arranged = out_edges(edges)
    flow.output("reach", reach(roots, arranged))
    flow.output("bfs", bfs(roots, arranged))
    flow.output("components", components(edges))
