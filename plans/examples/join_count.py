"""Example plan: a join and counts, for durable runs (`--state`) and benchmarks/durability.py.

`orders (user, item)` joined with `prices (item, price)` on item; outputs:

    spend       (user, total): the sum of the prices of a user's orders
    per_item    (item, count): how many orders each item has

    python -m executor run plans/examples/join_count.py \\
        --input orders=orders.csv --input prices=prices.csv --output out/ --state state/ --steps 20
"""


def build(flow):
    orders = flow.input("orders", "user BIGINT NOT NULL, item BIGINT NOT NULL")
    prices = flow.input("prices", "item BIGINT NOT NULL, price BIGINT NOT NULL")
    priced = orders.arrange_by_key("item").join(prices, on=["item"])
    flow.output("spend", priced.sum("price", by=["user"]))
    flow.output("per_item", orders.count(by=["item"]))
