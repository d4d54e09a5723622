#!/usr/bin/env bash
# Compile cost of `#[tool]`: `cargo check` time of a crate with N tools declared with the macro
# against a crate with the same N tools written by hand (the same args structs, derives and
# `Tool` impls the macro generates), in the same run, on the same machine.
#
#   benches/compile_cost/run.sh            # 200 tools, 5 rounds
#   TOOLS=500 ROUNDS=5 benches/compile_cost/run.sh
#
# The two crates are generated under target/compile_cost/ (a throwaway workspace that depends
# on this repository's crates by path, with its own target dir). Dependencies are built first;
# each round then touches each crate's lib.rs and times `cargo check` of that crate alone, so
# the figures are the crate's own check time. The best round of each is reported (least
# disturbed by other load), with every round listed. Results: target/compile_cost/results.md.
set -euo pipefail

TOOLS=${TOOLS:-200}
ROUNDS=${ROUNDS:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WS="$ROOT/target/compile_cost"
export CARGO_TARGET_DIR="$WS/target"

mkdir -p "$WS/macro_tools/src" "$WS/manual_tools/src"
cp "$ROOT/Cargo.lock" "$WS/Cargo.lock"

cat > "$WS/Cargo.toml" <<EOF
[workspace]
members = ["macro_tools", "manual_tools"]
resolver = "3"
EOF

for name in macro_tools manual_tools; do
  cat > "$WS/$name/Cargo.toml" <<EOF
[package]
name = "$name"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
effect-tool = { path = "$ROOT", default-features = false }
serde = { version = "1", features = ["derive"] }
schemars = "1.2"
EOF
done

# ---- the macro crate ----
gen_macro() {
  echo '//! Generated: tools declared with #[tool].'
  echo 'use effect_tool::{tool, EffectCtx, ToolError};'
  for ((i = 0; i < TOOLS; i++)); do
    case $((i % 4)) in
      0) cat <<EOF

/// Search the catalogue ($i).
#[tool(effect = "pure", timeout = "5s")]
pub async fn search_$i(
    /// What to look for.
    query: String,
    /// At most this many results.
    limit: Option<u32>,
) -> Result<Vec<String>, ToolError> {
    Ok(vec![format!("{query}:{}", limit.unwrap_or(10))])
}
EOF
      ;;
      1) cat <<EOF

/// Refund part of an order ($i).
#[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents), window = "cross-run", ttl = "24h")]
pub async fn refund_$i(
    ctx: &EffectCtx,
    /// The order to refund.
    order_id: String,
    /// How much, in cents.
    amount_cents: u64,
) -> Result<String, ToolError> {
    Ok(format!("{}:{order_id}:{amount_cents}", ctx.idempotency_key()))
}
EOF
      ;;
      2) cat <<EOF

/// Hold a seat ($i).
#[tool(effect = "compensable", key(flight, seat), compensate = release_$i)]
pub async fn hold_$i(
    /// The flight.
    flight: String,
    /// The seat.
    seat: String,
) -> Result<String, ToolError> {
    Ok(format!("{flight}/{seat}"))
}

/// Release a held seat ($i).
pub async fn release_$i(_ctx: &EffectCtx, _args: &Hold${i}Args, _hold: &String) -> Result<(), ToolError> {
    Ok(())
}
EOF
      ;;
      3) cat <<EOF

/// Send an email ($i).
#[tool(effect = "irreversible", key(to, subject), approval = "support", when = |a| a.to.ends_with("@vip.example"), timeout = "30s")]
pub async fn send_$i(
    /// The recipient.
    to: String,
    /// The subject.
    subject: String,
    #[secret] password: String,
) -> Result<u64, ToolError> {
    Ok((to.len() + subject.len() + password.len()) as u64)
}
EOF
      ;;
    esac
  done
}

