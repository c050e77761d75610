# The set-up commands of README.md.
#   make run            installs dependencies, builds Release and writes the report to report/
#   make test           installs dependencies, builds Release, runs ctest and pytest (the check a
#                       change must pass; under 8 minutes on 2 cores)
#   make test-sanitize  the ASan + UBSan build and every test that runs under it (its own target,
#                       as its own CI step: about three times the Release build's time)
#   make lint           clang-tidy with the checked-in .clang-tidy over every project source, and
#                       the clang-format check (scripts/lint)
# .ci/run runs test, test-sanitize and lint, one line each: "ci: make <target> took N s".
.PHONY: run test test-sanitize lint deps build build-asan bench format clean

JOBS ?= 2
BIN := build/release/posenc

deps:
	scripts/install-deps

build: deps
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS)

build-asan: deps
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS)

# The main job: measure speed against this machine's limits, train the quick lab comparison and
# the quick context-extension table (on the Jane Austen corpus), then write the report that
# renders them alongside the worked examples and checks.
run: build
	mkdir -p report
	$(BIN) bench --out report/bench.json
	$(BIN) lab --quick --out report/lab
	scripts/get-corpus
	$(BIN) lab --preset extend --quick --out report/extend
	$(BIN) report --out report/

# The Python tests run against the Release build's package (build/release/python/posenc) with
# Debian's interpreter, which has NumPy, PyTorch and pytest.
PYTHON := /usr/bin/python3

test: build
	ctest --preset release
	PYTHONPATH=build/release/python POSENC_BIN=$(abspath $(BIN)) $(PYTHON) -m pytest -q tests/python

test-sanitize: build-asan
	ctest --preset asan

lint: deps
	scripts/lint

bench: build
	scripts/install-bench-deps
	$(BIN) bench
	/usr/bin/python3 bench/compare_torch.py --posenc $(BIN)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf build report
