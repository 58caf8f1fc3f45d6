#!/usr/bin/env bash
# Installs a built sqlock into a temporary prefix (cmake --install) and builds and runs the
# consumer project tests/consumer against it, as a user would: once through
# find_package(sqlock CONFIG) and once through pkg-config (tests/consumer/Makefile).
# Each consumer takes a lock on an SQLite file and prints its token, and catches a usage_error and a
# lease_lost thrown by the library. The exported symbols are checked: the public API, no sqlock::detail.
#   bash scripts/check-install.sh [BUILD_DIR]      (default: build; it must be built)
# For a static libsqlock.a the consumers link SOCI's backends, libpq, libmariadb and sqlite3
# through the package (CMake) and Libs.private/Requires.private (pkg-config --static); for a
# shared libsqlock.so the CMake consumer is configured with SOCI, PostgreSQL and SQLite3 lookups
# disabled, and the pkg-config one with plain --libs: they must need nothing but libsqlock.
# KEEP=1 keeps the prefix and the consumer builds (their paths are printed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
build=$(cd "${1:-build}" && pwd)

say() { echo "check-install.sh: $*"; }
fail() { echo "check-install.sh: FAILED: $*" >&2; exit 1; }

work=$(mktemp -d /tmp/sqlock-install.XXXXXX)
if [[ ${KEEP:-} == 1 ]]; then trap 'say "kept $work"' EXIT; else trap 'rm -rf "$work"' EXIT; fi
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
for f in include/sqlock/sqlock.hpp include/sqlock/version.hpp share/sqlock/schema/sqlite.sql share/doc/sqlock/LICENSE; do
  [[ -f $prefix/$f ]] || fail "$f not installed"
done
config=$(find "$prefix" -name sqlockConfig.cmake -print -quit)
pc=$(find "$prefix" -name sqlock.pc -print -quit)
[[ -n $config && -f $(dirname "$config")/FindSOCI.cmake ]] || fail "lib/cmake/sqlock/{sqlockConfig,FindSOCI}.cmake not installed"
[[ -n $pc && $(basename "$(dirname "$pc")") == pkgconfig ]] || fail "lib/pkgconfig/sqlock.pc not installed"
libdir=$(dirname "$(dirname "$pc")")
[[ $(dirname "$(dirname "$(dirname "$config")")") == "$libdir" ]] || fail "sqlock.pc and the CMake package are in different lib dirs"
grep -qx "prefix=$prefix" "$pc" || fail "sqlock.pc does not name the install prefix $prefix"

if [[ -e $libdir/libsqlock.so ]]; then
  kind=shared
  libfile=$(readlink -f "$libdir/libsqlock.so")
  soname=$(readelf -d "$libdir/libsqlock.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ -n $soname && -e $libdir/$soname ]] || fail "libsqlock.so has no SONAME, or $soname is not installed"
  say "shared library: $(basename "$(readlink -f "$libdir/libsqlock.so")"), SONAME $soname"
elif [[ -e $libdir/libsqlock.a ]]; then
  kind=static
  libfile=$libdir/libsqlock.a
  say "static library: libsqlock.a"
else
  fail "no libsqlock.a or libsqlock.so in $libdir"
fi

# No failpoint code in what users get (only the test-only sqlock_failpoints has it): neither the
# failpoint function nor the environment variable that would make a production process kill or
# stop itself, in the library or in the installed commands.
for f in "$libfile" "$prefix/bin/sqlock" "$prefix/bin/sqlock-reaper"; do
  [[ -e $f ]] || continue
  # (grep without -q: an early exit would kill strings/nm with SIGPIPE, failing the pipe under pipefail.)
  if strings -a "$f" | grep SQLOCK_FAILPOINTS >/dev/null; then
    fail "$f contains the string SQLOCK_FAILPOINTS: failpoints were compiled into an installed file"
  fi
  if { nm -C "$f"; nm -CD "$f"; } 2>/dev/null | grep 'sqlock::detail::failpoint' >/dev/null; then
    fail "$f defines sqlock::detail::failpoint: failpoints were compiled into an installed file"
  fi
done
say "no failpoint code in $(basename "$libfile") or the installed commands"

# Symbol visibility (include/sqlock/export.hpp, CXX_VISIBILITY_PRESET hidden): libsqlock exports the
# public API, the typeinfo of the exceptions a program catches included, and nothing that names
# sqlock::detail. In a libsqlock.a the detail symbols are hidden too (for a user who links it into a .so).
if [[ $kind == shared ]]; then
  nm -D --defined-only -C "$libfile" >"$work/exported.txt" || fail "nm -D $libfile"
else
  readelf -sW "$libfile" | awk '($5 == "GLOBAL" || $5 == "WEAK") && $6 == "DEFAULT" && $7 != "UND" { print $8 }' |
    c++filt >"$work/exported.txt" || fail "readelf -s $libfile"
fi
if grep 'sqlock::detail::' "$work/exported.txt" >"$work/detail.txt"; then
  fail "$(basename "$libfile") exports $(wc -l <"$work/detail.txt") symbols naming sqlock::detail (is the library still" \
       "built with hidden visibility?), e.g.: $(head -3 "$work/detail.txt")"
fi
for sym in 'sqlock::store::store(' 'sqlock::table_locker(' 'sqlock::lease::release()' 'sqlock::version()' \
           'typeinfo for sqlock::error' 'typeinfo for sqlock::lease_lost' 'typeinfo for sqlock::usage_error'; do
  grep -F -- "$sym" "$work/exported.txt" >/dev/null ||
    fail "$(basename "$libfile") does not export $sym: mark its declaration SQLOCK_EXPORT (include/sqlock/export.hpp)"
done
say "$(basename "$libfile") exports the public API and no sqlock::detail symbol"

check_output() { # BINARY DB: runs a consumer twice (the lock is released in between)
  local out i
  for i in 1 2; do
    out=$("$1" "$2") || fail "$1 exited with $?"
    [[ $out =~ ^token\ [0-9]+$ ]] || fail "$1 printed '$out', not 'token N'"
    say "  run $i: $out"
  done
}

# The installed commands find libsqlock (a shared one through their RUNPATH, $ORIGIN/../lib) and print
# the version of the installed headers.
version=$(sed -n 's/^#define SQLOCK_VERSION_STRING "\(.*\)"$/\1/p' "$prefix/include/sqlock/version.hpp")
[[ -n $version ]] || fail "the installed sqlock/version.hpp has no SQLOCK_VERSION_STRING"
for cmd in sqlock sqlock-reaper; do
  if [[ -x $prefix/bin/$cmd ]]; then
    out=$("$prefix/bin/$cmd" --version) || fail "the installed $cmd does not run"
    [[ $out == "$cmd $version (lock tables: protocol "* ]] || fail "the installed $cmd --version printed '$out', not version $version"
  fi
done
say "version $version: headers and installed commands agree"

# ---- find_package ----
cmake_args=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release)
if [[ $kind == shared ]]; then
  cmake_args+=(-DCMAKE_DISABLE_FIND_PACKAGE_SOCI=ON -DCMAKE_DISABLE_FIND_PACKAGE_PostgreSQL=ON
               -DCMAKE_DISABLE_FIND_PACKAGE_SQLite3=ON -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON)
