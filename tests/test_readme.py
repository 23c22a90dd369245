"""The README's Python examples run as written (on the test session)."""
from __future__ import annotations

import re

from conftest import ROOT


def python_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_examples_run(spark, capsys):
    blocks = python_blocks()
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    runner = namespace["runner"]
    assert runner.closed and runner.frontier > 10
    rows = sorted(tuple(r) for r in runner.output("active").collect())
    # user 1 valid on [2, 8) but retracted at 6; user 2 valid on [5, 6) from time 3
    assert rows == [(1, 2, 8, 6, 2, 1), (1, 2, 8, 6, 6, -1), (2, 5, 6, 1, 5, 1),
                    (2, 5, 6, 1, 6, -1)]
    assert sorted(tuple(r) for r in runner.snapshot("active", at=5).collect()) == \
        [(1, 2, 8, 6, 1), (2, 5, 6, 1, 1)]
    segments = sorted(tuple(r) for r in namespace["sql_runner"].snapshot("by_segment", at=0)
                      .collect())  # the SQL views example
    assert [(s, n, str(v), c) for s, n, v, c in segments] == \
        [("AUTOMOBILE", 2, "260.00", 1), ("BUILDING", 1, "40.50", 1)]
    assert [r.c_custkey for r in namespace["sql_runner"].snapshot("big_buyers", at=0)
            .collect()] == [7]
    largest = namespace["sql_runner"].snapshot("largest", at=0)  # Spark's name, no alias
    assert sorted((r.o_custkey, str(r["max(o_totalprice)"])) for r in largest.collect()) == \
        [(7, "250.00"), (8, "40.50")]
    reach = namespace["reach_runner"]  # the iterate example: 3 unreachable once 2->3 goes
    assert sorted(x.node for x in reach.snapshot("reach", at=0).collect()) == [1, 2, 3]
    assert sorted(x.node for x in reach.snapshot("reach", at=1).collect()) == [1, 2]


def test_readme_sql_plan_builds():
    """The README's .sql plan declares its inputs and its materialized view."""
    from plans import Dataflow
    from plans.sql import script
    (text,) = re.findall(r"```sql\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    flow = Dataflow()
    script(flow, text)
    assert sorted(flow.inputs) == ["customer", "orders"] and list(flow.outputs) == ["by_segment"]
