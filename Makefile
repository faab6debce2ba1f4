# Batchcast top-level entry points. On a fresh Debian 12 machine, as root:
#   make demo    installs the Debian packages, builds what the demo runs, and runs the main demo
#   make test    installs what is needed (make deps: the Debian packages and the torch 2 venv),
#                builds, runs the whole test suite, the second PyTorch generation's tests,
#                then `sanitize` and `fuzz-ci`
#   make deps    the Debian packages (scripts/deps.sh) and the torch 2.x + numpy 2 venv
#                (scripts/torch2_venv.sh; docs/python.md "Supported versions")
#   make sanitize  the unit and service tests under ThreadSanitizer and ASan+UBSan (docs/testing.md)
#   make fuzz    each libFuzzer target for FUZZ_SECONDS (default 600) (docs/testing.md)
#   make test-repeat N=20 LABEL=mpi   a ctest label N times, failures per test (LOAD=1: one core busy)
#   make device-bundle        the GPU proof bundle in device/bundle (docs/gpu.md)
#   make device-bundle-check  that bundle run here in a stripped root (part of make test)
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The build tree compiles each target's .cc files in batches (CMake's unity build): 382 s
# instead of about 550 s for a fresh tree on 2 cores (docs/testing.md "Wall time"). UNITY=OFF
# for file-by-file builds while editing one file.
UNITY ?= ON
# Debug information of a tree the Makefile configures (CMake option BATCHCAST_DEBUG_INFO):
# lines (-g1: backtraces, perf and sanitizer reports keep file:line; about 30% less compile
# CPU than -g), full (-g, for a debugger: make build DEBUG_INFO=full in a fresh BUILD dir) or
# none (-g0). A tree that `make test` configures gets TEST_DEBUG_INFO (none: half the CPU of
# -g, for CI's 20-minute budget; docs/testing.md "Session 11"); an existing tree is kept as it is.
DEBUG_INFO ?= lines
TEST_DEBUG_INFO ?= none
# Whether `all` builds every benchmark (CMake option BATCHCAST_BENCHMARKS_IN_ALL). A tree that
# `make test` configures gets TEST_BENCHMARKS_IN_ALL (OFF: only the GPU proof bundle's three;
# compiling the other seven, which no test runs, cost 35 CPU-s of CI's budget; the test
# benchmarks_syntax compiles them syntax only); make bench builds the one it runs either way.
BENCHMARKS_IN_ALL ?= ON
TEST_BENCHMARKS_IN_ALL ?= OFF
# The second PyTorch generation's tree (scripts/torch2_tree.sh); TORCH2=OFF leaves it out.
BUILD_TORCH2 ?= build-torch2
TORCH2 ?= ON
# ccache (scripts/deps.sh installs it) for every tree the Makefile configures: the torch 2
# tree then reuses the main tree's module objects even from an empty cache (same flags; the
# base directory and no hashed build directory make the two trees' objects one). Sharing
# objects needs nothing else; CCACHE_DISABLE=1 turns it off.
ifneq ($(shell command -v ccache 2>/dev/null),)
CMAKE_LAUNCHERS := -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
                   -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1
endif
B ?= decode
# Sanitizer builds (scripts/sanitize.sh): own build dirs, at most 2 jobs (shared 2-core machines).
BUILD_TSAN ?= build-tsan
BUILD_ASAN ?= build-asan
SANITIZE_JOBS ?= 2
# libFuzzer targets (scripts/fuzz.sh): own build dir with clang; `test` fuzzes each briefly.
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_CI_SECONDS ?= 8
# test-repeat: a label N times (scripts/test_repeat.sh).
N ?= 20
LABEL ?= mpi
LOAD ?= 0

.PHONY: deps deps-debian configure build demo test bench install clean soak sanitize tsan asan \
        fuzz fuzz-ci test-repeat torch2 device-bundle device-bundle-check

deps: deps-debian
	@if [ "$(TORCH2)" != OFF ]; then bash scripts/torch2_venv.sh; fi

