#!/usr/bin/env bash
# The third-party MCP servers the gateway's tests front, installed from their registries at
# pinned versions into one cache folder (npm packages under node_modules/, mcp-server-git in a
# virtualenv). `install` prints `export EFFECT_TOOL_MCP_SERVERS=<dir>`: the tests find the
# servers there (tests/adapters/gateway*.rs), and fail under CI=1 when it is unset.
#
#   eval "$(scripts/mcp-servers.sh install)"
set -euo pipefail

DIR="${EFFECT_TOOL_MCP_SERVERS:-${TMPDIR:-/tmp}/effect-tool-mcp-servers}"
FILESYSTEM="@modelcontextprotocol/server-filesystem@2026.8.31"
MEMORY="@modelcontextprotocol/server-memory@2026.8.31"
EVERYTHING="@modelcontextprotocol/server-everything@2026.8.31"
GIT="mcp-server-git==2026.10.19"

case "${1:-}" in
install)
    mkdir -p "$DIR"
    npm install --silent --no-audit --no-fund --prefix "$DIR" "$FILESYSTEM" "$MEMORY" "$EVERYTHING" >&2
    if [ ! -x "$DIR/venv/bin/python" ]; then
        python3 -m venv "$DIR/venv" >&2
    fi
    "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check "$GIT" >&2
    echo "export EFFECT_TOOL_MCP_SERVERS=$DIR"
    ;;
*)
    echo "usage: $0 install   (then: eval \"\$($0 install)\")" >&2
    exit 2
    ;;
esac
