"""An upstream MCP server that breaks its own `outputSchema`, for the gateway's tests: plain
JSON-RPC over stdio with nothing but the standard library (an SDK would check its own answers
and never send a wrong one, which is what this server is for).

`forecast` (declared by the test, `readOnlyHint: false`) appends a line to the ledger file
($LEDGER), the outside count of effects, then answers with `structuredContent` that does not fit
the `outputSchema` it lists (`temperature` a string, not a number), unless $GOOD_OUTPUT is set.
`lookup` is `readOnlyHint: true` and answers with no `structuredContent` at all, though it lists
an `outputSchema` (MCP says a tool that lists one must send it).
"""

import json
import os
import sys

OUTPUT = {
    "type": "object",
    "properties": {"temperature": {"type": "number"}, "city": {"type": "string"}},
    "required": ["temperature", "city"],
}

TOOLS = [
    {
        "name": "forecast",
        "description": "Record a forecast for a city and return it.",
        "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "outputSchema": OUTPUT,
        "annotations": {"readOnlyHint": False, "idempotentHint": False},
    },
    {
        "name": "lookup",
        "description": "Look a forecast up.",
        "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "outputSchema": OUTPUT,
        "annotations": {"readOnlyHint": True},
    },
]


def answer(request):
    method = request.get("method")
    params = request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "shape", "version": "1.0.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        name = params.get("name")
        city = (params.get("arguments") or {}).get("city", "")
        if name == "forecast":
            with open(os.environ["LEDGER"], "a") as f:
                f.write(f"forecast {city}\n")
                f.flush()
                os.fsync(f.fileno())
            temperature = 21 if os.environ.get("GOOD_OUTPUT") else "warm"
            structured = {"temperature": temperature, "city": city}
            return {
                "content": [{"type": "text", "text": json.dumps(structured)}],
                "structuredContent": structured,
            }
        if name == "lookup":
            return {"content": [{"type": "text", "text": f"{city}: 21 degrees"}]}
        raise LookupError(f"unknown tool {name}")
    raise NotImplementedError(method)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        try:
            reply = {"jsonrpc": "2.0", "id": request["id"], "result": answer(request)}
        except NotImplementedError as e:
            reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"no method {e}"}}
        except LookupError as e:
            reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32602, "message": str(e)}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
