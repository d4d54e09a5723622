#!/usr/bin/env bash
# What effect-tool weighs in a user's application: a six-tool support agent (`app/`, the four
# classes, the default features: the SQLite journal) against the same six tools written by hand
# (`baseline/`: serde_json, schemars, a journal table in rusqlite), built cold in the same run.
#
#   benches/weight/run.sh
#
# For each: a cold `cargo build` (debug, as a new user's first build) timed in CPU seconds
# (user + system: steadier than wall time on a shared machine) and wall seconds, the crates that
# took longest (cargo's --timings), and the release binary's size, stripped and not. With
# cargo-bloat installed (`cargo install cargo-bloat`), the release .text by crate too.
# Results: target/weight/results.md.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="$ROOT/target/weight"
mkdir -p "$OUT"
: > "$OUT/results.md"

for app in app baseline; do
  dir="$ROOT/benches/weight/$app"
  export CARGO_TARGET_DIR="$OUT/$app"
  cp "$ROOT/Cargo.lock" "$dir/Cargo.lock"
  rm -rf "$CARGO_TARGET_DIR"
  (cd "$dir" && cargo fetch --quiet)
  /usr/bin/time -o "$OUT/$app.time" -f "%U %S %e" \
    cargo build --quiet --timings --manifest-path "$dir/Cargo.toml" 2>"$OUT/$app.build.log"
  read -r user sys wall <"$OUT/$app.time"
  cargo build --quiet --release --manifest-path "$dir/Cargo.toml"
  bin="$CARGO_TARGET_DIR/release/weight-$app"
  size=$(stat -c %s "$bin")
  cp "$bin" "$OUT/$app.stripped" && strip "$OUT/$app.stripped"
  stripped=$(stat -c %s "$OUT/$app.stripped")
  {
    echo "## $app"
    echo
    echo "cold debug build: $(python3 -c "print(round($user + $sys, 1))") s CPU, $wall s wall; release binary $size bytes, stripped $stripped bytes"
    echo
    echo "slowest units (s, wall, from cargo --timings):"
    echo
    python3 - "$(ls -t "$CARGO_TARGET_DIR"/cargo-timings/cargo-timing-*.html | head -1)" <<'PY'
import json, re, sys
data = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);\n", open(sys.argv[1]).read(), re.S).group(1))
data.sort(key=lambda u: -u["duration"])
for u in data[:10]:
    print(f"- {u['duration']:.1f} {u['name']} {u['version']} {u.get('target', '').strip()}")
PY
    echo
    if command -v cargo-bloat >/dev/null; then
      echo '```text'
      (cd "$dir" && cargo bloat --release --crates -n 12 2>/dev/null | grep -v '^ *Compiling\|Finished\|Analyzing')
      echo '```'
      echo
    fi
  } >> "$OUT/results.md"
  rm -f "$dir/Cargo.lock"
done
cat "$OUT/results.md"
