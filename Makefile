# The two commands of the README:
#   make demo   set up, run the main job on the bundled sample captures, print a summary
#   make test   set up (system packages, venv) and run every test (Rust and Python)
.PHONY: demo test setup setup-test system-deps rust-test py-test clean

VENV := .venv
PY := $(VENV)/bin/python
DEMO_OUT := demo-out

setup:
	scripts/setup-venv.sh

setup-test: system-deps
	scripts/setup-venv.sh test

system-deps:
	scripts/install-system-deps.sh
	scripts/install-lab-deps.sh
	CARGO_JOBS=2 scripts/install-agent-deps.sh

demo: setup
	rm -rf $(DEMO_OUT)
	$(VENV)/bin/tailscope analyze samples --out $(DEMO_OUT)
	$(VENV)/bin/tailscope db $(DEMO_OUT) -e "SELECT protocol, count(*) AS flows, sum(packets) AS packets, round(avg(duration_ns)/1e6, 1) AS avg_duration_ms FROM flows GROUP BY protocol ORDER BY flows DESC"

test: setup-test rust-test py-test

rust-test:
	cargo test --workspace --exclude tailscope-native -q

py-test:
	$(PY) -m pytest -q -n 2 --dist loadgroup

clean:
	rm -rf $(VENV) target build $(DEMO_OUT)
