#!/usr/bin/env bash
# PgBouncer 1.18 in front of a private PostgreSQL 15, in session and in transaction pooling, on free ports
# of 127.0.0.1 (tests/ha/README.md).
#
# Usage: scripts/ha/pgbouncer.sh start | stop | status | reset
#   start   Stops and wipes what an earlier start left in the dir, starts PostgreSQL (scripts/test-servers.sh,
#           PostgreSQL only, in DIR/pg) and one PgBouncer with two databases: sqlock_session (pool_mode=session)
#           and sqlock_transaction (pool_mode=transaction), both the PostgreSQL database sqlock. Writes
#           DIR/env.sh and prints its path:
#             SQLOCK_HA_PGBOUNCER_SESSION_URL, SQLOCK_HA_PGBOUNCER_TRANSACTION_URL (through PgBouncer),
#             SQLOCK_HA_PGBOUNCER_DIRECT_URL (PostgreSQL itself), SQLOCK_HA_PGBOUNCER_ADMIN_URL (the admin
#             console: user sqlock, database pgbouncer), SQLOCK_HA_PGBOUNCER_PID.
#   stop    Stops PgBouncer (its recorded pid, never by name) and PostgreSQL.
#   reset   KILL then RESUME of both databases on the admin console: every pooled server connection is closed,
#           so no scenario inherits an earlier one's PREPAREs, LISTENs or SETs.
#   status  Exit 0 only if both run.
# Environment: SQLOCK_HA_DIR (default <repo>/build/ha/pgbouncer), SQLOCK_TEST_SERVER_TIMEOUT (default 30).
# Auth: PostgreSQL trusts loopback; PgBouncer uses auth_type=trust with a userlist naming sqlock.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SELF="$ROOT/scripts/ha/pgbouncer.sh"
DIR=${SQLOCK_HA_DIR:-$ROOT/build/ha/pgbouncer}
TIMEOUT=${SQLOCK_TEST_SERVER_TIMEOUT:-30}
NAME=pgbouncer.sh
RUN=$DIR
# shellcheck source=scripts/lib/servers.sh
source "$ROOT/scripts/lib/servers.sh"

pg_servers() { SQLOCK_TEST_DIR=$DIR/pg SQLOCK_TEST_ENGINES=postgresql bash "$ROOT/scripts/test-servers.sh" "$@"; }

load_state() {
  [[ -f $DIR/state ]] || die "nothing recorded in $DIR (run: $SELF start)"
  # shellcheck source=/dev/null
  source "$DIR/state"
}

