# Batchcast top-level entry points. On a fresh Debian 12 machine, as root:
#   make demo    installs what is needed, builds, and runs the main demo
#   make test    installs what is needed, builds, and runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
B ?= decode

.PHONY: deps configure build demo test bench install clean

deps:
	@bash scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: deps
	@$(MAKE) --no-print-directory build
	bash scripts/demo.sh $(BUILD)

test: deps
	@$(MAKE) --no-print-directory build
	bash scripts/test.sh $(BUILD)

bench: deps
	@$(MAKE) --no-print-directory build
	bash benchmarks/run.sh $(BUILD) $(B)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
