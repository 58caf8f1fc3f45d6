#!/usr/bin/env bash
# Model-checks majority mode's fencing-token protocol with spin (docs/majority.md):
#   tests/spin/majority_token.pml      the protocol of src/majority_locker.cpp: must hold
#                                      (uniqueness and monotonicity), in three configurations;
#   majority_token.pml -DLOSS          the same with a member that restarts without its data (a new
#                                      identity), seeded before it counts: must hold; with -DNOSEED
#                                      (it counts at once, the old behaviour) spin must find a violation;
#   majority_token.pml -DEARLYWRITE    the write round settled once a majority was sent the write (a write in
#                                      flight counted as won): spin must find a violation;
#   tests/spin/one_round_shortcut.pml  per-member tokens, client takes the max: spin must find
#                                      a violation;
#   tests/spin/majority_exclusion.pml  exclusion in real time (Redlock's timing argument): must hold
#                                      plain and with delayed rejoin after data loss; spin must find
#                                      two acting holders under a member clock jump, a holder pause,
#                                      and data loss without delayed rejoin (the documented limits),
#                                      and a run with a hand-over (so "holds" is not vacuous).
#   tests/spin/table_one_row.pml       the table lock's one row per cycle (issue 40, design 1): exclusion
#                                      while leases are valid, tokens strictly increasing across releases,
#                                      takeovers, purges, first-use INSERTs and a restart (clock stepped
#                                      back, release not flushed), no lost wake-up: must hold with 2 and
#                                      3 clients and with MariaDB's stepwise purge and separate mark; spin
#                                      must find a violation with the purge not raising the floor, the
#                                      stepwise purge without its token guard, a release that frees after
#                                      reading the mark, today's MariaDB mark on a kept free row, a
#                                      takeover that clears the mark, the listener waking before it
#                                      LISTENs, the generation read after the statement, a takeover
#                                      without the expiry check, a purge of a live row, and in two
#                                      non-vacuity runs (a notified hand-over; a token the floor decided).
#   majority_token.pml -DTWOROUNDS     issue 40, design 3: the token written in the grant's own statement
#                                      (hint + 1, a strict win on a majority hands it out), the read and
#                                      write rounds only when it does not win: must hold with 2 clients in
#                                      any order, 2 acquisitions (the hint cached), 3 clients, any hint,
#                                      the first read carried by the grant, and data loss (seeded); spin
#                                      must find a violation when it hands out on one win, counts a
#                                      non-strict win, draws per member, skips the joined check after a
#                                      data loss, and in three non-vacuity runs (a cached hint wins; the
#                                      rounds recover a refused grant's write; a win on a seeded member).
#   tests/spin/row_grant_in_draw.pml   the row lock's grant recorded in the token draw's own transaction
#                                      (issue 40, design 2) against today's protocol: exclusion of valid
#                                      leases under the server's idle limit, pauses and ended sessions;
#                                      tokens strictly increasing in grant order; the record naming the
#                                      current holder. Must hold today, and for design 2 with its guard
#                                      (the draw checks the holding transaction is in progress after
#                                      writing the counter, and commits counter and record together),
#                                      with 3 clients and two sessions ended; with the guard on the holding
#                                      session (tokens); unguarded with the idle limit only (tokens); and
#                                      for SQLite's draw-before-lock. Spin must find a violation with no
#                                      guard (a session ended; no slow-path keep; the record), the record
#                                      under the holding-session guard, the guard read before the counter
#                                      write, the counter committed before the record, a guard on the
#                                      session instead of the transaction, a token drawn in the holding
#                                      transaction (repeated) or before the lock, validity from the answer,
#                                      a late loss report (the documented window), and in two non-vacuity
#                                      runs (a hand-over after the idle limit; a guard that refuses).
# Prints one line; -v also prints the hand-outs of each counter-example.
# Exit: 0 as expected, 1 not (or spin missing under CI=true), 77 spin missing outside CI (skipped).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
models=$PWD/tests/spin
verbose=false
for arg in "$@"; do
  case $arg in
    -v) verbose=true ;;
    *) echo "model-check.sh: unknown argument '$arg' (usage: model-check.sh [-v])" >&2; exit 2 ;;
  esac
