"""Call one tool as a principal over Streamable HTTP, in the run `checkout`, check the call's
disposition, and print its effect key (tests/ops/console_identities.rs: a call an MCP principal
makes, which four eyes keeps the same person from approving in the console).

Usage: python3 approval_call.py <URL> <TOKEN> <TOOL> <ARGS_JSON> <DISPOSITION>
Prints `key=<effect key>`; exits 0 and prints "N passed, 0 failed" when the disposition is the
one expected (e.g. `awaiting-approval`, `executed`); exits 1 otherwise.
"""

import json
import sys

import checks
from checks import check, meta_of, text_of
from isolation import client

RUN = {"effect-tool/run_id": "checkout"}


async def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    url, token, tool, args, expected = sys.argv[1:6]
    async with client(url, token) as session:
        result = await session.call_tool(tool, json.loads(args), meta=RUN)
        meta = meta_of(result)
        check(meta.get("effect-tool/disposition") == expected, f"{tool}: {meta} {text_of(result)}")
        print("key=" + meta.get("effect-tool/key", ""))
        print(f"ok: {tool} was {expected}")
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
