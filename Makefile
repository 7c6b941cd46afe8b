# The two commands of the README, on a fresh Debian 12 machine as root:
#   make run   installs missing packages, builds, and starts `sandboxd serve` with the embedded
#              defaults (127.0.0.1:8080); it prints a token and how to call the API
#   make test  installs, builds, runs every test (format, unit, integration, both normally and
#              under ASan + UBSan, the hostile suite, integration and hostile again on cgroup v2
#              under user-mode-linux and (a cgroup subset) under qemu, the hostile classes
#              Landlock defends against with Landlock left out, the fuzz harnesses for 10 s
#              each, then the leak audit)
# Plain `make` builds build/sandboxd and build/sandboxd-api. `make fuzz` runs each libFuzzer
# harness (tests/fuzz) for FUZZ_SECONDS; it builds them with clang in build-fuzz.

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
MESON      ?= meson
NINJA      ?= ninja
PYTEST     ?= /usr/bin/python3 -m pytest

.PHONY: all deps build asan fuzz-build fuzz run demo test test-packages unit integration hostile \
	uml qemu \
	format-check leak-audit bench clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	$(MESON) setup $(BUILD) --buildtype=debugoptimized

$(ASAN_BUILD)/build.ninja: | deps
	$(MESON) setup $(ASAN_BUILD) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

# libFuzzer exists only in clang; the fuzz option instruments every library (meson.build).
$(FUZZ_BUILD)/build.ninja: | deps
	CC=clang $(MESON) setup $(FUZZ_BUILD) -Dfuzz=true -Db_lundef=false

build: deps $(BUILD)/build.ninja
	$(NINJA) -C $(BUILD)

asan: deps $(ASAN_BUILD)/build.ninja
	$(NINJA) -C $(ASAN_BUILD)

fuzz-build: deps $(FUZZ_BUILD)/build.ninja
	$(NINJA) -C $(FUZZ_BUILD) fuzzers

fuzz: fuzz-build
	./tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

run: build
	$(BUILD)/sandboxd serve

demo: build
	./scripts/demo.sh $(BUILD)/sandboxd

unit: build
	$(MESON) test -C $(BUILD) --print-errorlogs

integration: build test-packages
	SANDBOXD=$(abspath $(BUILD)/sandboxd) $(PYTEST) -q tests/integration

hostile: build
	/usr/bin/python3 tests/hostile/harness.py --sandboxd $(abspath $(BUILD)/sandboxd) \
		--report $(BUILD)/hostile-report.json

# The integration tests and the hostile suite on a pure cgroup v2 hierarchy, Linux 6.1 without
# Landlock: Debian's user-mode-linux kernel, booted as an ordinary process (tests/uml/run.sh).
uml: build
	BUILD=$(BUILD) ./tests/uml/run.sh

# The cgroup subset of both on pure cgroup v2 under qemu's software emulation (no KVM needed),
# Debian's own amd64 Linux 6.1 with a 9p root (tests/qemu/run.sh): where UML cannot run.
qemu: build
	BUILD=$(BUILD) ./tests/qemu/run.sh

format-check: deps
	./tests/style/check-format.sh

leak-audit:
	/usr/bin/python3 scripts/leak_audit.py

# The npm packages the tests run (tests/compat) come from their lock file.
test-packages: deps
	./scripts/install-test-packages.sh

# The fuzz build is configured here and built by scripts/test.sh, beside its UML stage.
test: build asan test-packages $(FUZZ_BUILD)/build.ninja
	FUZZ_BUILD=$(FUZZ_BUILD) NINJA=$(NINJA) ./scripts/test.sh

bench: build
	./scripts/install-deps.sh --bench
	./bench/exec_latency.sh $(BUILD)/sandboxd
	./bench/peers.sh $(BUILD)/sandboxd
	/usr/bin/python3 bench/sessions.py --sandboxd $(BUILD)/sandboxd --rounds 300 \
		--plot-rounds 30 --out bench/results/sessions.md
	/usr/bin/python3 bench/batches.py --sandboxd $(BUILD)/sandboxd --rounds 3 --singles 200 \
		--out bench/results/batches.md
	/usr/bin/python3 bench/fleet.py --sandboxd $(BUILD)/sandboxd --rounds 300 --clients 8 \
		--seconds 10 --out bench/results/fleet.md

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
