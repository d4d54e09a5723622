//! Output schemas and the client's idempotency keys on the MCP server (issue 31 item 5, issue
//! 32 item 4), driven by the official Python `mcp` SDK over Streamable HTTP
//! (`tests/mcp_client/output_keys.py`), whose client checks every `structuredContent` against the
//! listed `outputSchema` itself:
//! - an object output's schema is its `outputSchema`; a list is wrapped under `result` in both
//!   schema and content; an output that breaks the schema its tool declares is an error result,
//!   never the structure;
//! - a payment sent with an `idempotencyKey` (in `_meta`, or the `Idempotency-Key` header) from
//!   three sessions of one principal is made once, counted in a ledger file the tool appends to
//!   (never the journal); the same key with another amount is an error; another principal's
//!   call under the same key is its own.
//!
//! Needs `python3 -m pip install -r tests/mcp_client/requirements.txt` (scripts/test.sh does it).

#![cfg(feature = "mcp-http")]

use crate::common;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use common::python::{client_passed, python, require_http_client, run_client};
use effect_tool::adapters::mcp::{BearerTokens, McpHttpConfig, McpServer};
use effect_tool::{EffectClass, EffectCtx, Engine, MemoryStore, Tool, ToolError, Toolkit, tools};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A payment, as the bank's tools return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Payment {
    /// The payment's id.
    pub id: String,
    /// Who was paid.
    pub to: String,
    /// How much.
    pub amount_cents: u64,
}

/// A bank whose payments are lines of a file (the outside ledger).
struct Bank {
    ledger: PathBuf,
}

impl Bank {
    fn payments(&self) -> Vec<Payment> {
        let text = std::fs::read_to_string(&self.ledger).unwrap_or_default();
        text.lines()
            .enumerate()
            .map(|(i, l)| {
                let mut parts = l.split(' ');
                let to = parts.nth(1).unwrap_or_default().to_owned();
                let amount_cents = parts.next().and_then(|a| a.parse().ok()).unwrap_or_default();
                Payment {
                    id: format!("p-{}", i + 1),
                    to,
                    amount_cents,
                }
            })
            .collect()
    }
}

#[tools]
impl Bank {
    /// Pay someone. Paying twice pays twice.
    #[tool(effect = "irreversible")]
    async fn pay(
        &self,
        ctx: &EffectCtx,
        /// Who to pay.
        to: String,
        /// How much, in cents.
        amount_cents: u64,
    ) -> Result<Payment, ToolError> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.ledger)
            .map_err(|e| ToolError::transient(e.to_string()))?;
        writeln!(file, "pay {to} {amount_cents} {}", ctx.run_id()).map_err(|e| ToolError::unknown(e.to_string()))?;
        Ok(self.payments().pop().expect("the line just written"))
    }

    /// The payments made so far.
    #[tool(effect = "pure")]
    async fn list_payments(&self) -> Result<Vec<Payment>, ToolError> {
        Ok(self.payments())
    }
}

/// No arguments.
#[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoArgs {}

/// A tool whose output breaks the schema it declares (a `Payment`): a bug of the server's.
struct Liar;

impl Tool for Liar {
    type Args = NoArgs;
    type Output = Value;
    type Error = ToolError;
    const NAME: &'static str = "liar";
    const CLASS: EffectClass = EffectClass::Pure;
    const DESCRIPTION: &'static str = "Claims to return a payment.";

    fn output_schema() -> Option<Value> {
        Some(effect_tool::value::schema::output_schema::<Payment>())
    }

    async fn call(&self, _ctx: &EffectCtx, _args: NoArgs) -> Result<Value, ToolError> {
        Ok(json!({"id": 7}))
    }
}

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

fn toolkit(bank: &Arc<Bank>) -> Toolkit {
    Toolkit::new()
        .with(bank.pay_tool())
        .with(bank.list_payments_tool())
        .with(Liar)
}

#[test]
fn the_manifest_names_each_output_type_and_its_schema_digest() {
    let dir = tempfile::tempdir().unwrap();
    let bank = Arc::new(Bank {
        ledger: dir.path().join("ledger.txt"),
    });
    let manifest = toolkit(&bank).manifest();
    let outputs: Vec<&str> = manifest.lines().filter(|l| l.starts_with("# output: ")).collect();
    assert_eq!(outputs.len(), 3, "{manifest}");
    assert!(
        outputs[0].starts_with("# output: liar: serde_json::value::Value schema="),
        "{manifest}"
    );
    assert!(
        outputs[1].starts_with("# output: list_payments: Vec<Payment> schema="),
        "{manifest}"
    );
    assert!(outputs[2].starts_with("# output: pay: Payment schema="), "{manifest}");
    // The review reads them back, and a changed output type is a change.
    let changed = manifest.replace("# output: pay: Payment schema=", "# output: pay: Receipt schema=");
    let review = effect_tool::toolkit::review::diff_manifests(&manifest, &changed).unwrap();
    assert!(
        review.to_text().contains("output type `Payment` → `Receipt`"),
        "{}",
        review.to_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_fit_their_schemas_and_a_clients_idempotency_key_pays_once_per_principal() {
    let python = python();
    require_http_client(&python);
    let dir = tempfile::tempdir().unwrap();
    let bank = Arc::new(Bank {
        ledger: dir.path().join("ledger.txt"),
    });
    let tools = toolkit(&bank);
    let auth = BearerTokens::new().with_token(ALICE, "alice").with_token(BOB, "bob");
    let handle = McpServer::new(tools, Engine::new(MemoryStore::new()))
        .bind_http_with(
            "127.0.0.1:0".parse().unwrap(),
            McpHttpConfig::default().with_authenticator(auth),
        )
        .await
        .unwrap();
    let out = run_client(&python, "output_keys.py", [handle.url(), ALICE.into(), BOB.into()]).await;
    handle.shutdown().await.unwrap();
    let stdout = client_passed(&out);
    assert!(
        stdout.contains("the same key with other arguments is an error"),
        "{stdout}"
    );
    // Counted in the ledger, not the journal: one payment for alice, one for bob.
    let ledger = std::fs::read_to_string(&bank.ledger).unwrap();
    let lines: Vec<&str> = ledger.lines().collect();
    assert_eq!(lines.len(), 2, "ledger:\n{ledger}");
    assert!(lines[0].starts_with("pay ann 500 alice/"), "ledger:\n{ledger}");
    assert!(lines[1].starts_with("pay ann 500 bob/"), "ledger:\n{ledger}");
}
