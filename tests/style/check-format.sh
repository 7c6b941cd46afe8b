#!/bin/sh
# Fails when any C file differs from what clang-format (with the repository's .clang-format)
# would write. Prints the offending files and a diff of the first few.
set -eu
cd "$(dirname "$0")/../.."
files=$(git ls-files --cached --others --exclude-standard '*.c' '*.h' 2>/dev/null || find src tests -name '*.[ch]')
[ -n "$files" ] || { echo "check-format: no C files found" >&2; exit 1; }
bad=0
for f in $files; do
  [ -f "$f" ] || continue
  if ! clang-format --style=file "$f" | cmp -s - "$f"; then
    echo "check-format: $f is not clang-formatted (run: clang-format -i $f)"
    [ "$bad" -lt 3 ] && clang-format --style=file "$f" | diff -u "$f" - | head -20
    bad=$((bad + 1))
  fi
done
n=$(echo "$files" | wc -w)
if [ "$bad" -ne 0 ]; then
  echo "check-format: $bad of $n files need formatting"
  exit 1
fi
echo "check-format: $n files formatted"
