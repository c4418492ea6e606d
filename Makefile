# prexid — every target creates .venv and installs what it needs, so each works on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The editable install is a tree of links to each file (setuptools' strict mode: the only one mypy can
# follow for a package-dir mapping), so adding or removing a module reinstalls.
STAMP := $(VENV)/.installed-$(shell (cat pyproject.toml; find service detectors -name '*.py' -o -name 'py.typed' | sort) | sha1sum | cut -c1-12)

.PHONY: help venv demo test unit lint typecheck evaluate evaluate-matrix kafka-start kafka-stop kube-build clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,plot,river,k8s]' --config-settings editable_mode=strict
	rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP) ## create .venv with prexid and its dev tools

demo: $(STAMP) ## run the embedded demo cluster (no Kafka needed); serves http://127.0.0.1:8000
	$(BIN)/prexid demo --duration $${DURATION:-60}

lint: $(STAMP) ## ruff (including the detectors/ purity rule)
	$(BIN)/ruff check service detectors tests deploy
	$(BIN)/ruff format --check service detectors tests deploy

typecheck: $(STAMP) ## mypy --strict on service/, detectors/ and the deploy/ generators
	$(BIN)/mypy
	$(BIN)/mypy --strict deploy/gen_rules.py deploy/gen_dashboard.py deploy/tools.py

unit: $(STAMP) ## unit tests only (no external services)
	$(BIN)/pytest -m "not integration"

test: lint typecheck ## the whole suite: lint, types, unit and real-broker integration tests
	$(BIN)/pytest

evaluate: $(STAMP) ## simulate 7 days of a 63x8 cluster, replay prexid and the baselines, write runs/d7/report
	$(BIN)/prexid simulate --out runs/d7 --days $${DAYS:-7}
	$(BIN)/prexid replay runs/d7 --out runs/d7/alerts.jsonl --baselines
	$(BIN)/prexid evaluate --alerts runs/d7/alerts.jsonl --labels runs/d7/labels.jsonl --report runs/d7/report

# evaluate-matrix: small by default; override e.g. `make evaluate-matrix NODES=16 HOURS=48 REPORT_SEEDS="100 101"`
MATRIX_OUT ?= runs/matrix
NODES ?= 8
HOURS ?= 12
FAILURES_PER_DAY ?= 24
MATRIX_ARGS = --out $(MATRIX_OUT) --nodes $(NODES) --hours $(HOURS) --failures-per-day $(FAILURES_PER_DAY) \
	$(if $(TUNE_VARIANTS),--tune-variants "$(TUNE_VARIANTS)") $(if $(TUNE_SEEDS),--tune-seeds "$(TUNE_SEEDS)") \
	$(if $(REPORT_VARIANTS),--report-variants "$(REPORT_VARIANTS)") \
	$(if $(REPORT_SEEDS),--report-seeds "$(REPORT_SEEDS)")

evaluate-matrix: $(STAMP) ## simulator variants x seeds through prexid and the baselines; worst case first in $(MATRIX_OUT)/report.md
	$(BIN)/prexid matrix $(MATRIX_ARGS)

kafka-start: ## start the local single-node Kafka broker (KRaft) on 127.0.0.1:19092
	deploy/kafka/kafka.sh start

kafka-stop: ## stop it
	deploy/kafka/kafka.sh stop

kube-build: ## build kube-apiserver and etcd (quarantine tests) from the Go module proxy into deploy/k8s/.cache/bin
	deploy/k8s/build.sh

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
