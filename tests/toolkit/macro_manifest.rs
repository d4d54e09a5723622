//! The manifest of a toolkit as a committed snapshot: the test to copy into your own crate.
//!
//! Every tool's name, class, key rule (as written), window, ttl, timeout, approval, hooks,
//! sensitive fields, values taken from the run (`#[secret]`) and retry limits, one line per
//! tool, sorted. Change a declaration and this test fails with the one line that changed;
//! re-bless with `UPDATE_SNAPSHOTS=1 cargo test --all-features --test toolkit macro_manifest::`
//! and the diff of `tests/snapshots/tools.manifest` shows the reviewer exactly
//! what running that tool twice now does. (`effect-tool manifest FILE --check COMMITTED` does the
//! same comparison from the command line.)

use std::sync::Arc;

use effect_tool::{EffectCtx, ToolError, Toolkit, tool, tools};

/// Look up an order.
#[tool(effect = "pure")]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

/// Refund part of an order.
#[tool(
    effect = "idempotent",
    key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents),
    window = "cross-run",
    ttl = "24h",
    approval = "support-lead",
    when = |a| a.amount_cents > 10_000,
    recover = find_refund
)]
async fn issue_refund(ctx: &EffectCtx, order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{}:{order_id}:{amount_cents}", ctx.idempotency_key()))
}

async fn find_refund(_ctx: &EffectCtx, _args: &IssueRefundArgs) -> Result<Option<String>, ToolError> {
    Ok(None)
}

/// Hold a seat until the booking completes.
#[tool(effect = "compensable", key(flight, seat), ttl = "2h", compensate = release_seat)]
async fn hold_seat(flight: String, seat: String) -> Result<String, ToolError> {
    Ok(format!("{flight}/{seat}"))
}

async fn release_seat(_ctx: &EffectCtx, _args: &HoldSeatArgs, _hold: &String) -> Result<(), ToolError> {
    Ok(())
}

/// Send an email to a customer.
#[tool(
    effect = "irreversible",
    key(to, subject),
    timeout = "30s",
    retry(max_attempts = 2, base_delay = "500ms"),
    open_world = true
)]
async fn send_email(to: String, subject: String, #[sensitive] smtp_password: String) -> Result<(), ToolError> {
    let _ = (to, subject, smtp_password);
    Ok(())
}

pub struct Payments;

/// The payment provider's API key: the application gives it to the run, the model never sees it.
pub struct StripeKey(pub String);

#[tools]
impl Payments {
    /// Charge an invoice.
    #[tool(effect = "irreversible", name = "charge_invoice", key = |a| a.invoice_id.clone(), approval = "finance")]
    pub async fn charge(
        &self,
        ctx: &EffectCtx,
        invoice_id: String,
        #[secret] stripe: &StripeKey,
    ) -> Result<String, ToolError> {
        Ok(format!("{}:{invoice_id}:{}", ctx.run_id(), stripe.0.len()))
    }
}

fn toolkit() -> Toolkit {
    let payments = Arc::new(Payments);
    Toolkit::new()
        .with(SendEmail)
        .with(IssueRefund)
        .with(LookupOrder)
        .with(HoldSeat)
        .with(payments.charge_tool())
}

#[test]
fn manifest_matches_the_committed_one() {
    let text = toolkit().manifest();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/tools.manifest");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).expect("no committed manifest: run with UPDATE_SNAPSHOTS=1");
    if committed != text {
        let diff: Vec<String> = committed
            .lines()
            .filter(|l| !text.lines().any(|n| n == *l))
            .map(|l| format!("- {l}"))
            .chain(
                text.lines()
                    .filter(|l| !committed.lines().any(|c| c == *l))
                    .map(|l| format!("+ {l}")),
            )
            .collect();
        panic!(
            "a tool's declaration changed:\n{}\nif intended, re-bless with UPDATE_SNAPSHOTS=1 and commit the manifest",
            diff.join("\n")
        );
    }
}

#[test]
fn a_changed_declaration_is_a_one_line_diff() {
    let before = toolkit().manifest();

    // The same toolkit with one declaration changed (this `send_email` shadows the one above).
    /// Send an email to a customer.
    #[tool(
        effect = "irreversible",
        key(to),
        timeout = "30s",
        retry(max_attempts = 2, base_delay = "500ms"),
        open_world = true
    )]
    async fn send_email(to: String, subject: String, #[sensitive] smtp_password: String) -> Result<(), ToolError> {
        let _ = (to, subject, smtp_password);
        Ok(())
    }
    let after = Toolkit::new()
        .with(SendEmail)
        .with(IssueRefund)
        .with(LookupOrder)
        .with(HoldSeat)
        .with(Arc::new(Payments).charge_tool())
        .manifest();
    let changed: Vec<(&str, &str)> = before.lines().zip(after.lines()).filter(|(a, b)| a != b).collect();
    assert_eq!(before.lines().count(), after.lines().count());
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].0.contains("key=fields(to, subject)"));
    assert!(changed[0].1.contains("key=fields(to)"));
}

/// A team's own review check, as a team writes it: the committed manifest read as declarations
/// and reviewed against the toolkit the code builds now; the test fails on any high-risk change
/// (a call that may now run twice, run without a person, or keep a sensitive value) and says
/// what it does at run time.
#[test]
fn a_teams_check_refuses_high_risk_changes() {
    use effect_tool::toolkit::review::{self, Risk};

    fn high_risk(committed: &str, now: &Toolkit) -> Vec<String> {
        let review = review::diff_manifests(committed, &now.manifest()).expect("the committed manifest reads");
        review
            .changes
            .iter()
            .filter(|c| c.risk == Risk::High)
            .map(|c| c.sentence())
            .collect()
    }

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/tools.manifest");
    let committed = std::fs::read_to_string(&path).expect("no committed manifest: run with UPDATE_SNAPSHOTS=1");
    assert_eq!(high_risk(&committed, &toolkit()), Vec::<String>::new());

    // The same toolkit after a change a reviewer must not miss: `send_email` lost `subject`
    // from its key and became idempotent.
    /// Send an email to a customer.
    #[tool(
        effect = "idempotent",
        key(to),
        timeout = "30s",
        retry(max_attempts = 2, base_delay = "500ms"),
        open_world = true
    )]
    async fn send_email(to: String, subject: String, #[sensitive] smtp_password: String) -> Result<(), ToolError> {
        let _ = (to, subject, smtp_password);
        Ok(())
    }
    let changed = Toolkit::new()
        .with(SendEmail)
        .with(IssueRefund)
        .with(LookupOrder)
        .with(HoldSeat)
        .with(Arc::new(Payments).charge_tool());
    assert_eq!(
        high_risk(&committed, &changed),
        [
            "`send_email`: irreversible → idempotent: the runtime will now retry it and re-run an unknown outcome \
             with the same key; confirm the provider honours `Idempotency-Key`",
            "`send_email`: key changed from `fields(to, subject)` to `fields(to)`: calls recorded under the old key \
             will not be replayed: a call retried across the change runs again; calls that differ only in `subject` \
             now share a key: the second gets the first's recorded result instead of running",
        ]
    );
}
