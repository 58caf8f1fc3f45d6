#!/usr/bin/env bash
# Everything CI checks (.ci/run calls it after installing the packages), runnable by developers:
#   bash scripts/ci.sh [STEP...]        (default: every step, in this order)
# Steps:
#   lint        scripts/lint.sh: clang-format on every C/C++ file, clang-tidy on the library (zero findings)
#   model       scripts/model-check.sh: the spin models of tests/spin/ (majority mode's token protocol and
#               exclusion, issue 40's three designs) must hold, and every negative control must be violated; beside
#               it, scripts/old-client.sh builds the mixed-version tests' older client in build/old-client
#   test        scripts/test.sh: build/ (RelWithDebInfo, static libsqlock.a, warnings as errors
#               under CI), the battery's two CI tiers (conformance, fault-smoke) on PostgreSQL,
#               MariaDB and SQLite, restart, crash and server-nemesis tests included
#   demo        scripts/demo.sh, the README's first command (reuses build/)
#   install     scripts/check-install.sh build: the static library installed to a temporary prefix,
#               a consumer built through find_package and through pkg-config
#   release     the `release-shared` preset (Release, BUILD_SHARED_LIBS=ON, warnings as errors) in
#               build/release-shared: the library and the two commands, then check-install.sh on it (the
#               installed libsqlock.so, consumers through find_package and pkg-config). The tests run in
#               the test step; `bash scripts/ci.sh release` followed by
#               `ctest --test-dir build/release-shared -L conformance` after building target
#               sqlock_conformance_programs reruns them against the .so (left out of CI for its time)
#   bench-smoke bench/run.sh --smoke on the release step's build (build/release-shared; configured here
#               when that step did not run): every benchmark program and mode runs once, briefly, against
#               private servers, and must print its result lines; fails naming each one that did not
#               (numbers are not looked at; the page goes to build/bench-smoke/benchmarks.md)
#   sanitize    scripts/sanitize.sh: Clang build with ASan + UBSan (build/asan), tests under it
#   docs        scripts/docs.sh: the Doxygen API reference (build/docs/api/html)
# Prints each step's duration at the end; stops at the first failing step.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -v CI ]]; then export CI; fi

all=(lint model test demo install release bench-smoke sanitize docs)
(($#)) || set -- "${all[@]}"
for s in "$@"; do
  [[ " ${all[*]} " == *" $s "* ]] || { echo "ci.sh: unknown step '$s' (steps: ${all[*]})" >&2; exit 64; }
done

# (Called in an `||` list, where set -e does not apply: hence the && chain.)
step_release() {
  cmake --preset release-shared >/dev/null &&
    cmake --build --preset release-shared -j2 --target sqlock sqlock-cli sqlock-reaper &&
    bash scripts/check-install.sh build/release-shared
}

step_bench_smoke() {
  { [[ -f build/release-shared/CMakeCache.txt ]] || cmake --preset release-shared >/dev/null; } &&
    bash bench/run.sh --smoke --build-dir build/release-shared
}

# What this machine does to child processes' clocks and preloads: the client-clock tests preload
# libfaketime, which once hung their worker in CI only (tests/skewed_process.hpp keeps what it saw).
hang_dir=/var/tmp/sqlock-libfaketime-hang
echo "ci.sh: kernel $(uname -r); /etc/ld.so.preload: $(cat /etc/ld.so.preload 2>/dev/null || echo none);" \
  "preload/faketime variables: $(env | grep -oE '^(LD_PRELOAD|LD_LIBRARY_PATH|FAKETIME[A-Z_]*)=' | tr '\n' ' ')"
rm -rf "$hang_dir"

summary=()
start=$SECONDS
report() {
  if compgen -G "$hang_dir/*.txt" >/dev/null; then
    echo
    echo "ci.sh: libfaketime hung a worker in this run (the tests reran it with their fallback):"
    cat "$hang_dir"/*.txt
  fi
  echo
  echo "ci.sh: step durations"
  local line
  for line in "${summary[@]}"; do echo "  $line"; done
  echo "  total $((SECONDS - start))s"
}
trap report EXIT

for s in "$@"; do
  echo
  echo "=== ci.sh: step '$s' ==="
  t0=$SECONDS rc=0
  case $s in
    lint) bash scripts/lint.sh || rc=$? ;;
    model)
      # The mixed-version tests' older client (scripts/old-client.sh) builds beside spin, which uses one core; the
      # test step's fixture (MixedVersion.BuildOldClient) then finds it built, or builds it and reports why not.
      mkdir -p build
      bash scripts/old-client.sh build/old-client >build/old-client.log 2>&1 &
      old_client=$!
      bash scripts/model-check.sh || rc=$?
      wait "$old_client" || echo "ci.sh: scripts/old-client.sh failed beside the model step (build/old-client.log); the test step tries again"
      ;;
    test) bash scripts/test.sh || rc=$? ;;
    demo) bash scripts/demo.sh || rc=$? ;;
    install) bash scripts/check-install.sh build || rc=$? ;;
    release) step_release || rc=$? ;;
    bench-smoke) step_bench_smoke || rc=$? ;;
    sanitize) bash scripts/sanitize.sh || rc=$? ;;
    docs) bash scripts/docs.sh || rc=$? ;;
  esac
  summary+=("$(printf '%-11s %4ss  %s' "$s" $((SECONDS - t0)) "$( ((rc == 0)) && echo ok || echo "FAILED (exit $rc)")")")
  if ((rc != 0)); then
    echo "ci.sh: step '$s' failed (exit $rc)" >&2
    exit "$rc"
  fi
done