deps-debian:
	@bash scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=$(UNITY) \
	  -DBATCHCAST_DEBUG_INFO=$(DEBUG_INFO) -DBATCHCAST_BENCHMARKS_IN_ALL=$(BENCHMARKS_IN_ALL) \
	  $(CMAKE_LAUNCHERS) $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Only what the demo runs (CMake target demo: the library, the CLI, the demo trainer and the
# Python package), not the tests and benchmarks; `make test` builds the rest in the same tree.
demo: deps-debian
	@$(MAKE) --no-print-directory configure
	cmake --build $(BUILD) -j $(JOBS) --target demo
	bash scripts/demo.sh $(BUILD)

# The sanitizer runs and the short fuzzing step follow the normal suite even when it failed;
# any of them failing fails `test`. scripts/test_all.sh builds the sanitizer trees and the fuzz
# targets in the background at the lowest CPU priority (nice 19) while the normal suite runs,
# and runs each tree's tests as soon as that tree and the suite are done (docs/testing.md).
# Build output goes to $(BUILD)/sanitizer-builds.log, printed when a build fails.
# The project's own test runs build with warnings as errors (BATCHCAST_WERROR=ON, whatever
# CI sets): a user's make demo, cmake or pip install never does (docs/testing.md).
# The torch 2 venv (about 3.5 GB from PyPI, mostly waiting on the network) is created in the
# background while the main tree builds; the torch 2 tree's build waits for it (a lock in
# scripts/torch2_venv.sh). Each phase prints its wall time ("make test: ... s"); the last lines
# summarise every step (ok, or FAILED with its failed tests) for a reader of the tail.
test: deps-debian
	@start=$$(date +%s); mkdir -p $(BUILD); \
	if [ "$(TORCH2)" != OFF ]; then bash scripts/torch2_venv.sh >$(BUILD)/torch2-venv.log 2>&1 & fi; \
	$(MAKE) --no-print-directory configure DEBUG_INFO=$(TEST_DEBUG_INFO) \
	  BENCHMARKS_IN_ALL=$(TEST_BENCHMARKS_IN_ALL) && \
	cmake -DBATCHCAST_WERROR=ON $(BUILD) >/dev/null && \
	$(MAKE) --no-print-directory build || exit 1; \
	echo "make test: main tree built at $$(( $$(date +%s) - start )) s"; \
	( CHECK_TORCH=$(TEST_DEVICE_TORCH) $(MAKE) --no-print-directory device-bundle-check \
	    >$(BUILD)/device-bundle-check.log 2>&1; \
	  echo "$$? $$(( $$(date +%s) - start ))" >$(BUILD)/device-bundle-check.rc ) & device_pid=$$!; \
	status=0; TEST_ALL_OFFSET=$$(( $$(date +%s) - start )) \
	  SANITIZE_JOBS=$(SANITIZE_JOBS) FUZZ_CI_SECONDS=$(FUZZ_CI_SECONDS) TORCH2=$(TORCH2) \
	  bash scripts/test_all.sh $(BUILD) $(BUILD_TSAN) $(BUILD_ASAN) $(BUILD_FUZZ) $(BUILD_TORCH2) \
	  || status=1; \
	echo "make test: suite, torch 2, sanitizers and fuzzing done at $$(( $$(date +%s) - start )) s"; \
	wait $$device_pid; read device_rc device_at <$(BUILD)/device-bundle-check.rc; \
	echo "=== the device bundle check (beside the suite, from the main tree's build on) ==="; \
	tail -n 40 $(BUILD)/device-bundle-check.log; \
	[ "$$device_rc" = 0 ] && device=ok || { device="FAILED (exit $$device_rc; $(BUILD)/device-bundle-check.log)"; status=1; }; \
	echo "make test: device bundle checked at $$device_at s (exit $$device_rc)"; \
	echo "=== make test: summary ==="; cat $(BUILD)/test-summary.txt 2>/dev/null; \
	echo "make test: the device bundle check: $$device (at $$device_at s)"; \
	echo "make test: $$( [ $$status = 0 ] && echo PASSED || echo FAILED ) in $$(( $$(date +%s) - start )) s"; \
	exit $$status

# The second PyTorch generation alone: its tree (torch_tests) and its `torch`-labelled tests.
torch2: deps
	JOBS=$(JOBS) MAIN_BUILD=$(BUILD) bash scripts/torch2_tree.sh build $(BUILD_TORCH2)
	bash scripts/torch2_tree.sh test $(BUILD_TORCH2)

# Both sanitizers, each in its own build dir; the second runs even when the first fails.
sanitize: deps
	@status=0; \
	$(MAKE) --no-print-directory tsan || status=1; \
	$(MAKE) --no-print-directory asan || status=1; \
	exit $$status

tsan:
	JOBS=$(SANITIZE_JOBS) bash scripts/sanitize.sh thread $(BUILD_TSAN)

asan:
	JOBS=$(SANITIZE_JOBS) bash scripts/sanitize.sh address $(BUILD_ASAN)

# Each libFuzzer target for FUZZ_SECONDS after replaying its corpus (FUZZ_TARGETS to pick).
fuzz: deps
	JOBS=$(SANITIZE_JOBS) FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh run $(BUILD_FUZZ)

# The CI step of `make test`: replay the corpus, fuzz each target FUZZ_CI_SECONDS.
fuzz-ci:
	JOBS=$(SANITIZE_JOBS) FUZZ_CI_SECONDS=$(FUZZ_CI_SECONDS) bash scripts/fuzz.sh ci $(BUILD_FUZZ)

test-repeat: deps
	@$(MAKE) --no-print-directory build
	LOAD=$(LOAD) bash scripts/test_repeat.sh $(BUILD) $(LABEL) $(N)

# The GPU proof (docs/gpu.md "Running the proof on the GPU machine"). device-bundle packs the
# CUDA build's test and benchmark programs and everything they load that the GPU machine lacks
# into device/bundle (ignored; the device tool carries it); device-bundle-check runs that bundle
# here in a root stripped of what the GPU machine lacks (CPU items pass, device items skip).
# make test runs the check without the torch 2.11 compiles (TEST_DEVICE_TORCH=1 adds them).
TEST_DEVICE_TORCH ?= 0
# BUNDLE_XZ: the payload's xz level; the check packs at 1 (a few MiB larger, a tenth of the
# CPU: make test's time budget), the bundle for the device at 6 (the carry limit is 64 MiB).
BUNDLE_XZ ?= 6
device-bundle: deps-debian
	@$(MAKE) --no-print-directory configure
	JOBS=$(JOBS) BUNDLE_XZ=$(BUNDLE_XZ) bash scripts/device_bundle.sh $(BUILD)

device-bundle-check:
	@$(MAKE) --no-print-directory device-bundle BUNDLE_XZ=1
	bash scripts/device_bundle_check.sh $(BUILD)

bench: deps
	@$(MAKE) --no-print-directory build
	bash benchmarks/run.sh $(BUILD) $(B)

# The protocol test's soak (issue 14): SOAK_SEEDS random schedules per producer, starting
# at SOAK_FIRST; a failure prints the seed and the command that replays it.
SOAK_SEEDS ?= 1000
SOAK_FIRST ?= 1
SOAK_PRODUCERS ?= leader service external multinode
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
	rm -rf $(BUILD) $(BUILD_TSAN) $(BUILD_ASAN) $(BUILD_FUZZ) $(BUILD_TORCH2)
