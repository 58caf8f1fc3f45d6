#!/usr/bin/env bash
# The main job on the embedded SQLite default: installs what is missing, builds
# the `sqlock` command, and runs the demo: several processes contend for one
# lock through `sqlock run`, and only one is ever inside the critical section.
#   bash scripts/demo.sh [--processes N] [--iterations N] [--db URL]
# (--db defaults to $SQLOCK_DB, then to the SQLite file ./sqlock.db.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

processes=4 iterations=10 db=${SQLOCK_DB:-sqlite:sqlock.db}
while (($#)); do
  case $1 in
    --processes) processes=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --db) db=$2; shift 2 ;;
    *) echo "demo.sh: unknown argument '$1' (use --processes N, --iterations N, --db URL)" >&2; exit 64 ;;
  esac
done

bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target sqlock-cli
sqlock=$PWD/build/cli/sqlock

work=$(mktemp -d /tmp/sqlock-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo 0 >"$work/counter"

# The critical section, run by `sqlock run` while it holds the lock: claim a
# marker file with noclobber (it fails if another process is inside), then
# read-increment-write a counter file that nothing else protects.
# shellcheck disable=SC2016 # expanded by the `sh -c` that runs it, not here
critical='set -C # noclobber: ">" fails on an existing file, ">|" overwrites
if ! : >"$1/inside"; then echo "OVERLAP: worker $2 found another process inside" >&2; exit 3; fi
n=$(cat "$1/counter"); sleep 0.01; echo $((n + 1)) >|"$1/counter"
echo "worker $2 (pid $$) inside with token $SQLOCK_TOKEN: counter $n -> $((n + 1))"
rm -f "$1/inside"'

"$sqlock" schema --db "$db" --apply >/dev/null # once, before the workers start
shown=$(sed -E 's#(//[^:/@]*):[^@/]*@#\1:***@#' <<<"$db") # the password masked
echo "demo: $processes processes x $iterations critical sections on $shown, through \`sqlock run\`"
worker() {
  local i
  for ((i = 0; i < iterations; i++)); do
    "$sqlock" run --db "$db" --name demo:critical-section --wait 60s -- sh -c "$critical" sh "$work" "$1" || return 1
  done
}
pids=()
for ((p = 0; p < processes; p++)); do
  worker "$p" &
  pids+=("$!")
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done

counter=$(cat "$work/counter")
expected=$((processes * iterations))
echo "counter = $counter (expected $expected), workers failed: $failed"
if ((counter != expected || failed != 0)); then
  echo "FAILED: the critical section was not exclusive"
  exit 1
fi
echo "OK: only one process was ever inside the critical section"
