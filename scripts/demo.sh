#!/usr/bin/env bash
# The main job on the embedded SQLite default: installs what is missing, builds
# sqlock, and runs the demo in which several processes contend for one lock.
# Extra arguments go to sqlock-demo (e.g. --processes 8 --iterations 50 --db URL).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target sqlock-demo

# The lock lives in ./sqlock.db (SQLite, WAL mode) unless --db says otherwise.
exec build/examples/sqlock-demo "$@"
