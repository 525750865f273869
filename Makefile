# The two entry points of README.md: `make demo` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
DEMO_MODEL ?= examples/small_cnn.py

.PHONY: setup demo test test-py test-rs lint protos

setup:
	scripts/setup.sh

demo: setup
	$(VENV)/bin/kforge optimize $(DEMO_MODEL) --backend cpu --budget 6 --max-cards 4 --out small_cnn.cast
	$(VENV)/bin/packager inspect small_cnn.cast

test: setup lint test-rs test-py

lint:
	$(PY) scripts/gen_protos.py --check
	$(VENV)/bin/ruff check .
	$(PY) -m mypy.stubtest search_core._native

test-rs:
	cd search_core && cargo test --workspace --exclude kf-search-core-py

# Two worker processes (pytest-xdist), each test file on one of them. A test that hangs ends its
# worker and leaves its name and every thread's stack in .pytest-hang-<worker>.txt.
test-py:
	$(PY) -m pytest -q -n 2 --dist loadfile || { status=$$?; cat .pytest-hang*.txt 2>/dev/null; exit $$status; }

protos:
	$(PY) scripts/gen_protos.py
