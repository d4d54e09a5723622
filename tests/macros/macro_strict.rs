//! `#[tool(strict)]`: a schema that cannot be sent with OpenAI's `"strict": true` fails
//! `cargo test`, with the reasons (issue 13). The attribute generates a `#[cfg(test)]` test named
//! `__effect_tool_strict_<Tool>` beside the declaration.

// The tools are declared for their generated tests only; nothing calls them.
#![allow(dead_code)]

use effect_tool::{ToolError, tool};

/// Look up an order. Every field can be strict (an `Option` is sent as nullable).
#[tool(effect = "pure", strict)]
async fn lookup_order(
    /// The order.
    order_id: String,
    /// Only this line.
    line: Option<u32>,
) -> Result<String, ToolError> {
    Ok(format!("{order_id}:{line:?}"))
}

/// The generated test of a strict-able tool is an ordinary test of this crate (it also runs on
/// its own in this binary's list), and passes.
#[test]
fn a_strict_tool_whose_schema_can_be_strict_passes_its_generated_test() {
    __effect_tool_strict_LookupOrder();
}

/// Declared inside a function, the generated test is not registered (so this binary stays
/// green) but can be called, to see it fail the way `cargo test` would show it.
#[test]
#[allow(unnameable_test_items)]
fn a_strict_tool_whose_schema_cannot_be_strict_fails_its_generated_test_with_the_reasons() {
    /// Count things by name.
    #[tool(effect = "pure", strict)]
    async fn count(
        /// How many of each.
        counts: std::collections::HashMap<String, u32>,
    ) -> Result<u32, ToolError> {
        Ok(counts.values().sum())
    }
    let panic = std::panic::catch_unwind(__effect_tool_strict_Count).expect_err("a map cannot be strict");
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(message.contains("cannot be strict"), "{message}");
    assert!(message.contains("`counts`"), "the reason names the field: {message}");
}
