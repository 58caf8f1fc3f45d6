#!/usr/bin/env bash
# A 3-node MariaDB 10.11 Galera cluster on loopback, for sqlock's tests (tests/ha/galera_suite.cpp).
#
# Usage: scripts/ha/galera.sh start | stop | status | kill N | restart N
#   start      stop and wipe what an earlier start left in $SQLOCK_HA_DIR, then bootstrap node 1
#              (--wsrep-new-cluster), join nodes 2 and 3 (rsync SST), create user/db sqlock/sqlock once
#              (replicated), write $SQLOCK_HA_DIR/env.sh and print its path
#   stop       SIGTERM each recorded mariadbd (by pid, never by name)
#   status     each node: pid, port, wsrep state and cluster size; exit 3 if one is down
#   kill N     SIGKILL node N's recorded mariadbd (N = 1..3) and wait until it is gone
#   restart N  start node N again: `mariadbd --wsrep-recover`, then --wsrep-start-position=<recovered>,
#              so it catches up by IST; waits until wsrep_cluster_size=3 and the node is Synced
#
# Environment:
#   SQLOCK_HA_DIR      where everything lives (default <repo>/build/ha/galera)
#   SQLOCK_HA_TIMEOUT  seconds to wait for a node (default 90)
#
# env.sh: SQLOCK_HA_GALERA_URL1..3 (mysql://sqlock:sqlock@127.0.0.1:<port>/sqlock), SQLOCK_HA_GALERA_PID1..3,
# SQLOCK_HA_GALERA_SCRIPT (this script, for the fault verbs), SQLOCK_HA_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SELF="$ROOT/scripts/ha/galera.sh"
DIR=${SQLOCK_HA_DIR:-$ROOT/build/ha/galera}
TIMEOUT=${SQLOCK_HA_TIMEOUT:-90}
PROVIDER=/usr/lib/galera/libgalera_smm.so
NODES=(1 2 3)

NAME=galera.sh
# shellcheck source=scripts/lib/servers.sh
source "$ROOT/scripts/lib/servers.sh"

load_state() {
  [[ -f $DIR/state ]] || die "no cluster recorded in $DIR (run: SQLOCK_HA_DIR=$DIR bash $SELF start)"
  # shellcheck source=/dev/null
  source "$DIR/state"
}

ndir() { echo "$RUN/n$1"; }
sock() { echo "$RUN/n$1/mariadb.sock"; }
pidfile() { echo "$RUN/n$1/mariadb.pid"; }
port() { local v="PORT$1"; echo "${!v}"; }
node_pid() { # pid of node $1's mariadbd, only if alive and really serving its data dir (pids get reused)
  local pid f
  f=$(pidfile "$1")
  [[ -s $f ]] && pid=$(<"$f") && alive "$pid" &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--datadir=$(ndir "$1")/data " && echo "$pid"
}
cli() { local n=$1; shift; mariadb --no-defaults -S "$(sock "$n")" -uroot -N -B "$@"; }
wsrep_status() { cli "$1" -e "SHOW STATUS LIKE '$2'" 2>/dev/null | cut -f2; }

node_args() { # the options of node $1, the same for --wsrep-recover and the real start
  local n=$1 d
  d=$(ndir "$n")
  local gcomm="gcomm://127.0.0.1:$GCOMM1,127.0.0.1:$GCOMM2,127.0.0.1:$GCOMM3"
  local g="GCOMM$n" i="IST$n" s="SST$n"
  printf '%s\n' --no-defaults --datadir="$d/data" ${MYUSER:+--user=$MYUSER} --port="$(port "$n")" \
    --bind-address=127.0.0.1 --socket="$(sock "$n")" --pid-file="$(pidfile "$n")" --skip-name-resolve \
    --tmpdir="$d/tmp" --log-error="$d/mariadb.log" --innodb-buffer-pool-size=32M --innodb-log-file-size=16M \
    --innodb-flush-log-at-trx-commit=1 --max-connections=300 \
    --binlog-format=ROW --innodb-autoinc-lock-mode=2 --default-storage-engine=InnoDB \
    --wsrep-on=ON --wsrep-provider="$PROVIDER" --wsrep-cluster-name=sqlock-ha \
    --wsrep-cluster-address="$gcomm" --wsrep-node-name="node$n" --wsrep-node-address="127.0.0.1:${!g}" \
    --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:${!g};ist.recv_addr=127.0.0.1:${!i};gcache.size=32M;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S" \
    --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:${!s}" --wsrep-slave-threads=2 \
    --log-bin-trust-function-creators=1
  # log_bin_trust_function_creators: Galera logs like a binlog, which makes CREATE TRIGGER need SUPER; the
  # tests' audit triggers (tests/faults/audit.hpp) are created by the user sqlock. sqlock itself creates
  # only tables and procedures, which do not need it.
}

