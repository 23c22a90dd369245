"""Profiles in configs/ and executor.runtime.config.load_conf. No Spark is started here."""

from __future__ import annotations

import pytest

from executor.runtime.config import (CONFIGS_DIR, ConfigError, kernel_backend, load_conf,
                                     partitions, profile_path)

JAR = "/opt/sparkRapidsPlugin/rapids-4-spark_2.13-26.06.0.jar"


@pytest.fixture
def jar_env(monkeypatch):
    monkeypatch.setenv("RAPIDS_PLUGIN_JAR", JAR)
    monkeypatch.delenv("SPARK_GPU_DISCOVERY_SCRIPT", raising=False)


@pytest.fixture
def conf_file(tmp_path):
    def write(text: str, name: str = "test.conf"):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


# --- the shipped profiles -------------------------------------------------------------


def test_cpu_profile():
    conf = load_conf("cpu")
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.adaptive.coalescePartitions.enabled"] == "false"
    assert kernel_backend(conf) == "numpy"
    assert partitions(conf) == 8
    assert load_conf() == conf  # cpu is the default


def test_gpu_profile_names_plugin_resources_and_jar(jar_env):
    conf = load_conf("gpu")
    assert conf["spark.plugins"] == "com.nvidia.spark.SQLPlugin"
    assert conf["spark.rapids.sql.enabled"] == "true"
    assert conf["spark.rapids.sql.explain"] == "NOT_ON_GPU"
    assert conf["spark.rapids.sql.python.gpu.enabled"] == "true"
    assert conf["spark.jars"] == JAR
    assert conf["spark.executorEnv.PYTHONPATH"] == JAR
    # mapInArrow kernels on the GPU: the plugin's Python worker and its GPU memory share
    assert conf["spark.rapids.sql.exec.MapInArrowExec"] == "true"
    assert conf["spark.submit.pyFiles"] == JAR
    python_gpu = float(conf["spark.rapids.python.memory.gpu.maxAllocFraction"])
    assert 0 < float(conf["spark.rapids.python.memory.gpu.allocFraction"]) <= python_gpu
    assert python_gpu + float(conf["spark.rapids.memory.gpu.maxAllocFraction"]) <= 1
    assert float(conf["spark.executor.resource.gpu.amount"]) == 1
    task = float(conf["spark.task.resource.gpu.amount"])
    assert 0 < task <= 1
    # every task slot of an executor can get its share of the GPU
    assert int(conf["spark.executor.cores"]) * task <= 1
    assert conf["spark.executor.resource.gpu.discoveryScript"].endswith("getGpusResources.sh")
    assert conf["spark.rapids.memory.pinnedPool.size"]
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert kernel_backend(conf) == "cupy"
    assert "spark.master" not in conf  # spark-submit or local[*] decides
    assert all("${" not in value for value in conf.values())


def test_gpu_profile_file_names_the_jar_variable():
    text = (CONFIGS_DIR / "gpu.conf").read_text()
    assert "${RAPIDS_PLUGIN_JAR}" in text


def test_gpu_discovery_script_default_and_override(jar_env, monkeypatch):
    assert (
        load_conf("gpu")["spark.executor.resource.gpu.discoveryScript"]
        == "/opt/sparkRapidsPlugin/getGpusResources.sh"
    )
    monkeypatch.setenv("SPARK_GPU_DISCOVERY_SCRIPT", "/x/gpus.sh")
    assert load_conf("gpu")["spark.executor.resource.gpu.discoveryScript"] == "/x/gpus.sh"


def test_gpu_profile_without_jar_variable(monkeypatch):
    monkeypatch.delenv("RAPIDS_PLUGIN_JAR", raising=False)
    with pytest.raises(ConfigError) as err:
        load_conf("gpu")
    message = str(err.value)
    assert "configs/gpu.conf" in message
    assert "spark.jars" in message
    assert "RAPIDS_PLUGIN_JAR" in message
    assert "rapids-4-spark jar" in message


def test_empty_variable_counts_as_unset(monkeypatch):
    monkeypatch.setenv("RAPIDS_PLUGIN_JAR", "")
    with pytest.raises(ConfigError, match="RAPIDS_PLUGIN_JAR"):
        load_conf("gpu")


def test_override_stands_in_for_missing_variable(monkeypatch):
    monkeypatch.delenv("RAPIDS_PLUGIN_JAR", raising=False)
    conf = load_conf(
        "gpu", ["spark.jars=/j.jar", "spark.executorEnv.PYTHONPATH=/j.jar",
                "spark.submit.pyFiles=/j.jar"]
    )
    assert conf["spark.jars"] == "/j.jar"


@pytest.mark.parametrize("name", ["cpu.conf", "gpu.conf", "cluster.conf.template"])
def test_every_profile_keeps_partitioning_stable(name, jar_env):
    conf = load_conf(CONFIGS_DIR / name)
    assert conf["spark.sql.shuffle.partitions"] == str(partitions(conf))
    assert conf["spark.sql.adaptive.coalescePartitions.enabled"] == "false"
    # with AQE on, localCheckpoint() drops an arrangement's partitioning and order
    assert conf["spark.sql.adaptive.enabled"] == "false"
    assert conf["spark.sql.optimizer.canChangeCachedPlanOutputPartitioning"] == "false"
    assert "InferFiltersFromConstraints" in conf["spark.sql.optimizer.excludedRules"]
    # an arrangement checkpointed over dropped aliases declares a partitioning in attributes
    # it does not output (tests/test_arrange.py)
    assert "RemoveRedundantAliases" in conf["spark.sql.optimizer.excludedRules"]
    assert conf["spark.sql.constraintPropagation.enabled"] == "false"  # see cpu.conf
    assert conf["spark.sql.optimizer.runtime.bloomFilter.enabled"] == "false"
    assert conf["spark.api.mode"] == "classic"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    kernel_backend(conf)


