#!/usr/bin/env bash
# A Patroni-managed PostgreSQL 15 cluster on loopback: one etcd (v3 API), three nodes under Patroni, and
# HAProxy in front routing to the leader by Patroni's REST health check (GET /primary).
#
# Usage: scripts/ha/patroni.sh VERB [ARG]
#   start [--async]       Fresh cluster (an earlier one in the dir is stopped and wiped first); synchronous_mode
#                         on unless --async. Waits for a leader with two streaming replicas. Writes
#                         $SQLOCK_HA_DIR/env.sh and prints its path.
#   stop                  Stops HAProxy, the agents, the postmasters and etcd, by their recorded pids.
#   status                The members as Patroni sees them; exit 0 only if a leader answers.
#   wait-leader [SECS]    Waits (default 60 s) for a node whose Patroni says it is the primary and whose
#                         PostgreSQL accepts writes; prints its number (1..3).
#   wait-healthy [SECS]   Waits for a leader with both replicas streaming (and one its sync standby unless
#                         --async): Patroni promotes only a sync standby in synchronous_mode. Prints the leader.
#   crash-postmaster      kill -9 of the leader's postmaster only: its Patroni restarts it in place (no
#                         failover). Prints the leader's number.
#   failover              Waits until healthy, then kill -9 of the leader's Patroni agent, its postmaster and
#                         the postmaster's children: a replica takes over after the leader key's ttl. Prints the
#                         old leader.
#   heal [SECS]           Starts every node whose agent is gone, then waits as wait-healthy (default 120 s).
#   restart-node N        Starts node N's agent again (after failover): it rejoins as a replica (pg_rewind).
#   pause-replication     Waits until healthy, then SIGSTOP of the leader's WAL senders: no replica receives
#                         WAL written from then on (with --async the leader still acknowledges commits). Only a
#                         failover (which kills them) ends it. Prints the leader's number.
#   replay-lsn N          Node N's pg_last_wal_replay_lsn(), for a test that must know what a replica saw.
# Environment: SQLOCK_HA_DIR (default <repo>/build/ha/patroni), SQLOCK_HA_TIMEOUT (start, default 90 s).
# Processes run in a fresh /tmp/sqlock-patroni.XXXXXX (short socket paths, readable by postgres) recorded in
# $SQLOCK_HA_DIR/state. PostgreSQL and Patroni run as postgres, never as root.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${SQLOCK_HA_DIR:-$ROOT/build/ha/patroni}
TIMEOUT=${SQLOCK_HA_TIMEOUT:-90}
PG_BIN=${SQLOCK_PG_BIN:-/usr/lib/postgresql/15/bin}
NAME=patroni.sh
RUN=/tmp
# shellcheck source=scripts/lib/servers.sh
source "$ROOT/scripts/lib/servers.sh"

load_state() {
  [[ -f $DIR/state ]] || die "no cluster recorded in $DIR (run: SQLOCK_HA_DIR=$DIR $0 start)"
  # shellcheck source=/dev/null
  source "$DIR/state"
}

pg_user() { if ((EUID == 0)); then setpriv --reuid=postgres --regid=postgres --init-groups "$@"; else "$@"; fi; }

postmaster_pid() { # N: the pid in node N's postmaster.pid, if that process lives
  local f="$RUN/node$1/data/postmaster.pid" p
  [[ -f $f ]] || return 1
  p=$(head -n 1 "$f")
  [[ -n $p ]] && alive "$p" && echo "$p"
}

agent_pid() { local p; p=$(cat "$RUN/node$1/patroni.pid" 2>/dev/null) && alive "$p" && echo "$p"; }

rest_port() { local v="REST$1"; echo "${!v}"; }
pg_port() { local v="PG$1"; echo "${!v}"; }

sql() { # N SQL: as postgres on node N's socket
  as_user postgres "$PG_BIN/psql" -XAtq -h "$RUN/node$1" -p "$(pg_port "$1")" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 -c "$2" 2>/dev/null
}

is_leader() { # N: Patroni says primary and PostgreSQL takes writes
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$(rest_port "$1")/primary") || return 1
  [[ $code == 200 ]] && [[ $(sql "$1" "SELECT pg_is_in_recovery()") == f ]]
}

