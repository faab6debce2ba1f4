# Batchcast top-level entry points. On a fresh Debian 12 machine, as root:
#   make demo    installs what is needed, builds, and runs the main demo
#   make test    installs what is needed, builds, and runs the whole test suite, then `sanitize`
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

.PHONY: deps configure build demo test bench install clean soak sanitize tsan asan fuzz fuzz-ci \
        test-repeat device-bundle device-bundle-check

deps:
	@bash scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=$(UNITY) $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: deps
	@$(MAKE) --no-print-directory build
	bash scripts/demo.sh $(BUILD)

# The sanitizer runs and the short fuzzing step follow the normal suite even when it failed;
# any of them failing fails `test`. scripts/test_all.sh builds the sanitizer trees and the fuzz
# targets in the background at the lowest CPU priority (nice 19) while the normal suite runs,
# and runs each tree's tests as soon as that tree and the suite are done (docs/testing.md).
# Build output goes to $(BUILD)/sanitizer-builds.log, printed when a build fails.
test: deps
	@$(MAKE) --no-print-directory build
	@status=0; SANITIZE_JOBS=$(SANITIZE_JOBS) FUZZ_CI_SECONDS=$(FUZZ_CI_SECONDS) \
	  bash scripts/test_all.sh $(BUILD) $(BUILD_TSAN) $(BUILD_ASAN) $(BUILD_FUZZ) || status=1; \
	CHECK_TORCH=$(TEST_DEVICE_TORCH) $(MAKE) --no-print-directory device-bundle-check || status=1; \
	exit $$status

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
device-bundle: deps
	@$(MAKE) --no-print-directory configure
	JOBS=$(JOBS) bash scripts/device_bundle.sh $(BUILD)

device-bundle-check: device-bundle
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
	rm -rf $(BUILD) $(BUILD_TSAN) $(BUILD_ASAN) $(BUILD_FUZZ)
