#!/usr/bin/env bash
# The in-memory engine with 64 callers, this tree against an earlier one (issue 36, item 6:
# "the same engine two waves ago"). Not part of CI: it builds a second release tree.
#
#   scripts/engine_then_now.sh              against 517975c (the engine at the end of the first
#                                           wave, two waves before issue 36's measurement)
#   scripts/engine_then_now.sh 6e910f8      against another revision (6e910f8: the end of the
#                                           second wave, when issue 36 was measured)
#   ROUNDS=7 scripts/engine_then_now.sh     wall-clock runs per binary (default 5)
#
# What it does:
# 1. A detached worktree of <rev> under $THEN_DIR (default /tmp/effect-tool-then-<rev>), given
#    this tree's `benches/callers.rs` (the key derivation's path adjusted for the old layout)
#    and, where <rev> has no `benches/common`, 6e910f8's (its API compiles against 517975c),
#    built in release with its own Cargo.lock into $THEN_TARGET (default
#    /tmp/effect-tool-then-target).
# 2. This tree's `benches/callers.rs`, built in release (the usual target dir).
# 3. Instructions per call with callgrind when `valgrind` is installed (a current-thread
#    runtime, 5,120 calls; the load of the machine does not move them): engine64, engine1,
#    hit64, and the baseline (key derivation and a map, no engine) of each tree.
# 4. Wall clock: each binary's full bench (`--bench`: 9 interleaved rounds of baseline and
#    engine), the two binaries alternated ROUNDS times, so the load hits both alike.
#
# Read the instruction counts for the result and the wall clock for its direction: on a
# shared 2-core machine one run's wall clock moves by more than the difference measured.
set -euo pipefail
cd "$(dirname "$0")/.."

rev="${1:-517975c}"
rounds="${ROUNDS:-5}"
then_dir="${THEN_DIR:-/tmp/effect-tool-then-$rev}"
then_target="${THEN_TARGET:-/tmp/effect-tool-then-target}"
now_target="${CARGO_TARGET_DIR:-target}"

if [ ! -d "$then_dir" ]; then
    git worktree add --detach "$then_dir" "$rev"
fi
# The old tree's key derivation lived at `effect_tool::key` (before the layered folders).
if git -C "$then_dir" cat-file -e HEAD:effect-tool-core/src/key.rs 2>/dev/null; then
    sed 's/effect_tool::call::key::identify/effect_tool::key::identify/' benches/callers.rs > "$then_dir/benches/callers.rs"
else
    cp benches/callers.rs "$then_dir/benches/callers.rs"
fi
if [ ! -e "$then_dir/benches/common/mod.rs" ]; then
    mkdir -p "$then_dir/benches/common"
    git show 6e910f8:benches/common/mod.rs > "$then_dir/benches/common/mod.rs"
fi
grep -q 'name = "callers"' "$then_dir/Cargo.toml" || printf '\n[[bench]]\nname = "callers"\nharness = false\n' >> "$then_dir/Cargo.toml"

bench_binary() { # <dir> <target dir>: build the callers bench there and print its path
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo bench --bench callers --no-run --message-format=json 2>/dev/null) |
        python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "callers" and m.get("executable"):
        print(m["executable"])'
}
echo "building $rev (then) and $(git rev-parse --short HEAD) (now) ..." >&2
then_bin="$(bench_binary "$then_dir" "$then_target")"
now_bin="$(bench_binary . "$now_target")"

if command -v valgrind > /dev/null; then
    echo "| instructions per call (callgrind, 5,120 calls) | then ($rev) | now | now ÷ then |"
    echo "|---|---|---|---|"
    for m in engine64 engine1 hit64 baseline64; do
        count() {
            EFFECT_TOOL_BENCH_COUNT="$m:5000" valgrind --tool=callgrind --collect-atstart=no \
                --toggle-collect=callers::counted --callgrind-out-file=/dev/null "$1" 2>&1 |
                sed -n 's/.*I *refs: *//p' | tr -d ,
        }
        t="$(count "$then_bin")"
        n="$(count "$now_bin")"
        python3 -c "t, n = $t / 5120, $n / 5120; print(f'| $m | {t:,.0f} | {n:,.0f} | {n / t:.3f} |')"
    done
    echo
fi

echo "wall clock, alternated $rounds times (each line: one binary's medians of 9 interleaved rounds):"
for i in $(seq 1 "$rounds"); do
    for side in then now; do
        bin="$then_bin"
        [ "$side" = now ] && bin="$now_bin"
        load="$(cut -d' ' -f1 /proc/loadavg)"
        "$bin" --bench | awk -v side="$side" -v load="$load" -v t="$(date -u +%T)" -F'|' '
            /engine on `MemoryStore`, 64 callers/ { e64 = $3 }
            /engine on `MemoryStore`, 1 caller/ { e1 = $3 }
            /replays of one record/ { hit = $3 }
            /baseline, 64 callers/ { b64 = $3 }
            END { printf "%s %s (load %s): engine64 %s, engine1 %s, hit64 %s, baseline64 %s\n", t, side, load, e64, e1, hit, b64 }'
    done
done
