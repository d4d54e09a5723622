#!/usr/bin/env bash
# Growth (issue 16): new-call and replay latency at journal sizes 10^4 to 10^7, on SQLite FULL
# and PostgreSQL, each beside a raw commit and a raw point select in the same rounds, gc of the
# largest journal under a caller's load, and the plot benches/growth.svg (see benches/growth.rs).
#
#   eval "$(.ci/postgres.sh start)"      # for PostgreSQL (skipped without EFFECT_TOOL_PG_URL)
#   benches/growth.sh
#
# Settings: BACKENDS (default "sqlite postgres"), GROWTH_SIZES (default
# 10000,100000,1000000,10000000), GROWTH_ROUNDS (7), GROWTH_ROUND_MS (300), GROWTH_GC (1),
# GROWTH_DIR (the SQLite journal's folder, default target/growth: ~7 GB at 10^7 records, its WAL
# as much again during gc; deleted at the end). Results are appended to
# target/growth/results.tsv; the plot uses each backend's latest run of each size. No plotting
# library: benches/growth_plot.py writes the SVG with Python's standard library.
set -euo pipefail
cd "$(dirname "$0")/.."
BACKENDS="${BACKENDS:-sqlite postgres}"
export GROWTH_GC="${GROWTH_GC:-1}" GROWTH_DIR="${GROWTH_DIR:-target/growth}"
export GROWTH_OUT="${GROWTH_OUT:-target/growth/results.tsv}"
mkdir -p "$GROWTH_DIR" "$(dirname "$GROWTH_OUT")"
log="$(dirname "$GROWTH_OUT")/build.log"
if ! cargo bench --features postgres --bench growth --no-run >"$log" 2>&1; then
  cat "$log" >&2; exit 1
fi
for b in $BACKENDS; do
  if [[ "$b" == postgres && -z "${EFFECT_TOOL_PG_URL:-}" ]]; then
    echo "growth.sh: skipping PostgreSQL: EFFECT_TOOL_PG_URL is not set" >&2; continue
  fi
  echo "# $b, $(date -u +%H:%M) UTC, $(uptime | sed 's/.*load/load/')"
  GROWTH_BACKEND="$b" cargo bench --features postgres --bench growth
done
python3 benches/growth_plot.py "$GROWTH_OUT" benches/growth.svg
