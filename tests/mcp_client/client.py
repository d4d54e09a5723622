"""External MCP client for effect-tool's example server (examples/mcp_server.rs).

Launches the server over stdio with the official Python `mcp` SDK, lists its tools (schemas and
the annotations each effect class implies), and calls them the way a retrying client would:
the same idempotent call twice must leave exactly one effect in the ledger file the tools write.

Usage: python3 client.py <server command...>
Environment: EFFECT_TOOL_LEDGER (the ledger file the server's tools append to) and
EFFECT_TOOL_DB (the server's SQLite journal) are passed through to the server (as is every
other variable, e.g. EFFECT_TOOL_MCP_LOG). With EFFECT_TOOL_SECRET_PROBE set, one more email
carries that value in its arguments (for the test that greps the server's logs for it).
Exits 0 and prints "N passed, 0 failed" when every check holds; exits 1 on the first failure.
"""

import os
import sys

import checks
from checks import check, check_tools, ledger_lines, meta_of, text_of
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def check_idempotent_call_twice(session):
    args = {"order_id": "A-1001", "amount_cents": 1500}
    first = await session.call_tool("issue_refund", args)
    second = await session.call_tool("issue_refund", args)
    check(not first.is_error, f"first refund failed: {text_of(first)}")
    check(not second.is_error, f"second refund failed: {text_of(second)}")
    check(first.structured_content == second.structured_content, "the two calls returned different refunds")
    check(first.structured_content["amount_cents"] == 1500, f"refund: {first.structured_content}")
    check(meta_of(first).get("effect-tool/disposition") == "executed", f"first: {meta_of(first)}")
    check(meta_of(second).get("effect-tool/disposition") == "replayed", f"second: {meta_of(second)}")
    check(meta_of(second).get("effect-tool/key", "").endswith("refund:A-1001:1500"), f"key: {meta_of(second)}")
    refunds = ledger_lines("refund")
    check(len(refunds) == 1, f"expected one refund in the ledger, found {refunds}")
    print("ok: issue_refund called twice, one refund in the ledger")

    # A run named in _meta is another run: the refund applies there once too.
    meta = {"effect-tool/run_id": "client-run-2"}
    third = await session.call_tool("issue_refund", args, meta=meta)
    fourth = await session.call_tool("issue_refund", args, meta=meta)
    check(not third.is_error and not fourth.is_error, f"run from _meta failed: {text_of(third)} {text_of(fourth)}")
    check(meta_of(third).get("effect-tool/key") == "client-run-2:refund:A-1001:1500", f"key: {meta_of(third)}")
    check(meta_of(fourth).get("effect-tool/disposition") == "replayed", f"fourth: {meta_of(fourth)}")
    check(len(ledger_lines("refund")) == 2, f"expected two refunds in the ledger, found {ledger_lines('refund')}")
    print("ok: run id taken from _meta; one refund per run")


async def check_rejected_and_blocked(session):
    bad = await session.call_tool("issue_refund", {"order_id": "A-1002", "amount_cents": "five"})
    check(bad.is_error, "a schema violation must be a tool error")
    check("`amount_cents`: expected integer" in text_of(bad), f"message: {text_of(bad)}")
    unknown = await session.call_tool("issue_refunds", {"order_id": "A-1002", "amount_cents": 5})
    check(unknown.is_error and "Did you mean `issue_refund`?" in text_of(unknown), f"message: {text_of(unknown)}")
    check(len(ledger_lines("refund")) == 2, "a rejected call must not run")
    print("ok: schema violation and unknown tool come back as tool errors; nothing ran")

    email = {"to": "ann@example.com", "body": "Your refund is on its way."}
    sent = await session.call_tool("email_customer", email)
    again = await session.call_tool("email_customer", email)
    check(not sent.is_error, f"email failed: {text_of(sent)}")
    check(again.is_error, "an irreversible call without a key sent again must be blocked")
    check(meta_of(again).get("effect-tool/outcome") == "blocked", f"outcome: {meta_of(again)}")
    check(meta_of(again).get("effect-tool/key"), "a blocked result carries the key")
    check(len(ledger_lines("email")) == 1, f"expected one email, found {ledger_lines('email')}")
    print("ok: email_customer re-sent under a new call is blocked; one email in the ledger")

    looked = await session.call_tool("lookup_order", {"order_id": "A-1002"})
    check(not looked.is_error and looked.structured_content["total_cents"] == 12500, f"lookup: {text_of(looked)}")


async def main():
    if len(sys.argv) < 2:
        print("usage: client.py <server command...>", file=sys.stderr)
        return 2
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await check_tools(session)
            await check_idempotent_call_twice(session)
            await check_rejected_and_blocked(session)
            probe = os.environ.get("EFFECT_TOOL_SECRET_PROBE")
            if probe:
                sent = await session.call_tool(
                    "email_customer", {"to": "bob@example.com", "body": f"Your one-time code is {probe}."}
                )
                check(not sent.is_error, f"probe email failed: {text_of(sent)}")
                check(probe not in text_of(sent), "the tool's answer repeats the argument")
                print("ok: sent an email whose arguments hold the probe value")
                charged = await session.call_tool(
                    "charge_card", {"order_id": "A-1001", "card_number": f"4111{probe}", "amount_cents": 1500}
                )
                check(not charged.is_error, f"charge_card failed: {text_of(charged)}")
                check(text_of(charged) == "charged 1500 cents for A-1001", f"charge_card: {text_of(charged)}")
                charges = ledger_lines("charge")
                check(len(charges) == 1 and charges[0].endswith(" keyed"), f"charges: {charges}")
                print("ok: charge_card ran with the server's key and a card number in its arguments")
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
