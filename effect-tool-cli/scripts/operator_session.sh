#!/usr/bin/env bash
# Prints the operator session shown in the README by really running the commands.
# Build first: cargo build -p effect-tool-cli --examples --bins
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
export PATH=$top/target/debug:$top/target/debug/examples:$PATH
rm -f /tmp/desk.db /tmp/desk.db-wal /tmp/desk.db-shm
export USER=dana
cd /tmp
show() { echo "\$ $*"; eval "$@" 2>&1; local rc=$?; [ $rc -ne 0 ] && echo "[exit $rc]"; echo; }
{
echo "# The agent's run: a refund, an invoice whose mail API timed out after sending, an account closure that needs approval"
show support_desk_journal /tmp/desk.db
echo "# The operator"
show export EFFECT_TOOL_STORE=/tmp/desk.db
show effect-tool list --state in-doubt,awaiting-approval,stale
K=$(effect-tool list --state in-doubt --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["key"])')
A=$(effect-tool list --state awaiting-approval --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["key"])')
show effect-tool show $K
echo "# The mail provider's log shows the invoice went out as msg-A-1002:"
show effect-tool resolve $K --applied --output "'{\"message_id\":\"msg-A-1002\"}'"
show effect-tool approve $A --as support-lead
show effect-tool list --run run-42
show effect-tool show $K
echo "# The agent retries: the invoice is replayed from the journal (not sent again), the approved closure runs"
show support_desk_journal /tmp/desk.db
echo "# Mistakes are one line and a non-zero exit"
show effect-tool resolve $K --not-applied
show effect-tool show run-42:no-such-key
show "echo '{\"order_id\": \"A-1002\", \"to\": }' | effect-tool canon"
echo "# Keys and canonical JSON, computed like any RFC 8785 implementation would"
show "echo '{\"to\": \"bob@example.com\", \"order_id\": \"A-1002\"}' | effect-tool key --run run-42 --tool send_invoice"
show "echo '{\"to\": \"bob@example.com\", \"order_id\": \"A-1002\", \"amount\": 1.50e2}' | effect-tool canon"
}
