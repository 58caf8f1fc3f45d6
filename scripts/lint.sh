#!/usr/bin/env bash
# The code's form, checked (CI's `lint` step) or fixed:
#   bash scripts/lint.sh          clang-format (.clang-format) on every C/C++ file git tracks, then
#                                 clang-tidy (.clang-tidy) on the library's sources (src/, with the headers
#                                 of src/ and include/sqlock/); any finding fails
#   bash scripts/lint.sh --fix    rewrites the files clang-format would change (clang-tidy is not applied)
#   bash scripts/lint.sh --format-only | --tidy-only
# Before either: scripts/check-deps.sh (every program the tests and scripts call is installed by deps.sh).
# Needs clang-format-14 and clang-tidy-14 (scripts/deps.sh --clang). clang-tidy reads a compilation database
# of the library configured with Clang in build/lint (configured, not built), one source per translation unit
# (SQLOCK_UNITY_BUILD=OFF), so that each source is checked, and must compile, on its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fix=0 format=1 tidy=1
for arg in "$@"; do
  case $arg in
    --fix) fix=1 tidy=0 ;;
    --format-only) tidy=0 ;;
    --tidy-only) format=0 ;;
    *) echo "lint.sh: unknown argument '$arg' (usage: lint.sh [--fix | --format-only | --tidy-only])" >&2; exit 64 ;;
  esac
done
for tool in clang-format-14 clang-tidy-14 run-clang-tidy-14; do
  command -v "$tool" >/dev/null || { echo "lint.sh: $tool is missing: run scripts/deps.sh --clang" >&2; exit 69; }
done

((fix)) || bash scripts/check-deps.sh

if ((format)); then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.c' '*.h')
  if ((fix)); then
    clang-format-14 -i --style=file "${files[@]}"
    echo "lint.sh: formatted ${#files[@]} files"
  elif ! clang-format-14 --dry-run -Werror --style=file "${files[@]}"; then
    echo "lint.sh: the files above are not formatted as .clang-format says: run bash scripts/lint.sh --fix" >&2
    exit 1
  else
    echo "lint.sh: clang-format: ${#files[@]} files as .clang-format says"
  fi
fi

if ((tidy)); then
  dir=build/lint
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_COMPILER=clang -DBUILD_TESTING=OFF -DSQLOCK_BUILD_CLI=OFF -DSQLOCK_BUILD_REAPER=OFF \
    -DSQLOCK_BUILD_EXAMPLES=OFF -DSQLOCK_BUILD_BENCH=OFF -DSQLOCK_UNITY_BUILD=OFF >/dev/null
  # Only the library's own translation units (target sqlock), each once.
  python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
entries = json.load(open(f"{d}/compile_commands.json"))
keep = [e for e in entries if "CMakeFiles/sqlock.dir/" in e.get("output", e["command"])]
json.dump(keep, open(f"{d}/compile_commands.json", "w"), indent=1)
print(f"lint.sh: clang-tidy on {len(keep)} files of the library")
PY
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  rc=0
  run-clang-tidy-14 -p "$dir" -j "$(nproc)" -quiet "$PWD/src/" >"$out" 2>&1 || rc=$?
  if ((rc != 0)) || grep -qE '(warning|error): ' "$out"; then
    grep -E '(warning|error): ' -A3 "$out" | sed 's/\x1b\[[0-9;]*m//g' >&2 || cat "$out" >&2
    echo "lint.sh: clang-tidy found the problems above (.clang-tidy): fix them" >&2
    exit 1
  fi
  echo "lint.sh: clang-tidy: no findings"
fi
