#!/usr/bin/env bash
# Runs a command with private PostgreSQL and MariaDB test servers (scripts/test-servers.sh):
# starts them in $SQLOCK_TEST_DIR (default build/test-servers), exports their SQLOCK_TEST_*
# variables, runs the command, and stops them on exit, whatever happened. Exit code: the command's.
#   bash scripts/with-servers.sh ctest --test-dir build/release-shared --output-on-failure
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
(($#)) || { echo "usage: with-servers.sh COMMAND [ARGS...]" >&2; exit 64; }

export SQLOCK_TEST_DIR=${SQLOCK_TEST_DIR:-$root/build/test-servers}
trap 'bash "$root/scripts/test-servers.sh" stop || echo "with-servers.sh: warning: stopping test servers failed" >&2' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
bash "$root/scripts/test-servers.sh" start >/dev/null
# shellcheck source=/dev/null
source "$SQLOCK_TEST_DIR/env.sh"
rc=0
"$@" || rc=$?
exit "$rc"