leader() { local n; for n in 1 2 3; do if is_leader "$n"; then echo "$n"; return 0; fi; done; return 1; }

wait_leader() { # SECS
  local end=$((SECONDS + $1)) n
  while ((SECONDS < end)); do
    if n=$(leader); then echo "$n"; return 0; fi
    sleep 0.3
  done
  die "no leader within $1 s; $(status_text)"
}

sync_standby() { # the node Patroni's sync key names (its /sync answers 200), if any
  local n
  for n in 1 2 3; do
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$(rest_port "$n")/sync") == 200 ]] &&
      { echo "$n"; return 0; }
  done
  return 1
}

replicas_answer() { # LEADER: every other node takes queries (a standby streams before it is consistent)
  local r
  for r in 1 2 3; do ((r == $1)) || [[ $(sql "$r" "SELECT pg_is_in_recovery()") == t ]] || return 1; done
}

# (A replica's pg_basebackup streams too, as application_name pg_basebackup: only the members' own count.)
wait_healthy() { # SECS: a leader with two streaming replicas, one of them its sync standby unless --async
  local end=$((SECONDS + $1)) n want=2 got=
  [[ $MODE == sync ]] && want=2/1
  n=$(wait_leader "$1")
  until got=$(sql "$n" "SELECT count(*) FILTER (WHERE state = 'streaming') || '/' ||
      count(*) FILTER (WHERE sync_state = 'sync') FROM pg_stat_replication WHERE application_name LIKE 'node_'") &&
      [[ $got == "$want"* ]] && replicas_answer "$n" &&
      { [[ $MODE == async ]] || sync_standby >/dev/null; }; do
    ((SECONDS < end)) || die "node$n leads but its replicas do not all stream (streaming/sync: $got); $(status_text)"
    sleep 0.3
    n=$(wait_leader $((end - SECONDS > 1 ? end - SECONDS : 1)))
  done
  echo "$n"
}

status_text() { curl -s --max-time 2 "http://127.0.0.1:$REST1/cluster" || curl -s --max-time 2 "http://127.0.0.1:$REST2/cluster" || true; }

start_agent() { # N
  (cd "$RUN" && exec setpriv --reuid=postgres --regid=postgres --init-groups \
    /usr/bin/patroni "$RUN/node$1.yml" >>"$RUN/node$1/patroni.log" 2>&1) &
  echo $! >"$RUN/node$1/patroni.pid"
}

write_node_config() { # N
  local n=$1 sync=true
  [[ $MODE == async ]] && sync=false
  cat >"$RUN/node$n.yml" <<EOF
scope: sqlock
namespace: /sqlock-$CLUSTER_ID/
name: node$n
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:$(rest_port "$n")
  connect_address: 127.0.0.1:$(rest_port "$n")
etcd3:
  hosts: 127.0.0.1:$ETCD_PORT
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: $sync
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        hot_standby: "on"
  initdb:
    - encoding: UTF8
    - auth: trust
  post_bootstrap: $RUN/post_bootstrap.sh
postgresql:
  listen: 127.0.0.1:$(pg_port "$n")
  connect_address: 127.0.0.1:$(pg_port "$n")
  data_dir: $RUN/node$n/data
  bin_dir: $PG_BIN
  pgpass: $RUN/node$n/pgpass
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: postgres, password: postgres}
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: $RUN/node$n
    shared_buffers: 16MB
    max_connections: 60
    fsync: "on"
  basebackup:
    - checkpoint: fast
EOF
}

cmd_stop() {
  [[ -f $DIR/state ]] || { say "nothing recorded in $DIR"; return 0; }
  load_state
  local p n pids=()
  p=$(cat "$RUN/haproxy.pid" 2>/dev/null) && alive "$p" && kill "$p" && pids+=("$p")
  for n in 1 2 3; do if p=$(agent_pid "$n"); then kill -9 "$p"; pids+=("$p"); fi; done
  for n in 1 2 3; do if p=$(postmaster_pid "$n"); then kill -QUIT "$p"; pids+=("$p"); fi; done
  p=$(cat "$RUN/etcd.pid" 2>/dev/null) && alive "$p" && kill "$p" && pids+=("$p")
  local end=$((SECONDS + 30))
  for p in "${pids[@]}"; do
    while alive "$p" && ((SECONDS < end)); do sleep 0.1; done
    alive "$p" && kill -9 "$p"
  done
  say "stopped (logs in $RUN)"
}