done

if ! command -v spin >/dev/null || ! command -v cc >/dev/null; then
  if [[ ${CI:-} == true ]]; then
    echo "model-check: FAILED: spin (or cc) is not installed; scripts/deps.sh --servers installs it" >&2
    exit 1
  fi
  echo "model-check: skipped: spin is not installed (scripts/deps.sh --spin)"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=() failures=() trails=()

# check LABEL MODEL EXPECT(hold|violate) [spin -D options...]
check() {
  local label=$1 model=$2 expect=$3
  shift 3
  local dir=$work/${label//[^a-zA-Z0-9]/_}
  mkdir -p "$dir"
  cp "$models/$model" "$dir/"
  (
    cd "$dir"
    spin "$@" -a "$model" >spin.log 2>&1 || { cat spin.log; exit 1; }
    # Breadth-first where a violation is expected: the shortest counter-example.
    local search=()
    [[ $expect == violate ]] && search=(-DBFS)
    cc -O2 -w -DSAFETY -DMEMLIM=4096 "${search[@]}" -o pan pan.c
    ./pan -m1000000 >pan.log 2>&1 || true
  ) || { failures+=("$label: spin or cc failed: $(tail -3 "$dir/spin.log" | tr '\n' ' ')"); return; }
  local log=$dir/pan.log errors states secs
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$log" | tail -1)
  states=$(awk '/states, stored/ {print $1; exit}' "$log")
  secs=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$log" | tail -1)
  local size
  size=$(awk -v s="${states:-0}" 'BEGIN { if (s >= 1e6) printf "%.1fM", s / 1e6; else if (s >= 1e3) printf "%.0fk", s / 1e3; else printf "%d", s }')
  if [[ $expect == hold ]]; then
    if [[ $errors == 0 ]] && ! grep -q -e 'max search depth too small' -e 'reached -DMEMLIM bound' "$log"; then
      results+=("$label holds ($size states, ${secs}s)")
    else
      failures+=("$label: expected to hold, spin says: $(grep -m1 -e 'assertion violated' -e 'too small' -e 'MEMLIM' -e 'errors:' "$log")")
    fi
  else
    if [[ ${errors:-0} -ge 1 ]] && grep -q 'assertion violated' "$log"; then
      local handouts
      handouts=$(cd "$dir" && spin "$@" -t "$model" 2>/dev/null | sed -n 's/^ *MSC: //p')
      trails+=("  $label:" "$(sed 's/^/    /' <<<"$handouts")")
      local tokens
      tokens=$(sed -n 's/.*hands out token \([0-9]*\).*/\1/p' <<<"$handouts" | paste -sd' ' | sed 's/ / then /g')
      [[ -n $tokens ]] && tokens="tokens $tokens; "
      results+=("$label violated as expected (${tokens}$(grep -m1 -o 'assertion violated.*(at' "$log" | sed 's/ (at$//; s/  */ /g'))")
    else
      failures+=("$label: spin found no violation, but one was expected")
    fi
  fi
}

start=$SECONDS
check "majority_token 2 clients x 2 acquisitions" majority_token.pml hold -DNCLIENTS=2 -DNACQ=2 -DMAXROUNDS=1
check "majority_token 2 clients x 2 rounds, any order" majority_token.pml hold -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=2 -DANYORDER
check "majority_token 3 clients" majority_token.pml hold -DNCLIENTS=3 -DNACQ=1 -DMAXROUNDS=1
check "majority_token with data loss, seeded before it counts" majority_token.pml hold -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1 -DLOSS
check "majority_token with data loss, counted at once (the old behaviour)" majority_token.pml violate -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1 -DLOSS -DNOSEED
check "majority_token, write round settled before a majority won" majority_token.pml violate -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1 -DEARLYWRITE
check "one_round_shortcut" one_round_shortcut.pml violate
check "majority_exclusion" majority_exclusion.pml hold
check "majority_exclusion with delayed rejoin after data loss" majority_exclusion.pml hold -DNACQ=1 -DLOSS -DREJOIN
check "majority_exclusion hands over (non-vacuity)" majority_exclusion.pml violate -DVACUITY
check "majority_exclusion with a member clock jump" majority_exclusion.pml violate -DJUMP
check "majority_exclusion with a holder pause" majority_exclusion.pml violate -DPAUSE
check "majority_exclusion with data loss, no delayed rejoin" majority_exclusion.pml violate -DLOSS
check "table_one_row 2 clients x 2 acquisitions" table_one_row.pml hold -DNCLIENTS=2 -DNACQ=2
check "table_one_row 3 clients" table_one_row.pml hold -DNCLIENTS=3 -DNACQ=1 -DMAXT=5
check "table_one_row, MariaDB's stepwise purge and separate mark" table_one_row.pml hold -DMARKAFTER -DSTEPWISE -DMAXT=5
check "table_one_row, purge without raising the floor" table_one_row.pml violate -DNOFLOOR
check "table_one_row, stepwise purge without its token guard" table_one_row.pml violate -DSTEPWISE -DNOGUARD
check "table_one_row, release reads the mark then frees" table_one_row.pml violate -DLOSTWAKE=1
check "table_one_row, mark after the answer on expires only" table_one_row.pml violate -DLOSTWAKE=2
check "table_one_row, takeover clears the mark" table_one_row.pml violate -DLOSTWAKE=3
check "table_one_row, listener wakes before it LISTENs" table_one_row.pml violate -DLATELISTEN
check "table_one_row, generation read after the statement" table_one_row.pml violate -DLATEGEN
check "table_one_row, takeover without the expiry check" table_one_row.pml violate -DNOEXPIRY
check "table_one_row, purge of a live row" table_one_row.pml violate -DPURGELIVE
check "table_one_row hands over to a notified waiter (non-vacuity)" table_one_row.pml violate -DVACUITY=1
check "table_one_row reinserts above the floor (non-vacuity)" table_one_row.pml violate -DVACUITY=2
check "majority_token, token in the grant's write, 2 clients, any order" majority_token.pml hold -DTWOROUNDS -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1 -DANYORDER
check "majority_token, token in the grant's write, 2 clients x 2 acquisitions" majority_token.pml hold -DTWOROUNDS -DNCLIENTS=2 -DNACQ=2 -DMAXROUNDS=1 -DFASTONLY=1
check "majority_token, token in the grant's write, 3 clients" majority_token.pml hold -DTWOROUNDS -DNCLIENTS=3 -DNACQ=1 -DMAXROUNDS=1 -DFASTONLY=2
check "majority_token, token in the grant's write, any hint" majority_token.pml hold -DTWOROUNDS -DANYHINT -DHINTMAX=2 -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1
check "majority_token, token in the grant's write, first read carried" majority_token.pml hold -DTWOROUNDS -DCARRY -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1
check "majority_token, token in the grant's write, data loss seeded" majority_token.pml hold -DTWOROUNDS -DLOSS -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1 -DFASTONLY=1
check "majority_token, token in the grant's write, data loss seeded, first read carried" majority_token.pml hold -DTWOROUNDS -DLOSS -DCARRY -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1 -DFASTONLY=1
check "majority_token, grant's write handed out on one win" majority_token.pml violate -DTWOROUNDS -DFASTFEW -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1
check "majority_token, grant's write won where the counter already is T" majority_token.pml violate -DTWOROUNDS -DFASTEQ -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1
check "majority_token, grant's statement draws per member" majority_token.pml violate -DTWOROUNDS -DFASTDRAW -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1
check "majority_token, grant's write without the joined check, data loss" majority_token.pml violate -DTWOROUNDS -DLOSS -DFASTNOJOIN -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1 -DFASTONLY=1
check "majority_token, grant's write wins with a cached hint (non-vacuity)" majority_token.pml violate -DTWOROUNDS -DVACUITY=1 -DNCLIENTS=2 -DNACQ=2 -DMAXROUNDS=1 -DFASTONLY=1
check "majority_token, rounds after a refused grant's write (non-vacuity)" majority_token.pml violate -DTWOROUNDS -DVACUITY=2 -DNCLIENTS=2 -DNACQ=1 -DMAXROUNDS=1
check "majority_token, grant's write wins on a seeded member (non-vacuity)" majority_token.pml violate -DTWOROUNDS -DLOSS -DVACUITY=3 -DNCLIENTS=2 -DNACQ=2 -DMAXROUNDS=1 -DFASTONLY=1

check "row_grant_in_draw today, 2 clients x 2 acquisitions" row_grant_in_draw.pml hold
check "row_grant_in_draw today, sessions ended" row_grant_in_draw.pml hold -DKILL
check "row_grant_in_draw, grant in the draw (design 2)" row_grant_in_draw.pml hold -DINDRAW
check "row_grant_in_draw, design 2, sessions ended" row_grant_in_draw.pml hold -DINDRAW -DKILL
check "row_grant_in_draw, design 2, 3 clients" row_grant_in_draw.pml hold -DINDRAW -DNCLIENTS=3 -DNACQ=1
check "row_grant_in_draw, design 2, two sessions ended" row_grant_in_draw.pml hold -DINDRAW -DKILL -DNKILL=2 -DMAXT=5
check "row_grant_in_draw, design 2 guarded on the holding session (tokens)" row_grant_in_draw.pml hold -DINDRAW -DGUARD=2 -DKILL -DNOREC
check "row_grant_in_draw, design 2 unguarded, idle limit only (tokens)" row_grant_in_draw.pml hold -DINDRAW -DGUARD=0 -DNOREC
check "row_grant_in_draw, SQLite draws before it locks" row_grant_in_draw.pml hold -DSQLITE
check "row_grant_in_draw, design 2 unguarded, a session ended" row_grant_in_draw.pml violate -DINDRAW -DGUARD=0 -DKILL -DNOREC
check "row_grant_in_draw, design 2 unguarded, no slow-path keep" row_grant_in_draw.pml violate -DINDRAW -DGUARD=0 -DNOKEEP -DNOREC
check "row_grant_in_draw, design 2 unguarded, the record" row_grant_in_draw.pml violate -DINDRAW -DGUARD=0
check "row_grant_in_draw, design 2 guarded on the holding session, the record" row_grant_in_draw.pml violate -DINDRAW -DGUARD=2 -DKILL
check "row_grant_in_draw, design 2, guard before the counter write" row_grant_in_draw.pml violate -DINDRAW -DLATECHECK -DKILL -DNOREC
check "row_grant_in_draw, design 2, counter committed before the record" row_grant_in_draw.pml violate -DINDRAW -DSPLITREC -DKILL
check "row_grant_in_draw, design 2, guard on the session not the transaction" row_grant_in_draw.pml violate -DINDRAW -DGUARD=3 -DKILL -DNOREC
check "row_grant_in_draw, token drawn in the holding transaction" row_grant_in_draw.pml violate -DINHOLD
check "row_grant_in_draw, token drawn before the lock" row_grant_in_draw.pml violate -DEARLYDRAW
check "row_grant_in_draw, design 2, validity from the answer" row_grant_in_draw.pml violate -DINDRAW -DLATEVALID
check "row_grant_in_draw, a session's end reported late" row_grant_in_draw.pml violate -DKILL -DSLOWWATCH
check "row_grant_in_draw hands over after the idle limit (non-vacuity)" row_grant_in_draw.pml violate -DVACUITY=1
check "row_grant_in_draw, design 2, the guard refuses a draw (non-vacuity)" row_grant_in_draw.pml violate -DINDRAW -DKILL -DVACUITY=2

if $verbose; then printf '%s\n' "${trails[@]}"; fi
join() { local out=$1; shift; for x in "$@"; do out+="; $x"; done; echo "$out"; }
summary=$(join "${results[@]}")
if ((${#failures[@]})); then
  echo "model-check: FAILED in $((SECONDS - start))s: $(join "${failures[@]}") [ok: $summary]"
  exit 1
fi
echo "model-check: ok in $((SECONDS - start))s: $summary"
