"""A tiny upstream MCP server for the gateway's tests (the official Python SDK's MCPServer, over
stdio). `append` appends a line to the ledger file ($LEDGER), the outside count of effects,
then hangs when $HANG_AFTER_APPLY is set (an upstream that acts and never answers). With
$EXTRA_ARG set, `append` takes one more argument: its schema drifted."""

import os
import time

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("ledger")


def _append(text: str) -> str:
    with open(os.environ["LEDGER"], "a") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    if os.environ.get("HANG_AFTER_APPLY"):
        time.sleep(3600)
    return f"appended {text}"


if os.environ.get("EXTRA_ARG"):

    @mcp.tool()
    def append(text: str, note: str = "") -> str:
        """Append a line to the ledger."""
        return _append(text)

else:

    @mcp.tool()
    def append(text: str) -> str:
        """Append a line to the ledger."""
        return _append(text)


if __name__ == "__main__":
    if os.environ.get("PIDFILE"):
        with open(os.environ["PIDFILE"], "a") as f:
            f.write(f"{os.getpid()}\n")
    mcp.run()
