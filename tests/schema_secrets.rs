//! Secret values never reach a log or the model: a TRACE subscriber captures everything
//! effect-tool logs while the `Dispatcher` refuses calls whose sensitive fields are of the wrong
//! type (and one that decodes wrong), and the capture, the model-facing texts and the results'
//! debug output are searched for the sensitive values.

mod common;

use common::capture::Capture;
use effect_tool::toolkit::ToolCall;
use effect_tool::{Engine, MemoryStore, RunContext, ToolError, tool};

/// Log in to the billing system.
#[tool(effect = "idempotent", key(user))]
async fn login(user: String, #[sensitive] pin: u32, #[sensitive] token: String) -> Result<String, ToolError> {
    let _ = (pin, token);
    Ok(format!("welcome {user}"))
}

const SECRETS: &[&str] = &["s3cr3t-pin-value", "77331199", "tok-5ecret-abc"];

#[tokio::test]
async fn wrong_typed_secrets_are_named_but_never_printed() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.subscriber()).unwrap();

    let dispatcher = effect_tool::toolkit![Login].dispatcher(Engine::new(MemoryStore::new()));
    let run = RunContext::new("secrets");
    let calls = [
        // The pin as a string: wrong type.
        ToolCall::new(
            "c1",
            "login",
            r#"{"user": "ann", "pin": "s3cr3t-pin-value", "token": "t"}"#,
        ),
        // The token as a number, the pin too large for u32.
        ToolCall::new(
            "c2",
            "login",
            r#"{"user": "ann", "pin": 77331199000, "token": 77331199}"#,
        ),
        // A valid secret beside a wrong field.
        ToolCall::new("c3", "login", r#"{"user": 5, "pin": 1, "token": "tok-5ecret-abc"}"#),
    ];
    let results = dispatcher.dispatch(&run, &calls).await;
    let mut seen = capture.text();
    for r in &results {
        assert!(r.is_rejected(), "{}", r.content());
        seen.push_str(&r.content());
        seen.push_str(&format!("{r:?}"));
        seen.push_str(&r.to_openai_message().to_string());
        seen.push_str(&r.to_anthropic_block().to_string());
    }
    assert!(
        results[0].content().contains("`pin`: expected integer"),
        "{}",
        results[0].content()
    );
    assert!(
        results[1].content().contains("`token`: expected string"),
        "{}",
        results[1].content()
    );
    assert!(results[1].content().contains("`pin`:"), "{}", results[1].content());
    assert!(
        seen.contains("tool call rejected"),
        "the rejections are logged:\n{seen}"
    );
    for secret in SECRETS {
        assert!(!seen.contains(secret), "secret {secret} printed:\n{seen}");
    }
    // "77331199000" contains "77331199": the pin's value is not shown either.
    assert!(!seen.contains("77331199000"), "{seen}");
}
