"""Resource limits: too many output changes in one step refuse the step with one line naming
the output and the setting, and nothing changes; memory exhaustion gets a hint."""
from __future__ import annotations

import pytest

from conftest import outputs_rows, updates_df
from executor import Runner, StepError
from executor.runtime.config import ConfigError
from executor.runtime.limits import OUTPUT_RECORDS_KEY, memory_hint
from plans import Dataflow


def test_output_records_limit_refuses_the_step(spark, conf):
    flow = Dataflow()
    flow.output("copies", flow.input("xs", "k BIGINT").explode(
        "transform(sequence(1, k), i -> named_struct('k', i, 'diff', 1L))"))
    runner = Runner(flow, conf={**conf, OUTPUT_RECORDS_KEY: "3"}, spark=spark)
    runner.step({"xs": updates_df(spark, "k BIGINT", [((3,), 0, 1)])}, upto=1)
    before = (runner.frontier, runner.steps, outputs_rows(runner, ["copies"]))
    with pytest.raises(StepError, match=rf"step 2 refused, nothing changed: output 'copies' "
                                        rf"has more than 3 changes \(rule: {OUTPUT_RECORDS_KEY}=3"):
        runner.step({"xs": updates_df(spark, "k BIGINT", [((4,), 1, 1)])}, upto=2)
    assert (runner.frontier, runner.steps, outputs_rows(runner, ["copies"])) == before
    with pytest.raises(ConfigError, match="positive integer"):
        Runner(flow, conf={**conf, OUTPUT_RECORDS_KEY: "many"}, spark=spark).step({}, upto=1)


def test_memory_hint():
    assert "spark.driver.memory" in memory_hint(RuntimeError("java.lang.OutOfMemoryError: Java heap space"))
    assert memory_hint(RuntimeError("key not found")) == ""
