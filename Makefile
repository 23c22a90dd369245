# diffspark: `make test` is the test command (CI runs it through .ci/run).
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

# The stamp is rebuilt (pip install re-run) only when requirements.txt changes.
$(VENV)/.installed: requirements.txt | java
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

demo: venv
	$(PY) -m executor demo

test: venv
	$(PY) -m pytest -q

bench: venv
	$(PY) benchmarks/linear.py