start_node() { # N [EXTRA...]: start node N's mariadbd in its own session; wait until it answers on its socket
  local n=$1 pid i args=()
  shift
  mapfile -t args < <(node_args "$n")
  rm -f "$(pidfile "$n")"
  setsid mariadbd "${args[@]}" "$@" </dev/null >>"$(ndir "$n")/mariadb.log" 2>&1 &
  pid=$!
  for ((i = 0; i < TIMEOUT * 5; i++)); do
    if [[ $(wsrep_status "$n" wsrep_local_state_comment) == Synced ]] && [[ -n $(node_pid "$n") ]]; then return 0; fi
    alive "$pid" || break
    sleep 0.2
  done
  kill -TERM "$pid" 2>/dev/null || true
  show_log "$(ndir "$n")/mariadb.log"
  die "Galera node $n failed to start and sync on 127.0.0.1:$(port "$n") (exited, or not Synced in ${TIMEOUT}s)"
}

wait_cluster_size() { # N SIZE: node N sees a primary component of SIZE nodes
  local i
  for ((i = 0; i < TIMEOUT * 5; i++)); do
    [[ $(wsrep_status "$1" wsrep_cluster_size) == "$2" ]] && return 0
    sleep 0.2
  done
  die "node $1: wsrep_cluster_size did not reach $2 in ${TIMEOUT}s"
}

stop_node() {
  local n=$1 pid i
  pid=$(node_pid "$n") || { rm -f "$(pidfile "$n")"; return 0; }
  kill -TERM "$pid"
  for ((i = 0; i < TIMEOUT * 10; i++)); do
    alive "$pid" || { rm -f "$(pidfile "$n")"; return 0; }
    sleep 0.1
  done
  die "Galera node $n (pid $pid) did not stop within ${TIMEOUT}s of SIGTERM; kill -9 $pid if it hangs"
}

kill_node() {
  local n=$1 pid i
  pid=$(node_pid "$n") || die "Galera node $n is not running: nothing to kill"
  kill -KILL "$pid"
  for ((i = 0; i < TIMEOUT * 100; i++)); do alive "$pid" || break; sleep 0.01; done
  alive "$pid" && die "mariadbd $pid (node $n) survived SIGKILL for ${TIMEOUT}s"
  rm -f "$(pidfile "$n")"
}

restart_node() {
  local n=$1 args=() pos
  [[ -z $(node_pid "$n") ]] || die "Galera node $n is running (pid $(node_pid "$n")): kill it first"
  mapfile -t args < <(node_args "$n")
  # --wsrep-recover prints the last committed position from InnoDB; starting there lets a donor send only the
  # missing write sets (IST) instead of a full copy (SST).
  mariadbd "${args[@]}" --wsrep-recover --log-error="$(ndir "$n")/recover.log" </dev/null >/dev/null 2>&1 ||
    { show_log "$(ndir "$n")/recover.log"; die "node $n: mariadbd --wsrep-recover failed"; }
  pos=$(sed -n 's/.*WSREP: Recovered position: *\([^ ]*\).*/\1/p' "$(ndir "$n")/recover.log" | tail -n 1)
  [[ -n $pos ]] || { show_log "$(ndir "$n")/recover.log"; die "node $n: no recovered position"; }
  start_node "$n" --wsrep-start-position="$pos"
  wait_cluster_size "$n" 3
  write_env
}

write_env() {
  {
    echo "# Generated by scripts/ha/galera.sh start; source it."
    printf 'export SQLOCK_HA_DIR=%s\n' "$DIR"
    printf 'export SQLOCK_HA_GALERA_SCRIPT=%s\n' "$SELF"
    for n in "${NODES[@]}"; do
      printf 'export SQLOCK_HA_GALERA_URL%s=mysql://sqlock:sqlock@127.0.0.1:%s/sqlock\n' "$n" "$(port "$n")"
      printf 'export SQLOCK_HA_GALERA_PID%s=%s\n' "$n" "$(node_pid "$n" || echo 0)"
    done
  } >"$DIR/env.sh.tmp"
  mv "$DIR/env.sh.tmp" "$DIR/env.sh"
}

cmd_stop() {
  [[ -f $DIR/state ]] || { say "nothing recorded in $DIR; nothing to stop"; return 0; }
  load_state
  local rc=0 n
  # The last one to stop is the one that can bootstrap; order does not matter to us (start wipes).
  for n in 3 2 1; do (stop_node "$n") || rc=1; done
  return "$rc"
}

wipe_run() { if [[ ${RUN:-} == "$DIR/run" || ${RUN:-} == /tmp/sqlock-galera.* ]]; then rm -rf "$RUN"; fi; }

