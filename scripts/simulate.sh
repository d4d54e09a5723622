#!/usr/bin/env bash
# The deterministic simulation (issue 18) over many seeds, in release: 1,000,000 memory-journal
# seeds by default. Not part of CI (CI runs 1,000 memory and 100 SQLite seeds in debug). See
# TESTING.md, "Simulation".
#
#   scripts/simulate.sh                 1,000,000 seeds from 0, memory journal
#   scripts/simulate.sh 10000           that many
#   scripts/simulate.sh 10000 500000    that many, from seed 500000
#   BACKEND=sqlite scripts/simulate.sh 10000
#
# A failing seed stops the run; its history (shrunk to the fewest calls and faults that still
# fail for that seed) and the one command that replays it are printed.
set -euo pipefail
cd "$(dirname "$0")/.."

seeds="${1:-1000000}"
first="${2:-0}"
export EFFECT_TOOL_SIM_SEEDS="$seeds" EFFECT_TOOL_SIM_FIRST="$first"
export EFFECT_TOOL_SIM_BACKEND="${BACKEND:-memory}"
exec cargo test --release -p effect-tool-core --features testing,sqlite --test simulation
