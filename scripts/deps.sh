#!/usr/bin/env bash
# Installs (Debian/apt) what sqlock needs to build and test. Idempotent: when everything
# is already installed it only runs dpkg-query and exits, with no apt-get at all.
# Usage: scripts/deps.sh [--print] [--servers] [--spin] [--clang] [--docs] [--bench]
#   --print    print the packages the other flags select, one per line, and install nothing
#              (scripts/check-deps.sh reads the list this way)
#   --servers  also PostgreSQL 15, MariaDB server, spin, promtool (prometheus, for scripts/check-rules.sh)
#              and the fault kit of the reliability battery (libfaketime, nftables, iproute2, stress-ng for
#              battery.sh --under-load): everything the full test run needs
#   --spin     also spin, for scripts/model-check.sh (the majority token model check)
#   --clang    also Clang (clang++, clang-14): the sanitizer build of scripts/sanitize.sh and CI, and
#              clang-format-14 and clang-tidy-14 for scripts/lint.sh
#   --docs     also Doxygen: the API reference (scripts/docs.sh, cmake --build build --target docs)
#   --bench    also the peers and tools of bench/run.sh: Redis server and hiredis (sqlock-peer-redis),
#              tooz with its PostgreSQL and MySQL drivers (bench/peers/tooz_bench.py), matplotlib
#              (bench/report.py's charts); all for Debian's /usr/bin/python3
set -euo pipefail

# curl: the metrics tests scrape endpoints with it, and scripts/ha/patroni.sh asks Patroni's REST API.
# scripts/check-deps.sh (CI's lint step) checks that every program the tests and scripts call is named here.
pkgs=(build-essential cmake pkg-config git curl libsoci-dev libboost-dev libboost-date-time-dev
      libpq-dev libmariadb-dev libsqlite3-dev sqlite3 libgtest-dev libgmock-dev googletest
      libbenchmark-dev libcli11-dev libfmt-dev nlohmann-json3-dev prometheus-cpp-dev)
print=0
for arg in "$@"; do
  case $arg in
    --print) print=1 ;;
    # postgresql-15 brings psql (postgresql-client-15); test-servers.sh uses /usr/lib/postgresql/15/bin.
    # The replicated topologies of tests/ha/ (scripts/ha/): Galera (galera-4, rsync, mariadb-backup),
    # Patroni with etcd, PgBouncer, HAProxy. Their own services do not start on install (policy-rc.d).
    # prometheus brings promtool, which scripts/check-rules.sh runs on contrib/prometheus/sqlock.rules.yml.
    # procps: pgrep (scripts/ha/patroni.sh); gdb: a hung worker's backtrace (tests/skewed_process.hpp).
    --servers) pkgs+=(postgresql-15 mariadb-server mariadb-client spin faketime libfaketime nftables iproute2
                         stress-ng galera-4 rsync mariadb-backup patroni etcd-server python3-etcd3 pgbouncer
                         haproxy prometheus procps gdb) ;;
    --spin) pkgs+=(spin) ;;
    # Clang's ASan/UBSan runtimes (libclang-rt-14-dev) are only recommended by clang-14, and
    # llvm-symbolizer (llvm-14) turns sanitizer reports' addresses into file:line.
    --clang) pkgs+=(clang libclang-rt-14-dev llvm-14 clang-format-14 clang-tidy-14 python3) ;;
    --docs) pkgs+=(doxygen) ;;
    # redis-server brings redis-cli (redis-tools), which bench/run.sh uses to wait for it and stop it.
    --bench) pkgs+=(redis-server libhiredis-dev python3-tooz python3-psycopg2 python3-pymysql python3-matplotlib) ;;
    *) echo "deps.sh: unknown argument '$arg' (usage: deps.sh [--print] [--servers] [--spin] [--clang] [--docs] [--bench])" >&2; exit 2 ;;
  esac
done

if ((print)); then
  printf '%s\n' "${pkgs[@]}"
  exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
  # "ii" = wanted and fully installed; anything else (absent, half-configured, removed) counts as missing.
  [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true) == ii* ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

if ((EUID != 0)); then
  echo "deps.sh: missing packages: ${missing[*]}" >&2
  echo "deps.sh: not root, so not installing them; run:  sudo bash $0 $*" >&2
  exit 1
fi
echo "deps.sh: installing: ${missing[*]}" >&2
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