cmd_start() {
  command -v mariadbd >/dev/null || die "no mariadbd (run: bash scripts/deps.sh --servers)"
  [[ -f $PROVIDER ]] || die "no Galera provider $PROVIDER (run: bash scripts/deps.sh --servers)"
  command -v rsync >/dev/null || die "no rsync, needed for SST (run: bash scripts/deps.sh --servers)"
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  if [[ -f $DIR/state ]]; then
    (cmd_stop) # a failure here stops us: never leak a running node
    (load_state && wipe_run)
    rm -f "$DIR/state" "$DIR/env.sh"
  fi
  MYUSER=
  if ((EUID == 0)); then MYUSER=mysql; fi
  RUN=$DIR/run
  rm -rf "$RUN"
  mkdir -p "$RUN" && chmod 755 "$RUN"
  local ok=1
  ((${#RUN} + 30 < 100)) || ok=0
  if ((EUID == 0)); then runuser -u mysql -- test -x "$RUN" 2>/dev/null || ok=0; fi
  if ((ok == 0)); then
    rm -rf "$RUN"
    RUN=$(mktemp -d /tmp/sqlock-galera.XXXXXX) && chmod 755 "$RUN"
  fi
  local used=() n kind p
  for n in "${NODES[@]}"; do
    for kind in PORT GCOMM IST SST; do
      p=$(pick_port ${used[@]+"${used[@]}"})
      used+=("$p")
      printf -v "$kind$n" %s "$p"
    done
  done
  {
    printf 'RUN=%q\nMYUSER=%q\n' "$RUN" "$MYUSER"
    for n in "${NODES[@]}"; do
      for kind in PORT GCOMM IST SST; do p="$kind$n"; printf '%s=%q\n' "$p" "${!p}"; done
    done
  } >"$DIR/state"
  say "3 Galera nodes on 127.0.0.1:$PORT1,$PORT2,$PORT3, files in $RUN"

  for n in "${NODES[@]}"; do
    # A tmpdir of its own: /tmp is shared with other servers and their clean-ups.
    mkdir -p "$(ndir "$n")/data" "$(ndir "$n")/tmp" && chmod 755 "$(ndir "$n")" && touch "$(ndir "$n")/mariadb.log"
  done
  # Only node 1 is initialised: 2 and 3 receive its data by SST when they join.
  give_to mysql "$RUN"
  mariadb-install-db --no-defaults --datadir="$(ndir 1)/data" ${MYUSER:+--user=$MYUSER} --skip-test-db \
    --tmpdir="$(ndir 1)/tmp" \
    --auth-root-authentication-method=normal >"$(ndir 1)/install.log" 2>&1 ||
    { show_log "$(ndir 1)/install.log"; die "mariadb-install-db failed"; }
  give_to mysql "$RUN"
  start_node 1 --wsrep-new-cluster
  cli 1 -e "CREATE DATABASE sqlock;
    CREATE USER 'sqlock'@'127.0.0.1' IDENTIFIED BY 'sqlock';
    CREATE USER 'sqlock'@'localhost' IDENTIFIED BY 'sqlock';
    GRANT ALL ON sqlock.* TO 'sqlock'@'127.0.0.1', 'sqlock'@'localhost';
    GRANT PROCESS, CONNECTION ADMIN ON *.* TO 'sqlock'@'127.0.0.1', 'sqlock'@'localhost';" ||
    die "Galera setup (database and user sqlock on node 1) failed"
  start_node 2
  start_node 3
  wait_cluster_size 1 3
  write_env
  echo "$DIR/env.sh"
}

cmd_status() {
  load_state
  local rc=0 n pid
  for n in "${NODES[@]}"; do
    if pid=$(node_pid "$n"); then
      echo "node $n: running on 127.0.0.1:$(port "$n"), pid $pid, $(wsrep_status "$n" wsrep_local_state_comment)," \
        "cluster size $(wsrep_status "$n" wsrep_cluster_size)"
    else
      echo "node $n: stopped (port $(port "$n"))"
      rc=3
    fi
  done
  return "$rc"
}

node_arg() { [[ ${1:-} =~ ^[123]$ ]] || die "$2 needs a node number 1, 2 or 3 (got '${1:-}')"; }

case ${1:-} in
  start)
    # Under load a joiner's SST now and then fails and takes its mariadbd down (seen 2 in 19 starts at load
    # 7-14): that is the test cluster's set-up, not what the tests judge, so a failed start is tried once more
    # from scratch (cmd_start stops and wipes what the first try left).
    (cmd_start) || { say "the start failed (above); starting once more from scratch"; cmd_start; } ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  kill) node_arg "${2:-}" kill; load_state; kill_node "$2"; write_env ;;
  restart) node_arg "${2:-}" restart; load_state; restart_node "$2" ;;
  *) echo "usage: $0 start | stop | status | kill N | restart N" >&2; exit 2 ;;
esac
