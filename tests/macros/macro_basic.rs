//! The `#[tool]` attribute end to end: generated names, constants, keys, approval, hooks, and
//! calls through the engine, with effects counted outside the engine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use effect_tool::{
    CallOptions, EffectClass, EffectCtx, Engine, KeyRule, MemoryStore, RunContext, Tool, ToolError, ToolMeta, Window,
    tool, tools,
};
use serde::{Deserialize, Serialize};

/// The refunds made, by order: the ledger the engine cannot see (per order, since the tests of
/// this file run in parallel and another one calls the function directly).
static REFUNDS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn refunds_of(order: &str) -> usize {
    REFUNDS.lock().unwrap().iter().filter(|o| *o == order).count()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Refund {
    pub id: String,
    pub amount_cents: u64,
}

/// Refund part of an order.
///
/// The amount is in cents.
#[tool(effect = "idempotent", key = |a| format!("refund:{}:{}", a.order_id, a.amount_cents), window = "cross-run", ttl = "24h")]
async fn issue_refund(
    ctx: &EffectCtx,
    /// The order to refund.
    order_id: String,
    /// How much, in cents.
    amount_cents: u64,
) -> Result<Refund, ToolError> {
    REFUNDS.lock().unwrap().push(order_id.clone());
    Ok(Refund {
        id: format!("re_{}", ctx.idempotency_key().len()),
        amount_cents,
    })
    .map(|mut r: Refund| {
        r.id = format!("re_{order_id}");
        r
    })
}

/// Look up an order.
#[tool(effect = "pure")]
async fn lookup_order(order_id: String) -> Result<String, ToolError> {
    Ok(format!("order {order_id}"))
}

static EMAILS: AtomicUsize = AtomicUsize::new(0);

/// Send an email.
#[tool(
    effect = "irreversible",
    key(to, subject),
    approval = "support-lead",
    when = |a| a.to.ends_with("@vip.example"),
    timeout = "30s",
    retry(max_attempts = 2, base_delay = "10ms"),
    name = "send_email_v2",
    strict_input,
    open_world = true,
    recover = find_sent,
)]
async fn send_email(
    to: String,
    subject: String,
    #[sensitive] api_token: String,
    ctx: &EffectCtx,
) -> Result<u64, ToolError> {
    let _ = (api_token, ctx, to, subject);
    Ok(EMAILS.fetch_add(1, Ordering::SeqCst) as u64)
}

async fn find_sent(_ctx: &EffectCtx, _args: &SendEmailArgs) -> Result<Option<u64>, ToolError> {
    Ok(None)
}

static RESERVED: AtomicUsize = AtomicUsize::new(0);

/// Hold a seat.
#[tool(effect = "compensable", compensate = release_seat)]
async fn reserve_seat(seat: String) -> Result<String, ToolError> {
    RESERVED.fetch_add(1, Ordering::SeqCst);
    Ok(format!("hold:{seat}"))
}