# ---- the hand-written crate: what the macro generates, written out ----
gen_manual() {
  echo '//! Generated: the same tools with hand-written Tool impls.'
  echo 'use std::time::Duration;'
  echo 'use effect_tool::{EffectClass, EffectCtx, KeyRule, Tool, ToolError, Window};'
  echo 'use schemars::JsonSchema;'
  echo 'use serde::{Deserialize, Serialize};'
  for ((i = 0; i < TOOLS; i++)); do
    case $((i % 4)) in
      0) cat <<EOF

/// Search the catalogue ($i).
pub async fn search_$i(query: String, limit: Option<u32>) -> Result<Vec<String>, ToolError> {
    Ok(vec![format!("{query}:{}", limit.unwrap_or(10))])
}

/// The arguments of search_$i.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(description = "")]
pub struct Search${i}Args {
    /// What to look for.
    pub query: String,
    /// At most this many results.
    pub limit: Option<u32>,
}

/// The search_$i tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Search$i;

impl Tool for Search$i {
    type Args = Search${i}Args;
    type Output = Vec<String>;
    type Error = ToolError;
    const NAME: &'static str = "search_$i";
    const CLASS: EffectClass = EffectClass::Pure;
    const DESCRIPTION: &'static str = "Search the catalogue ($i).";
    const TIMEOUT: Option<Duration> = Some(Duration::from_millis(5000));

    async fn call(&self, _ctx: &EffectCtx, args: Self::Args) -> Result<Self::Output, Self::Error> {
        search_$i(args.query, args.limit).await
    }
}
EOF
      ;;
      1) cat <<EOF

/// Refund part of an order ($i).
pub async fn refund_$i(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{}:{order_id}:{amount_cents}", ctx.idempotency_key()))
}

/// The arguments of refund_$i.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(description = "")]
pub struct Refund${i}Args {
    /// The order to refund.
    pub order_id: String,
    /// How much, in cents.
    pub amount_cents: u64,
}

/// The refund_$i tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Refund$i;

impl Tool for Refund$i {
    type Args = Refund${i}Args;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "refund_$i";
    const CLASS: EffectClass = EffectClass::Idempotent;
    const DESCRIPTION: &'static str = "Refund part of an order ($i).";
    const KEY_RULE: KeyRule = KeyRule::Custom("|a| format!(\"refund:{}:{}\", a.order_id, a.amount_cents)");
    const WINDOW: Window = Window::CrossRun;
    const TTL: Option<Duration> = Some(Duration::from_millis(86_400_000));

    fn key(&self, a: &Self::Args) -> Option<String> {
        Some(format!("refund:{}:{}", a.order_id, a.amount_cents))
    }

    async fn call(&self, ctx: &EffectCtx, args: Self::Args) -> Result<Self::Output, Self::Error> {
        refund_$i(ctx, args.order_id, args.amount_cents).await
    }
}
EOF
      ;;
      2) cat <<EOF

/// Hold a seat ($i).
pub async fn hold_$i(flight: String, seat: String) -> Result<String, ToolError> {
    Ok(format!("{flight}/{seat}"))
}

/// Release a held seat ($i).
pub async fn release_$i(_ctx: &EffectCtx, _args: &Hold${i}Args, _hold: &String) -> Result<(), ToolError> {
    Ok(())
}

/// The arguments of hold_$i.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(description = "")]
pub struct Hold${i}Args {
    /// The flight.
    pub flight: String,
    /// The seat.
    pub seat: String,
}

/// The hold_$i tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Hold$i;

impl Tool for Hold$i {
    type Args = Hold${i}Args;
    type Output = String;
    type Error = ToolError;
    const NAME: &'static str = "hold_$i";
    const CLASS: EffectClass = EffectClass::Compensable;
    const DESCRIPTION: &'static str = "Hold a seat ($i).";
    const KEY_RULE: KeyRule = KeyRule::Fields(&["flight", "seat"]);
    const HAS_COMPENSATE: bool = true;

    async fn call(&self, _ctx: &EffectCtx, args: Self::Args) -> Result<Self::Output, Self::Error> {
        hold_$i(args.flight, args.seat).await
    }

    async fn compensate(&self, ctx: &EffectCtx, args: &Self::Args, output: &Self::Output) -> Result<(), Self::Error> {
        release_$i(ctx, args, output).await
    }
}
EOF
      ;;
      3) cat <<EOF