bouncer_pid() { # the recorded pid, only if alive and really running our ini (pids get reused)
  local pid
  [[ -s $BDIR/pgbouncer.pid ]] && pid=$(<"$BDIR/pgbouncer.pid") && [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$BDIR/pgbouncer.ini" && echo "$pid"
}

admin() { # SQL on the admin console
  psql -X -q -h 127.0.0.1 -p "$B_PORT" -U sqlock -d pgbouncer -c "$1" >/dev/null
}

bouncer_stop() {
  local pid i
  pid=$(bouncer_pid) || return 0
  kill -INT "$pid" # immediate shutdown
  for ((i = 0; i < TIMEOUT * 10; i++)); do alive "$pid" || return 0; sleep 0.1; done
  die "PgBouncer (pid $pid) did not stop within ${TIMEOUT}s of SIGINT; kill -9 $pid if it hangs"
}

cmd_stop() {
  [[ -f $DIR/state ]] || { say "nothing recorded in $DIR; nothing to stop"; return 0; }
  load_state
  local rc=0
  (bouncer_stop) || rc=1
  pg_servers stop || rc=1
  return "$rc"
}

cmd_start() {
  command -v pgbouncer >/dev/null || die "no pgbouncer (run: bash scripts/deps.sh --servers)"
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  if [[ -f $DIR/state ]]; then cmd_stop; fi
  rm -rf "$DIR/bouncer" "$DIR/state" "$DIR/env.sh"
  # shellcheck source=/dev/null
  pg_servers start >/dev/null
  # shellcheck source=/dev/null
  source "$DIR/pg/env.sh"
  BDIR=$DIR/bouncer
  if ((EUID == 0)) && ! runuser -u postgres -- test -x "$DIR"; then BDIR=$(mktemp -d /tmp/sqlock-pgbouncer.XXXXXX); fi
  mkdir -p "$BDIR" && chmod 755 "$BDIR"
  B_PORT=$(pick_port "$SQLOCK_TEST_PG_PORT")
  printf 'BDIR=%q\nB_PORT=%q\nPG_PORT=%q\n' "$BDIR" "$B_PORT" "$SQLOCK_TEST_PG_PORT" >"$DIR/state"
  local pg="host=127.0.0.1 port=$SQLOCK_TEST_PG_PORT dbname=sqlock"
  cat >"$BDIR/pgbouncer.ini" <<INI
; scripts/ha/pgbouncer.sh
[databases]
sqlock_session = $pg pool_mode=session
sqlock_transaction = $pg pool_mode=transaction

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $B_PORT
unix_socket_dir =
auth_type = trust
auth_file = $BDIR/userlist.txt
admin_users = sqlock
pool_mode = session
default_pool_size = 150
max_client_conn = 400
server_reset_query = DISCARD ALL
logfile = $BDIR/pgbouncer.log
INI
  echo '"sqlock" "sqlock"' >"$BDIR/userlist.txt"
  touch "$BDIR/pgbouncer.log"
  give_to postgres "$BDIR"
  # setpriv does not fork: $! is PgBouncer itself (which refuses to run as root). setsid: a harness killing
  # its process group does not take it along.
  local as=()
  if ((EUID == 0)); then as=(setpriv --reuid=postgres --regid=postgres --init-groups); fi
  (cd "$BDIR" && exec setsid ${as[@]+"${as[@]}"} pgbouncer "$BDIR/pgbouncer.ini" </dev/null >>"$BDIR/pgbouncer.log" 2>&1) &
  echo $! >"$BDIR/pgbouncer.pid"
  local i
  for ((i = 0; i < TIMEOUT * 10; i++)); do
    if psql -X -q -h 127.0.0.1 -p "$B_PORT" -U sqlock -d sqlock_transaction -c 'SELECT 1' >/dev/null 2>&1; then break; fi
    bouncer_pid >/dev/null || { show_log "$BDIR/pgbouncer.log"; die "PgBouncer exited during start"; }
    sleep 0.1
  done
  bouncer_pid >/dev/null || die "PgBouncer did not start"
  psql -X -q -h 127.0.0.1 -p "$B_PORT" -U sqlock -d sqlock_session -c 'SELECT 1' >/dev/null ||
    { show_log "$BDIR/pgbouncer.log"; die "PgBouncer on 127.0.0.1:$B_PORT does not answer"; }
  local url=postgresql://sqlock:sqlock@127.0.0.1
  {
    echo "# Generated by scripts/ha/pgbouncer.sh start; source it."
    echo "export SQLOCK_HA_PGBOUNCER_SESSION_URL=$url:$B_PORT/sqlock_session"
    echo "export SQLOCK_HA_PGBOUNCER_TRANSACTION_URL=$url:$B_PORT/sqlock_transaction"
    echo "export SQLOCK_HA_PGBOUNCER_DIRECT_URL=$url:$SQLOCK_TEST_PG_PORT/sqlock"
    echo "export SQLOCK_HA_PGBOUNCER_ADMIN_URL=$url:$B_PORT/pgbouncer"
    echo "export SQLOCK_HA_PGBOUNCER_PID=$(<"$BDIR/pgbouncer.pid")"
  } >"$DIR/env.sh"
  say "PgBouncer on 127.0.0.1:$B_PORT (session: sqlock_session, transaction: sqlock_transaction) in front of PostgreSQL on 127.0.0.1:$SQLOCK_TEST_PG_PORT"
  echo "$DIR/env.sh"
}

cmd_reset() {
  load_state
  bouncer_pid >/dev/null || die "PgBouncer is not running (run: $SELF start)"
  local db
  for db in sqlock_session sqlock_transaction; do
    admin "KILL $db" || die "KILL $db on the admin console failed"
    admin "RESUME $db" || die "RESUME $db on the admin console failed"
  done
}

cmd_status() {
  load_state
  local rc=0 pid
  if pid=$(bouncer_pid); then echo "pgbouncer: running on 127.0.0.1:$B_PORT, pid $pid"
  else echo "pgbouncer: stopped (port $B_PORT)"; rc=3; fi
  pg_servers status | sed -n 1p || rc=3
  echo "env: $DIR/env.sh"
  return "$rc"
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  reset) cmd_reset ;;
  status) cmd_status ;;
  *) echo "usage: $0 start | stop | status | reset" >&2; exit 2 ;;
esac
