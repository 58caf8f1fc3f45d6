#!/usr/bin/env bash
# The reliability battery's tiers (docs/guarantees.md), each on private PostgreSQL and MariaDB servers
# (scripts/with-servers.sh) and SQLite files:
#   bash scripts/battery.sh conformance        deterministic behaviour on every engine (minutes; CI runs it)
#   bash scripts/battery.sh fault-smoke        faults injected with CI durations (CI runs it)
#   bash scripts/battery.sh fault-smoke --under-load
#                                              the same beside two CPU hogs (stress-ng --cpu 2), as on a
#                                              shared, noisy CI machine: a scenario must make its fault
#                                              bite by synchronising on the event, not by timing
#   bash scripts/battery.sh soak [--rounds N | --until-failure] [--seed S]
#                                              the battery's scenarios (label "battery") with 10x durations
#                                              (SQLOCK_SOAK=1) and a fresh random seed per round, repeated
#                                              until the first failure or N rounds (default 10); with
#                                              --until-failure, new seeds for as long as every round passes.
#                                              Only the fork nemesis and the operation fuzzer:
#                                                bash scripts/battery.sh soak --until-failure -- -R 'ForkNemesis|Fuzz'
#   bash scripts/battery.sh ha                 every test on the replicated topologies (tests/ha/: Galera,
#                                              Patroni + etcd, PgBouncer, HAProxy), each started by its
#                                              scripts/ha/ script as a ctest fixture; CI runs only their
#                                              fault-smoke subset
#   bash scripts/battery.sh characterization   the documented limits (relaxed durability, majority without
#                                              delayed rejoin, client-time negative controls): tests that
#                                              assert the limit is real
# Extra arguments after `--` go to ctest. Builds build/ (RelWithDebInfo) first, as scripts/test.sh does.
# A failed scenario keeps its run directory (history, audit dump, nemesis log) and prints its replay
# command; safety failures are never retried (no --repeat until-pass anywhere).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage="usage: battery.sh conformance|fault-smoke|soak|characterization|ha [--under-load] [--rounds N | --until-failure] [--seed S] [-- CTEST-ARGS...]"
(($#)) || { echo "$usage" >&2; exit 64; }
tier=$1
shift
rounds=10 seed= under_load=0 until_failure=0
ctest_args=()
while (($#)); do
  case $1 in
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --under-load) under_load=1; shift ;;
    --until-failure) until_failure=1; shift ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "battery.sh: unknown argument '$1' ($usage)" >&2; exit 64 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "battery.sh: --rounds must be a positive number, not '$rounds'" >&2; exit 64; }

bash scripts/deps.sh --servers
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2

if ((under_load)); then
  # Two CPU hogs for as long as the tier runs (any tier takes it; fault-smoke is the one CI must pass
  # under load). stress-ng is a child of this shell: stopped by its pid when the tier ends.
  command -v stress-ng >/dev/null || { echo "battery.sh: --under-load needs stress-ng (sudo bash scripts/deps.sh --servers)" >&2; exit 69; }
  stress-ng --cpu 2 --quiet &
  hog=$!
  trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null || true' EXIT
  echo "battery.sh: under load: stress-ng --cpu 2 (pid $hog) runs beside the tier"
fi

case $tier in
  conformance | fault-smoke | characterization | ha)
    bash scripts/with-servers.sh ctest --test-dir build --output-on-failure -L "^$tier\$" "${ctest_args[@]}" ;;
  soak)
    export SQLOCK_SOAK=1
    ((until_failure)) && [[ -n $seed ]] && { echo "battery.sh: --until-failure draws new seeds: drop --seed" >&2; exit 64; }
    # The end-of-run table: each scenario appends "test, scenario, seed, grants, verdict, seconds" to the round's
    # SQLOCK_BATTERY_SUMMARY file (tests/faults/soak.hpp); ctest's own verdict line fills in for a
    # test that wrote none (killed by its timeout, or crashed). Kept in $summary_dir.
    summary_dir=$(mktemp -d "${TMPDIR:-/tmp}/sqlock-soak.XXXXXX")
    table="$summary_dir/table.txt"
    soak_table() {  # ROUND SEED T0 T1: the round's lines, appended to $table and printed
      awk -F'\t' -v round="$1" -v seed="$2" -v t0="$3" -v t1="$4" '
        FILENAME ~ /[.]tsv$/ {
          n_of[$1]++; line[$1, n_of[$1]] = $0
          if ($5 ~ /^FAILED/) any_failed[$1] = 1
          next
        }
        match($0, /Test +#[0-9]+: [^ ]+ /) {
          split(substr($0, RSTART, RLENGTH), w, " "); name = w[3]
          rest = substr($0, RSTART + RLENGTH); sub(/^[. ]+/, "", rest)
          status = rest; sub(/ +[0-9.]+ sec.*$/, "", status); sub(/^[*]+/, "", status)
          secs = match(rest, /[0-9.]+ sec/) ? substr(rest, RSTART, RLENGTH - 4) : 0
          order[++n] = name; ctest[name] = status; took[name] = secs; next
        }
        function out(name, scenario, s, g, t, v) {
          if (v ~ /^FAILED/) failed++
          printf "round %-3s %-62s %-14s seed %-20s grants %-7s %7.1f s  %s\n", round, name, scenario, s, g, t, v
        }
        END {
          failed = 0
          for (i = 1; i <= n; i++) {
            name = order[i]
            if (!(name in n_of)) {
              v = ctest[name] == "Passed" ? "passed" : "FAILED (ctest: " ctest[name] ")"
              out(name, "-", "-", "-", took[name], v " [no summary line: not a scenario run, or killed before its end]")
              continue
            }
            for (k = 1; k <= n_of[name]; k++) {
              split(line[name, k], f, "\t"); v = f[5]
              # ctest failed the test though no scenario of it says so (a crash after the checks, a timeout):
              if (ctest[name] != "Passed" && !(name in any_failed)) v = "FAILED (ctest: " ctest[name] "; scenario: " v ")"
              out(name, f[2], f[3], f[4], f[6], v)
            }
          }
          printf "round %s: %d tests, %d failed lines, %d s, SQLOCK_BATTERY_SEED=%s\n", round, n, failed, t1 - t0, seed
        }' "$summary_dir/round-$1.tsv" "$summary_dir/round-$1.ctest" | tee -a "$table"
    }
    for ((r = 1; until_failure || r <= rounds; r++)); do
      s=${seed:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
      echo "=== battery.sh soak: round $r of $( ((until_failure)) && echo 'until the first failure' || echo "$rounds"), SQLOCK_BATTERY_SEED=$s ==="
      : >"$summary_dir/round-$r.tsv"
      t0=$(date +%s)
      rc=0
      SQLOCK_BATTERY_SUMMARY="$summary_dir/round-$r.tsv" SQLOCK_BATTERY_SEED=$s bash scripts/with-servers.sh \
        ctest --test-dir build --output-on-failure -L '^battery$' "${ctest_args[@]}" 2>&1 |
        tee "$summary_dir/round-$r.ctest" || rc=$?  # pipefail: ctest's status
      echo "=== battery.sh soak: the table of round $r (one line per scenario; kept in $table) ==="
      soak_table "$r" "$s" "$t0" "$(date +%s)"
      ((rc == 0)) || {
        echo "battery.sh: soak round $r failed (each failed test printed its own replay line above); replay the round with: bash scripts/battery.sh soak --rounds 1 --seed $s${ctest_args[*]:+ -- ${ctest_args[*]}}" >&2
        exit 1
      }
    done
    echo "=== battery.sh soak: every round ==="
    cat "$table"
    echo "battery.sh: soak: $rounds rounds passed" ;;
  *) echo "battery.sh: unknown tier '$tier' ($usage)" >&2; exit 64 ;;
esac
