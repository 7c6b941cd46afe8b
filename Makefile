# The two commands of the README, on a fresh Debian 12 machine as root:
#   make run   installs missing packages, builds, and starts `sandboxd serve` with the embedded
#              defaults (127.0.0.1:8080); it prints a token and how to call the API
#   make test  installs, builds, runs every test (format, unit, integration, both normally and
#              under ASan + UBSan, then the leak audit)
# Plain `make` builds build/sandboxd and build/sandboxd-api.

BUILD      ?= build
ASAN_BUILD ?= build-asan
MESON      ?= meson
NINJA      ?= ninja
PYTEST     ?= /usr/bin/python3 -m pytest

.PHONY: all deps build asan run demo test unit integration hostile format-check leak-audit bench clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	$(MESON) setup $(BUILD) --buildtype=debugoptimized

$(ASAN_BUILD)/build.ninja: | deps
	$(MESON) setup $(ASAN_BUILD) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

build: deps $(BUILD)/build.ninja
	$(NINJA) -C $(BUILD)

asan: deps $(ASAN_BUILD)/build.ninja
	$(NINJA) -C $(ASAN_BUILD)

run: build
	$(BUILD)/sandboxd serve

demo: build
	./scripts/demo.sh $(BUILD)/sandboxd

unit: build
	$(MESON) test -C $(BUILD) --print-errorlogs

integration: build
	SANDBOXD=$(abspath $(BUILD)/sandboxd) $(PYTEST) -q tests/integration

hostile: build
	/usr/bin/python3 tests/hostile/harness.py --sandboxd $(abspath $(BUILD)/sandboxd) \
		--report $(BUILD)/hostile-report.json

format-check: deps
	./tests/style/check-format.sh

leak-audit:
	./scripts/leak-audit.sh

test: build asan
	./scripts/test.sh

bench: build
	./bench/exec_latency.sh $(BUILD)/sandboxd

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
