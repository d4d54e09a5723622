//! Sensitive arguments sealed before rmcp sees them.
//!
//! rmcp logs every request in full at DEBUG and TRACE (`received request`, the HTTP transport's
//! messages), whatever the application's filter lets through. So the server seals the values of
//! a tool's `#[sensitive]` arguments as soon as a `tools/call` arrives (the stdio transport's
//! messages as they are read, the HTTP request's body before rmcp parses it) and unseals them
//! only when the call is dispatched: what rmcp handles, and so logs, is
//! `{"effect-tool/sealed": "<nonce><ciphertext>"}`, the value encrypted under a key that lives
//! in this process only (a keystream of HMAC-SHA256 blocks, a fresh 128-bit nonce per value).
//!
//! A client that sends such an object itself gains nothing: without the key it decrypts to
//! noise, which is not JSON, so the object stays as sent and fails the argument's type like any
//! other wrong value.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use rmcp::model::{ClientRequest, JsonObject, JsonRpcMessage, JsonRpcRequest};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::toolkit::Toolkit;

/// The field of a sealed value's object.
pub(crate) const SEALED: &str = "effect-tool/sealed";

/// Seals and unseals the sensitive arguments of one server's tools.
pub(crate) struct Sealer {
    key: [u8; 32],
    /// Each tool with sensitive arguments, and their names.
    sensitive: HashMap<String, &'static [&'static str]>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("tools", &self.sensitive.keys())
            .finish_non_exhaustive()
    }
}

/// 16 bytes of nonce, hex; then the ciphertext, hex.
const NONCE: usize = 16;

impl Sealer {
    /// A sealer for `toolkit`'s tools, with a fresh key.
    ///
    /// # Panics
    ///
    /// If the operating system's random generator fails.
    pub(crate) fn new(toolkit: &Toolkit) -> Self {
        let mut key = [0u8; 32];
        if let Err(e) = getrandom::fill(&mut key) {
            panic!("the operating system's random generator failed ({e}): no key to seal sensitive arguments with");
        }
        let sensitive = toolkit
            .tools()
            .map(|t| t.meta())
            .filter(|m| !m.sensitive.is_empty())
            .map(|m| (m.name.to_owned(), m.sensitive))
            .collect();
        Sealer { key, sensitive }
    }

    /// Whether any tool has sensitive arguments (else there is nothing to seal).
    // Used by the HTTP guard (feature `mcp-http`) only.
    #[cfg_attr(not(feature = "mcp-http"), allow(dead_code))]
    pub(crate) fn needed(&self) -> bool {
        !self.sensitive.is_empty()
    }

    /// The same keystream for sealing and unsealing: HMAC-SHA256(key, nonce ‖ block number).
    fn xor(&self, nonce: &[u8; NONCE], data: &mut [u8]) {
        for (i, chunk) in data.chunks_mut(32).enumerate() {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
            mac.update(nonce);
            mac.update(&(i as u64).to_be_bytes());
            let block = mac.finalize().into_bytes();
            for (b, k) in chunk.iter_mut().zip(block.iter()) {
                *b ^= k;
            }
        }
    }

    fn seal_value(&self, value: &Value) -> Value {
        let mut nonce = [0u8; NONCE];
        if let Err(e) = getrandom::fill(&mut nonce) {
            panic!("the operating system's random generator failed ({e}): no nonce to seal a sensitive argument with");
        }
        let mut data = serde_json::to_vec(value).expect("a JSON value serializes");
        self.xor(&nonce, &mut data);
        let mut text = hex(&nonce);
        text.push_str(&hex(&data));
        let mut sealed = Map::new();
        sealed.insert(SEALED.to_owned(), Value::String(text));
        Value::Object(sealed)
    }

    fn unseal_value(&self, value: &Value) -> Option<Value> {
        let Value::Object(map) = value else { return None };
        if map.len() != 1 {
            return None;
        }
        let bytes = unhex(map.get(SEALED)?.as_str()?)?;
        if bytes.len() < NONCE {
            return None;
        }
        let (nonce, data) = bytes.split_at(NONCE);
        let nonce: [u8; NONCE] = nonce.try_into().ok()?;
        let mut data = data.to_vec();
        self.xor(&nonce, &mut data);
        serde_json::from_slice(&data).ok()
    }

