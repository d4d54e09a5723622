"""External MCP client for effect-tool's MCP gateway (examples/gateway_filesystem.rs) in front of
the official filesystem MCP server.

Launches the gateway over stdio with the official Python `mcp` SDK, lists its tools (the
declared writer `edit_file` with its class, the read-only tools as `pure`, no undeclared writer)
and calls `edit_file` twice with the same edit, as a retrying client would: the edit doubles the
one `x` of the file, so applied twice the file would read `xxx`.

Usage: python3 gateway_client.py <gateway command...>
Environment: EFFECT_TOOL_NOTE, the file the edit changes (under the filesystem server's root);
everything else (EFFECT_TOOL_GATEWAY_CONFIG, EFFECT_TOOL_DB) is passed through to the gateway.
Exits 0 and prints "N passed, 0 failed" when every check holds; exits 1 on the first failure.
"""

import os
import sys

import checks
from checks import check, meta_of, text_of
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def note():
    with open(os.environ["EFFECT_TOOL_NOTE"], encoding="utf-8") as f:
        return f.read()


async def check_tools(session):
    listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    check("edit_file" in tools, f"edit_file is not listed: {sorted(tools)}")
    check("read_text_file" in tools, f"read_text_file is not listed: {sorted(tools)}")
    check("write_file" not in tools, f"write_file is undeclared and may write, yet listed: {sorted(tools)}")
    edit = tools["edit_file"]
    check(edit.annotations is not None, "edit_file: no annotations")
    check(edit.annotations.read_only_hint is False, f"edit_file: readOnlyHint {edit.annotations.read_only_hint}")
    check(edit.annotations.idempotent_hint is False, f"edit_file: idempotentHint {edit.annotations.idempotent_hint}")
    check(edit.meta and edit.meta.get("effect-tool/class") == "irreversible", f"edit_file: _meta {edit.meta}")
    check("path" in edit.input_schema.get("properties", {}), f"edit_file: schema {edit.input_schema}")
    read = tools["read_text_file"]
    check(read.annotations is not None and read.annotations.read_only_hint is True, f"read_text_file: {read.annotations}")
    print("ok: the gateway lists the declared writer and the read-only tools, no undeclared writer")


async def check_edit_twice(session):
    args = {"path": os.environ["EFFECT_TOOL_NOTE"], "edits": [{"oldText": "x", "newText": "xx"}]}
    first = await session.call_tool("edit_file", args)
    second = await session.call_tool("edit_file", args)
    check(not first.is_error, f"first edit failed: {text_of(first)}")
    check(not second.is_error, f"second edit failed: {text_of(second)}")
    check(meta_of(first).get("effect-tool/disposition") == "executed", f"first: {meta_of(first)}")
    check(meta_of(second).get("effect-tool/disposition") == "replayed", f"second: {meta_of(second)}")
    check(":edit_file:" in meta_of(second).get("effect-tool/key", ""), f"key: {meta_of(second)}")
    check(text_of(second) == text_of(first), "the second call did not read the recorded result")
    check(note() == "xx", f"expected the edit applied once (xx), the file reads {note()!r}")
    print("ok: edit_file called twice through the gateway, applied once in the file")

    read = await session.call_tool("read_text_file", {"path": os.environ["EFFECT_TOOL_NOTE"]})
    check(not read.is_error and "xx" in text_of(read), f"read_text_file: {text_of(read)}")


async def main():
    if len(sys.argv) < 2:
        print("usage: gateway_client.py <gateway command...>", file=sys.stderr)
        return 2
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await check_tools(session)
            await check_edit_twice(session)
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
