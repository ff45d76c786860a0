# The two commands of the README:
#   make demo   set up, run the main job on the bundled sample captures, print a summary
#   make test   set up (system packages, venv) and run every test (Rust and Python)
.PHONY: demo test setup setup-test system-deps rust-lint rust-test py-test fuzz-ci lab-pool clean

VENV := .venv
PY := $(VENV)/bin/python
DEMO_OUT := demo-out
DEMO_WEEK := demo-week
FIXTURE := tests/fixtures/enrichment

setup:
	scripts/setup-venv.sh

setup-test: system-deps
	scripts/setup-venv.sh test

system-deps:
	scripts/install-system-deps.sh
	scripts/install-lab-deps.sh
	CARGO_JOBS=2 scripts/install-agent-deps.sh
	scripts/install-report-deps.sh
	scripts/install-java.sh

demo: setup
	rm -rf $(DEMO_OUT) $(DEMO_WEEK)
	$(PY) scripts/make-demo-week.py --out $(DEMO_WEEK)
	$(VENV)/bin/tailscope analyze $(DEMO_WEEK)/captures --out $(DEMO_OUT) --site ams1 \
	  --prefixes $(DEMO_WEEK)/prefixes.csv --sessions $(DEMO_WEEK)/sessions.csv --regions $(DEMO_WEEK)/regions.csv
	$(VENV)/bin/tailscope db --build-only $(DEMO_OUT)
	$(VENV)/bin/tailscope stats $(DEMO_OUT) --by week
	$(VENV)/bin/tailscope report $(DEMO_OUT) --out $(DEMO_OUT)/report
	@echo "open $(DEMO_OUT)/report/report-2026-W47.html (the weekly report); tailscope db $(DEMO_OUT) for SQL"

test: setup-test rust-lint rust-test py-test fuzz-ci

rust-test:
	cargo test --workspace --exclude tailscope-native -q

# rustfmt.toml's layout and no clippy warning (rustup's components; fetched when missing).
rust-lint:
	scripts/rust-lint.sh

# The lab runs real stacks through a userspace emulator: its timing suffers when other tests
# share the two cores, so it runs on its own after the rest.
py-test:
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not lab"
	$(PY) -m pytest -q -m "lab and not lab_targets"

# A larger randomized lab pool than CI's, by hand (root; tests/lab/pool.py): SEEDS=1-200 keeps its
# table in $(LAB_POOL_OUT)/pool-table.txt for docs/accuracy.md.
SEEDS ?= 1-96
LAB_POOL_OUT ?= lab-pool
lab-pool: setup-test
	$(PY) -m tests.lab.pool --seeds $(SEEDS) --out $(LAB_POOL_OUT)

# Bounded fuzz run (~2 minutes plus the build; fuzz/README.md). FUZZ_SECONDS=N per target.
fuzz-ci:
	scripts/fuzz-ci.sh

clean:
	rm -rf $(VENV) target fuzz/target build $(DEMO_OUT) $(DEMO_WEEK)