fi
say "find_package consumer ($kind)"
cmake -S "$root/tests/consumer" -B "$work/cmake" "${cmake_args[@]}" >"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log"; fail "configuring tests/consumer"; }
cmake --build "$work/cmake" -j2 --verbose >"$work/cmake-build.log" 2>&1 ||
  { cat "$work/cmake-build.log"; fail "building tests/consumer"; }
link=$(grep -- '-o sqlock-consumer ' "$work/cmake-build.log" || true)
if [[ $kind == static ]]; then
  for l in libsoci_core libsoci_postgresql libsoci_mysql libsoci_sqlite3 libpq libmariadb libsqlite3; do
    [[ $link == *"$l."* || $link == *"-l${l#lib}"* ]] || fail "the consumer's link line lacks $l: $link"
  done
else
  [[ $link != *soci* ]] || fail "a consumer of the shared library links SOCI: $link"
fi
check_output "$work/cmake/sqlock-consumer" "$work/cmake.db"

# ---- pkg-config ----
pcflags=()
[[ $kind == static ]] && pcflags=(PKG_CONFIG_FLAGS=--static)
say "pkg-config consumer ($kind): $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config ${pcflags:+--static} --libs sqlock)"
if [[ $kind == shared ]]; then
  [[ -z $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --print-requires-private sqlock) ]] ||
    fail "sqlock.pc of a shared library has Requires.private"
fi
mkdir -p "$work/pc"
PKG_CONFIG_PATH=$libdir/pkgconfig make -s -C "$root/tests/consumer" O="$work/pc" "${pcflags[@]}" ||
  fail "building tests/consumer with its Makefile (pkg-config)"
check_output "$work/pc/sqlock-consumer-pc" "$work/pc.db"

# ---- the prometheus component (sqlock::prometheus, sqlock-prometheus.pc) ----
# Installed when sqlock was built with prometheus-cpp; CI installs it (scripts/deps.sh), so there it must be.
if [[ -f $(dirname "$config")/sqlockPrometheusTargets.cmake ]]; then
  [[ -f $libdir/pkgconfig/sqlock-prometheus.pc ]] || fail "sqlockPrometheusTargets.cmake is installed but not sqlock-prometheus.pc"
  say "prometheus component: find_package(sqlock COMPONENTS prometheus)"
  cmake -S "$root/tests/consumer-prometheus" -B "$work/cmake-prom" "${cmake_args[@]}" >"$work/cmake-prom.log" 2>&1 ||
    { cat "$work/cmake-prom.log"; fail "configuring tests/consumer-prometheus"; }
  cmake --build "$work/cmake-prom" -j2 >"$work/cmake-prom-build.log" 2>&1 ||
    { cat "$work/cmake-prom-build.log"; fail "building tests/consumer-prometheus"; }
  out=$("$work/cmake-prom/sqlock-prometheus-consumer" "$work/prom.db") || fail "sqlock-prometheus-consumer exited with $?"
  [[ $out == "metrics ok" ]] || fail "sqlock-prometheus-consumer printed '$out', not 'metrics ok'"
  say "prometheus component: pkg-config sqlock-prometheus"
  mkdir -p "$work/pc-prom"
  PKG_CONFIG_PATH=$libdir/pkgconfig make -s -C "$root/tests/consumer-prometheus" O="$work/pc-prom" "${pcflags[@]}" ||
    fail "building tests/consumer-prometheus with its Makefile (pkg-config)"
  out=$("$work/pc-prom/sqlock-prometheus-consumer-pc" "$work/prom-pc.db") ||
    fail "sqlock-prometheus-consumer-pc exited with $?"
  [[ $out == "metrics ok" ]] || fail "sqlock-prometheus-consumer-pc printed '$out', not 'metrics ok'"
elif [[ -n ${CI:-} ]]; then
  fail "the prometheus component is not installed: sqlock was built without prometheus-cpp (install prometheus-cpp-dev: bash scripts/deps.sh)"
fi
say "OK: $kind libsqlock installed, used through find_package and pkg-config"
