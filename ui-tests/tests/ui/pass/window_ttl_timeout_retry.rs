use std::time::Duration;

use effect_tool::{tool, Tool, ToolError, Window};

/// Refund an order.
#[tool(
    effect = "idempotent",
    window = "thread",
    ttl = "7d",
    timeout = "1m30s",
    retry(max_attempts = 5, base_delay = "200ms", max_delay = "30s")
)]
async fn refund(order_id: String) -> Result<String, ToolError> {
    Ok(order_id)
}

/// Another window.
#[tool(effect = "irreversible", window = "cross-run", retry(max_attempts = 1))]
async fn pay(invoice: String) -> Result<String, ToolError> {
    Ok(invoice)
}

/// The default window.
#[tool(effect = "idempotent", window = "run")]
async fn run_scoped(id: String) -> Result<String, ToolError> {
    Ok(id)
}

fn main() {
    assert_eq!(Refund::WINDOW, Window::Thread);
    assert_eq!(Refund::TTL, Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(Refund::TIMEOUT, Some(Duration::from_secs(90)));
    assert_eq!(Refund::RETRY.max_attempts, 5);
    assert_eq!(Refund::RETRY.max_delay, Duration::from_secs(30));
    assert_eq!(Pay::WINDOW, Window::CrossRun);
    assert_eq!(Pay::RETRY.max_attempts, 1);
    assert_eq!(RunScoped::WINDOW, Window::Run);
}
