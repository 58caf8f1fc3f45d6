#!/usr/bin/env bash
# Builds sqlock and runs its tests (ctest) against private PostgreSQL and MariaDB servers.
# Runs the two CI tiers, `ctest -L 'conformance|fault-smoke' -j2` (docs/guarantees.md); extra arguments replace
# that selection and go to ctest, e.g.  scripts/test.sh -R postgres -j2
# The servers are always stopped on exit; the exit code is ctest's (or the failing step's).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
# CI (if set) reaches the tests unchanged; make sure it is exported even if only a shell variable.
if [[ -v CI ]]; then export CI; fi

bash scripts/deps.sh --servers
# Under CI, warnings are errors (SQLOCK_WARNINGS_AS_ERRORS); elsewhere the cached choice stands (default off).
# Under CI the benchmark programs are left out of this build: no test runs them, and CI's bench-smoke step
# builds and runs them in the Release build (scripts/ci.sh).
# Under CI: warnings as errors, no benchmarks, and line tables only (-g1) for debug information: the
# same code, backtraces with file and line, about a quarter less compile time.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CI:+-DSQLOCK_WARNINGS_AS_ERRORS=ON -DSQLOCK_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"}
cmake --build build -j2

export SQLOCK_TEST_DIR=${SQLOCK_TEST_DIR:-$root/build/test-servers}
# EXIT trap without its own `exit`, so the script's exit status is kept; INT/TERM go through it too.
trap 'bash "$root/scripts/test-servers.sh" stop || echo "test.sh: warning: stopping test servers failed" >&2' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
bash scripts/test-servers.sh start >/dev/null
# shellcheck source=/dev/null
source "$SQLOCK_TEST_DIR/env.sh"

# Two at a time (the machine has 2 cores): tests share the servers through tables and users of their own;
# the ones that restart, crash, freeze or partition a server run alone (RUN_SERIAL).
(($#)) || set -- -L 'conformance|fault-smoke' -j2
rc=0
ctest --test-dir build --output-on-failure "$@" || rc=$?
exit "$rc"
