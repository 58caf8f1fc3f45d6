#!/usr/bin/env bash
# Private PostgreSQL 15 and MariaDB 10.11 servers for sqlock's tests, on free ports of 127.0.0.1.
#
# Usage: scripts/test-servers.sh start | stop | status | restart|crash postgresql|mariadb
#   start    Fresh, empty servers: any servers recorded in the dir are stopped and their data
#            wiped first (no reuse, so a run never sees an earlier run's tables or locks).
#            Writes DIR/env.sh (SQLOCK_TEST_* variables) and prints its path on stdout.
#   stop     Stops both servers (pg_ctl / the recorded pid, never by name); keeps the dir and logs.
#   restart  Stops one server and starts it again on the same port and data (no re-init).
#   crash    Kills one server with SIGKILL (PostgreSQL: the postmaster of our data dir; MariaDB: the
#            recorded mariadbd of our data dir; never by process name), then starts it again on the
#            same port and data: the server runs crash recovery. Waits for readiness, like start.
#   status   Prints each server's state; exit 0 only if both (or, PostgreSQL only, it) run.
# Environment:
#   SQLOCK_TEST_DIR   control dir: state, env.sh (default: <repo>/build/test-servers, whatever
#                     the cwd). Servers live in DIR/run, or, if the postgres/mysql users cannot
#                     reach DIR or its path is too long for a Unix socket, in a fresh
#                     /tmp/sqlock-test.XXXXXX recorded in DIR/state.
#   SQLOCK_PG_BIN     PostgreSQL binaries (default /usr/lib/postgresql/15/bin)
#   SQLOCK_TEST_SERVER_TIMEOUT  seconds to wait for start/stop (default 30)
# For a private server of one fault test (read by start, kept in DIR/state for the other verbs):
#   SQLOCK_TEST_ENGINES  "postgresql" starts PostgreSQL only (no MariaDB, no SQLOCK_TEST_MYSQL_* in
#                        env.sh), "mariadb" MariaDB only (no SQLOCK_TEST_PG_* in env.sh); default
#                        "postgresql mariadb"
#   SQLOCK_TEST_PG_CONF  extra postgresql.conf lines, appended after ours (later settings win),
#                        e.g. "listen_addresses = '127.0.0.1,10.1.2.1'"
#   SQLOCK_TEST_PG_HBA   extra pg_hba.conf lines, appended (e.g. "host all all 10.1.2.0/30 trust")
#   SQLOCK_TEST_PG_ENV   space-separated VAR=value pairs for the postmaster's environment, e.g. a
#                        libfaketime preload: "LD_PRELOAD=... FAKETIME_TIMESTAMP_FILE=... FAKETIME_NO_CACHE=1"
#   SQLOCK_TEST_MY_ARGS  space-separated extra mariadbd options, after ours (later ones win), e.g.
#                        "--bind-address=127.0.0.1,10.1.2.1"
#   SQLOCK_TEST_MY_SQL   extra SQL run as root after our setup, e.g. "CREATE USER 'sqlock'@'10.1.2.2' ..."
#   SQLOCK_TEST_MY_ENV   space-separated VAR=value pairs for mariadbd's environment (like SQLOCK_TEST_PG_ENV)
# Both servers trust local connections; user/password/database are all "sqlock" (PostgreSQL also
# has a second database, sqlock2, SQLOCK_TEST_PG2_URL: an independent member for majority tests).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF="$ROOT/scripts/test-servers.sh"
DIR=${SQLOCK_TEST_DIR:-$ROOT/build/test-servers}
PG_BIN=${SQLOCK_PG_BIN:-/usr/lib/postgresql/15/bin}
TIMEOUT=${SQLOCK_TEST_SERVER_TIMEOUT:-30}
ENGINES=${SQLOCK_TEST_ENGINES:-postgresql mariadb}
PG_CONF=${SQLOCK_TEST_PG_CONF:-}
PG_HBA=${SQLOCK_TEST_PG_HBA:-}
PG_ENV=${SQLOCK_TEST_PG_ENV:-}
MY_ARGS=${SQLOCK_TEST_MY_ARGS:-}
MY_SQL=${SQLOCK_TEST_MY_SQL:-}
MY_ENV=${SQLOCK_TEST_MY_ENV:-}