async fn release_seat(_ctx: &EffectCtx, _args: &ReserveSeatArgs, _hold: &String) -> Result<(), ToolError> {
    RESERVED.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn constants_say_what_was_declared() {
    assert_eq!(IssueRefund::NAME, "issue_refund");
    assert_eq!(IssueRefund::CLASS, EffectClass::Idempotent);
    assert_eq!(
        IssueRefund::DESCRIPTION,
        "Refund part of an order.\n\nThe amount is in cents."
    );
    assert_eq!(
        IssueRefund::KEY_RULE,
        KeyRule::Custom(r#"|a| format!("refund:{}:{}", a.order_id, a.amount_cents)"#)
    );
    assert_eq!(IssueRefund::WINDOW, Window::CrossRun);
    assert_eq!(IssueRefund::TTL, Some(Duration::from_secs(24 * 3600)));

    assert_eq!(LookupOrder::CLASS, EffectClass::Pure);
    assert_eq!(LookupOrder::KEY_RULE, KeyRule::Default);

    let meta = ToolMeta::of::<SendEmail>();
    assert_eq!(meta.name, "send_email_v2");
    assert_eq!(meta.class, EffectClass::Irreversible);
    assert_eq!(meta.key_rule, KeyRule::Fields(&["to", "subject"]));
    assert_eq!(meta.approval, Some("support-lead"));
    assert_eq!(meta.approval_when, Some(r#"|a| a.to.ends_with("@vip.example")"#));
    assert_eq!(meta.timeout, Some(Duration::from_secs(30)));
    assert_eq!(meta.sensitive, &["api_token"]);
    assert_eq!(meta.open_world, Some(true));
    assert!(meta.has_recover);
    assert!(!meta.has_compensate);
    assert_eq!(meta.retry.max_attempts, 2);
    assert_eq!(meta.retry.base_delay, Duration::from_millis(10));
    assert_eq!(meta.retry.max_delay, effect_tool::RetryPolicy::DEFAULT.max_delay);
    assert_eq!(ToolMeta::of::<SendEmail>().name, SendEmail::NAME);
    const { assert!(SendEmail::STRICT_INPUT) };

    assert!(ToolMeta::of::<ReserveSeat>().has_compensate);
}

#[test]
fn key_and_approval_closures_run_on_the_args() {
    let args = IssueRefundArgs {
        order_id: "o-1".into(),
        amount_cents: 250,
    };
    assert_eq!(IssueRefund.key(&args).as_deref(), Some("refund:o-1:250"));

    let mail = |to: &str| SendEmailArgs {
        to: to.into(),
        subject: "hi".into(),
        api_token: "t".into(),
    };
    assert!(SendEmail.needs_approval(&mail("a@vip.example")));
    assert!(!SendEmail.needs_approval(&mail("a@example.com")));
    assert_eq!(
        SendEmail.key(&mail("a@example.com")),
        None,
        "field keys are made by the engine"
    );
}

#[test]
fn schema_has_docs_and_no_context() {
    let schema = IssueRefund::input_schema();
    let props = schema["properties"].as_object().unwrap();
    assert_eq!(props.len(), 2, "{schema}");
    assert_eq!(props["order_id"]["description"], "The order to refund.");
    assert_eq!(props["amount_cents"]["description"], "How much, in cents.");
    assert_eq!(schema["additionalProperties"], false);
}

#[tokio::test]
async fn the_original_function_stays_callable() {
    let ctx = EffectCtx::detached(RunContext::new("r"), "issue_refund", EffectClass::Idempotent);
    let refund = issue_refund(&ctx, "o-9".into(), 5).await.unwrap();
    assert_eq!(refund.id, "re_o-9");
    assert_eq!(lookup_order("x".into()).await.unwrap(), "order x");
}

#[tokio::test]
async fn a_declared_tool_runs_once_through_the_engine() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-macro-basic");
    let args = IssueRefundArgs {
        order_id: "o-42".into(),
        amount_cents: 1000,
    };
    let first = engine
        .call(&IssueRefund, &run, CallOptions::call_id("c1"), args.clone())
        .await
        .unwrap();
    let second = engine
        .call(&IssueRefund, &run, CallOptions::call_id("c2"), args)
        .await
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(refunds_of("o-42"), 1);
}

// ---- tools as methods of a struct holding state ----

pub struct Shop {
    refunds: AtomicUsize,
    prefix: String,
}

#[tools]
impl Shop {
    /// Refund through the shop's client.
    #[tool(effect = "idempotent", key(order_id), recover = already_refunded)]
    pub async fn refund(&self, ctx: &EffectCtx, order_id: String) -> Result<String, ToolError> {
        let _ = ctx;
        self.refunds.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}{order_id}", self.prefix))
    }

    async fn already_refunded(&self, _ctx: &EffectCtx, _args: &ShopRefundArgs) -> Result<Option<String>, ToolError> {
        Ok(None)
    }

    /// Count refunds so far.
    #[tool(effect = "pure", name = "refund_count")]
    pub async fn count(&self) -> Result<usize, ToolError> {
        Ok(self.refunds.load(Ordering::SeqCst))
    }
}

#[tokio::test]
async fn method_tools_share_their_state() {
    let shop = Arc::new(Shop {
        refunds: AtomicUsize::new(0),
        prefix: "re_".into(),
    });
    assert_eq!(ShopRefund::NAME, "refund");
    const { assert!(ShopRefund::HAS_RECOVER) };
    assert_eq!(ShopCount::NAME, "refund_count");
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-shop");
    let tool = shop.refund_tool();
    for call in ["a", "b"] {
        let out = engine
            .call(
                &tool,
                &run,
                CallOptions::call_id(call),
                ShopRefundArgs { order_id: "o-1".into() },
            )
            .await
            .unwrap();
        assert_eq!(out, "re_o-1");
    }
    assert_eq!(shop.refunds.load(Ordering::SeqCst), 1);
    let count = engine
        .call(
            &ShopCount::new(shop.clone()),
            &run,
            CallOptions::default(),
            ShopCountArgs {},
        )
        .await
        .unwrap();
    assert_eq!(count, 1);
}
