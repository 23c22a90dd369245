"""Example plan: a join and a count, for durable runs (`--state`) and benchmarks/durability.py.

`orders (user, item)` joined with `prices (item, price)` on item; outputs:

    priced      (item, user, price): every order with its item's current price
    per_user    (user, count): how many priced orders each user has

    python -m executor run plans/examples/join_count.py \\
        --input orders=orders.csv --input prices=prices.csv --output out/ --state state/ --steps 20
"""


def build(flow):
    orders = flow.input("orders", "user BIGINT NOT NULL, item BIGINT NOT NULL")
    prices = flow.input("prices", "item BIGINT NOT NULL, price BIGINT NOT NULL")
    priced = orders.arrange_by_key("item").join(prices, on=["item"])
    flow.output("priced", priced)
    flow.output("per_user", priced.count(by=["user"]))
