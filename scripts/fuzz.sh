#!/usr/bin/env bash
# Run the cargo-fuzz targets of fuzz/ (see the "Fuzzing" section of TESTING.md).
#
#   scripts/fuzz.sh [target] [seconds]
#
# Default: every target, 600 s each, one after the other, at the lowest CPU priority. Needs the
# nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). New inputs that add coverage
# go to fuzz/corpus/<target>/ (kept in the repository: minimize with
# `cargo +nightly fuzz cmin <target>` when it grows); crashes go to fuzz/artifacts/<target>/
# (git-ignored: fix them, then keep the input in the corpus and a regression test in the crate).
set -euo pipefail

cd "$(dirname "$0")/../fuzz"
targets=(canonical_json arguments stored_row marker duration)
if [[ $# -ge 1 && "$1" != all ]]; then
    targets=("$1")
fi
seconds="${2:-600}"

export CARGO_PROFILE_DEV_DEBUG=line-tables-only
for target in "${targets[@]}"; do
    dict=()
    if [[ -f "dict/$target.dict" ]]; then
        dict=("-dict=dict/$target.dict")
    fi
    echo "== $target: ${seconds}s"
    mkdir -p "corpus/$target"
    nice -n 19 cargo +nightly fuzz run "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}"
done

# The journals `stored_row` leaves (one per fuzzing process, named by its pid): those of
# processes that have ended.
for db in /dev/shm/effect-tool-fuzz-stored-row-*.db "${TMPDIR:-/tmp}"/effect-tool-fuzz-stored-row-*.db; do
    [[ -e "$db" ]] || continue
    pid="${db##*-}"
    pid="${pid%.db}"
    kill -0 "$pid" 2>/dev/null || rm -f "$db" "$db-wal" "$db-shm"
done