    /// Seal the sensitive arguments of `tool` in `arguments`.
    pub(crate) fn seal_arguments(&self, tool: &str, arguments: &mut JsonObject) {
        let Some(names) = self.sensitive.get(tool) else { return };
        for name in names.iter() {
            if let Some(v) = arguments.get_mut(*name) {
                *v = self.seal_value(v);
            }
        }
    }

    /// Unseal the sensitive arguments of `tool` in `arguments` (what the dispatcher gets).
    pub(crate) fn unseal_arguments(&self, tool: &str, arguments: &mut JsonObject) {
        let Some(names) = self.sensitive.get(tool) else { return };
        for name in names.iter() {
            if let Some(v) = arguments.get_mut(*name)
                && let Some(open) = self.unseal_value(v)
            {
                *v = open;
            }
        }
    }

    /// Seal a `tools/call` among the messages a transport received (typed, as rmcp reads them
    /// from stdio).
    pub(crate) fn seal_message<Resp, Not>(&self, message: &mut JsonRpcMessage<ClientRequest, Resp, Not>) {
        if let JsonRpcMessage::Request(JsonRpcRequest {
            request: ClientRequest::CallToolRequest(call),
            ..
        }) = message
            && let Some(arguments) = call.params.arguments.as_mut()
        {
            let tool = call.params.name.to_string();
            self.seal_arguments(&tool, arguments);
        }
    }

    /// Seal every `tools/call` in a JSON-RPC message (or batch) as JSON, as an HTTP body holds
    /// it; whether anything was sealed.
    // Used by the HTTP guard (feature `mcp-http`) and the tests.
    #[cfg_attr(not(feature = "mcp-http"), allow(dead_code))]
    pub(crate) fn seal_json(&self, message: &mut Value) -> bool {
        match message {
            Value::Array(batch) => batch.iter_mut().fold(false, |sealed, m| self.seal_json(m) | sealed),
            Value::Object(m) if m.get("method").and_then(Value::as_str) == Some("tools/call") => {
                let Some(Value::Object(params)) = m.get_mut("params") else {
                    return false;
                };
                let Some(tool) = params.get("name").and_then(Value::as_str).map(str::to_owned) else {
                    return false;
                };
                match params.get_mut("arguments") {
                    Some(Value::Object(arguments)) if self.sensitive.contains_key(&tool) => {
                        self.seal_arguments(&tool, arguments);
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(HEX[(b >> 4) as usize]));
        out.push(char::from(HEX[(b & 0xf) as usize]));
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sealer() -> Sealer {
        Sealer {
            key: [7; 32],
            sensitive: HashMap::from([("pay".to_owned(), &["card"][..])]),
        }
    }

    #[test]
    fn sealed_values_open_again_and_show_nothing_of_themselves() {
        let s = sealer();
        let mut body = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "pay", "arguments": {"card": "4111111111111111", "amount": 5}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "other", "arguments": {"card": "4000000000000002"}}}
        ]);
        assert!(s.seal_json(&mut body));
        let text = body.to_string();
        assert!(!text.contains("4111111111111111"), "{text}");
        assert!(
            text.contains("4000000000000002"),
            "a tool without sensitive arguments is left alone"
        );
        let mut args = body[0]["params"]["arguments"].as_object().unwrap().clone();
        assert_eq!(args["amount"], json!(5));
        s.unseal_arguments("pay", &mut args);
        assert_eq!(Value::Object(args), json!({"card": "4111111111111111", "amount": 5}));
        // The same value sealed twice is two texts (a fresh nonce each time).
        assert_ne!(s.seal_value(&json!("x")), s.seal_value(&json!("x")));
    }

    #[test]
    fn a_sealed_object_the_client_made_up_stays_as_it_was_sent() {
        let s = sealer();
        let forged = json!({SEALED: format!("{}{}", "00".repeat(16), "abcd")});
        let mut args = json!({"card": forged.clone()}).as_object().unwrap().clone();
        s.unseal_arguments("pay", &mut args);
        assert_eq!(args["card"], forged);
        // Sealed under another key, it does not open here either.
        let other = Sealer {
            key: [8; 32],
            ..sealer()
        };
        let mut args = json!({"card": other.seal_value(&json!("4111111111111111"))})
            .as_object()
            .unwrap()
            .clone();
        s.unseal_arguments("pay", &mut args);
        assert!(!Value::Object(args).to_string().contains("4111111111111111"));
    }
}
