#!/usr/bin/env bash
# The whole benchmark suite, from scratch, in one command; then docs/benchmarks.md and its charts.
#
# Usage: bash bench/run.sh [--quick | --smoke] [--only SUITE...] [--impls IMPL...] [--seconds S] [--build-dir DIR]
#   --quick        a smoke test: 1 s per grid cell, few samples, small reaper and renewal sizes
#   --smoke        shorter still (CI's bench-smoke step): every program and mode once, 1 client; results in
#                  build/bench-smoke, the page to build/bench-smoke/benchmarks.md (docs/ untouched); exits 1
#                  naming every run that failed, timed out or was skipped
#   --build-dir D  build the programs in this existing build tree (CI: the Release build) instead of
#                  build/bench-release
#   --only SUITE…  run only these suites (cycle handoff majority renewal reaper; also comma-separated);
#                  the other suites' results of an earlier run are kept and stay in the report
#   --impls IMPL…  run only these implementations in the cycle grid (floor sqlock-table floor-rowlock
#                  sqlock-row tooz redis sqlock-semaphore sqlock-rw-shared sqlock-rw-exclusive
#                  sqlock-table-nometrics; also comma-separated), e.g.
#                  `--only cycle --impls sqlock-table,sqlock-semaphore`
#   --seconds S    seconds per cycle-grid cell (default 5, --quick 1)
#
# The coordination kinds (issue 22: a semaphore of 4 permits, the shared and the exclusive side of a
# read-write lock, all over a table locker) run in the cycle grid at 1 and 4 clients, in the same
# cells as the plain table lock, so report.py can put their cost next to it (its Targets table).
#
# Steps: scripts/deps.sh --servers --bench (installs what is missing; needs root for that), a Release
# build in build/bench-release, private PostgreSQL + MariaDB (scripts/test-servers.sh with
# SQLOCK_TEST_DIR=build/bench-servers), a Redis on a free loopback port with its default durability
# (no config file: RDB snapshots on its default schedule, no AOF, so no fsync per write), a SQLite
# file under /tmp; then the suites, each program's stdout (JSON lines, bench/results-format.md) to
# build/bench-results/<name>.jsonl, its stderr to <name>.err, and what was run to <name>.run.json;
# machine facts to build/bench-results/meta-<UTC time>.json; finally bench/report.py. Every server
# is stopped on exit, whatever happened. A program that is not built (yet) or fails costs only its
# own cells: they are recorded as skipped or failed and the report says so.
# A full run takes about 25-30 minutes on 2 cores (first build included; the coordination cells add ~5).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=$ROOT/build/bench-release
RESULTS=$ROOT/build/bench-results
SERVERS=$ROOT/build/bench-servers
PY=/usr/bin/python3 # Debian's: python3-tooz, psycopg2, pymysql and matplotlib live there
ALL_SUITES=(cycle handoff majority renewal reaper)
ALL_IMPLS=(floor sqlock-table floor-rowlock sqlock-row tooz redis sqlock-semaphore sqlock-rw-shared sqlock-rw-exclusive
  sqlock-table-nometrics)
COORD_IMPLS=(sqlock-semaphore sqlock-rw-shared sqlock-rw-exclusive) # over a table locker: every engine
METRICS_IMPLS=(sqlock-table-nometrics) # issue 23: the table lock with metrics off, at COORD_CLIENTS
COORD_CLIENTS=(1 4)                                                  # the client counts they run at
TARGETS=(sqlock-floor sqlock-peer-redis sqlock-grid sqlock-majority-bench sqlock-reaper-bench sqlock-metrics-bench)

