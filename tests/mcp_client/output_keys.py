"""Output schemas and the client's idempotency keys of an effect-tool server over Streamable
HTTP (tests/adapters/mcp_output_keys.rs), through the official Python SDK, whose client checks
every `structuredContent` against the tool's listed `outputSchema` itself.

- `pay` (irreversible, output an object `Payment`): its `outputSchema` is the object's schema,
  and its `structuredContent` the payment. Called with `idempotencyKey` in `_meta`, from three
  sessions (three runs) of principal A, and with the `Idempotency-Key` header: one payment;
  the same key with another amount is an error naming the key, never the earlier payment;
  principal B's call under the same key is B's own.
- `payments` (pure, output `Vec<Payment>`): wrapped, `{"result": [...]}` in schema and content.
- `liar` (its output breaks the schema it declares): an error result, never the structure.

Usage: python3 output_keys.py <URL> <TOKEN_A> <TOKEN_B>
Exits 0 and prints "N passed, 0 failed" when every check holds; exits 1 on the first failure.
"""

import contextlib
import sys

import checks
from checks import check, meta_of, text_of
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

PAY = {"to": "ann", "amount_cents": 500}


@contextlib.asynccontextmanager
async def client(url, token, idempotency_key=None):
    """One MCP session as `token`, sending `Idempotency-Key` on every request if given."""
    headers = {"Authorization": f"Bearer {token}"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    url, token_a, token_b = sys.argv[1:4]
    async with client(url, token_a) as a:
        tools = {t.name: t for t in (await a.list_tools()).tools}
        pay_schema = tools["pay"].output_schema
        check(pay_schema is not None and pay_schema.get("type") == "object", f"pay: {pay_schema}")
        check(set(pay_schema["properties"]) == {"id", "to", "amount_cents"}, f"pay: {pay_schema}")
        listed = tools["list_payments"].output_schema
        check(listed["required"] == ["result"], f"payments: {listed}")
        check(listed["properties"]["result"]["type"] == "array", f"payments: {listed}")
        print("ok: outputSchema is the object's schema, or the output wrapped under `result`")

        first = await a.call_tool("pay", PAY, meta={"idempotencyKey": "order-7-payment"})
        check(not first.is_error, f"pay: {text_of(first)}")
        check(meta_of(first).get("effect-tool/disposition") == "executed", f"pay: {meta_of(first)}")
        key = meta_of(first).get("effect-tool/key", "")
        check(key.startswith("%client:principal:alice:pay:"), f"the client's key scoped: {key}")
        payment = first.structured_content
        check(payment["to"] == "ann" and payment["amount_cents"] == 500, f"structuredContent: {payment}")
        print("ok: structuredContent is the payment, checked by the SDK against the schema")

    async with client(url, token_a) as a:
        again = await a.call_tool("pay", PAY, meta={"idempotencyKey": "order-7-payment"})
        check(meta_of(again).get("effect-tool/disposition") == "replayed", f"retry: {meta_of(again)}")
        check(again.structured_content == payment, f"retry: {again.structured_content} != {payment}")
        other = await a.call_tool("pay", {"to": "ann", "amount_cents": 900}, meta={"idempotencyKey": "order-7-payment"})
        check(other.is_error, f"the same key with other arguments ran: {text_of(other)}")
        check(meta_of(other).get("effect-tool/outcome") == "rejected", f"other arguments: {meta_of(other)}")
        check("was used before" in text_of(other) and "new idempotency key" in text_of(other), text_of(other))
        check(other.structured_content is None, f"no earlier payment for other arguments: {other.structured_content}")
        print("ok: a retry from a new session replays; the same key with other arguments is an error")

    async with client(url, token_a, idempotency_key="order-7-payment") as a:
        header = await a.call_tool("pay", PAY)
        check(meta_of(header).get("effect-tool/disposition") == "replayed", f"header: {meta_of(header)}")
        check(header.structured_content == payment, f"header: {header.structured_content}")
        two = await a.call_tool("pay", PAY, meta={"idempotencyKey": "another"})
        check(two.is_error and "two idempotency keys" in text_of(two), f"two keys: {text_of(two)}")
        print("ok: the Idempotency-Key header is the same key; two different keys are refused")

    async with client(url, token_b) as b:
        own = await b.call_tool("pay", PAY, meta={"idempotencyKey": "order-7-payment"})
        check(meta_of(own).get("effect-tool/disposition") == "executed", f"B: {meta_of(own)}")
        check(meta_of(own).get("effect-tool/key") != key, "B reached A's key")
        print("ok: another principal's call under the same key is its own")

    async with client(url, token_a) as a:
        made = await a.call_tool("list_payments", {})
        check(not made.is_error, f"payments: {text_of(made)}")
        check(set(made.structured_content) == {"result"}, f"payments: {made.structured_content}")
        check(len(made.structured_content["result"]) == 2, f"payments: {made.structured_content}")
        lie = await a.call_tool("liar", {})
        check(lie.is_error, f"liar: {text_of(lie)}")
        check(meta_of(lie).get("effect-tool/outcome") == "invalid-output", f"liar: {meta_of(lie)}")
        check("does not fit the output schema" in text_of(lie), text_of(lie))
        check(lie.structured_content is None, f"liar: {lie.structured_content}")
        print("ok: a list is wrapped; an output that breaks its schema is an error, never the structure")
    print(f"{checks.CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    checks.run(main)
