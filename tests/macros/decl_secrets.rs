//! The two kinds of protected values. A value the application holds (`#[secret]`: a password, a
//! token) is taken from the run, is never in the schema and never reaches the model or the
//! journal; a value the model supplies that must not be kept (`#[sensitive]`: a card number) is
//! in the schema, and never reaches the journal, keys or error texts (by its serialized name).
//! Both work with `compensate`. Effects are counted by ledgers the engine cannot see.

use crate::common;

use std::sync::{LazyLock, Mutex};

use common::ledger::Downstream;
use effect_tool::{
    CallOptions, DynTool, EffectCtx, EffectError, Engine, Filter, MemoryStore, RunContext, Store, Tool, ToolCall,
    ToolError, tool, toolkit,
};

/// The SMTP password the application holds.
#[derive(Clone)]
pub struct SmtpPassword(String);

const PASSWORD: &str = "hunter2-smtp-password";

static MAILS: LazyLock<Downstream> = LazyLock::new(Downstream::default);
/// The passwords the mail server was given, as it saw them.
static LOGINS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Send an email through the company's SMTP relay.
#[tool(effect = "irreversible", key(to))]
async fn send_email(
    ctx: &EffectCtx,
    /// Who to write to.
    to: String,
    #[secret] smtp: SmtpPassword,
) -> Result<String, ToolError> {
    LOGINS.lock().unwrap().push(smtp.0.clone());
    MAILS.apply(&ctx.idempotency_key());
    Ok(format!("sent to {to}"))
}

#[tokio::test]
async fn an_application_value_is_taken_from_the_run_and_never_reaches_the_model_or_the_journal() {
    let schema = <SendEmail as Tool>::input_schema().to_string();
    assert!(
        !schema.contains("smtp"),
        "the application's value is in the schema: {schema}"
    );

    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-mail").with_value(SmtpPassword(PASSWORD.into()));
    let kit = toolkit![SendEmail];
    let out = kit
        .dispatcher(engine.clone())
        .dispatch(
            &run,
            &[ToolCall {
                id: "c1".into(),
                name: "send_email".into(),
                arguments: r#"{"to": "ada@example.com"}"#.into(),
            }],
        )
        .await;
    assert_eq!(
        out[0].output().and_then(|v| v.as_str()),
        Some("sent to ada@example.com"),
        "{out:?}"
    );
    assert_eq!(MAILS.effects(), 1);
    assert!(
        LOGINS.lock().unwrap().iter().any(|p| p == PASSWORD),
        "the tool got the password"
    );
    let records = engine.store().list(&Filter::default()).await.unwrap();
    let stored = format!("{records:?} {:?}", engine.store().audit(None).await.unwrap());
    assert!(!stored.contains(PASSWORD), "the password reached the journal: {stored}");
}

