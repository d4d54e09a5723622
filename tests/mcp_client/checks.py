"""Checks shared by the external MCP clients (client.py over stdio, http_client.py over
Streamable HTTP): counting checks, reading the ledger file the server's tools append to, reading
tool results, the tools/list checks, and the "N passed, 0 failed" report.
"""

import asyncio
import os
import sys

CHECKS = 0


def check(condition, message):
    """Count one check; raise AssertionError with `message` if `condition` does not hold."""
    global CHECKS
    if not condition:
        raise AssertionError(message)
    CHECKS += 1


def ledger_lines(prefix):
    """The lines of the ledger file ($EFFECT_TOOL_LEDGER) that start with `prefix` and a space."""
    path = os.environ["EFFECT_TOOL_LEDGER"]
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().splitlines() if line.startswith(prefix + " ")]


def text_of(result):
    """The text content of a tool result."""
    return "".join(getattr(block, "text", "") for block in result.content)


def meta_of(result):
    """The `_meta` of a tool result ({} if none)."""
    return result.meta or {}


async def check_tools(session):
    """tools/list: the example server's four tools, their schemas and the annotations and
    `_meta` class each effect class implies."""
    listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    # The stdio example adds `charge_card` (a card number and the processor's key).
    desk = {"lookup_order", "issue_refund", "hold_shipment", "email_customer"}
    check(set(tools) in (desk, desk | {"charge_card"}), f"unexpected tools: {sorted(tools)}")

    expected = {
        # class: (readOnlyHint, destructiveHint, idempotentHint)
        "lookup_order": ("pure", True, None, None),
        "issue_refund": ("idempotent", False, False, True),
        "hold_shipment": ("compensable", False, False, False),
        "email_customer": ("irreversible", False, True, False),
    }
    for name, (cls, read_only, destructive, idempotent) in expected.items():
        a = tools[name].annotations
        check(a is not None, f"{name}: no annotations")
        check(a.read_only_hint is read_only, f"{name}: readOnlyHint {a.read_only_hint}, expected {read_only}")
        check(a.destructive_hint is destructive, f"{name}: destructiveHint {a.destructive_hint}, expected {destructive}")
        check(a.idempotent_hint is idempotent, f"{name}: idempotentHint {a.idempotent_hint}, expected {idempotent}")
        check(a.open_world_hint is (name != "lookup_order"), f"{name}: openWorldHint {a.open_world_hint}")
        check((tools[name].meta or {}).get("effect-tool/class") == cls, f"{name}: _meta class {tools[name].meta}")
        schema = tools[name].input_schema
        check(schema.get("type") == "object", f"{name}: inputSchema is not an object schema: {schema}")
        check("$schema" not in schema, f"{name}: inputSchema carries $schema")
        check(tools[name].description, f"{name}: no description")

    # The key rule is published as its kind, never as the closure's source.
    keys = {name: (tools[name].meta or {}).get("effect-tool/key") for name in tools}
    check(keys["issue_refund"] == "custom", f"issue_refund: _meta key {keys['issue_refund']!r}, expected 'custom'")
    check(keys["email_customer"] == "default", f"email_customer: _meta key {keys['email_customer']!r}")

    refund = tools["issue_refund"].input_schema
    check(sorted(refund["required"]) == ["amount_cents", "order_id"], f"refund required: {refund['required']}")
    check(refund["properties"]["amount_cents"]["type"] == "integer", f"amount_cents: {refund['properties']}")
    check(refund["properties"]["order_id"]["type"] == "string", f"order_id: {refund['properties']}")
    check(
        refund["properties"]["order_id"].get("description") == "The order to refund.",
        f"order_id description: {refund['properties']['order_id']}",
    )
    print("ok: tools/list: 4 tools, schemas and annotations per class")


def run(main):
    """Run the client's async `main` and exit with its status; on the first failed check, print
    it and "N passed, 1 failed" and exit 1."""
    try:
        status = asyncio.run(main())
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        print(f"{CHECKS} passed, 1 failed")
        sys.exit(1)
    sys.exit(status)
