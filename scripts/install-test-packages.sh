#!/bin/sh
# Installs the npm packages the tests run (tests/compat: the peers' own clients, which
# tests/integration/test_compat_*.py drive unchanged against sandboxd's drop-in APIs) from the
# lock file, with `npm ci`. Quiet and quick when they are in place and the lock file has not
# changed since; `make test` calls it every time.
set -eu
cd "$(dirname "$0")/../tests/compat"
stamp=node_modules/.package-lock.json
if [ -f "$stamp" ] && [ ! package-lock.json -nt "$stamp" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-test-packages: npm is missing (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
echo "install-test-packages: npm ci in tests/compat" >&2
npm ci --no-audit --no-fund --loglevel=error >/dev/null
