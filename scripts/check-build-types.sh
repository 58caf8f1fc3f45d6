#!/usr/bin/env bash
# Compiles sqlock with warnings as errors in every build type with GCC and Clang, one build tree
# each under build/types/<compiler>-<type>. Not part of CI (CI compiles RelWithDebInfo and Release
# with GCC and RelWithDebInfo + ASan/UBSan with Clang): run it after touching warning-prone code.
#   bash scripts/check-build-types.sh [TARGET...]      (default: every target)
# Environment: COMPILERS (default "g++ clang++"), BUILD_TYPES (default "Debug Release
# RelWithDebInfo MinSizeRel"). Stops at the first failing build; prints what passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

targets=()
for t in "$@"; do targets+=(--target "$t"); done
passed=()
trap 'echo "check-build-types.sh: passed: ${passed[*]:-none}"' EXIT
for cxx in ${COMPILERS:-g++ clang++}; do
  for type in ${BUILD_TYPES:-Debug Release RelWithDebInfo MinSizeRel}; do
    dir=build/types/${cxx%++}-$type
    echo "=== check-build-types.sh: $cxx $type ($dir)"
    cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$type" \
          -DSQLOCK_WARNINGS_AS_ERRORS=ON >/dev/null
    cmake --build "$dir" -j2 "${targets[@]}"
    passed+=("$cxx/$type")
  done
done
