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
  python3 python3-pytest python3-requests python3-jsonschema python3-venv
  bash coreutils procps iproute2 util-linux
  bubblewrap
  python3-matplotlib
  user-mode-linux
  qemu-system-x86 busybox-static cpio xz-utils
  nodejs node-typescript golang-go rustc default-jdk-headless
  runsc
  chromium
  postgresql haproxy
"

# python3-venv: tests/integration/test_sdk.py installs the Python SDK (clients/python) into a
# fresh venv with pip, as its users do (offline: the package builds with its own backend).
#
# python3-matplotlib: a runtime of the sandbox (DESIGN.md: sessions plot with it), and what
# tests/integration/test_programs.py draws a PNG with inside one. user-mode-linux: Linux 6.1 as
# an ordinary process, for the `make test` stage that runs the tests on a pure cgroup v2
# hierarchy without Landlock (tests/uml; no KVM needed). qemu-system-x86, busybox-static, cpio:
# the same tests under qemu's software emulation with Debian 12's own kernel (tests/qemu), for
# hosts where UML 6.1 cannot run; busybox and cpio make its initramfs. That guest's kernel is not
# installed on the host (its package would write /boot and run the initramfs hooks): it is
# fetched with apt-get download and unpacked into $SANDBOXD_TEST_CACHE, below.
#
# nodejs, node-typescript, golang-go, rustc, default-jdk-headless (gcc and g++ come with
# build-essential): the toolchains of the languages a request may name (src/model/language.c),
# which the sandbox runs from the host's read-only /usr; tests/integration/test_languages.py
# runs every one.
#
# chromium: the headless browser tests/integration/test_playground.py drives the web playground
# in (through npm playwright-core, tests/compat).
#
# postgresql, haproxy: the fleet's shared store and its load balancer (deploy/). The tests start
# servers of their own (tests/integration/test_fleet.py: a cluster made by initdb in a temp dir,
# HAProxy with deploy/haproxy.cfg, on loopback ports) and stop them; the packages' own services
# are not used (libpq-dev above is the client library the API process links).
#
# runsc: gVisor, the second isolation backend (src/sandbox/gvisor; `--backend gvisor`), which
# tests/integration/test_gvisor.py runs; the benchmark compares sandboxd against it as well.
#
# Only the benchmark needs these: the sandboxes it compares sandboxd against (firejail, crun,
# bubblewrap above), a local Jupyter kernel (bench/sessions.py compares a session
# cell with one) and the load/timing tools. Kept out of the default list so that building and
# testing do not pull in container runtimes.
BENCH_PACKAGES="
  firejail crun wrk hyperfine linux-perf python3-ipykernel python3-jupyter-client
"

case "${1:-}" in
  --bench) PACKAGES="$PACKAGES $BENCH_PACKAGES" ;;
  "") ;;
  *) echo "usage: $0 [--bench]" >&2; exit 64 ;;
esac

# Where the test guests' files live (tests/qemu/run.sh reads the same variable): outside the
# tree, so that a fresh clone or `make clean` does not fetch the kernel again, and in /var/cache
# because it can all be fetched again.
SANDBOXD_TEST_CACHE=${SANDBOXD_TEST_CACHE:-/var/cache/sandboxd-test}

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
# npm installs the peers' own clients that the drop-in API tests run (tests/compat, from its lock
# file: scripts/install-test-packages.sh). Debian's npm, unless a Node.js that brings its own is
# installed (NodeSource's nodejs, which conflicts with Debian's npm package).
if ! command -v npm >/dev/null 2>&1; then
  missing="$missing npm"
fi

# The qemu guest's kernel: Debian 12's generic amd64 flavour (linux-image-amd64 names the current
# version), unpacked into $SANDBOXD_TEST_CACHE/guest-kernel/<version>/: boot/ (vmlinuz, config)
# and only the modules directories the guest's initramfs takes its modules from (virtio, 9p and
# what 9p needs; the whole tree is 400 MB). Not the cloud flavour: it is built without 9p
# (CONFIG_NET_9P is not set), which the guest's root comes through. Fetched once; a newer
# version in the archive does not replace a working one. boot/vmlinux is the kernel unpacked
# from vmlinuz's xz payload: qemu starts that ELF directly (PVH, the kernel has CONFIG_PVH),
# which spares the guest 3.4 s of emulated BIOS and decompression at every boot.
guest_kernel_missing() {
  ! ls "$SANDBOXD_TEST_CACHE"/guest-kernel/*/boot/vmlinux-* >/dev/null 2>&1
}
# The ELF kernel inside a bzImage: the xz stream from its magic on (what the kernel tree's
# scripts/extract-vmlinux does), decompressed; xz stops at the stream's end.
unpack_vmlinux() {
  offset=$(LC_ALL=C grep -abo "$(printf '\3757zXZ')" "$1" | head -n 1 | cut -d: -f1)
  [ -n "$offset" ] && tail -c +"$((offset + 1))" "$1" | xz -dcq >"$2" 2>/dev/null
  # xz complains of the bytes after the stream; what matters is an ELF file.
  [ "$(head -c 4 "$2" | od -An -c | tr -d ' ')" = "177ELF" ]
}
fetch_guest_kernel() {
  package=$(apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1)
  if [ -z "$package" ]; then
    echo "install-deps: apt knows no linux-image-amd64: cannot fetch the qemu guest's kernel" >&2
    return 1
  fi
  mkdir -p "$SANDBOXD_TEST_CACHE/guest-kernel"
  work=$(mktemp -d "$SANDBOXD_TEST_CACHE/guest-kernel/.fetch.XXXXXX") || return 1
  # apt's download sandbox user (_apt) cannot write into a root-only directory: download as root.
  if (cd "$work" && apt-get -qq -o APT::Sandbox::User=root download "$package") &&
    mkdir "$work/tree" &&
    dpkg-deb --fsys-tarfile "$work"/"$package"_*.deb | tar -x -C "$work/tree" --wildcards \
      './boot/*' './lib/modules/*/kernel/drivers/virtio/*' './lib/modules/*/kernel/net/9p/*' \
      './lib/modules/*/kernel/fs/9p/*' './lib/modules/*/kernel/fs/netfs/*' \
      './lib/modules/*/kernel/fs/fscache/*' &&
    unpack_vmlinux "$work/tree/boot/vmlinuz-${package#linux-image-}" \
      "$work/tree/boot/vmlinux-${package#linux-image-}"; then
    # Renamed into place whole: a half-unpacked kernel is never seen as fetched.
    rm -rf "$SANDBOXD_TEST_CACHE/guest-kernel/${package#linux-image-}"
    mv "$work/tree" "$SANDBOXD_TEST_CACHE/guest-kernel/${package#linux-image-}"
    rm -rf "$work"
    echo "install-deps: qemu guest kernel $package in $SANDBOXD_TEST_CACHE/guest-kernel" >&2
  else
    rm -rf "$work"
    echo "install-deps: cannot fetch $package for the qemu guest" >&2
    return 1
  fi
}

[ -z "$missing" ] && ! guest_kernel_missing && exit 0

if [ "$(id -u)" -ne 0 ]; then
  # Only the qemu test stage needs the guest kernel: building does not fail for its lack.
  if guest_kernel_missing; then
    echo "install-deps: no qemu guest kernel in $SANDBOXD_TEST_CACHE (run as root to fetch it)" >&2
  fi
  [ -z "$missing" ] && exit 0
  echo "install-deps: missing packages:$missing (run as root to install them)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ -n "$missing" ]; then
  echo "install-deps: installing$missing" >&2
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if guest_kernel_missing; then fetch_guest_kernel || true; fi
exit 0
