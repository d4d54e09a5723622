"""External MCP client for effect-tool's streaming example (examples/deploy_stream.rs `serve`).

Launches the server over stdio with the official Python `mcp` SDK and calls its `deploy` tool,
a `#[tool(stream)]`, twice with the same arguments and a progress callback (the SDK then sends a
`progressToken` in the request's `_meta`). The first call must deliver one
`notifications/progress` per step (progress 1, 2, 3, each message the step as JSON) and return
the last step; the second must be a replay: the same result, no progress, no step made. Steps are
counted in the ledger file the tool appends to, which the engine never reads.

Usage: python3 progress.py <server command...>
Environment: EFFECT_TOOL_LEDGER (the ledger file), passed through to the server.
Exits 0 and prints "N passed, 0 failed" when every check holds; exits 1 on the first failure.
"""

import json
import os
import sys

import checks
from checks import check, ledger_lines, meta_of, text_of
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    if len(sys.argv) < 2:
        print("usage: progress.py <server command...>", file=sys.stderr)
        return 2
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            seen = []

            async def on_progress(progress, total, message):
                seen.append((progress, message))

            args = {"service": "billing", "version": "1.4.2"}
            first = await session.call_tool("deploy", args, progress_callback=on_progress)
            check(not first.is_error, f"the deploy failed: {text_of(first)}")
            check(meta_of(first).get("effect-tool/disposition") == "executed", f"first: {meta_of(first)}")
            check([p for p, _ in seen] == [1, 2, 3], f"progress numbers: {seen}")
            stages = [json.loads(m)["stage"] for _, m in seen]
            check(stages == ["built", "pushed", "live"], f"progress messages: {seen}")
            last = {"stage": "live", "done": 3, "of": 3}
            check(first.structured_content == last, f"output: {first.structured_content}")
            check(len(ledger_lines("step")) == 3, f"steps made: {ledger_lines('step')}")
            print("ok: deploy streamed 3 progress notifications and returned the last step")

            seen.clear()
            second = await session.call_tool("deploy", args, progress_callback=on_progress)
            check(not second.is_error, f"the second deploy failed: {text_of(second)}")
            check(meta_of(second).get("effect-tool/disposition") == "replayed", f"second: {meta_of(second)}")
            check(second.structured_content == last, f"replayed output: {second.structured_content}")
            check(seen == [], f"a replay sent progress: {seen}")
            check(len(ledger_lines("step")) == 3, f"a replay made steps: {ledger_lines('step')}")
            print("ok: the same deploy again is a replay: the recorded last step, no progress, no step")
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