cmd_start() {
  local tool pkg
  for tool in patroni:patroni etcd:etcd-server curl:curl haproxy:haproxy pgrep:procps; do
    pkg=${tool#*:} tool=${tool%%:*}
    command -v "$tool" >/dev/null ||
      die "$tool not found: install Debian package $pkg (run: bash scripts/deps.sh --servers)"
  done
  MODE=sync
  [[ ${1:-} == --async ]] && MODE=async
  if [[ -f $DIR/state ]]; then
    cmd_stop
    load_state
    [[ $RUN == /tmp/sqlock-patroni.* ]] && rm -rf "$RUN"
    rm -f "$DIR/state" "$DIR/env.sh"
  fi
  mkdir -p "$DIR"
  RUN=$(mktemp -d /tmp/sqlock-patroni.XXXXXX)
  chmod 755 "$RUN"
  CLUSTER_ID=$(basename "$RUN" | cut -d. -f2)
  ETCD_PORT=$(pick_port)
  ETCD_PEER=$(pick_port "$ETCD_PORT")
  PG1=$(pick_port "$ETCD_PORT" "$ETCD_PEER")
  PG2=$(pick_port "$ETCD_PORT" "$ETCD_PEER" "$PG1")
  PG3=$(pick_port "$ETCD_PORT" "$ETCD_PEER" "$PG1" "$PG2")
  REST1=$(pick_port "$ETCD_PORT" "$ETCD_PEER" "$PG1" "$PG2" "$PG3")
  REST2=$(pick_port "$ETCD_PORT" "$ETCD_PEER" "$PG1" "$PG2" "$PG3" "$REST1")
  REST3=$(pick_port "$ETCD_PORT" "$ETCD_PEER" "$PG1" "$PG2" "$PG3" "$REST1" "$REST2")
  HAPROXY=$(pick_port "$ETCD_PORT" "$ETCD_PEER" "$PG1" "$PG2" "$PG3" "$REST1" "$REST2" "$REST3")
  cat >"$DIR/state" <<EOF
RUN=$RUN
MODE=$MODE
CLUSTER_ID=$CLUSTER_ID
ETCD_PORT=$ETCD_PORT
PG1=$PG1
PG2=$PG2
PG3=$PG3
REST1=$REST1
REST2=$REST2
REST3=$REST3
HAPROXY=$HAPROXY
EOF

  (exec etcd --name sqlock --data-dir "$RUN/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster "sqlock=http://127.0.0.1:$ETCD_PEER" >"$RUN/etcd.log" 2>&1) &
  echo $! >"$RUN/etcd.pid"

  cat >"$RUN/post_bootstrap.sh" <<EOF
#!/bin/sh
set -e
psql -Xq "\$1" -c "CREATE ROLE sqlock LOGIN PASSWORD 'sqlock'" -c "GRANT pg_monitor TO sqlock" \
  -c "CREATE DATABASE sqlock OWNER sqlock"
EOF
  chmod 755 "$RUN/post_bootstrap.sh"
  local n
  for n in 1 2 3; do
    mkdir -p "$RUN/node$n"
    write_node_config "$n"
  done
  give_to postgres "$RUN"

  local end=$((SECONDS + 20))
  until curl -s --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" | grep -q true; do
    ((SECONDS < end)) || { show_log "$RUN/etcd.log"; die "etcd did not start"; }
    sleep 0.2
  done
  for n in 1 2 3; do start_agent "$n"; done

  cat >"$RUN/haproxy.cfg" <<EOF
global
  maxconn 200
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 2s
listen primary
  bind 127.0.0.1:$HAPROXY
  option httpchk GET /primary
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
  server node1 127.0.0.1:$PG1 check port $REST1
  server node2 127.0.0.1:$PG2 check port $REST2
  server node3 127.0.0.1:$PG3 check port $REST3
EOF
  (exec haproxy -db -f "$RUN/haproxy.cfg" >"$RUN/haproxy.log" 2>&1) &
  echo $! >"$RUN/haproxy.pid"

  wait_healthy "$TIMEOUT" >/dev/null || { for n in 1 2 3; do show_log "$RUN/node$n/patroni.log"; done; exit 1; }
  local leader_n
  leader_n=$(leader)
  local hosts="127.0.0.1:$PG1,127.0.0.1:$PG2,127.0.0.1:$PG3"
  cat >"$DIR/env.sh" <<EOF
export SQLOCK_HA_PG_URL=postgresql://sqlock:sqlock@$hosts/sqlock?target_session_attrs=read-write
export SQLOCK_HA_PG_NODE_URL1=postgresql://sqlock:sqlock@127.0.0.1:$PG1/sqlock
export SQLOCK_HA_PG_NODE_URL2=postgresql://sqlock:sqlock@127.0.0.1:$PG2/sqlock
export SQLOCK_HA_PG_NODE_URL3=postgresql://sqlock:sqlock@127.0.0.1:$PG3/sqlock
export SQLOCK_HA_HAPROXY_URL=postgresql://sqlock:sqlock@127.0.0.1:$HAPROXY/sqlock
export SQLOCK_HA_PATRONI_REST1=http://127.0.0.1:$REST1
export SQLOCK_HA_PATRONI_REST2=http://127.0.0.1:$REST2
export SQLOCK_HA_PATRONI_REST3=http://127.0.0.1:$REST3
export SQLOCK_HA_ETCD_URL=http://127.0.0.1:$ETCD_PORT
export SQLOCK_HA_PATRONI_MODE=$MODE
EOF
  say "leader node$leader_n, mode $MODE, in $RUN"
  echo "$DIR/env.sh"
}

walsender_pids() { # N: node N's WAL senders
  local pm c
  pm=$(postmaster_pid "$1") || die "node$1's postmaster is not running"
  for c in $(pgrep -P "$pm"); do
    if tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null | grep -q '^postgres: .*walsender'; then echo "$c"; fi
  done
}

node_arg() { [[ ${1:-} =~ ^[123]$ ]] || die "give a node number 1..3"; echo "$1"; }

verb=${1:-}
shift || true
case $verb in
  start) cmd_start "$@" ;;
  stop) cmd_stop ;;
  status)
    load_state
    status_text
    echo
    leader >/dev/null
    ;;
  wait-leader) load_state; wait_leader "${1:-60}" ;;
  wait-healthy) load_state; wait_healthy "${1:-60}" ;;
  crash-postmaster)
    load_state
    n=$(wait_leader 30)
    p=$(postmaster_pid "$n") || die "node$n's postmaster is not running"
    kill -9 "$p"
    while alive "$p"; do sleep 0.05; done
    echo "$n"
    ;;
  failover)
    load_state
    n=$(wait_healthy 60)
    a=$(agent_pid "$n") || die "node$n's agent is not running"
    p=$(postmaster_pid "$n") || die "node$n's postmaster is not running"
    # The whole instance dies, as with its machine: its backends and WAL senders too, not only the postmaster.
    kids=$(pgrep -P "$p" || true)
    # shellcheck disable=SC2086
    kill -9 "$a" "$p" $kids
    while alive "$a" || alive "$p"; do sleep 0.05; done
    echo "$n"
    ;;
  restart-node)
    load_state
    n=$(node_arg "${1:-}")
    agent_pid "$n" >/dev/null && die "node$n's agent runs already"
    start_agent "$n"
    ;;
  heal)
    load_state
    for n in 1 2 3; do agent_pid "$n" >/dev/null || start_agent "$n"; done
    wait_healthy "${1:-120}"
    ;;
  pause-replication)
    load_state
    n=$(wait_healthy 60)
    senders=$(walsender_pids "$n")
    [[ -n $senders ]] || die "node$n has no WAL sender"
    # shellcheck disable=SC2086
    kill -STOP $senders
    echo "$n"
    ;;
  replay-lsn) load_state; n=$(node_arg "${1:-}"); sql "$n" "SELECT pg_last_wal_replay_lsn()" ;;
  *) die "usage: $0 start [--async] | stop | status | wait-leader [SECS] | crash-postmaster | failover | restart-node N | heal [SECS] | pause-replication | replay-lsn N" ;;
esac
