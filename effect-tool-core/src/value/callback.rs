//! Callback tokens: what a tool hands a provider that finishes its effect later (a payout, a
//! long job), and what the provider's webhook brings back to settle the record.
//!
//! A token names the tool, the effect key and the attempt it was issued to, and carries
//! HMAC-SHA256 of the three under the journal's marker secret
//! ([`MarkerSecret`], the one [`crate::Engine::marker_secret`] loads): nobody without the secret
//! can make one, and a token of one key, attempt or tool does not verify for another
//! ([`CallbackToken::verify`], in constant time). The journal keeps only the token's SHA-256
//! ([`CallbackToken::digest`]), so a leaked journal does not leak live tokens; the pending
//! record accepts exactly the token it was given, once, before its deadline
//! ([`Op::Settle`](crate::decide::record::Op::Settle)).
//!
//! The text form is `etcb1.<tool hex>.<key hex>.<attempt>.<mac hex>`: URL-safe, so it fits in a
//! callback URL's query or a provider's metadata field.

use crate::value::digest::{hex, unhex};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::value::marker::MarkerSecret;

/// What every token starts with (the format's version).
const PREFIX: &str = "etcb1";
/// What the MAC covers before the token's fields, so that it means "a callback token" only.
const CONTEXT: &[u8] = b"effect-tool callback v1\n";

/// A callback token: the tool, key and attempt it settles, signed under the journal's secret.
///
/// Its `Debug` shows the tool, key and attempt, never the MAC.
#[derive(Clone, PartialEq, Eq)]
pub struct CallbackToken {
    tool: String,
    key: String,
    attempt: u32,
    mac: [u8; 32],
}

impl std::fmt::Debug for CallbackToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackToken")
            .field("tool", &self.tool)
            .field("key", &self.key)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for CallbackToken {
    /// The token's text form (see the module docs): what the provider sends back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{PREFIX}.{}.{}.{}.{}",
            hex(self.tool.as_bytes()),
            hex(self.key.as_bytes()),
            self.attempt,
            hex(&self.mac)
        )
    }
}

/// Why a callback token was refused before the journal was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The text is not a callback token (`etcb1.<tool>.<key>.<attempt>.<mac>`, hex fields).
    #[error(
        "not a callback token: expected `etcb1.<tool hex>.<key hex>.<attempt>.<mac hex>`, as the tool was given it"
    )]
    Malformed,
    /// The MAC does not verify under this journal's secret: forged, altered, or issued by
    /// another journal.
    #[error(
        "the callback token for key `{key}` does not verify under this journal's secret (forged, altered, or issued by another journal); nothing was settled"
    )]
    Forged {
        /// The key the token names (not to be trusted).
        key: String,
    },
}

impl CallbackToken {
    /// A token for attempt `attempt` of `tool` under `key`, signed with `secret`.
    pub fn issue(secret: &MarkerSecret, tool: &str, key: &str, attempt: u32) -> Self {
        let mac = mac(secret, tool, key, attempt).finalize().into_bytes().into();
        CallbackToken {
            tool: tool.to_owned(),
            key: key.to_owned(),
            attempt,
            mac,
        }
    }

    /// The token in `text` (its [`Display`](std::fmt::Display) form) if it verifies under
    /// `secret`: the MAC compared in constant time.
    pub fn verify(secret: &MarkerSecret, text: &str) -> Result<Self, TokenError> {
        let token = Self::parse(text).ok_or(TokenError::Malformed)?;
        mac(secret, &token.tool, &token.key, token.attempt)
            .verify_slice(&token.mac)
            .map_err(|_| TokenError::Forged { key: token.key.clone() })?;
        Ok(token)
    }

    /// The token's fields, unverified.
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.');
        if parts.next()? != PREFIX {
            return None;
        }
        let tool = String::from_utf8(unhex(parts.next()?)?).ok()?;
        let key = String::from_utf8(unhex(parts.next()?)?).ok()?;
        let attempt = parts.next()?.parse().ok()?;
        let mac = unhex(parts.next()?)?.try_into().ok()?;
        parts.next().is_none().then_some(CallbackToken {
            tool,
            key,
            attempt,
            mac,
        })
    }

    /// The tool it settles.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The effect key it settles.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The attempt it was issued to.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// SHA-256 hex of the token's text: what the pending record keeps and the settlement
    /// compares.
    pub fn digest(&self) -> String {
        crate::value::digest::sha256_hex(self.to_string().as_bytes())
    }
}

/// HMAC-SHA256 under `secret` of the token's context and fields.
fn mac(secret: &MarkerSecret, tool: &str, key: &str, attempt: u32) -> Hmac<Sha256> {
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(CONTEXT);
    // Lengths first: no two field lists make the same bytes.
    for field in [tool.as_bytes(), key.as_bytes()] {
        mac.update(&(field.len() as u64).to_be_bytes());
        mac.update(field);
    }
    mac.update(&attempt.to_be_bytes());
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(b: u8) -> MarkerSecret {
        MarkerSecret::from_bytes([b; 32])
    }

    #[test]
    fn a_token_round_trips_and_verifies_only_under_its_secret() {
        let t = CallbackToken::issue(&secret(1), "payout", "payout:k/1", 3);
        let text = t.to_string();
        assert!(text.starts_with("etcb1."), "{text}");
        let back = CallbackToken::verify(&secret(1), &text).expect("verifies");
        assert_eq!((back.tool(), back.key(), back.attempt()), ("payout", "payout:k/1", 3));
        assert_eq!(back.digest(), t.digest());
        assert_eq!(
            CallbackToken::verify(&secret(2), &text),
            Err(TokenError::Forged {
                key: "payout:k/1".into()
            })
        );
        assert!(!format!("{t:?}").contains(&hex(&t.mac)));
    }

    #[test]
    fn a_token_altered_in_any_field_does_not_verify() {
        let s = secret(7);
        let good = CallbackToken::issue(&s, "payout", "k", 1);
        for other in [
            CallbackToken {
                attempt: 2,
                ..good.clone()
            },
            CallbackToken {
                key: "k2".into(),
                ..good.clone()
            },
            CallbackToken {
                tool: "refund".into(),
                ..good.clone()
            },
        ] {
            assert!(matches!(
                CallbackToken::verify(&s, &other.to_string()),
                Err(TokenError::Forged { .. })
            ));
        }
        for bad in [
            "",
            "etcb1",
            "etcb2.70.6b.1.00",
            "etcb1.7.6b.1.00",
            "etcb1.70.6b.x.00",
            "etcb1.70.6b.1.00.00",
        ] {
            assert_eq!(CallbackToken::verify(&s, bad), Err(TokenError::Malformed), "{bad}");
        }
        // A MAC of the wrong length is malformed, not a panic.
        let text = good.to_string();
        assert_eq!(
            CallbackToken::verify(&s, &text[..text.len() - 2]),
            Err(TokenError::Malformed)
        );
        assert_eq!(CallbackToken::verify(&s, &format!(" {text} ")), Ok(good));
    }
}