def test_cluster_template():
    conf = load_conf(CONFIGS_DIR / "cluster.conf.template")
    assert conf["spark.master"] == "spark://HOST:7077"
    assert conf["spark.executor.memory"]
    assert int(conf["spark.executor.cores"]) > 0


# --- overrides ------------------------------------------------------------------------


def test_overrides_win_and_later_overrides_win_more():
    conf = load_conf(
        "cpu", ["spark.driver.memory=2g", "spark.driver.memory=3g", "spark.new.key=a=b"]
    )
    assert conf["spark.driver.memory"] == "3g"
    assert conf["spark.new.key"] == "a=b"  # only the first '=' separates


def test_dict_overrides():
    conf = load_conf("cpu", {"diffspark.kernel.backend": "auto", "spark.ui.enabled": True})
    assert kernel_backend(conf) == "auto"
    assert conf["spark.ui.enabled"] == "true"


def test_single_string_override():
    assert load_conf("cpu", "spark.driver.memory=1g")["spark.driver.memory"] == "1g"


def test_partitions_override_moves_shuffle_partitions():
    conf = load_conf("cpu", ["diffspark.partitions=12"])
    assert partitions(conf) == 12
    assert conf["spark.sql.shuffle.partitions"] == "12"
    conf = load_conf("cpu", ["diffspark.partitions=12", "spark.sql.shuffle.partitions=5"])
    assert conf["spark.sql.shuffle.partitions"] == "5"


def test_malformed_override():
    with pytest.raises(ConfigError, match="expected key=value"):
        load_conf("cpu", ["spark.driver.memory"])
    with pytest.raises(ConfigError, match="malformed key"):
        load_conf("cpu", ["bad key=1"])


def test_override_variables_expand(monkeypatch):
    monkeypatch.setenv("DIFFSPARK_TEST_MEM", "5g")
    conf = load_conf("cpu", ["spark.driver.memory=${DIFFSPARK_TEST_MEM}"])
    assert conf["spark.driver.memory"] == "5g"
    monkeypatch.delenv("DIFFSPARK_TEST_MEM")
    with pytest.raises(ConfigError, match="--conf: spark.driver.memory needs environment variable DIFFSPARK_TEST_MEM"):
        load_conf("cpu", ["spark.driver.memory=${DIFFSPARK_TEST_MEM}"])


# --- file format ----------------------------------------------------------------------


def test_file_format(conf_file, monkeypatch):
    monkeypatch.setenv("DIFFSPARK_TEST_DIR", "/data")
    path = conf_file(
        "# comment\n"
        "\n"
        "   ! also a comment\n"
        "spark.a   1\n"
        "spark.b=2\n"
        "spark.c: 3\n"
        "spark.d   -Dx=1 -Dy=2  \n"
        "spark.e   ${DIFFSPARK_TEST_DIR}/x:${DIFFSPARK_TEST_UNSET:-fallback}\n"
        "spark.a   4\n"
    )
    conf = load_conf(path)
    assert conf == {
        "spark.a": "4",
        "spark.b": "2",
        "spark.c": "3",
        "spark.d": "-Dx=1 -Dy=2",
        "spark.e": "/data/x:fallback",
    }


@pytest.mark.parametrize(
    "line",
    ["spark.no.value", "spark.empty =", "spark.x ${UNCLOSED", "spark.x a \\", "bad!key value"],
)
def test_malformed_line_names_file_and_line(conf_file, line):
    path = conf_file(f"# header\nspark.ok 1\n{line}\n", name="broken.conf")
    with pytest.raises(ConfigError) as err:
        load_conf(path)
    assert "broken.conf:3" in str(err.value)


def test_missing_variable_in_file_names_file_key_and_variable(conf_file, monkeypatch):
    monkeypatch.delenv("DIFFSPARK_TEST_UNSET", raising=False)
    path = conf_file("spark.local.dir ${DIFFSPARK_TEST_UNSET}\n", name="mine.conf")
    with pytest.raises(
        ConfigError, match="mine.conf: spark.local.dir needs environment variable DIFFSPARK_TEST_UNSET"
    ):
        load_conf(path)


def test_unknown_profile():
    with pytest.raises(ConfigError, match="unknown profile 'tpu'"):
        load_conf("tpu")


def test_profile_path():
    assert profile_path("cpu") == CONFIGS_DIR / "cpu.conf"
    assert profile_path(str(CONFIGS_DIR / "gpu.conf")) == CONFIGS_DIR / "gpu.conf"


# --- validation of our own keys --------------------------------------------------------


@pytest.mark.parametrize("backend", ["numpy", "cupy", "auto", "NumPy"])
def test_backend_accepted(backend):
    assert kernel_backend(load_conf("cpu", [f"diffspark.kernel.backend={backend}"])) == backend.lower()


@pytest.mark.parametrize("backend", ["torch", "gpu", ""])
def test_backend_rejected(backend):
    with pytest.raises(ConfigError, match="diffspark.kernel.backend must be one of numpy, cupy, auto"):
        load_conf("cpu", [f"diffspark.kernel.backend={backend}"])


@pytest.mark.parametrize("value", ["0", "-3", "eight", "2.5", ""])
def test_partitions_rejected(value):
    with pytest.raises(ConfigError, match="diffspark.partitions must be a positive integer"):
        load_conf("cpu", [f"diffspark.partitions={value}"])


def test_accessor_defaults():
    assert kernel_backend({}) == "auto"
    assert partitions({}) == 8
    assert partitions({"diffspark.partitions": 3}) == 3

