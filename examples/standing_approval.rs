//! Standing approvals: a person approves, in advance, the refunds of up to 5,000 cents for the
//! next eight hours; those run without waiting, the others wait for a person as before.
//!
//! Run: `cargo run --example standing_approval` (no set-up: an in-memory journal). It exits
//! non-zero when anything differs from what is said here.
//!
//! 1. Alice (role `finance`) grants: `refund` calls with `cents <= 5000`, for eight hours.
//! 2. A refund of 1,200 cents runs at once; its record names Alice as approver, its audit entry
//!    (`grant-used`) names the grant. Called again, it replays: the payment backend (a ledger
//!    the engine cannot see) refunded it once.
//! 3. A refund of 9,000 cents is over the limit: it waits for a person.
//! 4. Alice's own refund (a run scoped to her) waits too: nobody approves their own calls.
//! 5. Bob revokes the grant: the next small refund waits for a person.

use std::sync::Mutex;

use effect_tool::decide::grant::{Condition, Test};
use effect_tool::store::NewGrant;
use effect_tool::{CallOptions, Disposition, Engine, MemoryStore, RunContext, Store, ToolError, tool};

/// The payment backend's own ledger of refunds (outside the engine).
static REFUNDS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Refund part of an order, in cents. Every refund needs the approval of `finance`.
#[tool(effect = "irreversible", key(order_id), approval = "finance")]
async fn refund(order_id: String, cents: u64) -> Result<String, ToolError> {
    REFUNDS.lock().unwrap().push(format!("{order_id}:{cents}"));
    Ok(format!("refunded {cents} cents on {order_id}"))
}

fn check(what: &str, ok: bool) {
    println!("{} {what}", if ok { "ok  " } else { "FAIL" });
    if !ok {
        std::process::exit(1);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let engine = Engine::new(MemoryStore::new());
    let store = engine.store().clone();
    let grant = engine
        .grant::<Refund>(NewGrant {
            tool: String::new(),
            role: "finance".into(),
            granted_by: "alice".into(),
            granter_names: Vec::new(),
            when: vec![Condition {
                arg: "cents".into(),
                test: Test::AtMost(5000.0),
            }],
            valid_from: None,
            valid_until: store.now() + 8 * 3_600_000,
            run_id: None,
            principal: None,
        })
        .await
        .expect("the grant is made");
    println!("1. alice granted {}: refund where cents <= 5000, for 8 hours", grant.id);

    let run = RunContext::new("support-run-1");
    let call = |run: RunContext, order: &'static str, cents: u64| {
        let engine = engine.clone();
        async move {
            engine
                .call_with_report(
                    &Refund,
                    &run,
                    CallOptions::default(),
                    RefundArgs {
                        order_id: order.into(),
                        cents,
                    },
                )
                .await
        }
    };
    let small = call(run.clone(), "A-1", 1200).await;
    println!("2. refund A-1 1200: {}", small.disposition.as_str());
    check(
        "a covered refund runs without waiting",
        small.disposition == Disposition::Executed,
    );
    let key = small.key.clone().expect("a journaled call has a key");
    let rec = store.get(&key).await.unwrap().expect("the record");
    check(
        "its record names the granter",
        rec.decided_by.as_deref() == Some("alice"),
    );
    let audit = store.audit(Some(&key)).await.unwrap();
    check(
        "its audit entry names the grant",
        audit
            .iter()
            .any(|e| e.action == "grant-used" && e.detail.as_ref().is_some_and(|d| d["grant"] == grant.id.as_str())),
    );
    let again = call(run.clone(), "A-1", 1200).await;
    check("called again, it replays", again.disposition == Disposition::Replayed);

    let big = call(run.clone(), "A-2", 9000).await;
    println!("3. refund A-2 9000: {}", big.disposition.as_str());
    check(
        "over the limit, it waits for a person",
        big.disposition == Disposition::AwaitingApproval,
    );

    let own = call(RunContext::new("alice/support-run-2"), "A-3", 100).await;
    println!("4. alice's own refund A-3 100: {}", own.disposition.as_str());
    check(
        "the granter's own call waits",
        own.disposition == Disposition::AwaitingApproval,
    );

    engine.revoke_grant(&grant.id, "bob").await.unwrap();
    let after = call(run, "A-4", 100).await;
    println!(
        "5. after bob revoked it, refund A-4 100: {}",
        after.disposition.as_str()
    );
    check(
        "after the revocation, it waits",
        after.disposition == Disposition::AwaitingApproval,
    );

    let refunds = REFUNDS.lock().unwrap().clone();
    println!("payment backend refunded: {refunds:?}");
    check("the backend refunded A-1 once, nothing else", refunds == ["A-1:1200"]);
}
