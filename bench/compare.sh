#!/usr/bin/env bash
# Compare the acquire + release cycle of this tree with an earlier commit's, in the same run.
#
# Usage: bash bench/compare.sh REV [--seconds S] [--rounds R] [--clients "1 4"]
#   REV          the commit to compare against (built in build/compare-<short rev>/, a detached worktree)
#   --seconds S  seconds per cell (default 5)
#   --rounds R   runs of each cell per side (default 3); the sides alternate, and every other round
#                starts with the other side, so that drift (a checkpoint, a neighbour) hits both alike
#   --clients L  client counts (default "1 4")
#
# Both sides are Release builds of sqlock-grid, run against the same private PostgreSQL, MariaDB
# (scripts/test-servers.sh, SQLOCK_TEST_DIR=build/compare-servers) and SQLite file, table and row
# locks, distinct names. Prints a table of median cycles/s per side and their ratio (this tree /
# REV), and leaves every JSON line in build/compare-results/. The servers are stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
say() { printf '%s compare.sh: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 2; }
usage() { sed -n '3,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit "${1:-2}"; }

rev=
seconds=5 rounds=3 clients="1 4"
while (($#)); do
  case $1 in
    --seconds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--seconds needs a whole number > 0"; seconds=$2; shift 2 ;;
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a whole number > 0"; rounds=$2; shift 2 ;;
    --clients) [[ ${2:-} =~ ^[0-9\ ]+$ ]] || die "--clients needs numbers, e.g. \"1 4\""; clients=$2; shift 2 ;;
    -h | --help) usage 0 ;;
    -*) say "unknown argument '$1'"; usage ;;
    *) [[ -z $rev ]] || die "one commit only (got '$rev' and '$1')"; rev=$1; shift ;;
  esac
done
[[ -n $rev ]] || usage
full=$(git rev-parse --verify --quiet "$rev^{commit}") || die "'$rev' is not a commit of this repository: give a hash or a ref"
short=${full:0:9}

OLD_SRC=$ROOT/build/compare-$short/src OLD_BUILD=$ROOT/build/compare-$short/build
NEW_BUILD=$ROOT/build/bench-release
RESULTS=$ROOT/build/compare-results
export SQLOCK_TEST_DIR=$ROOT/build/compare-servers
mkdir -p "$RESULTS"

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
build() { # SRC BUILD
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DSQLOCK_BUILD_BENCH=ON "${launcher[@]}" >"$2.configure.log" 2>&1 ||
    die "configuring $1 failed ($2.configure.log)"
  cmake --build "$2" -j"$(nproc)" --target sqlock-grid >"$2.build.log" 2>&1 || die "building $1 failed ($2.build.log)"
  find "$2" -type f -name sqlock-grid -perm -u+x -print -quit
}
if [[ ! -d $OLD_SRC ]]; then
  mkdir -p "$(dirname "$OLD_SRC")"
  git worktree add --detach "$OLD_SRC" "$full" >/dev/null || die "git worktree add $OLD_SRC $short failed"
fi
mkdir -p "$OLD_BUILD" "$NEW_BUILD"
say "building sqlock-grid at $short and at this tree (Release)"
old_bin=$(build "$OLD_SRC" "$OLD_BUILD")
new_bin=$(build "$ROOT" "$NEW_BUILD")
[[ -x $old_bin && -x $new_bin ]] || die "sqlock-grid was built but not found under $OLD_BUILD or $NEW_BUILD"

sqlite_db=$(mktemp -u /tmp/sqlock-compare-XXXXXX.db)
trap 'bash "$ROOT/scripts/test-servers.sh" stop >/dev/null 2>&1 || true; rm -f "$sqlite_db"*' EXIT
env_sh=$(bash "$ROOT/scripts/test-servers.sh" start) || die "scripts/test-servers.sh start failed"
# shellcheck source=/dev/null
source "$env_sh"

out=$RESULTS/compare-$short-$(date -u +%Y%m%dT%H%M%S).jsonl
: >"$out"
cell() { # SIDE BIN URL LOCK CLIENTS
  local line
  line=$(timeout $((seconds + 90)) "$2" cycle --url "$3" --lock "$4" --clients "$5" --names distinct \
    --seconds "$seconds" 2>>"$RESULTS/stderr.log" | tail -n 1) || { say "a $1 cell failed: $4 $3 c$5"; return 0; }
  printf '{"side":"%s",%s\n' "$1" "${line#\{}" >>"$out"
}
i=0
for url in "$SQLOCK_TEST_PG_URL" "$SQLOCK_TEST_MYSQL_URL" "sqlite://$sqlite_db"; do
  for lock in table row; do
    [[ $url == sqlite* && $lock == row ]] && continue
    for c in $clients; do
      say "cells: ${url%%:*} $lock c$c x $rounds rounds"
      for ((r = 0; r < rounds; r++, i++)); do
        if ((i % 2)); then cell new "$new_bin" "$url" "$lock" "$c"; cell old "$old_bin" "$url" "$lock" "$c"
        else cell old "$old_bin" "$url" "$lock" "$c"; cell new "$new_bin" "$url" "$lock" "$c"; fi
      done
    done
  done
done

/usr/bin/python3 - "$out" "$short" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cells = {}
for r in rows:
    key = (r["engine"], r["impl"], r["clients"])
    cells.setdefault(key, {}).setdefault(r["side"], []).append(r)
print(f"| engine | lock | clients | {sys.argv[2]} cycles/s | this tree cycles/s | ratio | errors |")
print("|---|---|---:|---:|---:|---:|---:|")
for (engine, impl, c), sides in sorted(cells.items()):
    med = {s: statistics.median(x["cycles_per_s"] for x in v) for s, v in sides.items()}
    errors = sum(x.get("errors", 0) for v in sides.values() for x in v)
    old, new = med.get("old"), med.get("new")
    ratio = f"{new / old:.2f}x" if old and new else "-"
    fmt = lambda v: f"{v:,.0f}" if v is not None else "-"
    print(f"| {engine} | {impl.removeprefix('sqlock-')} | {c} | {fmt(old)} | {fmt(new)} | {ratio} | {errors} |")
EOF
say "every run: $out"
