"""Two MCP clients of one effect-tool server over Streamable HTTP, at the same time: what one
records must never be what the other gets.

Usage:
  python3 isolation.py anonymous <URL>
      Two clients without tokens and without run ids send the same unkeyed irreversible call
      (email_customer) at once, with the same JSON-RPC request id: each client is its own run
      with its own call ids, so both emails are sent.
  python3 isolation.py principals <URL> <TOKEN_A> <TOKEN_B>
      Two principals name the same run id and call id in _meta. B calls first (trying to
      pre-empt A), then A: A's call runs (it is not "replayed" from B's record); A's retry
      from a new session replays A's own result; B never receives A's output.
Environment: EFFECT_TOOL_LEDGER, the ledger file the server's tools append to (read only).
Exits 0 and prints "N passed, 0 failed" when every check holds; exits 1 on the first failure.
"""

import asyncio
import contextlib
import sys

import checks
from checks import check, ledger_lines, meta_of, text_of
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

EMAIL = {"to": "ann@example.com", "body": "Your parcel left the warehouse."}
REFUND = {"order_id": "A-1001", "amount_cents": 1500}
SHARED = {"effect-tool/run_id": "shared-run", "effect-tool/call_id": "call_1"}


@contextlib.asynccontextmanager
async def client(url, token=None):
    """One MCP session over its own HTTP client, with a bearer token if given."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def one_email(url, started, both_started):
    async with client(url) as session:
        started.release()
        # Both sessions are open before either calls: the calls overlap.
        await both_started.wait()
        return await session.call_tool("email_customer", EMAIL)


async def anonymous(url):
    started = asyncio.Semaphore(0)
    both = asyncio.Event()

    async def gate():
        await started.acquire()
        await started.acquire()
        both.set()

    a, b, _ = await asyncio.gather(one_email(url, started, both), one_email(url, started, both), gate())
    for name, r in (("A", a), ("B", b)):
        check(not r.is_error, f"{name}'s email failed: {text_of(r)}")
        check(meta_of(r).get("effect-tool/disposition") == "executed", f"{name}: {meta_of(r)}")
    check(meta_of(a).get("effect-tool/key") != meta_of(b).get("effect-tool/key"), f"one key: {meta_of(a)} {meta_of(b)}")
    emails = ledger_lines("email")
    check(len(emails) == 2, f"expected both clients' emails in the ledger, found {emails}")
    print("ok: two clients without run ids, same call at once: two runs, both emails sent")


async def principals(url, token_a, token_b):
    async with client(url, token_b) as b:
        b_first = await b.call_tool("issue_refund", REFUND, meta=SHARED)
        check(not b_first.is_error, f"B's refund failed: {text_of(b_first)}")
        check(meta_of(b_first).get("effect-tool/disposition") == "executed", f"B: {meta_of(b_first)}")
    async with client(url, token_a) as a:
        a_first = await a.call_tool("issue_refund", REFUND, meta=SHARED)
        check(not a_first.is_error, f"A's refund failed: {text_of(a_first)}")
        check(
            meta_of(a_first).get("effect-tool/disposition") == "executed",
            f"A's call was not run (pre-empted by B's record?): {meta_of(a_first)}",
        )
        check(a_first.structured_content != b_first.structured_content, "A received B's refund")
        check(len(ledger_lines("refund")) == 2, f"one refund each: {ledger_lines('refund')}")
        print("ok: B recorded first under A's run id; A's call still ran (not pre-empted)")

        sent = await a.call_tool("email_customer", EMAIL, meta=SHARED)
        check(meta_of(sent).get("effect-tool/disposition") == "executed", f"A's email: {meta_of(sent)}")
    async with client(url, token_b) as b:
        b_email = await b.call_tool("email_customer", EMAIL, meta=SHARED)
        check(not b_email.is_error, f"B's email failed: {text_of(b_email)}")
        check(
            meta_of(b_email).get("effect-tool/disposition") == "executed",
            f"B got A's recorded email instead of sending its own: {meta_of(b_email)}",
        )
        check(len(ledger_lines("email")) == 2, f"one email each: {ledger_lines('email')}")
        print("ok: same run id and call id from B: B's own call, not A's recorded output")

        b_again = await b.call_tool("issue_refund", REFUND, meta=SHARED)
        check(meta_of(b_again).get("effect-tool/disposition") == "replayed", f"B retry: {meta_of(b_again)}")
        check(b_again.structured_content == b_first.structured_content, "B's retry is not B's refund")
    async with client(url, token_a) as a:
        a_again = await a.call_tool("issue_refund", REFUND, meta=SHARED)
        check(meta_of(a_again).get("effect-tool/disposition") == "replayed", f"A retry: {meta_of(a_again)}")
        check(a_again.structured_content == a_first.structured_content, "A's retry is not A's refund")
        a_email = await a.call_tool("email_customer", EMAIL, meta=SHARED)
        check(meta_of(a_email).get("effect-tool/disposition") == "replayed", f"A email retry: {meta_of(a_email)}")
    check(len(ledger_lines("refund")) == 2 and len(ledger_lines("email")) == 2, "retries changed the ledger")
    print("ok: each principal's retry from a new session replays its own result")


async def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "anonymous" and len(sys.argv) == 3:
        await anonymous(sys.argv[2])
    elif mode == "principals" and len(sys.argv) == 5:
        await principals(*sys.argv[2:5])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