/// Send an email ($i).
pub async fn send_$i(to: String, subject: String, password: String) -> Result<u64, ToolError> {
    Ok((to.len() + subject.len() + password.len()) as u64)
}

/// The arguments of send_$i.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(description = "")]
pub struct Send${i}Args {
    /// The recipient.
    pub to: String,
    /// The subject.
    pub subject: String,
    pub password: String,
}

/// The send_$i tool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Send$i;

impl Tool for Send$i {
    type Args = Send${i}Args;
    type Output = u64;
    type Error = ToolError;
    const NAME: &'static str = "send_$i";
    const CLASS: EffectClass = EffectClass::Irreversible;
    const DESCRIPTION: &'static str = "Send an email ($i).";
    const KEY_RULE: KeyRule = KeyRule::Fields(&["to", "subject"]);
    const TIMEOUT: Option<Duration> = Some(Duration::from_millis(30_000));
    const SECRETS: &'static [&'static str] = &["password"];
    const APPROVAL: Option<&'static str> = Some("support");

    fn needs_approval(&self, a: &Self::Args) -> bool {
        a.to.ends_with("@vip.example")
    }

    async fn call(&self, _ctx: &EffectCtx, args: Self::Args) -> Result<Self::Output, Self::Error> {
        send_$i(args.to, args.subject, args.password).await
    }
}
EOF
      ;;
    esac
  done
}

gen_macro > "$WS/macro_tools/src/lib.rs"
gen_manual > "$WS/manual_tools/src/lib.rs"

cd "$WS"
echo "building dependencies (not timed)..." >&2
# Offline when every dependency is already in cargo's cache (the usual case in this repository),
# else fetch them from crates.io once.
cargo check --offline --quiet -p macro_tools -p manual_tools 2>/dev/null ||
  cargo check --quiet -p macro_tools -p manual_tools

now() { date +%s.%N; }
time_check() {
  touch "$WS/$1/src/lib.rs"
  local start end
  start=$(now)
  cargo check --offline --quiet -p "$1"
  end=$(now)
  echo "$end - $start" | bc -l
}

macro_times=()
manual_times=()
for ((r = 1; r <= ROUNDS; r++)); do
  # Alternate the order so neither crate always runs first.
  if ((r % 2)); then
    macro_times+=("$(time_check macro_tools)")
    manual_times+=("$(time_check manual_tools)")
  else
    manual_times+=("$(time_check manual_tools)")
    macro_times+=("$(time_check macro_tools)")
  fi
  echo "round $r: macro ${macro_times[-1]}s, hand-written ${manual_times[-1]}s" >&2
done

best() { printf '%s\n' "$@" | sort -g | head -1; }
median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }
macro_best=$(best "${macro_times[@]}")
manual_best=$(best "${manual_times[@]}")
ratio=$(echo "$macro_best / $manual_best" | bc -l)
macro_median=$(median "${macro_times[@]}")
manual_median=$(median "${manual_times[@]}")
median_ratio=$(echo "$macro_median / $manual_median" | bc -l)

fmt() { printf '%.2f' "$1"; }
{
  echo "| crate | tools | \`cargo check\` best of $ROUNDS | median | every round (s) |"
  echo "|---|---|---|---|---|"
  echo "| \`#[tool]\` | $TOOLS | $(fmt "$macro_best") s | $(fmt "$macro_median") s | $(for t in "${macro_times[@]}"; do printf '%s ' "$(fmt "$t")"; done)|"
  echo "| hand-written \`impl Tool\` | $TOOLS | $(fmt "$manual_best") s | $(fmt "$manual_median") s | $(for t in "${manual_times[@]}"; do printf '%s ' "$(fmt "$t")"; done)|"
  echo
  echo "Ratio (macro / hand-written): **$(fmt "$ratio")x** best, $(fmt "$median_ratio")x median (target: at most 1.5x)."
  echo
  echo "Machine: $(nproc) CPU(s), $(rustc --version)."
} | tee "$WS/results.md"
