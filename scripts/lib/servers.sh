# Helpers shared by the scripts that start private servers on loopback (scripts/test-servers.sh,
# scripts/ha/*.sh). Source it after setting NAME (the script's name in messages), RUN (the directory
# the servers live in; as_user cds there) and TIMEOUT if used. Never kills or finds a process by name.
# shellcheck shell=bash

say() { echo "$NAME: $*" >&2; }
die() { say "error: $*"; exit 1; }
show_log() { [[ -f $1 ]] || return 0; say "--- last lines of $1 ---"; tail -n 40 "$1" >&2 || true; }

# PostgreSQL refuses to run as root, and mariadbd drops to --user=mysql: as root, run the
# servers as their system users. As anyone else, run everything as the current user.
as_user() { # USER CMD...: cd first so tools don't complain about an unreadable cwd (e.g. /root)
  local u=$1; shift
  if ((EUID == 0)); then (cd "$RUN" && runuser -u "$u" -- "$@"); else (cd "$RUN" && "$@"); fi
}
give_to() { if ((EUID == 0)); then chown -R "$1:" "${@:2}"; fi; }

alive() { # process $1 exists and is not a zombie (a killed server is one until its parent reaps it)
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

port_free() { # no socket at all (listening or connected) uses this local port
  if command -v ss >/dev/null; then
    [[ -z $(ss -Htan "sport = :$1") ]]
  else
    if grep -qi "^ *[0-9]*: [0-9A-F]*:$(printf %04X "$1") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
      return 1
    fi
  fi
}
pick_port() { # random free port in 20000-60000, different from each argument
  local p i x ok
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 40001))
    ok=1
    for x in "$@"; do [[ $p != "$x" ]] || ok=0; done
    ((ok)) && port_free "$p" && { echo "$p"; return; }
  done
  die "found no free TCP port in 20000-60000 after 200 tries (see: ss -tan)"
}
