# diffspark: `make test` is the test command (CI runs it through .ci/run, with the slow tests
# too: make test PYTEST_MARK="slow or not slow").
# Needs Python 3.11 and Java 17 (CPU machines; GPU clusters use environment.yml).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: venv demo test bench java

venv: $(VENV)/.installed

# Spark 4 runs on the JVM: say so before a long pip install, not at the first test.
java:
	@if [ -n "$$JAVA_HOME" ] && [ -x "$$JAVA_HOME/bin/java" ]; then :; \
	elif command -v java >/dev/null 2>&1; then :; \
	else echo "diffspark needs Java 17: 'java' not found on PATH and JAVA_HOME unset;" \
	     "install OpenJDK 17 (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; fi

# The pinned runtime and test requirements, then diffspark itself (editable: the checkout is
# what runs; `diffspark` lands in .venv/bin). The stamp is rebuilt (pip install re-run) only
# when a requirement file or pyproject.toml changes.
$(VENV)/.installed: requirements.txt requirements-test.txt pyproject.toml | java
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-test.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

# The flagship job: triangles of a real SNAP graph (shared/ beside the clone; else an R-MAT
# graph is generated) maintained under random edge insertions and deletions.
DEMO_GRAPH ?= $(firstword $(wildcard ../shared/data/facebook_combined.txt) /tmp/diffspark-rmat-50k.txt)

demo: venv
	test -f $(DEMO_GRAPH) || $(PY) -m benchmarks.rmat --edges 50000 --seed 1 --out $(DEMO_GRAPH)
	$(PY) -m executor triangles --edges $(DEMO_GRAPH) --stream 3 --batch 200

# PYTEST_MARK selects the tests: "not slow" (the fast suite, for development) unless given;
# "slow or not slow" runs them all. pytest's exit status 5 (no test selected) is a failure,
# said as such.
PYTEST_MARK ?= not slow

test: venv
	@echo "$(PY) -m pytest -q -m \"$(PYTEST_MARK)\" --durations=40"; \
	rc=0; $(PY) -m pytest -q -m "$(PYTEST_MARK)" --durations=40 || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no test matches PYTEST_MARK=\"$(PYTEST_MARK)\"" >&2; fi; \
	exit $$rc

bench: venv
	$(PY) benchmarks/linear.py
