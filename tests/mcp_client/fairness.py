"""One MCP client holding slow calls must not hold up another client's instant one.

Talks to a server (tests/mcp_http_limits.rs) whose tools are `slow` (blocks until released),
`instant` and `release` (releases every slow call), limited per principal to LIMIT calls at
once and QUEUE waiting. Client A sends LIMIT + QUEUE + 1 slow calls at once: LIMIT run, QUEUE
wait, and exactly one is answered "busy" at once. While A's calls are still blocked, client B
(another principal) calls `instant`, which must complete. Then B releases, and every one of
A's calls that was not refused completes.

Usage: python3 fairness.py <URL> <TOKEN_A> <TOKEN_B> <LIMIT> <QUEUE>
       python3 fairness.py three <URL> <TOKEN_A> <TOKEN_B> <TOKEN_C> <SLOW_EACH> <HELD>
The second form: clients A and B (two principals) each send SLOW_EACH slow calls at once, more
than their share; client C (a third principal) waits until HELD of them hold a place (the tool
`entered` counts them), then calls `instant`, which must be served, not refused and not held
up, while every slow call is still blocked. Then C releases, and all of A's and B's calls
complete (none was refused: they waited their turn).
Exits 0 and prints "N passed, 0 failed" when every check holds; exits 1 on the first failure.
"""

import asyncio
import sys

import checks
from checks import check, meta_of, text_of
from isolation import client

# Only a guard against hanging forever when the server is wrong (e.g. no per-principal limit,
# so nothing is ever answered busy); passing never depends on it.
HANG_GUARD_SECONDS = 120


async def three(url, token_a, token_b, token_c, slow_each, held):
    async with client(url, token_a) as a, client(url, token_b) as b, client(url, token_c) as c:
        slow = [asyncio.create_task(x.call_tool("slow", {"n": i})) for x in (a, b) for i in range(slow_each)]
        # Wait (on the server's own count, not on a clock) until the slow calls hold their places.
        while True:
            entered = await asyncio.wait_for(c.call_tool("entered", {}), HANG_GUARD_SECONDS)
            check(not entered.is_error, f"C's `entered` call: {text_of(entered)}")
            if int(text_of(entered)) >= held:
                break
            await asyncio.sleep(0)
        check(int(text_of(entered)) == held, f"{text_of(entered)} slow calls hold a place, expected {held}")
        fast = await asyncio.wait_for(c.call_tool("instant", {}), HANG_GUARD_SECONDS)
        check(not fast.is_error and text_of(fast) == "instant", f"C's instant call: {meta_of(fast)} {text_of(fast)}")
        check(all(not t.done() for t in slow), "a slow call finished (or was refused) before the release")
        print(f"ok: with A's and B's slow calls holding {held} places, C's instant call was served")

        released = await c.call_tool("release", {})
        check(not released.is_error, f"release: {text_of(released)}")
        rest = await asyncio.wait_for(asyncio.gather(*slow), HANG_GUARD_SECONDS)
        for r in rest:
            check(not r.is_error and text_of(r).startswith("slow "), f"a slow call: {meta_of(r)} {text_of(r)}")
        print(f"ok: after the release, all {len(rest)} of A's and B's calls completed, none refused")
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


async def main():
    if len(sys.argv) == 8 and sys.argv[1] == "three":
        url, token_a, token_b, token_c = sys.argv[2:6]
        return await three(url, token_a, token_b, token_c, int(sys.argv[6]), int(sys.argv[7]))
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    url, token_a, token_b = sys.argv[1:4]
    limit, queue = int(sys.argv[4]), int(sys.argv[5])
    async with client(url, token_a) as a, client(url, token_b) as b:
        slow = [asyncio.create_task(a.call_tool("slow", {"n": i})) for i in range(limit + queue + 1)]
        done, pending = await asyncio.wait(slow, timeout=HANG_GUARD_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        check(done, f"none of A's {len(slow)} slow calls was answered busy (no per-principal limit?)")
        busy = [t.result() for t in done]
        for r in busy:
            check(r.is_error and meta_of(r).get("effect-tool/outcome") == "busy", f"not busy: {meta_of(r)} {text_of(r)}")
            check("busy" in text_of(r) and "call again" in text_of(r), f"message: {text_of(r)}")
        print(f"ok: A's call beyond {limit} running and {queue} waiting is answered busy at once")

        fast = await asyncio.wait_for(b.call_tool("instant", {}), HANG_GUARD_SECONDS)
        check(not fast.is_error and text_of(fast) == "instant", f"B's instant call: {text_of(fast)}")
        check(all(not t.done() for t in pending), "A's slow calls finished before they were released")
        check(len(pending) == limit + queue, f"{len(pending)} of A's calls pending, expected {limit + queue}")
        print("ok: B's instant call completed while A's slow calls were still blocked")

        released = await b.call_tool("release", {})
        check(not released.is_error, f"release: {text_of(released)}")
        rest = await asyncio.wait_for(asyncio.gather(*pending), HANG_GUARD_SECONDS)
        for r in rest:
            check(not r.is_error and text_of(r).startswith("slow "), f"A's slow call: {text_of(r)}")
        print(f"ok: after the release, A's {len(rest)} admitted calls all completed")
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
