#!/usr/bin/env bash
# Builds the mixed-version storm's client (tests/mixed_version/mixed_client.cpp, this tree's source)
# against the library of an older commit, for tests/faults/mixed_version_suite.cpp (docs/guarantees.md,
# "Two sqlock versions on the same tables").
#
# Usage: bash scripts/old-client.sh OUT [REV]
#   REV   the older commit (default: the one below, issue 40's baseline, the last release of protocol 1
#         before the record of the protocol existed)
#   OUT   REV's tree (git archive) in OUT/src, its library alone (Release, static) built in OUT/build and
#         installed to OUT/prefix, and the client, built with find_package(sqlock) against that prefix, at
#         OUT/mixed_client. Nothing is rebuilt when OUT/mixed_client exists and OUT/stamp names REV and
#         this tree's client source as they are.
# Needs the repository's history (a clone, not an export of one commit) and the build packages of
# scripts/deps.sh. Prints where the client is on its last line.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf 'old-client.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 2; }
(($# >= 1 && $# <= 2)) || die "usage: bash scripts/old-client.sh OUT [REV]"
out=$1 rev=${2:-e66d7d0}
full=$(git -C "$ROOT" rev-parse --verify --quiet "$rev^{commit}") ||
  die "'$rev' is not a commit of $ROOT: the mixed-version tests need the repository's history (clone it without --depth, or git fetch --unshallow)"
mkdir -p "$out"
out=$(cd "$out" && pwd)
# What the build is of: the commit, and this tree's client source.
stamp="$full $(cat "$ROOT/tests/mixed_version/mixed_client.cpp" "$ROOT/tests/mixed_version/CMakeLists.txt" | sha256sum | cut -c1-16)"
if [[ -x $out/mixed_client && $(cat "$out/stamp" 2>/dev/null) == "$stamp" ]]; then
  echo "$out/mixed_client"
  exit 0
fi
rm -rf "$out/client" "$out/mixed_client" "$out/stamp"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
if [[ $(cat "$out/prefix/rev" 2>/dev/null) != "$full" ]]; then
  rm -rf "$out/src" "$out/build" "$out/prefix"
  mkdir -p "$out/src"
  git -C "$ROOT" archive --format=tar "$full" | tar -x -C "$out/src"
  say "building the library of ${full:0:9} in $out/build"
  cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DSQLOCK_BUILD_EXAMPLES=OFF \
    -DSQLOCK_BUILD_BENCH=OFF -DSQLOCK_BUILD_CLI=OFF -DSQLOCK_BUILD_REAPER=OFF -DCMAKE_INSTALL_PREFIX="$out/prefix" \
    "${launcher[@]}" >"$out/configure.log" || { cat "$out/configure.log" >&2; die "configuring ${full:0:9} failed"; }
  cmake --build "$out/build" -j2 >"$out/build.log" 2>&1 || { tail -50 "$out/build.log" >&2; die "building ${full:0:9} failed"; }
  cmake --install "$out/build" >/dev/null
  echo "$full" >"$out/prefix/rev"
fi
say "building the client against it"
cmake -S "$ROOT/tests/mixed_version" -B "$out/client" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$out/prefix" \
  "${launcher[@]}" >/dev/null
cmake --build "$out/client" >"$out/client.log" 2>&1 || { cat "$out/client.log" >&2; die "building the client failed"; }
cp "$out/client/mixed_client" "$out/mixed_client"
echo "$stamp" >"$out/stamp"
echo "$out/mixed_client"