want_my() { [[ " $ENGINES " == *" mariadb "* ]]; }
want_pg() { [[ " $ENGINES " == *" postgresql "* ]]; }

NAME=test-servers.sh
# shellcheck source=scripts/lib/servers.sh
source "$ROOT/scripts/lib/servers.sh"

load_state() {
  [[ -f $DIR/state ]] || die "no servers recorded in $DIR (run: $SELF start)"
  # shellcheck source=/dev/null
  source "$DIR/state"
  set_paths
}
set_paths() {
  PGDIR=$RUN/pg PGDATA=$RUN/pg/data PGLOG=$RUN/pg/postgresql.log
  MYDIR=$RUN/my MYDATA=$RUN/my/data MYLOG=$RUN/my/mariadb.log
  MYSOCK=$RUN/my/mariadb.sock MYPID=$RUN/my/mariadb.pid
}

# ---------------------------------------------------------------- PostgreSQL
pg_running() { [[ -d $PGDATA ]] && as_user postgres "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; }

pg_init() {
  [[ -x $PG_BIN/initdb ]] || die "no PostgreSQL 15 in $PG_BIN (run: bash scripts/deps.sh --servers)"
  mkdir -p "$PGDIR" && chmod 755 "$PGDIR" && touch "$PGLOG" && give_to postgres "$PGDIR"
  as_user postgres "$PG_BIN/initdb" -D "$PGDATA" -A trust -U postgres -E UTF8 --no-locale \
    >"$PGDIR/initdb.log" 2>&1 || { show_log "$PGDIR/initdb.log"; die "PostgreSQL initdb failed"; }
  # Appending keeps the file owned by postgres. Later settings override initdb's.
  cat >>"$PGDATA/postgresql.conf" <<CONF
# --- sqlock test server (scripts/test-servers.sh)
port = $PG_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PGDIR'
# The soak tier runs four storms at once (battery.sh soak -- -j4); each opens up to about 100 sessions here: its
# workers' stores (4 x (pool + 2 reserved + the listener)), the reaper's, and the fenced resource's, which lives on
# PostgreSQL for the MariaDB storms too. At 200 a round ran out of slots ("remaining connection slots are reserved").
max_connections = 400
shared_buffers = 16MB
fsync = on
synchronous_commit = on
# After a crash (the crash verb), one syncfs instead of an fsync per data file (seconds here).
recovery_init_sync_method = syncfs
# Everything goes to the pg_ctl -l log file, which tests may grep for ERROR lines.
log_destination = 'stderr'
logging_collector = off
log_min_messages = warning
log_line_prefix = '%m [%p] %q%u@%d '
CONF
  if [[ -n $PG_CONF ]]; then printf '# --- SQLOCK_TEST_PG_CONF\n%s\n' "$PG_CONF" >>"$PGDATA/postgresql.conf"; fi
  if [[ -n $PG_HBA ]]; then printf '# --- SQLOCK_TEST_PG_HBA\n%s\n' "$PG_HBA" >>"$PGDATA/pg_hba.conf"; fi
}

pg_start() {
  local env_args=()
  if [[ -n $PG_ENV ]]; then read -r -a env_args <<<"$PG_ENV"; fi
  as_user postgres env ${env_args[@]+"${env_args[@]}"} "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$PGLOG" -w -t "$TIMEOUT" start >/dev/null 2>&1 ||
    { show_log "$PGLOG"; die "PostgreSQL failed to start on 127.0.0.1:$PG_PORT (exited, or not ready in ${TIMEOUT}s); log: $PGLOG"; }
}

pg_setup() {
  local c
  # Separate -c: CREATE DATABASE cannot run inside the implicit transaction of a multi-statement -c.
  # sqlock2: a second, independent database on the same server (a member of the majority tests).
  for c in "CREATE ROLE sqlock LOGIN PASSWORD 'sqlock'" "CREATE DATABASE sqlock OWNER sqlock" \
           "CREATE DATABASE sqlock2 OWNER sqlock" "GRANT pg_signal_backend TO sqlock"; do
    psql -X -q -v ON_ERROR_STOP=1 -h "$PGDIR" -p "$PG_PORT" -U postgres -d postgres -c "$c" >/dev/null ||
      die "PostgreSQL setup failed at: $c"
  done
}

pg_stop() {
  pg_running || return 0
  as_user postgres "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t "$TIMEOUT" stop >/dev/null ||
    { show_log "$PGLOG"; die "PostgreSQL (data $PGDATA) did not stop within ${TIMEOUT}s"; }
}

pg_pid() { # pid of our postmaster, only if alive and really serving our data dir (pids get reused)
  local pid
  [[ -s $PGDATA/postmaster.pid ]] && pid=$(head -n 1 "$PGDATA/postmaster.pid") && [[ $pid =~ ^[0-9]+$ ]] &&
    alive "$pid" && [[ $(sed -n 2p "$PGDATA/postmaster.pid") == "$PGDATA" ]] &&
    [[ $(readlink -f "/proc/$pid/cwd" 2>/dev/null) == "$(readlink -f "$PGDATA")" ]] && echo "$pid"
}

pg_crash() { # SIGKILL the postmaster (its backends die with it), then start again: crash recovery
  local pid i
  pid=$(pg_pid) || die "PostgreSQL (data $PGDATA) is not running: nothing to crash"
  kill -KILL "$pid"
  for ((i = 0; i < TIMEOUT * 100; i++)); do alive "$pid" || break; sleep 0.01; done
  alive "$pid" && die "PostgreSQL postmaster $pid survived SIGKILL for ${TIMEOUT}s"
  # Orphaned backends exit as soon as they notice the postmaster is gone; none may still use
  # the old shared memory when the new postmaster starts, so wait for them too.
  for ((i = 0; i < TIMEOUT * 100; i++)); do
    pg_orphans_gone && break
    sleep 0.01
  done
  pg_orphans_gone || die "PostgreSQL backends of the killed postmaster $pid still run in $PGDATA after ${TIMEOUT}s"
  # The killed postmaster can stay a zombie (when nobody reaps it, e.g. PID 1 in a container),
  # and PostgreSQL takes a lock file whose pid still exists for a live server: remove the lock
  # files that name it (it is dead, and so are its backends).
  local f
  for f in "$PGDATA/postmaster.pid" "$PGDIR/.s.PGSQL.$PG_PORT.lock"; do
    [[ -f $f && $(head -n 1 "$f") == "$pid" ]] && rm -f "$f"
  done
  pg_start
}
pg_orphans_gone() { # no process left that runs in our data dir (the postmaster's children do)
  local p data
  data=$(readlink -f "$PGDATA")
  for p in /proc/[0-9]*; do
    [[ $(readlink -f "$p/cwd" 2>/dev/null) == "$data" ]] && return 1
  done
  return 0
}

# ---------------------------------------------------------------- MariaDB
my_pid() { # pid of our mariadbd, only if alive and really serving our data dir (pids get reused)
  local pid
  [[ -s $MYPID ]] && pid=$(<"$MYPID") && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--datadir=$MYDATA " && echo "$pid"
}
my_cli() { mariadb --no-defaults -S "$MYSOCK" -uroot "$@"; }

my_init() {
  command -v mariadbd >/dev/null || die "no mariadbd (run: bash scripts/deps.sh --servers)"
  # A tmpdir of its own: /tmp is shared with other servers and whatever cleans it (a test once failed on
  # "Error on delete of '/tmp/#sql-temptable-...'" while other programs ran beside it).
  mkdir -p "$MYDIR/tmp" && chmod 755 "$MYDIR" && touch "$MYLOG" && give_to mysql "$MYDIR"
  # root@localhost with an empty password (not unix_socket auth), so a non-root runner can log in too.
  mariadb-install-db --no-defaults --datadir="$MYDATA" ${MYUSER:+--user=$MYUSER} --skip-test-db \
    --auth-root-authentication-method=normal >"$MYDIR/install.log" 2>&1 ||
    { show_log "$MYDIR/install.log"; die "mariadb-install-db failed"; }
}

my_start() {
  local pid i extra_args=() env_args=()
  if [[ -n $MY_ARGS ]]; then read -r -a extra_args <<<"$MY_ARGS"; fi
  if [[ -n $MY_ENV ]]; then read -r -a env_args <<<"$MY_ENV"; fi
  rm -f "$MYPID"
  # setsid: own session, so a test harness killing its process group does not take the server along.
  setsid env ${env_args[@]+"${env_args[@]}"} mariadbd --no-defaults --datadir="$MYDATA" ${MYUSER:+--user=$MYUSER} --port="$MY_PORT" \
    --bind-address=127.0.0.1 --socket="$MYSOCK" --pid-file="$MYPID" --skip-name-resolve \
    --log-error="$MYLOG" --tmpdir="$MYDIR/tmp" --innodb-buffer-pool-size=32M --innodb-flush-log-at-trx-commit=1 \
    --max-connections=300 --skip-log-bin ${extra_args[@]+"${extra_args[@]}"} </dev/null >>"$MYLOG" 2>&1 &
  pid=$!
  for ((i = 0; i < TIMEOUT * 5; i++)); do
    if mariadb-admin --no-defaults -S "$MYSOCK" -uroot ping >/dev/null 2>&1 && [[ -n $(my_pid) ]]; then
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break # died during startup: no point waiting
    sleep 0.2
  done
  kill -TERM "$pid" 2>/dev/null || true
  show_log "$MYLOG"
  die "MariaDB failed to start on 127.0.0.1:$MY_PORT (exited, or not ready in ${TIMEOUT}s); log: $MYLOG"
}

my_setup() {
  # sqlock@localhost is for the socket, sqlock@127.0.0.1 for TCP (skip-name-resolve).
  # PROCESS + CONNECTION ADMIN: tests may list and KILL any session, not only their own.
  my_cli -e "CREATE DATABASE sqlock;
    CREATE USER 'sqlock'@'127.0.0.1' IDENTIFIED BY 'sqlock';
    CREATE USER 'sqlock'@'localhost' IDENTIFIED BY 'sqlock';
    GRANT ALL ON sqlock.* TO 'sqlock'@'127.0.0.1', 'sqlock'@'localhost';
    GRANT PROCESS, CONNECTION ADMIN ON *.* TO 'sqlock'@'127.0.0.1', 'sqlock'@'localhost';" ||
    die "MariaDB setup (database and user sqlock) failed"
  if [[ -n $MY_SQL ]]; then my_cli -e "$MY_SQL" || die "MariaDB setup: SQLOCK_TEST_MY_SQL failed: $MY_SQL"; fi
}

my_stop() {
  local pid i
  pid=$(my_pid) || { rm -f "$MYPID"; return 0; }
  kill -TERM "$pid"
  for ((i = 0; i < TIMEOUT * 10; i++)); do # InnoDB's clean shutdown can take a few seconds
    alive "$pid" || { rm -f "$MYPID"; return 0; } # a zombie has stopped too
    sleep 0.1
  done
  show_log "$MYLOG"
  die "MariaDB (pid $pid, data $MYDATA) did not stop within ${TIMEOUT}s of SIGTERM; kill -9 $pid if it hangs"
}

my_crash() { # SIGKILL our mariadbd, then start again: InnoDB crash recovery
  local pid i
  pid=$(my_pid) || die "MariaDB (data $MYDATA) is not running: nothing to crash"
  kill -KILL "$pid"
  for ((i = 0; i < TIMEOUT * 100; i++)); do alive "$pid" || break; sleep 0.01; done
  alive "$pid" && die "mariadbd $pid survived SIGKILL for ${TIMEOUT}s"
  my_start
}

# ---------------------------------------------------------------- commands
write_env() {
  local restart crash
  restart="env SQLOCK_TEST_DIR=$(printf %q "$DIR") bash $(printf %q "$SELF") restart"
  crash="env SQLOCK_TEST_DIR=$(printf %q "$DIR") bash $(printf %q "$SELF") crash"
  {
    echo "# Generated by scripts/test-servers.sh start; source it."
    printf 'export SQLOCK_TEST_DIR=%q\n' "$DIR"
    if ! want_pg; then # MariaDB only
      printf 'export SQLOCK_TEST_MYSQL_URL=%q\n' "mysql://sqlock:sqlock@127.0.0.1:$MY_PORT/sqlock"
      printf 'export SQLOCK_TEST_MYSQL_LOG=%q\n' "$MYLOG"
      printf 'export SQLOCK_TEST_MYSQL_RESTART=%q\n' "$restart mariadb"
      printf 'export SQLOCK_TEST_MYSQL_CRASH=%q\n' "$crash mariadb"
      printf 'export SQLOCK_TEST_MYSQL_PORT=%q SQLOCK_TEST_MYSQL_SOCKET=%q\n' "$MY_PORT" "$MYSOCK"
      printf 'export SQLOCK_TEST_MYSQL_PID_FILE=%q\n' "$MYPID"
      return
    fi
    printf 'export SQLOCK_TEST_PG_URL=%q\n' "postgresql://sqlock:sqlock@127.0.0.1:$PG_PORT/sqlock"
    printf 'export SQLOCK_TEST_PG2_URL=%q\n' "postgresql://sqlock:sqlock@127.0.0.1:$PG_PORT/sqlock2"
    if want_my; then printf 'export SQLOCK_TEST_MYSQL_URL=%q\n' "mysql://sqlock:sqlock@127.0.0.1:$MY_PORT/sqlock"; fi
    printf 'export SQLOCK_TEST_PG_LOG=%q\n' "$PGLOG"
    if want_my; then printf 'export SQLOCK_TEST_MYSQL_LOG=%q\n' "$MYLOG"; fi
    printf 'export SQLOCK_TEST_PG_RESTART=%q\n' "$restart postgresql"
    if want_my; then printf 'export SQLOCK_TEST_MYSQL_RESTART=%q\n' "$restart mariadb"; fi
    printf 'export SQLOCK_TEST_PG_CRASH=%q\n' "$crash postgresql"
    if want_my; then
      printf 'export SQLOCK_TEST_MYSQL_CRASH=%q\n' "$crash mariadb"
      printf 'export SQLOCK_TEST_PG_PORT=%q SQLOCK_TEST_MYSQL_PORT=%q\n' "$PG_PORT" "$MY_PORT"
      printf 'export SQLOCK_TEST_PG_SOCKET_DIR=%q SQLOCK_TEST_MYSQL_SOCKET=%q\n' "$PGDIR" "$MYSOCK"
    else
      printf 'export SQLOCK_TEST_PG_PORT=%q\n' "$PG_PORT"
      printf 'export SQLOCK_TEST_PG_SOCKET_DIR=%q\n' "$PGDIR"
      printf 'export SQLOCK_TEST_PG_DATA=%q\n' "$PGDATA"
    fi
  } >"$DIR/env.sh"
}

choose_run_dir() { # sets RUN: DIR/run if the server users can reach it, else a fresh /tmp dir
  RUN=$DIR/run
  rm -rf "$RUN" # leftovers of an interrupted start (servers running from it would be in DIR/state)
  mkdir -p "$RUN" && chmod 755 "$RUN"
  # sun_path holds 107 bytes; the longest socket is $RUN/pg/.s.PGSQL.NNNNN.
  local ok=1
  ((${#RUN} + 20 < 100)) || ok=0
  if ((EUID == 0)); then
    runuser -u postgres -- test -x "$RUN" 2>/dev/null || ok=0
    runuser -u mysql -- test -x "$RUN" 2>/dev/null || ok=0
  fi
  if ((ok == 0)); then
    rm -rf "$RUN"
    RUN=$(mktemp -d /tmp/sqlock-test.XXXXXX) && chmod 755 "$RUN"
    say "note: postgres/mysql cannot reach $DIR (or path too long); servers live in $RUN"
  fi
}

wipe_run_dir() { # only directories this script created
  if [[ $RUN == "$DIR/run" || $RUN == /tmp/sqlock-test.* ]]; then rm -rf "$RUN"; fi
}

cmd_start() {
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  if [[ -f $DIR/state ]]; then
    (load_state && { ! want_pg || pg_stop; } && { ! want_my || my_stop; }) # a failure here stops us: never leak a running server
    (load_state && wipe_run_dir)
    rm -f "$DIR/state" "$DIR/env.sh"
  fi
  case $ENGINES in
    "postgresql mariadb" | "mariadb postgresql" | postgresql | mariadb) ;;
    *) die "SQLOCK_TEST_ENGINES must be \"postgresql mariadb\", \"postgresql\" or \"mariadb\" (got '$ENGINES')" ;;
  esac
  MYUSER=
  if ((EUID == 0)); then MYUSER=mysql; fi
  choose_run_dir
  set_paths
  PG_PORT=$(pick_port)
  MY_PORT=$(pick_port "$PG_PORT")
  printf 'RUN=%q\nPG_PORT=%q\nMY_PORT=%q\nMYUSER=%q\nENGINES=%q\nPG_ENV=%q\nMY_ARGS=%q\nMY_ENV=%q\n' "$RUN" \
    "$PG_PORT" "$MY_PORT" "$MYUSER" "$ENGINES" "$PG_ENV" "$MY_ARGS" "$MY_ENV" >"$DIR/state"

  if ! want_pg; then
    say "MariaDB on 127.0.0.1:$MY_PORT (no PostgreSQL: SQLOCK_TEST_ENGINES=$ENGINES), files in $RUN"
  elif want_my; then
    say "PostgreSQL on 127.0.0.1:$PG_PORT, MariaDB on 127.0.0.1:$MY_PORT, files in $RUN"
  else
    say "PostgreSQL on 127.0.0.1:$PG_PORT (no MariaDB: SQLOCK_TEST_ENGINES=$ENGINES), files in $RUN"
  fi
  if want_pg; then pg_init; fi
  if want_my; then my_init; fi # while initdb's disk I/O settles; both are a few seconds
  if want_pg; then
    pg_start
    pg_setup
  fi
  if want_my; then
    my_start
    my_setup
  fi
  write_env
  echo "$DIR/env.sh"
}

cmd_stop() {
  [[ -f $DIR/state ]] || { say "nothing recorded in $DIR; nothing to stop"; return 0; }
  load_state
  local rc=0
  if want_pg; then (pg_stop) || rc=1; fi # subshells: die() in one must not skip the other
  if want_my; then (my_stop) || rc=1; fi
  return "$rc"
}

cmd_restart() {
  load_state
  case ${1:-} in
    postgresql | postgres | pg) pg_stop; pg_start ;;
    mariadb | mysql) my_stop; my_start ;;
    *) die "restart needs an engine: postgresql or mariadb (got '${1:-}')" ;;
  esac
}