say() { printf '%s run.sh: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
warn() { say "warning: $*"; }
die() { say "error: $*"; exit 1; }
usage() {
  sed -n '3,16s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit "${1:-2}"
}

# ---------------------------------------------------------------- arguments
command_line="bash bench/run.sh${*:+ $*}"
quick=0 smoke=0
seconds=
only=()
impls_only=()
while (($#)); do
  case $1 in
    --quick) quick=1; shift ;;
    --smoke) quick=1 smoke=1; shift ;;
    --build-dir)
      [[ -n ${2:-} ]] || die "--build-dir needs a directory"
      BUILD=$(realpath -m "$2"); shift 2 ;;
    --only)
      shift
      while (($#)) && [[ $1 != --* ]]; do
        IFS=, read -r -a parts <<<"$1"
        only+=("${parts[@]}")
        shift
      done
      ((${#only[@]})) || usage
      ;;
    --impls)
      shift
      while (($#)) && [[ $1 != --* ]]; do
        IFS=, read -r -a parts <<<"$1"
        impls_only+=("${parts[@]}")
        shift
      done
      ((${#impls_only[@]})) || usage
      ;;
    --seconds)
      if ! [[ ${2:-} =~ ^[0-9]+$ ]] || (($2 == 0)); then die "--seconds needs a whole number of seconds > 0"; fi
      seconds=$2; shift 2 ;;
    -h | --help) usage 0 ;;
    *) say "unknown argument '$1'"; usage ;;
  esac
done
for s in "${only[@]}"; do
  [[ " ${ALL_SUITES[*]} " == *" $s "* ]] || die "unknown suite '$s' (suites: ${ALL_SUITES[*]})"
done
for i in "${impls_only[@]}"; do
  [[ " ${ALL_IMPLS[*]} " == *" $i "* ]] || die "unknown implementation '$i' (implementations: ${ALL_IMPLS[*]})"
done
want_impl() { ((${#impls_only[@]} == 0)) || [[ " ${impls_only[*]} " == *" $1 "* ]]; }
suites=("${only[@]}")
((${#suites[@]})) || suites=("${ALL_SUITES[@]}")
want() { [[ " ${suites[*]} " == *" $1 "* ]]; }

# Sizes. Full: ~5 s per grid cell; quick and smoke: smoke tests whose numbers mean nothing.
if ((smoke)); then
  cell_s=${seconds:-1} handoff_samples=5 majority_cycles=5
  reaper_rows=2000 reaper_window=1 reaper_settle=1
  renew_leases=50 renew_ttl=3s renew_s=3
  RESULTS=$ROOT/build/bench-smoke
elif ((quick)); then
  cell_s=${seconds:-1} handoff_samples=20 majority_cycles=20
  reaper_rows=20000 reaper_window=2 reaper_settle=1
  renew_leases=500 renew_ttl=3s renew_s=6
else
  cell_s=${seconds:-5} handoff_samples=200 majority_cycles=200
  reaper_rows=1000000 reaper_window='' reaper_settle='' # the program's defaults (10 s windows, 20 s settle)
  renew_leases=10000 renew_ttl=15s renew_s=60
fi
results_rel=${RESULTS#"$ROOT"/}
CLIENTS=(1 4 16)
NAMES=(distinct shared)
if ((smoke)); then CLIENTS=(1) NAMES=(distinct); fi
REAPER_ENGINES=(postgresql mysql)
RENEWAL_ENGINES=(postgresql mysql)

# Our own servers only: never a database, member list or URL from the caller's environment.
unset SQLOCK_BENCH_URL SQLOCK_BENCH_URLS SQLOCK_BENCH_MAJORITY_URLS \
  SQLOCK_TEST_PG_URL SQLOCK_TEST_PG2_URL SQLOCK_TEST_MYSQL_URL
export SQLOCK_TEST_DIR=$SERVERS

started_epoch=$(date +%s)
started_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- JSON helpers
json_str() { # a JSON string literal
  local s=$1
  s=${s//\\/\\\\} s=${s//\"/\\\"} s=${s//$'\t'/\\t} s=${s//$'\n'/\\n} s=${s//$'\r'/}
  printf '"%s"' "$s"
}
json_val() { # a number as it is, anything else as a string
  if [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then printf '%s' "$1"; else json_str "$1"; fi
}
json_obj() { # KEY=VALUE... -> {"KEY": VALUE, ...}
  local kv sep=
  printf '{'
  for kv in "$@"; do
    printf '%s%s: ' "$sep" "$(json_str "${kv%%=*}")"
    json_val "${kv#*=}"
    sep=', '
  done
  printf '}'
}
json_arr() { # WORD... -> ["WORD", ...]
  local w sep=
  printf '['
  for w in "$@"; do printf '%s%s' "$sep" "$(json_str "$w")"; sep=', '; done
  printf ']'
}
load1() { cut -d' ' -f1 /proc/loadavg; }

# ---------------------------------------------------------------- dependencies and build
bash scripts/deps.sh --servers --bench ||
  warn "scripts/deps.sh --servers --bench failed: whatever is missing is skipped below"

mkdir -p "$RESULTS"
if [[ ${#only[@]} -eq 0 ]]; then
  rm -rf "$RESULTS" && mkdir -p "$RESULTS" # from scratch
else
  for s in "${suites[@]}"; do rm -f "$RESULTS/$s"-*; done # only these suites' old results
fi

declare -A target_state=() # built | absent (no such target yet) | failed (see the build log)
declare -A target_path=()  # where the program landed: <build>/bench/, or a subdirectory (bench/floor, ...)
say "configuring a Release build in $BUILD"
if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSQLOCK_BUILD_BENCH=ON \
  >"$RESULTS/build-configure.log" 2>&1; then
  help=$(cmake --build "$BUILD" --target help 2>/dev/null || true)
  for t in "${TARGETS[@]}"; do
    case $t in # only what the chosen suites run
      sqlock-floor | sqlock-peer-redis | sqlock-metrics-bench) want cycle || continue ;;
      sqlock-grid) want cycle || want handoff || want renewal || continue ;;
      sqlock-majority-bench) want majority || continue ;;
      sqlock-reaper-bench) want reaper || continue ;;
    esac
    if ! grep -Eq "(^|[[:space:]])${t}(:|[[:space:]]|$)" <<<"$help"; then
      target_state[$t]=absent
      warn "no target $t in this tree (not landed yet, or its dependencies are missing): its cells are skipped"
      continue
    fi
    say "building $t"
    if cmake --build "$BUILD" -j"$(nproc)" --target "$t" >"$RESULTS/build-$t.log" 2>&1; then
      target_path[$t]=$BUILD/bench/$t
      [[ -x ${target_path[$t]} ]] || target_path[$t]=$(find "$BUILD" -type f -name "$t" -perm -u+x -print -quit)
      if [[ -n ${target_path[$t]} ]]; then
        target_state[$t]=built
      else
        target_state[$t]=failed
        warn "built $t, but found no program $t under $BUILD: its cells are skipped"
      fi
    else
      target_state[$t]=failed
      warn "building $t failed ($results_rel/build-$t.log): its cells are skipped"
      tail -n 15 "$RESULTS/build-$t.log" >&2 || true
    fi
  done
else
  tail -n 30 "$RESULTS/build-configure.log" >&2 || true
  die "cmake configure failed ($results_rel/build-configure.log)"
fi

# bin TARGET: its path if it was built; else a reason on stdout and status 1
bin() {
  case ${target_state[$1]:-absent} in
    built) echo "${target_path[$1]}" ;;
    failed) echo "$1 failed to build ($results_rel/build-$1.log)"; return 1 ;;
    *) echo "$1 is not built: no such target in this tree"; return 1 ;;
  esac
}
# supports BINARY OPTION: the program's usage text (from --help; it must do no work then) names OPTION.
# Probed before any server runs and with no database variables set, so a --help taken for a
# benchmark run finds nothing to connect to.
declare -A usage_text=()
supports() {
  if [[ ! -v usage_text[$1] ]]; then
    usage_text[$1]=$(timeout 10 "$1" --help </dev/null 2>&1 || true)
  fi
  [[ ${usage_text[$1]} == *"$2"* ]]
}
tooz_ok() { # ENGINE: reason on stdout and status 1 when tooz cannot run against it
  local mod=psycopg2
  [[ $1 == mysql ]] && mod=pymysql
  [[ -f $ROOT/bench/peers/tooz_bench.py ]] || { echo "bench/peers/tooz_bench.py does not exist in this tree"; return 1; }
  [[ -x $PY ]] || { echo "$PY is missing"; return 1; }
  "$PY" -c "import tooz, $mod" 2>/dev/null || { echo "$PY cannot import tooz and $mod (scripts/deps.sh --bench)"; return 1; }
}
for t in sqlock-majority-bench sqlock-reaper-bench; do
  if b=$(bin "$t"); then supports "$b" --help || true; fi
done

# ---------------------------------------------------------------- servers
sqlite_dir=
redis_pid='' redis_port='' redis_dir=$SERVERS/redis
servers_started=0
current_child='' # the timeout(1) running a benchmark program, while one runs
cleanup() {
  local pid
  if [[ -n $current_child ]]; then # timeout passes the TERM on to the program
    kill -TERM "$current_child" 2>/dev/null || true
    wait "$current_child" 2>/dev/null || true
    current_child=''
  fi
  if [[ -n $redis_pid ]]; then
    # Only the redis-server we started: the pid we recorded, still running our port.
    pid=$redis_pid
    if kill -0 "$pid" 2>/dev/null && [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *":$redis_port"* ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && { warn "redis-server $pid ignored SIGTERM; killing it"; kill -KILL "$pid" || true; }
    fi
    redis_pid=
  fi
  if ((servers_started)); then
    bash "$ROOT/scripts/test-servers.sh" stop || warn "stopping the PostgreSQL and MariaDB test servers failed"
    servers_started=0
  fi
  if [[ -n $sqlite_dir && $sqlite_dir == /tmp/sqlock-bench.* ]]; then rm -rf "$sqlite_dir"; sqlite_dir=; fi
}
# EXIT trap without its own `exit`, so the script's exit status is kept; INT/TERM go through it too.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

port_free() { [[ -z $(ss -Htan "sport = :$1" 2>/dev/null) ]]; }
pick_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 40001))
    port_free "$p" && { echo "$p"; return; }
  done
  return 1
}

need_sql=1 need_redis=0 # every suite needs the SQL servers
if want cycle; then
  if b=$(bin sqlock-peer-redis); then
    if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
      need_redis=1
    else
      warn "redis-server or redis-cli is missing (scripts/deps.sh --bench): the redis cells are skipped"
    fi
  fi
fi

if ((need_sql)); then
  say "starting PostgreSQL and MariaDB (scripts/test-servers.sh, SQLOCK_TEST_DIR=build/bench-servers)"
  servers_started=1 # from here on, stop them on exit even if start fails half-way
  env_sh=$(bash "$ROOT/scripts/test-servers.sh" start) || die "scripts/test-servers.sh start failed"
  # shellcheck source=/dev/null
  source "$env_sh"
  sqlite_dir=$(mktemp -d /tmp/sqlock-bench.XXXXXX)
  SQLITE_URL=sqlite:$sqlite_dir/bench.db
fi
if ((need_redis)); then
  redis_port=$(pick_port) || die "found no free TCP port for Redis"
  mkdir -p "$redis_dir"
  rm -f "$redis_dir/dump.rdb"
  # As a user would run it: no config file, so Redis' built-in defaults (appendonly no; RDB
  # snapshots after 3600 s/1 change, 300 s/100, 60 s/10000). Own session, like test-servers.sh's MariaDB.
  setsid redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$redis_dir" \
    --logfile "$redis_dir/redis.log" --daemonize no </dev/null >/dev/null 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do
    [[ $(redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null) == PONG ]] && break
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ $(redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null) == PONG ]] ||
    { tail -n 20 "$redis_dir/redis.log" >&2 || true; die "redis-server did not start on 127.0.0.1:$redis_port"; }
  REDIS_URL=redis://127.0.0.1:$redis_port
  say "Redis on 127.0.0.1:$redis_port (pid $redis_pid)"
fi

# ---------------------------------------------------------------- machine facts
first_line() { "$@" 2>/dev/null | head -n 1 || true; }
git_rev=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
git_branch=$(git -C "$ROOT" rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
git_dirty=$([[ -n $(git -C "$ROOT" status --porcelain 2>/dev/null) ]] && echo yes || echo no)
cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
mem_total=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
# shellcheck source=/dev/null
os_name=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-}")
pg_version='' pg_sync='' pg_fsync='' my_version='' my_flush=''
redis_version='' redis_aof='' redis_save='' sqlite_version='' sqlite_fs=''
if ((need_sql)); then
  pg_version=$(first_line psql -XAtc "SHOW server_version" "$SQLOCK_TEST_PG_URL")
  pg_sync=$(first_line psql -XAtc "SHOW synchronous_commit" "$SQLOCK_TEST_PG_URL")
  pg_fsync=$(first_line psql -XAtc "SHOW fsync" "$SQLOCK_TEST_PG_URL")
  my_q() { first_line mariadb --no-defaults -h 127.0.0.1 -P "$SQLOCK_TEST_MYSQL_PORT" -usqlock -psqlock -N -e "$1"; }
  my_version=$(my_q "SELECT @@version")
  my_flush=$(my_q "SELECT @@innodb_flush_log_at_trx_commit")
  sqlite_version=$(first_line sqlite3 --version | cut -d' ' -f1)
  sqlite_fs=$(first_line findmnt -no FSTYPE -T "$sqlite_dir")
fi
if ((need_redis)); then
  redis_version=$(first_line redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
  redis_aof=$(redis-cli -h 127.0.0.1 -p "$redis_port" config get appendonly 2>/dev/null | sed -n 2p || true)
  redis_save=$(redis-cli -h 127.0.0.1 -p "$redis_port" config get save 2>/dev/null | sed -n 2p || true)
fi
compiler=$(grep -m1 '^CMAKE_CXX_COMPILER:' "$BUILD/CMakeCache.txt" 2>/dev/null | cut -d= -f2 || true)
compiler_version=$(first_line "${compiler:-c++}" --version)
meta=$RESULTS/meta-$(date -u +%Y%m%dT%H%M%SZ).json

# settle SECONDS: wait (at most that long) for the 1-minute load average to fall below half the
# cores, so that the build's load does not sit on the first cells.
settle() {
  local half end
  half=$(awk -v n="$(nproc)" 'BEGIN {print n / 2}')
  end=$((SECONDS + $1))
  while ((SECONDS < end)) && awk -v l="$(load1)" -v h="$half" 'BEGIN {exit !(l >= h)}'; do sleep 2; done
}
load_built=$(cut -d' ' -f1-3 /proc/loadavg)
((quick)) || { say "waiting up to 60 s for the build's load to settle (load now $load_built)"; settle 60; }
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

targets_json() {
  local t kv=()
  for t in "${TARGETS[@]}"; do kv+=("$t=${target_state[$t]:-not needed}"); done
  json_obj "${kv[@]}"
}
write_meta() { # yes|no: finished
  {
    printf '{\n'
    printf '  "started_utc": %s, "finished_utc": %s, "finished": %s,\n' "$(json_str "$started_utc")" \
      "$(json_str "$([[ $1 == yes ]] && date -u +%Y-%m-%dT%H:%M:%SZ)")" "$([[ $1 == yes ]] && echo true || echo false)"
    printf '  "elapsed_s": %s, "quick": %s, "cell_seconds": %s,\n' "$(($(date +%s) - started_epoch))" \
      "$( ((quick)) && echo true || echo false)" "$cell_s"
    printf '  "suites": %s, "command": %s,\n' "$(json_arr "${suites[@]}")" "$(json_str "$command_line")"
    printf '  "sizes": %s,\n' "$(json_obj "handoff_samples=$handoff_samples" "majority_cycles=$majority_cycles" \
      "reaper_rows=$reaper_rows" "renewal_leases=$renew_leases" "renewal_ttl=$renew_ttl" "renewal_seconds=$renew_s")"
    printf '  "git": %s,\n' "$(json_obj "rev=$git_rev" "branch=$git_branch" "dirty=$git_dirty")"
    printf '  "machine": %s,\n' "$(json_obj "nproc=$(nproc)" "cpu_model=$cpu_model" "memory=$mem_total" \
      "kernel=$(uname -r)" "os=$os_name" "hostname=$(hostname)")"
    printf '  "load": %s,\n' "$(json_obj "before=$load_before" "after_build=$load_built" \
      "at_start=$load_start" "after=$([[ $1 == yes ]] && cut -d' ' -f1-3 /proc/loadavg)")"
    printf '  "build": %s,\n' "$(json_obj "dir=${BUILD#"$ROOT"/}" "type=Release" "compiler=$compiler_version")"
    printf '  "targets": %s,\n' "$(targets_json)"
    printf '  "servers": %s\n' "$(json_obj "postgresql=$pg_version" "postgresql_synchronous_commit=$pg_sync" \
      "postgresql_fsync=$pg_fsync" "mariadb=$my_version" "mariadb_innodb_flush_log_at_trx_commit=$my_flush" \
      "sqlite=$sqlite_version" "sqlite_filesystem=$sqlite_fs" "redis=$redis_version" \
      "redis_appendonly=$redis_aof" "redis_save=$redis_save")"
    printf '}\n'
  } >"$meta.tmp" && mv "$meta.tmp" "$meta"
}
write_meta no

# ---------------------------------------------------------------- running one program
n_ok=0 n_failed=0 n_skipped=0
# record NAME STATUS RC ELAPSED REASON COMMAND-STRING KEY=VALUE...: NAME.run.json
record() {
  local name=$1 status=$2 rc=$3 elapsed=$4 reason=$5 cmd=$6
  shift 6
  {
    printf '{"name": %s, "status": %s, "exit_code": %s, "elapsed_s": %s, "reason": %s, ' \
      "$(json_str "$name")" "$(json_str "$status")" "${rc:-null}" "${elapsed:-null}" "$(json_str "$reason")"
    printf '"started_utc": %s, "load1_after": %s, "command": %s, "expect": %s}\n' \
      "$(json_str "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" "$(load1)" "$(json_str "$cmd")" "$(json_obj "$@")"
  } >"$RESULTS/$name.run.json"
}
# skip NAME REASON KEY=VALUE...
skip() {
  local name=$1 reason=$2
  shift 2
  warn "skipping $name: $reason"
  record "$name" skipped "" "" "$reason" "" "$@"
  n_skipped=$((n_skipped + 1))
}
# run NAME LIMIT_S KEY=VALUE... -- COMMAND...: stdout to NAME.jsonl, stderr to NAME.err, killed after LIMIT_S.
run() {
  local name=$1 limit=$2 rc=0 t0 elapsed status reason='' lines cmd
  shift 2
  local -a fields=()
  while (($#)) && [[ $1 != -- ]]; do fields+=("$1"); shift; done
  shift
  t0=$(date +%s.%N)
  # In the background, and waited for: a signal to this script interrupts `wait` at once (its trap
  # ends the program), where a foreground child would first run to its end. timeout(1) puts the
  # program in a process group of its own, out of reach of the terminal's Ctrl-C.
  timeout --kill-after=10 "$limit" "$@" >"$RESULTS/$name.jsonl" 2>"$RESULTS/$name.err" </dev/null &
  current_child=$!
  wait "$current_child" || rc=$?
  current_child=''
  elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  lines=$(grep -c '^[[:space:]]*{' "$RESULTS/$name.jsonl" || true)
  if ((rc == 0)); then
    status=ok
    ((lines > 0)) || { status=failed reason="exit 0 but no JSON line on stdout"; }
  elif ((rc == 124 || rc == 137)); then
    status=timeout reason="killed after ${limit} s"
  else
    status=failed reason="exit $rc: $(grep -v '^[[:space:]]*$' "$RESULTS/$name.err" | tail -n 1 | cut -c1-300)"
  fi
  cmd=$(printf '%q ' "$@")
  record "$name" "$status" "$rc" "$elapsed" "$reason" "${cmd% }" "${fields[@]}"
  if [[ $status == ok ]]; then
    n_ok=$((n_ok + 1))
    say "$name: $lines line(s) in ${elapsed} s$(summary "$RESULTS/$name.jsonl")"
  else
    n_failed=$((n_failed + 1))
    warn "$name: $status ($reason); stderr in $results_rel/$name.err"
  fi
}
summary() { # a short look at the first result line, for the console
  local l
  l=$(grep -m1 '^[[:space:]]*{' "$1" || true)
  for k in cycles_per_s p50_us rows_per_s lag_p99_ms; do
    [[ $l =~ \"$k\":[[:space:]]*([0-9.eE+-]+) ]] && printf ', %s %.4g' "$k" "${BASH_REMATCH[1]}"
  done
  return 0
}

# ---------------------------------------------------------------- the grid of cycles
# Engine lanes: label engine variant floor-url sqlock-url floor-extra
lanes=()
if ((need_sql)); then
  lanes=(
    "postgresql|postgresql||$SQLOCK_TEST_PG_URL|$SQLOCK_TEST_PG_URL|"
    "mysql|mysql||$SQLOCK_TEST_MYSQL_URL|$SQLOCK_TEST_MYSQL_URL|"
    "sqlite-full|sqlite|sync=full|$SQLITE_URL|$SQLITE_URL?synchronous=full|--sync full"
    "sqlite-normal|sqlite|sync=normal|$SQLITE_URL|$SQLITE_URL?synchronous=normal|--sync normal"
  )
  if ((smoke)); then unset 'lanes[3]'; fi # the same programs as sqlite-full
fi

# cycle_impl LABEL ENGINE VARIANT FLOOR_URL SQLOCK_URL FLOOR_EXTRA IMPL CLIENTS NAMES
cycle_impl() {
  local label=$1 engine=$2 variant=$3 furl=$4 surl=$5 fextra=$6 impl=$7 c=$8 n=$9 b why name
  local -a extra=() common=(--clients "$c" --names "$n" --seconds "$cell_s")
  read -r -a extra <<<"$fextra"
  name=cycle-$label-$impl-c$c-$n
  [[ $impl == redis ]] && name=cycle-redis-c$c-$n engine=redis variant=
  local -a f=(suite=cycle "engine=$engine" "impl=$impl" "variant=$variant" "clients=$c" "names=$n")
  local limit=$((cell_s + 90))
  case $impl in
    floor | floor-rowlock)
      local mode=insert
      [[ $impl == floor-rowlock ]] && mode=rowlock
      b=$(bin sqlock-floor) || { skip "$name" "$b" "${f[@]}"; return 0; }
      run "$name" "$limit" "${f[@]}" -- "$b" --engine "$engine" --url "$furl" "${common[@]}" --mode "$mode" "${extra[@]}" ;;
    sqlock-table | sqlock-row)
      b=$(bin sqlock-grid) || { skip "$name" "$b" "${f[@]}"; return 0; }
      run "$name" "$limit" "${f[@]}" -- "$b" cycle --url "$surl" --lock "${impl#sqlock-}" "${common[@]}" ;;
    sqlock-table-nometrics)
      b=$(bin sqlock-grid) || { skip "$name" "$b" "${f[@]}"; return 0; }
      run "$name" "$limit" "${f[@]}" -- "$b" cycle --url "$surl" --lock table --metrics off "${common[@]}" ;;
    sqlock-semaphore | sqlock-rw-shared | sqlock-rw-exclusive)
      b=$(bin sqlock-grid) || { skip "$name" "$b" "${f[@]}"; return 0; }
      local -a more=()
      [[ $impl == sqlock-semaphore ]] && more=(--permits 4)
      run "$name" "$limit" "${f[@]}" -- "$b" cycle --url "$surl" --lock "${impl#sqlock-}" "${more[@]}" "${common[@]}" ;;
    tooz)
      why=$(tooz_ok "$engine") || { skip "$name" "$why" "${f[@]}"; return 0; }
      run "$name" "$limit" "${f[@]}" -- "$PY" "$ROOT/bench/peers/tooz_bench.py" --url "$furl" "${common[@]}" ;;
    redis)
      b=$(bin sqlock-peer-redis) || { skip "$name" "$b" "${f[@]}"; return 0; }
      [[ -n $redis_pid ]] || { skip "$name" "no Redis server (redis-server or redis-cli missing)" "${f[@]}"; return 0; }
      run "$name" "$limit" "${f[@]}" -- "$b" --url "$REDIS_URL" "${common[@]}" ;;
  esac
}

suite_cycle() {
  local lane label engine variant furl surl fextra c n i=0 k
  for lane in "${lanes[@]}"; do
    IFS='|' read -r label engine variant furl surl fextra <<<"$lane"
    for c in "${CLIENTS[@]}"; do
      for n in "${NAMES[@]}"; do
        local -a impls=(floor sqlock-table)
        [[ $engine == sqlite ]] || impls+=(floor-rowlock sqlock-row tooz)
        [[ $engine == postgresql ]] && impls+=(redis) # once per clients x names, next to PostgreSQL
        [[ " ${COORD_CLIENTS[*]} " == *" $c "* ]] && impls+=("${COORD_IMPLS[@]}" "${METRICS_IMPLS[@]}")
        local -a chosen=()
        for k in "${impls[@]}"; do want_impl "$k" && chosen+=("$k"); done
        impls=("${chosen[@]}")
        ((${#impls[@]})) || continue
        # Every other cell runs in reverse order, so that drift (a checkpoint, a neighbour's load)
        # hits the floor and sqlock alike.
        if ((i % 2)); then
          for ((k = ${#impls[@]} - 1; k >= 0; k--)); do
            cycle_impl "$label" "$engine" "$variant" "$furl" "$surl" "$fextra" "${impls[k]}" "$c" "$n"
          done
        else
          for k in "${impls[@]}"; do
            cycle_impl "$label" "$engine" "$variant" "$furl" "$surl" "$fextra" "$k" "$c" "$n"
          done
        fi
        i=$((i + 1))
      done
    done
  done
  # What the metrics add to a cycle, measured alone (no database): the report divides it by the cycles above.
  if want_impl sqlock-table-nometrics; then
    local b
    b=$(bin sqlock-metrics-bench) || { skip cycle-metrics-recording "$b" suite=metrics impl=sqlock-metrics; return 0; }
    local -a iters=()
    ((quick)) && iters=(--iterations 100000)
    run cycle-metrics-recording 300 suite=metrics impl=sqlock-metrics -- "$b" "${iters[@]}"
  fi
}

suite_handoff() {
  local b spec label engine variant url path name limit=600
  ((quick)) && limit=180
  for spec in "postgresql|postgresql||$SQLOCK_TEST_PG_URL|notify row-queue poll in-process" \
    "mysql|mysql||$SQLOCK_TEST_MYSQL_URL|notify row-queue poll in-process" \
    "sqlite-full|sqlite|sync=full|$SQLITE_URL?synchronous=full|notify poll in-process"; do
    IFS='|' read -r label engine variant url paths <<<"$spec"
    for path in $paths; do
      name=handoff-$label-$path
      local -a f=(suite=handoff "engine=$engine" "variant=$variant" "path=$path")
      if b=$(bin sqlock-grid); then
        run "$name" "$limit" "${f[@]}" -- "$b" handoff --url "$url" --path "$path" --samples "$handoff_samples"
      else
        skip "$name" "$b" "${f[@]}"
      fi
    done
  done
}

suite_majority() {
  local b limit=600
  local -a args=() f=(suite=majority engine=postgresql)
  ((quick)) && limit=180
  b=$(bin sqlock-majority-bench) || { skip majority "$b" "${f[@]}"; return 0; }
  supports "$b" --cycles && args+=(--cycles "$majority_cycles")
  # Members: SQLOCK_TEST_PG_URL, SQLOCK_TEST_PG2_URL, SQLOCK_TEST_MYSQL_URL (our env.sh).
  run majority "$limit" "${f[@]}" -- "$b" "${args[@]}"
}

url_of() {
  case $1 in
    postgresql) echo "$SQLOCK_TEST_PG_URL" ;;
    mysql) echo "$SQLOCK_TEST_MYSQL_URL" ;;
    sqlite) echo "$SQLITE_URL" ;;
  esac
}

suite_reaper() {
  local b e limit=1200
  local -a args=()
  ((quick)) && limit=240
  for e in "${REAPER_ENGINES[@]}"; do
    local -a f=(suite=reaper "engine=$e")
    b=$(bin sqlock-reaper-bench) || { skip "reaper-$e" "$b" "${f[@]}"; continue; }
    args=(--rows "$reaper_rows")
    [[ -n $reaper_window ]] && supports "$b" --window && args+=(--window "$reaper_window")
    [[ -n $reaper_settle ]] && supports "$b" --settle && args+=(--settle "$reaper_settle")
    run "reaper-$e" "$limit" "${f[@]}" -- "$b" "$(url_of "$e")" "${args[@]}"
  done
}

suite_renewal() {
  local b e limit=$((renew_s + 240))
  ((quick)) && limit=$((renew_s + 60))
  for e in "${RENEWAL_ENGINES[@]}"; do
    local -a f=(suite=renewal "engine=$e")
    b=$(bin sqlock-grid) || { skip "renewal-$e" "$b" "${f[@]}"; continue; }
    run "renewal-$e" "$limit" "${f[@]}" -- "$b" renewal --url "$(url_of "$e")" \
      --leases "$renew_leases" --ttl "$renew_ttl" --seconds "$renew_s"
  done
}

for s in "${suites[@]}"; do
  say "suite $s"
  "suite_$s"
done

say "done: $n_ok run(s) ok, $n_failed failed or timed out, $n_skipped skipped, in $(($(date +%s) - started_epoch)) s"
write_meta yes
cleanup
if ((smoke)); then
  # What the step asserts: every program ran and printed its lines. The page is made too (the
  # generator must not rot either), but next to the results: docs/ keeps the last real run.
  "$PY" "$ROOT/bench/report.py" --results "$RESULTS" --out "$RESULTS/benchmarks.md" --no-charts ||
    die "bench/report.py failed on the smoke run's results"
  bad=0
  for f in "$RESULTS"/*.run.json; do
    "$PY" - "$f" <<'PYEOF' || bad=$((bad + 1))
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("status") != "ok":
    cmd = r.get("command") or ""
    prog = cmd.split()[0].rsplit("/", 1)[-1] if cmd else "(not run)"
    if prog.startswith("python"):
        prog = cmd.split()[1].rsplit("/", 1)[-1]
    print(f"run.sh: bench smoke: {r['name']}: {prog} {r.get('status')}: {r.get('reason') or '?'}", file=sys.stderr)
    sys.exit(1)
PYEOF
  done
  ((n_ok > 0)) || die "bench smoke: no benchmark program ran"
  ((bad == 0)) || die "bench smoke: $bad run(s) of $((n_ok + n_failed + n_skipped)) did not print their lines (above; stderr in $results_rel/NAME.err)"
  say "bench smoke: all $n_ok runs printed their lines (page: $results_rel/benchmarks.md)"
  exit 0
fi
"$PY" "$ROOT/bench/report.py" --results "$RESULTS" || die "bench/report.py failed"
say "wrote docs/benchmarks.md and docs/bench/*.png"
((n_failed + n_skipped == 0)) || warn "$((n_failed + n_skipped)) run(s) produced no results: see 'Runs without results' in docs/benchmarks.md"
