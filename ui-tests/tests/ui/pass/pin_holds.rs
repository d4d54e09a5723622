use effect_tool::{assert_declared, tool, EffectCtx, ToolError};

/// Charge a card.
#[tool(effect = "irreversible", key(invoice_id), approval = "finance")]
async fn send_payment(invoice_id: String) -> Result<String, ToolError> {
    Ok(invoice_id)
}

/// Hold a seat.
#[tool(effect = "compensable", key(r#seat), compensate = release, window = "thread")]
async fn reserve_seat(r#seat: String) -> Result<String, ToolError> {
    Ok(seat)
}

async fn release(_ctx: &EffectCtx, _args: &ReserveSeatArgs, _out: &String) -> Result<(), ToolError> {
    Ok(())
}

assert_declared!(SendPayment: irreversible, approval = "finance", key(invoice_id));
assert_declared! {
    ReserveSeat: compensable, compensate, key(seat), window = "thread";
    SendPayment: irreversible;
}

fn main() {}
