#!/usr/bin/env bash
# Runs sqlock's tests under AddressSanitizer + UndefinedBehaviorSanitizer, against private
# PostgreSQL and MariaDB servers (scripts/test-servers.sh), as CI does.
#   bash scripts/sanitize.sh [CTEST-ARGS...]
# Builds the `asan` preset (CMakePresets.json: Clang, RelWithDebInfo at -O1 as ASan advises, -fsanitize=address,undefined
# with -fno-sanitize-recover, warnings as errors) in build/asan. Every process the tests start
# (workers, the sqlock and sqlock-reaper commands) is instrumented as well; any ASan or UBSan
# report aborts that process, which fails its test; leaks are reported at exit (LeakSanitizer).
# libfaketime is never preloaded into these processes (its constructor deadlocks ASan's allocator):
# the client-clock tests move their clock with tests/clock_shift_preload.cpp here (tests/test_env.hpp,
# sanitizer_build); the main test run covers libfaketime.
# Default selection: every suite except the ones that
# restart, kill, freeze or partition the servers (labels "restart", "crash", "nemesis"), the spin model
# check ("model": no sqlock code runs in it), the battery's long recorded-history scenarios ("battery":
# minutes each under ASan; an abandoned-lease leak in its worker was found by running them here once),
# the characterization tier (run outside CI) and the command's conformance suite (label "cli": 240 s of CPU under
# ASan, mostly the sanitized library behind the command, which the library's own suites cover; the command's
# signal and process-tree paths still run instrumented in sqlock_cli_realtime_tests, and the whole suite runs in
# the main test run; `bash scripts/sanitize.sh -L cli` runs it sanitized);
# SQLOCK_SANITIZE_EXCLUDE changes the regex: they exercise the servers more than sqlock, and run in the
# main test run.
# Arguments replace the default selection and go to ctest, e.g.  scripts/sanitize.sh -R sqlite
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
if [[ -v CI ]]; then export CI; fi

bash scripts/deps.sh --servers --clang
cmake --preset asan >/dev/null
# The default selection builds only the programs it runs (target sqlock_sanitize_programs, which
# tests/CMakeLists.txt derives from the same labels); other selections build everything.
if (($# > 0)) || [[ -v SQLOCK_SANITIZE_EXCLUDE ]]; then
  cmake --build --preset asan -j2
else
  cmake --build --preset asan -j2 --target sqlock-cli sqlock-reaper sqlock_sanitize_programs
fi

# abort_on_error: a report kills the process with SIGABRT even where a test only checks an exit code.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}
# tests/sanitizers/lsan.supp lists the leak suppressions, each with its reason (majority mode's
# member calls need none: the locker joins them).
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-14/bin/llvm-symbolizer}
export SQLOCK_TEST_DIR=${SQLOCK_TEST_DIR:-$root/build/asan/test-servers}
if (($# > 0)); then
  exec bash scripts/with-servers.sh ctest --test-dir build/asan --output-on-failure "$@"
fi
# Two passes. The first runs two tests at a time, like the main test run (RUN_SERIAL tests alone).
# The majority suite runs with full malloc stacks (fast_unwind_on_malloc=0): libpq has
# no frame pointers, and only a full stack shows which member call a leak report comes from (until
# issue 19 they ran on detached threads that a test process could exit under). Majority.ProcessContentionIsExclusive
# (four processes over three databases) is liveness-bound: under ASan's slowdown split votes make it run
# out of its 120 s for grants; its safety checks run in the main test run.
# The majority battery scenarios (BatteryMajorityF.*) bound how soon late grants are given back and
# losses reported, in hundreds of milliseconds calibrated for an optimised build; they too run in the
# main test run.
# The default list is also in tests/CMakeLists.txt (sqlock_sanitize_programs): change both. -L selects the
# two CI tiers, which every test carries; a program left unbuilt shows up as an unlabelled <target>_NOT_BUILT.
exclude=${SQLOCK_SANITIZE_EXCLUDE:-restart|crash|model|nemesis|characterization|battery|soak-smoke|ha|cli|mixed-version}
bash scripts/with-servers.sh bash -c '
  ctest --test-dir build/asan --output-on-failure -j2 -L "conformance|fault-smoke" -LE "$1" \
    -E "^Majority\.|^BatteryMajorityF\." || exit
  ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0 \
    ctest --test-dir build/asan --output-on-failure -L "conformance|fault-smoke" -LE "$1" -R "^Majority\." \
      -E "ProcessContentionIsExclusive"
' sanitize "$exclude"
