"""Example plan: every operator family over every column type the builder accepts.

Orders (STRING, DECIMAL, DATE, TIMESTAMP, DOUBLE, BOOLEAN, nulls) and customers: linear
chains (filter, map with `upper`, DECIMAL arithmetic and CASE), join, semijoin, antijoin,
count, sum, min, max, distinct, threshold, top_k (ascending, descending, by an expression),
a user reduction kernel, conjunctive queries (a STRING join variable with nulls, STRING and
DECIMAL constants, a DATE comparison), and `iterate` (the customers reachable from the
corporate ones through shared orders' ids). tests/test_driver_types.py steps it on both
placements against the reference interpreter; tests/test_cluster.py steps it on a standalone
cluster's executors.

    python -m executor run plans/examples/families.py \\
        --input orders=orders.parquet --input customers=customers.parquet --output out/
"""
from plans.examples.graphs import reach

ORDERS = ("o_id BIGINT, c_id BIGINT, status STRING, total DECIMAL(12,2), placed DATE, "
          "at TIMESTAMP, score DOUBLE, rush BOOLEAN")
CUSTOMERS = "c_id BIGINT, name STRING, segment STRING"


def count_positive(xp, group, cols, count):
    """A user reduction: per group, how many rows have score > 0 (multiplicity counted)."""
    n = int(group.shape[0] and (xp.max(group) + 1))
    hits = xp.where(cols["score"] > 0, count, xp.zeros_like(count))
    totals = xp.zeros(n, dtype=xp.int64)
    for g in range(n):  # small groups in tests; a real kernel would segment-sum
        totals[g] = xp.sum(xp.where(group == g, hits, xp.zeros_like(hits)))
    return xp.arange(n, dtype=xp.int64), {"positive": totals}


def relational(flow):
    """Every family but iterate, over every column type."""
    o = flow.input("orders", ORDERS)
    c = flow.input("customers", CUSTOMERS)
    j = o.arrange_by_key("c_id").join(c.arrange_by_key("c_id"), on=["c_id"])
    flow.output("revenue", j.sum("total", by=["segment"]))
    flow.output("ids", o.sum("o_id", by=["status"]))
    flow.output("orders_per", j.count(by=["segment"]))
    flow.output("first_name", j.min("name", by=["segment"]))
    flow.output("latest", o.max("placed", by=["c_id"]))
    flow.output("last_at", o.max("at", by=["rush"]))
    flow.output("best", o.max("score", by=["status"]))
    flow.output("top", o.top_k(2, order_by="total", by=["c_id"]))
    flow.output("top_expr", o.map("c_id", "status", "total").top_k(
        1, order_by="-total", by=["status"]))
    flow.output("top_desc", o.top_k(2, order_by="placed DESC NULLS FIRST, total", by=["status"]))
    flow.output("statuses", o.map("c_id", "status").distinct())
    flow.output("priced", o.filter("total IS NULL OR total > 0").map(
        "c_id", "upper(status) AS status", "total * 2 AS doubled", "placed",
        "CASE WHEN rush THEN 'rush' ELSE 'normal' END AS speed").count(by=["status", "speed"]))
    flow.output("twice", o.map("status", "rush").threshold(
        "CASE WHEN count >= 2 THEN 1 ELSE 0 END"))
    flow.output("lonely", c.antijoin(o, on=["c_id"]))
    flow.output("kept", o.semijoin(c.filter("segment IS NOT NULL"), on=["c_id"]))
    flow.output("positive", o.map("c_id", "score").filter("score IS NOT NULL").reduce(
        by=["c_id"], kernel=count_positive, schema="positive BIGINT"))
    rs, rp, rt = (o.map("c_id", col) for col in ("status", "placed", "total"))
    flow.output("same_status", flow.query("q(a, b, s) :- rs(a, s), rs(b, s)", rs=rs))
    flow.output("paid_on", flow.query("q(a, p) :- rs(a, 'paid'), rp(a, p), rt(a, 0)",
                                      rs=rs, rp=rp, rt=rt))
    flow.output("earlier", flow.query("q(a, p, p2) :- rp(a, p), rp(a, p2), p < p2", rp=rp))
    flow.output("named", flow.query("q(a, n, s) :- rs(a, s), cn(a, n)", rs=rs,
                                    cn=c.map("c_id", "name")))
    return o, c


def build(flow):
    o, c = relational(flow)
    # customers linked by an order id they share: c_id -> o_id -> the other orders' c_id
    hops = o.map("o_id", "c_id").filter("c_id IS NOT NULL")
    links = hops.arrange_by_key("o_id").join(hops.map("o_id", "c_id AS dst"), on=["o_id"])
    arranged = links.map("c_id AS node", "dst").arrange_by_key("node")
    roots = c.filter("segment = 'corp' AND c_id IS NOT NULL").map("c_id AS node").distinct()
    flow.output("linked", reach(roots, arranged))
