"""External MCP client for effect-tool's example server over Streamable HTTP.

Talks to `examples/mcp_server.rs --http ADDR` with the official Python `mcp` SDK's Streamable
HTTP client: lists the tools (schemas and annotations, the same checks as client.py, in checks.py), calls an
idempotent tool, then calls it again from a NEW HTTP session and expects the recorded result
without a second effect in the ledger file the server's tools append to. A call with bad
arguments, or with arguments larger than the server's limit, must come back as a tool error
(isError) and run nothing. A call without a run id runs in its session's own run, so from a
new session it is a new call.

Usage: python3 http_client.py <MCP endpoint URL, e.g. http://127.0.0.1:8080/mcp>
Environment: EFFECT_TOOL_LEDGER, the ledger file the server's tools append to (read only).
Exits 0 and prints "N passed, 0 failed" when every check holds; exits 1 on the first failure.
"""

import contextlib
import sys

import checks
from checks import check, check_tools, ledger_lines, meta_of, text_of
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REFUND = {"order_id": "A-1001", "amount_cents": 1500}
RUN = {"effect-tool/run_id": "http-run-1"}
# No run in _meta: the call runs in its session's own run (never shared with another session).
UNSCOPED_REFUND = {"order_id": "A-1002", "amount_cents": 700}


# The Mcp-Session-Id headers the server answered with, per session, in order.
SESSION_IDS = []


@contextlib.asynccontextmanager
async def new_session(url):
    """One MCP session over its own HTTP client and connection."""
    ids = set()

    async def record_session_id(response):
        if "mcp-session-id" in response.headers:
            ids.add(response.headers["mcp-session-id"])

    http = create_mcp_http_client()
    http.event_hooks["response"].append(record_session_id)
    async with http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                result = await session.initialize()
                print(f"session: protocol {result.protocol_version}, server {result.server_info.name}")
                yield session
    SESSION_IDS.append((str(result.protocol_version), ids))


async def first_session(url):
    async with new_session(url) as session:
        await check_tools(session)

        first = await session.call_tool("issue_refund", REFUND, meta=RUN)
        check(not first.is_error, f"first refund failed: {text_of(first)}")
        check(meta_of(first).get("effect-tool/disposition") == "executed", f"first: {meta_of(first)}")
        check(meta_of(first).get("effect-tool/key") == "http-run-1:refund:A-1001:1500", f"key: {meta_of(first)}")
        check(len(ledger_lines("refund")) == 1, f"expected one refund, found {ledger_lines('refund')}")
        print("ok: issue_refund applied once (run from _meta)")

        bad = await session.call_tool("issue_refund", {"order_id": "A-1001", "amount_cents": "five"}, meta=RUN)
        check(bad.is_error, "a call with bad arguments must be a tool error")
        check(meta_of(bad).get("effect-tool/outcome") == "rejected", f"outcome: {meta_of(bad)}")
        check("`amount_cents`: expected integer" in text_of(bad), f"message: {text_of(bad)}")
        check(len(ledger_lines("refund")) == 1, "a rejected call must not run")
        print("ok: bad arguments come back as isError; nothing ran")

        huge = await session.call_tool("email_customer", {"to": "ann@example.com", "body": "x" * 300_000}, meta=RUN)
        check(huge.is_error, "arguments over the size limit must be a tool error")
        check(meta_of(huge).get("effect-tool/outcome") == "rejected", f"outcome: {meta_of(huge)}")
        check("more than the" in text_of(huge) and "nothing was run" in text_of(huge), f"message: {text_of(huge)}")
        check(ledger_lines("email") == [], "an oversized call must not run")
        print("ok: arguments over the size limit come back as isError; nothing ran")

        unscoped = await session.call_tool("issue_refund", UNSCOPED_REFUND)
        check(not unscoped.is_error, f"refund without _meta failed: {text_of(unscoped)}")
        check(meta_of(unscoped).get("effect-tool/disposition") == "executed", f"unscoped: {meta_of(unscoped)}")
        return first.structured_content, unscoped.structured_content


async def second_session(url, refund, unscoped_refund):
    async with new_session(url) as session:
        again = await session.call_tool("issue_refund", REFUND, meta=RUN)
        check(not again.is_error, f"retried refund failed: {text_of(again)}")
        check(meta_of(again).get("effect-tool/disposition") == "replayed", f"retry: {meta_of(again)}")
        check(again.structured_content == refund, f"retry returned {again.structured_content}, first {refund}")
        check(len(ledger_lines("refund")) == 2, f"expected two refunds in all, found {ledger_lines('refund')}")
        print("ok: issue_refund retried from a new session: recorded result, no second refund")

        unscoped = await session.call_tool("issue_refund", UNSCOPED_REFUND)
        check(not unscoped.is_error, f"refund without _meta failed: {text_of(unscoped)}")
        check(meta_of(unscoped).get("effect-tool/disposition") == "executed", f"unscoped: {meta_of(unscoped)}")
        check(unscoped.structured_content != unscoped_refund, f"a new session's run got the other one's refund")
        check(len(ledger_lines("refund")) == 3, f"expected three refunds in all, found {ledger_lines('refund')}")
        print("ok: without _meta, each session has its own run: a new session's call is a new call")


async def main():
    if len(sys.argv) != 2:
        print("usage: http_client.py <MCP endpoint URL>", file=sys.stderr)
        return 2
    url = sys.argv[1]
    refund, unscoped_refund = await first_session(url)
    await second_session(url, refund, unscoped_refund)
    # Protocol versions before 2026-07-28 have sessions (an Mcp-Session-Id from the server);
    # later ones are sessionless. With sessions, the two connections must be two sessions.
    (first_version, first_ids), (second_version, second_ids) = SESSION_IDS
    if first_version < "2026-07-28":
        check(len(first_ids) == 1 and len(second_ids) == 1, f"one session id per connection: {SESSION_IDS}")
        check(first_ids != second_ids, f"the second connection reused the first session: {SESSION_IDS}")
        print("ok: two connections, two MCP sessions")
    else:
        print(f"ok: sessionless protocol {first_version}, {second_version}")
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
