#!/bin/sh
# Installs the Debian packages sandboxd needs to build, test and benchmark.
# Idempotent and quiet when everything is present: `make` calls it every time.
#
# usage: scripts/install-deps.sh [--bench]
#   --bench   also the peers and load tools that only `make bench` uses (bench/peers.sh)
set -eu

PACKAGES="
  build-essential pkg-config meson ninja-build clang-format
  clang libclang-rt-14-dev
  libmicrohttpd-dev libjansson-dev libseccomp-dev libcap-dev libsqlite3-dev
  libpq-dev libinih-dev libssl-dev libcurl4-openssl-dev libcmocka-dev
  python3 python3-pytest python3-requests python3-jsonschema
  bash coreutils procps iproute2 util-linux
  bubblewrap
  python3-matplotlib
  user-mode-linux
"

# python3-matplotlib: a runtime of the sandbox (DESIGN.md: sessions plot with it), and what
# tests/integration/test_programs.py draws a PNG with inside one. user-mode-linux: Linux 6.1 as
# an ordinary process, for the `make test` stage that runs the tests on a pure cgroup v2
# hierarchy without Landlock (tests/uml; no KVM needed).
#
# Only the benchmark needs these: the sandboxes it compares sandboxd against (firejail, crun,
# gVisor's runsc, bubblewrap above), a local Jupyter kernel (bench/sessions.py compares a session
# cell with one) and the load/timing tools. Kept out of the default list so that building and
# testing do not pull in container runtimes.
BENCH_PACKAGES="
  firejail crun runsc wrk hyperfine linux-perf python3-ipykernel python3-jupyter-client
"

case "${1:-}" in
  --bench) PACKAGES="$PACKAGES $BENCH_PACKAGES" ;;
  "") ;;
  *) echo "usage: $0 [--bench]" >&2; exit 64 ;;
esac

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages:$missing (run as root to install them)" >&2
  exit 1
fi
echo "install-deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
