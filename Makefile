# The two commands of the README, on a fresh Debian 12 machine as root:
#   make run   installs missing packages, builds, runs the main job with the embedded defaults
#   make test  installs, builds, runs every test (unit, integration, hostile, format, sanitizers)
# Plain `make` builds build/sandboxd.

BUILD      ?= build
ASAN_BUILD ?= build-asan
MESON      ?= meson
NINJA      ?= ninja
PYTEST     ?= /usr/bin/python3 -m pytest

.PHONY: all deps build asan run test unit integration format-check leak-audit bench clean

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
	./scripts/demo.sh $(BUILD)/sandboxd

unit: build
	$(MESON) test -C $(BUILD) --print-errorlogs

integration: build
	SANDBOXD=$(abspath $(BUILD)/sandboxd) $(PYTEST) -q tests/integration

format-check: deps
	./tests/style/check-format.sh

leak-audit:
	./scripts/leak-audit.sh

test: build asan
	./tests/style/check-format.sh
	$(MESON) test -C $(BUILD) --print-errorlogs
	$(MESON) test -C $(ASAN_BUILD) --print-errorlogs
	SANDBOXD=$(abspath $(BUILD)/sandboxd) $(PYTEST) -q -p no:cacheprovider tests/integration
	SANDBOXD=$(abspath $(ASAN_BUILD)/sandboxd) SANDBOXD_SANITIZED=1 $(PYTEST) -q -p no:cacheprovider tests/integration
	./scripts/leak-audit.sh

bench: build
	./bench/exec_latency.sh $(BUILD)/sandboxd

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
