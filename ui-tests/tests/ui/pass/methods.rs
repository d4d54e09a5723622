use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use effect_tool::{tools, EffectCtx, Tool, ToolError};

pub struct Ledger {
    next: AtomicU64,
}

#[tools]
impl Ledger {
    /// Post an entry.
    #[tool(effect = "compensable", key(account), recover = find, compensate = reverse)]
    pub async fn post(&self, ctx: &EffectCtx, account: String, amount: i64) -> Result<u64, ToolError> {
        let _ = (ctx, account, amount);
        Ok(self.next.fetch_add(1, Ordering::SeqCst))
    }

    async fn find(&self, _ctx: &EffectCtx, _args: &LedgerPostArgs) -> Result<Option<u64>, ToolError> {
        Ok(None)
    }

    async fn reverse(&self, _ctx: &EffectCtx, _args: &LedgerPostArgs, _id: &u64) -> Result<(), ToolError> {
        Ok(())
    }

    /// The next entry id.
    #[effect_tool::tool(effect = "pure")]
    pub async fn peek(&self) -> Result<u64, ToolError> {
        Ok(self.next.load(Ordering::SeqCst))
    }
}

/// `Self` in argument and return types means the impl's type.
#[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Point {
    pub x: i64,
}

#[tools]
impl Point {
    /// Add two points.
    #[tool(effect = "pure")]
    pub async fn add(&self, other: Self) -> Result<Self, ToolError> {
        Ok(Point { x: self.x + other.x })
    }
}

fn main() {
    let ledger = Arc::new(Ledger { next: AtomicU64::new(1) });
    let post = ledger.post_tool();
    let peek = LedgerPeek::new(ledger.clone());
    assert_eq!(LedgerPost::NAME, "post");
    assert_eq!(LedgerPeek::NAME, "peek");
    let _ = (post, peek);
    let _ = PointAddArgs { other: Point { x: 1 } };
}
