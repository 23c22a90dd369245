"""Example plan for long runs (benchmarks/soak.py, benchmarks/follow_lag.py): a join, a
reduction and an iteration over three inputs that change every step.

    spend   (user, total): the price of each user's orders summed (join + sum)
    reach   (node): the nodes reachable over `edges` from any user who ordered (iterate)
"""


def build(flow):
    orders = flow.input("orders", "user BIGINT NOT NULL, item BIGINT NOT NULL")
    prices = flow.input("prices", "item BIGINT NOT NULL, price BIGINT NOT NULL")
    edges = flow.input("edges", "src BIGINT NOT NULL, dst BIGINT NOT NULL")
    flow.output("spend", orders.join(prices, on=["item"]).sum("price", by=["user"]))
    roots = orders.map("user AS node").distinct()
    arcs = edges.map("src AS node", "dst")
    flow.output("reach", roots.iterate(lambda r: roots.concat(
        r.join(arcs, on=["node"]).map("dst AS node")).distinct()))