cmd_crash() {
  load_state
  case ${1:-} in
    postgresql | postgres | pg) pg_crash ;;
    mariadb | mysql) my_crash ;;
    *) die "crash needs an engine: postgresql or mariadb (got '${1:-}')" ;;
  esac
}

cmd_status() {
  load_state
  local rc=0 pid
  if ! want_pg; then echo "postgresql: not started (SQLOCK_TEST_ENGINES=$ENGINES)"
  elif pg_running; then echo "postgresql: running on 127.0.0.1:$PG_PORT (data $PGDATA)"
  else echo "postgresql: stopped (port $PG_PORT, data $PGDATA)"; rc=3; fi
  if ! want_my; then echo "mariadb: not started (SQLOCK_TEST_ENGINES=$ENGINES)"
  elif pid=$(my_pid); then echo "mariadb: running on 127.0.0.1:$MY_PORT, pid $pid (data $MYDATA)"
  else echo "mariadb: stopped (port $MY_PORT, data $MYDATA)"; rc=3; fi
  echo "env: $DIR/env.sh"
  return "$rc"
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) cmd_restart "${2:-}" ;;
  crash) cmd_crash "${2:-}" ;;
  status) cmd_status ;;
  *) echo "usage: $0 start | stop | status | restart|crash postgresql|mariadb" >&2; exit 2 ;;
esac
