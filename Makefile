# Batchcast top-level entry points. On a fresh Debian 12 machine, as root:
#   make demo    installs what is needed, builds, and runs the main demo
#   make test    installs what is needed, builds, and runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
B ?= decode

.PHONY: deps configure build demo test bench install clean soak

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

# The protocol test's soak (issue 14): SOAK_SEEDS random schedules per producer, starting
# at SOAK_FIRST; a failure prints the seed and the command that replays it.
SOAK_SEEDS ?= 1000
SOAK_FIRST ?= 1
SOAK_PRODUCERS ?= leader service external
soak: deps
	@$(MAKE) --no-print-directory configure
	cmake --build $(BUILD) -j $(JOBS) --target protocol_random
	@rc=0; for p in $(SOAK_PRODUCERS); do \
	  $(BUILD)/tests/protocol/protocol_random --producer $$p --first $(SOAK_FIRST) \
	    --seeds $(SOAK_SEEDS) --keep-going || rc=1; \
	done; exit $$rc

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