#[tokio::test]
async fn a_missing_application_value_is_a_clear_error_before_anything_runs() {
    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-no-password");
    let before = MAILS.requests();
    let err = engine
        .call(
            &SendEmail,
            &run,
            CallOptions::call_id("c1"),
            SendEmailArgs {
                to: "bob@example.com".into(),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, EffectError::MissingValue { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("SmtpPassword") && text.contains("with_value"), "{text}");
    assert_eq!(MAILS.requests(), before, "nothing was sent");
    let records = engine.store().list(&Filter::default()).await.unwrap();
    assert!(records.is_empty(), "nothing was claimed: {records:?}");
}

const CARD: &str = "4111111111111111";
static PAYMENTS: LazyLock<Downstream> = LazyLock::new(Downstream::default);

/// Pay an order with the card number the user typed.
#[tool(effect = "irreversible")]
async fn pay(
    ctx: &EffectCtx,
    /// The order.
    order: String,
    /// The card number, as the user typed it.
    #[sensitive]
    #[serde(rename = "cardNumber")]
    card_number: String,
) -> Result<String, ToolError> {
    PAYMENTS.apply(&ctx.idempotency_key());
    Ok(format!(
        "paid {order} with a card ending {}",
        &card_number[card_number.len() - 4..]
    ))
}

#[tokio::test]
async fn a_renamed_sensitive_value_is_in_the_schema_and_nowhere_it_would_be_kept() {
    let schema = <Pay as Tool>::input_schema();
    assert!(
        schema["properties"].get("cardNumber").is_some(),
        "the model must be able to send it: {schema}"
    );
    assert_eq!(Pay::SENSITIVE, ["cardNumber"]);

    let engine = Engine::new(MemoryStore::new());
    let run = RunContext::new("run-pay");
    let args = |card: &str| serde_json::json!({"order": "o-1", "cardNumber": card});
    let out = DynTool::call_json(&Pay, &engine, &run, CallOptions::call_id("c1"), args(CARD)).await;
    assert_eq!(
        out.result.as_ref().ok().and_then(|v| v.as_str()),
        Some("paid o-1 with a card ending 1111")
    );
    let records = engine.store().list(&Filter::default()).await.unwrap();
    let stored = format!("{records:?} {:?}", engine.store().audit(None).await.unwrap());
    assert!(!stored.contains(CARD), "the card number reached the journal: {stored}");
    assert!(!records[0].key.contains(CARD), "{}", records[0].key);

    // A malformed value: the rejection does not quote it.
    let bad = serde_json::json!({"order": "o-2", "cardNumber": 4_111_111_111_111_111_u64});
    let out = DynTool::call_json(&Pay, &engine, &run, CallOptions::call_id("c2"), bad).await;
    let err = out.result.unwrap_err().to_string();
    assert!(!err.contains(CARD), "the error quotes the card number: {err}");
    assert!(err.contains("[sensitive]"), "{err}");
    assert_eq!(PAYMENTS.effects(), 1);
}

/// The API token of the booking system, held by the application.
#[derive(Clone)]
pub struct BookingToken(String);

static HOLDS: LazyLock<Downstream> = LazyLock::new(Downstream::default);
/// Holds released, by the token the release was made with.
static RELEASED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Hold a room; released when the run is abandoned.
#[tool(effect = "compensable", key(room), compensate = release_room)]
async fn hold_room(
    ctx: &EffectCtx,
    /// The room.
    room: String,
    /// The guest's passport number (not kept: the release does without it).
    #[sensitive]
    passport: Option<String>,
    #[secret] token: &BookingToken,
) -> Result<String, ToolError> {
    assert!(passport.is_some() && !token.0.is_empty());
    HOLDS.apply(&ctx.idempotency_key());
    Ok(format!("hold-{room}"))
}

/// The booking system needs the application's token to release the hold, again.
#[allow(clippy::ptr_arg)] // a compensation takes `&Output`, here `&String`
async fn release_room(ctx: &EffectCtx, args: &HoldRoomArgs, hold: &String) -> Result<(), ToolError> {
    let token = ctx
        .value::<BookingToken>()
        .ok_or_else(|| ToolError::definitive("no booking token"))?;
    assert!(args.passport.is_none(), "the journal does not keep the passport number");
    RELEASED.lock().unwrap().push((hold.clone(), token.0.clone()));
    Ok(())
}

#[tokio::test]
async fn a_compensable_tool_with_protected_values_is_compensated_by_abandon_run() {
    let engine = Engine::new(MemoryStore::new());
    let token = || BookingToken("booking-token".into());
    let run = RunContext::new("run-rooms").with_value(token());
    let kit = toolkit![HoldRoom];
    let out = kit
        .dispatcher(engine.clone())
        .dispatch(
            &run,
            &[ToolCall {
                id: "c1".into(),
                name: "hold_room".into(),
                arguments: r#"{"room": "101", "passport": "X1234567"}"#.into(),
            }],
        )
        .await;
    assert_eq!(out[0].output().and_then(|v| v.as_str()), Some("hold-101"), "{out:?}");
    assert_eq!(HOLDS.effects(), 1);

    // Abandoned by an operator's process that does not hold the token: nothing is undone, and
    // the report says which value to give.
    let bare = RunContext::new("run-rooms");
    let report = kit.abandon_run(&engine, &bare).await.unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(report.failed[0].1.contains("BookingToken"), "{report:?}");
    assert!(!report.failed[0].1.contains("type changed"), "{report:?}");
    assert!(RELEASED.lock().unwrap().is_empty());

    // With the token: released once, with it.
    let report = kit.abandon_run(&engine, &run).await.unwrap();
    assert_eq!(report.compensated.len(), 1, "{report:?}");
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(
        *RELEASED.lock().unwrap(),
        [("hold-101".to_owned(), "booking-token".to_owned())]
    );
    let again = kit
        .abandon_run(&engine, &run.clone().with_value(token()))
        .await
        .unwrap();
    assert_eq!(again.already_compensated.len(), 1, "{again:?}");
    assert_eq!(RELEASED.lock().unwrap().len(), 1, "released once");
}
