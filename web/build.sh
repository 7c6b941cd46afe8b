#!/bin/sh
# Builds the web playground (issue 20) into OUTDIR: exactly index.html, app.js (one minified
# bundle of src/app.js and the CodeMirror packages it imports) and app.css. `sandboxd serve`
# answers them at /, /assets/app.js and /assets/app.css; the page fetches nothing else.
#
#   web/build.sh OUTDIR
#
# Needs node and npm. The packages come from package-lock.json with `npm ci` (network the first
# time), run only when node_modules is missing or older than the lock file; after that the
# build is offline. Each file is written beside its final name and renamed into place, so a
# server reading OUTDIR never sees half a file.
set -eu

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 64
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")"

# npm ci writes node_modules/.package-lock.json last: its age says when the install finished.
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "web/build.sh: npm is missing (scripts/install-deps.sh installs it)" >&2
    exit 1
  fi
  echo "web/build.sh: npm ci in web/" >&2
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi

esbuild=node_modules/.bin/esbuild
# iife: a classic script (loaded with defer), nothing global; es2020 is what the page's code and
# CodeMirror need, and every current browser runs.
"$esbuild" src/app.js --bundle --minify --format=iife --target=es2020 --log-level=warning \
  --outfile="$out/.app.js.tmp"
"$esbuild" src/app.css --minify --log-level=warning --loader:.css=css \
  --outfile="$out/.app.css.tmp"
cp src/index.html "$out/.index.html.tmp"
for name in app.js app.css index.html; do
  mv -f "$out/.$name.tmp" "$out/$name"
done
