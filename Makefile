# Batchcast top-level entry points. On a fresh Debian 12 machine, as root:
#   make demo    installs what is needed, builds, and runs the main demo
#   make test    installs what is needed, builds, and runs the whole test suite, then `sanitize`
#   make sanitize  the unit and service tests under ThreadSanitizer and ASan+UBSan (docs/testing.md)
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
B ?= decode
# Sanitizer builds (scripts/sanitize.sh): own build dirs, at most 2 jobs (shared 2-core machines).
BUILD_TSAN ?= build-tsan
BUILD_ASAN ?= build-asan
SANITIZE_JOBS ?= 2

.PHONY: deps configure build demo test bench install clean soak sanitize tsan asan

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

# The sanitizer runs follow the normal suite even when it failed; either failing fails `test`.
# While the normal suite runs, both sanitizer trees are built in the background at the lowest
# CPU priority (nice 19): they take only the CPU the tests leave idle (waiting on daemons,
# heartbeats, mpirun), so the tests see no more load than a busy node gives them and the
# builds cost little wall time. Their output goes to $(BUILD)/sanitizer-builds.log, printed
# when a build fails.
test: deps
	@$(MAKE) --no-print-directory build
	@status=0; \
	( JOBS=$(SANITIZE_JOBS) nice -n 19 bash scripts/sanitize.sh thread $(BUILD_TSAN) --build-only && \
	  JOBS=$(SANITIZE_JOBS) nice -n 19 bash scripts/sanitize.sh address $(BUILD_ASAN) --build-only \
	) > $(BUILD)/sanitizer-builds.log 2>&1 & bg=$$!; \
	bash scripts/test.sh $(BUILD) || status=1; \
	if ! wait $$bg; then cat $(BUILD)/sanitizer-builds.log; status=1; fi; \
	$(MAKE) --no-print-directory sanitize || status=1; \
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
	rm -rf $(BUILD) $(BUILD_TSAN) $(BUILD_ASAN)
