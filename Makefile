# The two set-up commands of README.md.
#   make run   installs dependencies, builds Release and writes the report to report/
#   make test  installs dependencies, builds and runs every test (release, then asan)
.PHONY: run test deps build build-asan bench format clean

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
	$(MAKE) build-asan
	ctest --preset asan

bench: build
	scripts/install-bench-deps
	$(BIN) bench
	/usr/bin/python3 bench/compare_torch.py --posenc $(BIN)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf build report
