//! The fixture the bench binaries share: an idempotent refund tool whose body is a no-op, with
//! a ~100-byte input, so that only the engine and the journal are measured.

// Each bench binary uses its own part of the fixture.
#![allow(dead_code)]

use std::time::Duration;

use effect_tool::{EffectClass, EffectCtx, Tool, ToolError};
use serde::{Deserialize, Serialize};

/// The refund's arguments.
#[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    pub order_id: String,
    pub amount_cents: u64,
    pub currency: String,
    pub reason: String,
}

/// About 100 bytes of JSON; `n` makes each input (and so each key) new.
pub fn input(n: u64) -> RefundArgs {
    RefundArgs {
        order_id: format!("ord_{n:016}"),
        amount_cents: 12_345,
        currency: "EUR".into(),
        reason: "customer returned the damaged item".into(),
    }
}

/// An idempotent no-op: its output is the amount.
pub struct Refund;

impl Tool for Refund {
    type Args = RefundArgs;
    type Output = u64;
    type Error = ToolError;
    const NAME: &'static str = "issue_refund";
    const CLASS: EffectClass = EffectClass::Idempotent;

    async fn call(&self, _ctx: &EffectCtx, args: RefundArgs) -> Result<u64, ToolError> {
        Ok(args.amount_cents)
    }
}

/// A measured operation: `run(n)` performs `n` operations and returns the time they took.
pub type Op<'a> = Box<dyn FnMut(u64) -> Duration + 'a>;

/// How many operations one measurement of an op runs: about `budget`'s worth, between `min`
/// and `max`.
pub struct Calibration {
    pub budget: Duration,
    pub min: u64,
    pub max: u64,
}

/// Per-operation times (seconds) of every op in every round. The ops run interleaved (round 1
/// of each, then round 2 of each, ...) so that a change in the machine's load hits them alike,
/// and ratios are taken within a round. Each op is first calibrated to `cal`.
pub fn measure_interleaved(ops: &mut [Op<'_>], rounds: usize, cal: &Calibration) -> Vec<Vec<f64>> {
    let sizes: Vec<u64> = ops
        .iter_mut()
        .map(|run| {
            let mut n = 8u64;
            loop {
                let t = run(n);
                if t >= cal.budget / 4 || n >= cal.max {
                    let per = t.as_secs_f64() / n as f64;
                    break ((cal.budget.as_secs_f64() / per) as u64).clamp(cal.min, cal.max);
                }
                n *= 4;
            }
        })
        .collect();
    (0..rounds)
        .map(|_| {
            ops.iter_mut()
                .zip(&sizes)
                .map(|(run, &n)| run(n).as_secs_f64() / n as f64)
                .collect()
        })
        .collect()
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
