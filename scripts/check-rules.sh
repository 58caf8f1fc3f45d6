#!/usr/bin/env bash
# Checks the Prometheus rules of contrib/prometheus/sqlock.rules.yml (docs/operations.md, "Metrics and alerts"):
#   promtool check rules   the file parses, every expression and template is valid;
#   promtool test rules    tests/prometheus/sqlock.rules.test.yml: every alert fires, with its labels and
#                          annotations, and stays quiet below its threshold; the recording rules' values.
# Exit: 0 both pass, 1 either fails (or promtool missing under CI=true), 77 promtool missing outside CI (skipped).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v promtool >/dev/null; then
  if [[ ${CI:-} == true ]]; then
    echo "check-rules: FAILED: promtool is not installed; install the package prometheus: bash scripts/deps.sh --servers" >&2
    exit 1
  fi
  echo "check-rules: skipped: promtool is not installed (package prometheus: bash scripts/deps.sh --servers)"
  exit 77
fi

status=0
promtool check rules contrib/prometheus/sqlock.rules.yml || status=1
promtool test rules tests/prometheus/sqlock.rules.test.yml || status=1
if ((status)); then
  echo "check-rules: FAILED: see promtool's output above" >&2
  exit 1
fi
echo "check-rules: ok"
