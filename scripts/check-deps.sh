#!/usr/bin/env bash
# Every program the tests, scripts and benchmarks call comes from a package scripts/deps.sh installs:
# a tool that only the developer's machine had fails CI on a new one (curl did, in issue 38).
#   bash scripts/check-deps.sh          (CI's `lint` step runs it, after .ci/run's deps.sh)
# Two checks:
#   1. the tree: each program of the candidate list below that tests/, scripts/ or bench/ call must be in
#      the table `programs` (program -> Debian package), and that package must be named in scripts/deps.sh
#      (or be of priority "required", present on every Debian system);
#   2. this machine: each program of the table is found (command -v), else the run stops naming the package
#      to install, so a missing tool is a clear error here and not "nothing answered" in a test.
# A new tool: add it to `programs` and its package to deps.sh (and, if tests call it by a new name, to
# `candidates`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# program -> Debian 12 package, for every program outside Priority: required that tests/scripts/bench call.
declare -A programs=(
  [curl]=curl [pgrep]=procps [pkill]=procps [ss]=iproute2 [ip]=iproute2 [tc]=iproute2 [nft]=nftables
  [stress-ng]=stress-ng [faketime]=faketime [sqlite3]=sqlite3 [psql]=postgresql-15 [mariadb]=mariadb-client
  [spin]=spin [promtool]=prometheus [patroni]=patroni [etcd]=etcd-server [pgbouncer]=pgbouncer
  [haproxy]=haproxy [redis-server]=redis-server [redis-cli]=redis-server [gdb]=gdb [python3]=python3
  [clang-format-14]=clang-format-14 [clang-tidy-14]=clang-tidy-14 [doxygen]=doxygen [git]=git
)
# Programs of Priority: required packages (coreutils, util-linux, procps is not one): no need to list them.
required=(timeout stat setpriv runuser flock mkfifo kill sleep sed grep awk find xargs)
# What to look for in the tree: the table's programs and the usual suspects of a shell or a test.
# (A comma-separated list, so that this line is not itself taken for a call by a scan like ours.)
IFS=, read -ra suspects <<<"wget,jq,nc,socat,lsof,strace,xxd,bc,openssl,iptables,perf,valgrind,hyperfine,tshark"
candidates=("${!programs[@]}" "${suspects[@]}")

mapfile -t installed < <(bash scripts/deps.sh --print --servers --spin --clang --docs --bench)
problems=0
say() { echo "check-deps.sh: $*" >&2; problems=$((problems + 1)); }

for t in "${candidates[@]}"; do
  # A call: the name as a word after a quote, a parenthesis, a pipe, a semicolon or a line's start.
  git grep -qE "(^|[\"'( ;|&\`])$t( |\"|'|$)" -- tests scripts bench ':!scripts/check-deps.sh' 2>/dev/null || continue
  if [[ -z ${programs[$t]:-} ]]; then
    [[ " ${required[*]} " == *" $t "* ]] && continue
    say "tests, scripts or bench call '$t', which scripts/check-deps.sh's table does not list: add it with its" \
        "Debian package, and the package to scripts/deps.sh"
    continue
  fi
  [[ " ${installed[*]} " == *" ${programs[$t]} "* ]] ||
    say "tests, scripts or bench call '$t' (Debian package ${programs[$t]}), which scripts/deps.sh does not install"
done

for t in "${!programs[@]}"; do
  command -v "$t" >/dev/null 2>&1 || [[ -x /usr/lib/postgresql/15/bin/$t ]] ||
    say "'$t' is not installed on this machine: install Debian package ${programs[$t]}" \
        "(bash scripts/deps.sh --servers --clang --docs --bench installs everything the checks call)"
done

((problems == 0)) || exit 1
echo "check-deps.sh: ${#programs[@]} programs the tests and scripts call, each installed by scripts/deps.sh"
