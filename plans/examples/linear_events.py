"""Example plan: which tags each user has active, from events with validity intervals.

An event `(user, item, lo, hi, tags)` is valid at times lo <= t < hi (a missing bound is
unbounded); `tags` is a ';'-separated list, so the inputs can be plain CSV. Two inputs with
the same schema: `history`, a snapshot of the events so far (a file with no `time` and `diff`
columns: every row is one event at time 0), and `events`, later updates (with `time` and
`diff`; diff -1 retracts an event). Outputs:

    user_tags   (user, tag) for every tag of every valid event; a 'promo' tag counts twice
    active      (user, item) of every valid event

The chain after the shared filter is linear, so the optimizer fuses it into one Linear[...]
node per output (see `python -m executor explain`).

    python -m executor run plans/examples/linear_events.py \\
        --input history=history.csv --input events=events.parquet --output out/ --steps 3
"""

SCHEMA = "user BIGINT, item BIGINT, lo BIGINT, hi BIGINT, tags STRING"


def build(flow):
    history = flow.input("history", SCHEMA)
    events = flow.input("events", SCHEMA)
    valid = history.concat(events).filter("user >= 0")  # negative users are test accounts

    tags = (valid
            .map("user", "lo", "hi", "split(coalesce(tags, ''), ';') AS tags")
            # one update per tag: a struct per element, its `diff` multiplies the event's
            .explode("transform(filter(tags, t -> t != ''), t -> named_struct("
                     "'user', user, 'tag', t, 'lo', lo, 'hi', hi, "
                     "'diff', IF(t = 'promo', 2L, 1L)))")
            .temporal_filter(lower="lo", upper="hi")
            .map("user", "tag"))
    flow.output("user_tags", tags)

    flow.output("active", valid.temporal_filter(lower="lo", upper="hi").map("user", "item"))
