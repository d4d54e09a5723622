"""Two principals of one effect-tool server over Streamable HTTP, calling `cross-run` tools whose
keys come from the arguments (tests/adapters/mcp_principals.rs).

`refund` (cross-run, key `order:{order_id}`): B sends the same arguments as A, in a run of the
same name: B's call runs (its own key), B never receives A's recorded output, and A's retry from
a new session replays A's own. `reserve_stock` (cross-run, key `sku:{sku}`, declared
`shared_keys`): B's call with A's arguments is A's call, replayed.

Usage: python3 principal_keys.py <URL> <TOKEN_A> <TOKEN_B>
Exits 0 and prints "N passed, 0 failed" when every check holds; exits 1 on the first failure.
"""

import asyncio
import sys

import checks
from checks import check, meta_of, text_of
from isolation import client

RUN = {"effect-tool/run_id": "r1"}


async def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    url, token_a, token_b = sys.argv[1:4]
    async with client(url, token_a) as a:
        first = await a.call_tool("refund", {"order_id": "A-1"}, meta=RUN)
        check(not first.is_error, f"A's refund: {text_of(first)}")
        check(meta_of(first).get("effect-tool/disposition") == "executed", f"A: {meta_of(first)}")
        check("alice/" in text_of(first), f"A's refund ran in A's run: {text_of(first)}")
        shared = await a.call_tool("reserve_stock", {"sku": "SKU-9"}, meta=RUN)
        check(meta_of(shared).get("effect-tool/disposition") == "executed", f"A's reservation: {meta_of(shared)}")
    async with client(url, token_b) as b:
        second = await b.call_tool("refund", {"order_id": "A-1"}, meta=RUN)
        check(not second.is_error, f"B's refund: {text_of(second)}")
        check(
            meta_of(second).get("effect-tool/disposition") == "executed",
            f"B's refund was not run (A's record under the same key?): {meta_of(second)} {text_of(second)}",
        )
        check("alice" not in text_of(second), f"B received A's recorded output: {text_of(second)}")
        check(meta_of(second).get("effect-tool/key") != meta_of(first).get("effect-tool/key"), "one key for both")
        print("ok: B's refund with A's arguments ran under B's own key; B never saw A's output")
        reserved = await b.call_tool("reserve_stock", {"sku": "SKU-9"}, meta=RUN)
        check(
            meta_of(reserved).get("effect-tool/disposition") == "replayed",
            f"a shared_keys tool: B's call is A's: {meta_of(reserved)}",
        )
        print("ok: a tool declared shared_keys shares its keys across principals")
    async with client(url, token_a) as a:
        again = await a.call_tool("refund", {"order_id": "A-1"}, meta=RUN)
        check(meta_of(again).get("effect-tool/disposition") == "replayed", f"A's retry: {meta_of(again)}")
        check(text_of(again) == text_of(first), f"A's retry: {text_of(again)} != {text_of(first)}")
        print("ok: A's retry from a new session replays A's own refund")
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
