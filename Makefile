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

run: build
	$(BIN) report --out report/

test: build
	ctest --preset release
	$(MAKE) build-asan
	ctest --preset asan

bench: build
	$(BIN) bench

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf build report
