//! Who is calling over HTTP (feature `mcp-http`): the [`Authenticator`] trait, which maps an
//! HTTP request to a [`Principal`], and its two ready forms, [`BearerTokens`] (static tokens)
//! and [`JwtAuthenticator`] (OAuth 2.1 access tokens as JWTs, verified against the
//! authorization server's configured keys, as the MCP authorization spec describes for
//! resource servers). [`ProtectedResource`] is the metadata (RFC 9728) that tells MCP clients
//! which authorization server issues tokens for this server.

use std::collections::HashMap;

use axum::http::request::Parts;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::Principal;

pub use jsonwebtoken;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

/// Why a request is not let in. [`AuthError::Missing`] and [`AuthError::Invalid`] are answered
/// `401 Unauthorized` with a `WWW-Authenticate: Bearer` challenge that points at the
/// protected-resource metadata; [`AuthError::InsufficientScope`] is answered `403 Forbidden`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The request carries no credentials (no `Authorization: Bearer` header).
    #[error("the request has no bearer token: send `Authorization: Bearer <token>`")]
    Missing,
    /// The credentials are not valid (unknown token, bad signature, expired, wrong issuer or
    /// audience). The text goes to the client: it must not contain the token.
    #[error("the bearer token is not valid: {0}")]
    Invalid(String),
    /// The token is valid but lacks a scope this server needs (the scopes, space-separated).
    #[error("the bearer token lacks the scope `{0}`")]
    InsufficientScope(String),
}

/// Maps an HTTP request to the [`Principal`] making it, or refuses it. Runs on every request
/// to the MCP endpoint, before the MCP layer reads it.
///
/// ```
/// use effect_tool_core::adapters::mcp::{AuthError, Authenticator, Principal};
///
/// /// Lets in whoever a trusted proxy in front of the server says it authenticated.
/// struct FromProxy;
///
/// #[async_trait::async_trait]
/// impl Authenticator for FromProxy {
///     async fn authenticate(&self, request: &axum::http::request::Parts) -> Result<Principal, AuthError> {
///         let user = request.headers.get("x-authenticated-user").ok_or(AuthError::Missing)?;
///         let user = user.to_str().map_err(|_| AuthError::Invalid("the user header is not text".into()))?;
///         Ok(Principal::new(user))
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The principal of this request, or why it is refused.
    async fn authenticate(&self, request: &Parts) -> Result<Principal, AuthError>;

    /// The protected-resource metadata this authenticator implies (e.g. the JWT issuer as the
    /// authorization server), served unless [`super::McpHttpConfig::with_protected_resource`]
    /// sets one.
    fn protected_resource(&self) -> Option<ProtectedResource> {
        None
    }
}

/// The token of an `Authorization: Bearer <token>` header.
///
/// # Errors
///
/// [`AuthError::Missing`] without such a header, [`AuthError::Invalid`] when it is not a
/// bearer token.
pub fn bearer_token(request: &Parts) -> Result<&str, AuthError> {
    let header = request
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or(AuthError::Missing)?;
    let value = header
        .to_str()
        .map_err(|_| AuthError::Invalid("the Authorization header is not ASCII".into()))?;
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => Ok(token.trim()),
        _ => Err(AuthError::Invalid(
            "the Authorization header is not `Bearer <token>`".into(),
        )),
    }
}

/// Static bearer tokens, each naming its principal: for a few known clients (services, CI).
/// Tokens are kept as SHA-256 digests, and a request's token is compared by its digest.
///
/// ```
/// use effect_tool_core::adapters::mcp::BearerTokens;
/// let tokens = BearerTokens::new()
///     .with_token(std::env::var("ALICE_TOKEN").unwrap_or_else(|_| "a-long-random-token".into()), "alice");
/// ```
#[derive(Clone, Default)]
pub struct BearerTokens {
    by_digest: HashMap<[u8; 32], Principal>,
}

impl std::fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerTokens")
            .field(
                "principals",
                &self.by_digest.values().map(Principal::id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl BearerTokens {
    /// No tokens (every request is refused until one is added).
    pub fn new() -> Self {
        Self::default()
    }

    /// Let in requests bearing `token`, as `principal`.
    ///
    /// # Panics
    ///
    /// If `token` is shorter than 16 bytes (too easy to guess) or `principal` is empty.
    pub fn with_token(mut self, token: impl AsRef<str>, principal: impl Into<String>) -> Self {
        let token = token.as_ref();
        assert!(
            token.len() >= 16,
            "a bearer token needs at least 16 bytes (use e.g. 32 random bytes, hex); this one has {}",
            token.len()
        );
        self.by_digest.insert(digest(token), Principal::new(principal));
        self
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[async_trait::async_trait]
impl Authenticator for BearerTokens {
    async fn authenticate(&self, request: &Parts) -> Result<Principal, AuthError> {
        let token = bearer_token(request)?;
        self.by_digest
            .get(&digest(token))
            .cloned()
            .ok_or_else(|| AuthError::Invalid("the token is not one of this server's".into()))
    }
}

/// Why a JWT authenticator could not be configured.
#[derive(Debug, thiserror::Error)]
#[error("the JWT verification keys cannot be used: {0}")]
pub struct JwtError(String);

/// One verification key: the algorithm it verifies (tokens must be signed with exactly it) and
/// its key id.
#[derive(Clone)]
struct JwtKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

/// OAuth 2.1 access tokens as JWTs, verified against the authorization server's keys (which you
/// configure: nothing is fetched at run time), the way the MCP authorization spec asks of a
/// resource server:
///
/// - the signature, by a configured key of the token's `kid` whose algorithm is the token's
///   `alg` (so a token cannot choose a weaker algorithm, or `none`);
/// - `iss` is the issuer, `aud` contains this server's audience (its resource URL: tokens
///   issued for another server are refused), `exp` is in the future (60 s leeway), `nbf` is
///   past, and `sub` names the principal;
/// - every required scope is in the `scope` claim (else `403` with `insufficient_scope`).
///
/// ```
/// use effect_tool_core::adapters::mcp::JwtAuthenticator;
/// let jwks = r#"{"keys":[{"kty":"oct","kid":"k1","alg":"HS256","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}]}"#;
/// let auth = JwtAuthenticator::new("https://auth.example.com", "https://mcp.example.com/mcp")
///     .with_jwks(jwks)
///     .unwrap()
///     .with_required_scopes(["mcp:tools"]);
/// ```
#[derive(Clone)]
pub struct JwtAuthenticator {
    issuer: String,
    audience: String,
    keys: Vec<JwtKey>,
    required_scopes: Vec<String>,
}

impl std::fmt::Debug for JwtAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuthenticator")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field(
                "keys",
                &self
                    .keys
                    .iter()
                    .map(|k| (k.kid.clone(), k.algorithm))
                    .collect::<Vec<_>>(),
            )
            .field("required_scopes", &self.required_scopes)
            .finish()
    }
}

impl JwtAuthenticator {
    /// Tokens of `issuer` (the authorization server's issuer identifier) for `audience` (this
    /// MCP server's canonical URL, e.g. `https://mcp.example.com/mcp`). Add keys with
    /// [`JwtAuthenticator::with_jwks`] or [`JwtAuthenticator::with_key`].
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        JwtAuthenticator {
            issuer: issuer.into(),
            audience: audience.into(),
            keys: Vec::new(),
            required_scopes: Vec::new(),
        }
    }

    /// Add the keys of a JWK Set (the JSON the issuer publishes at its `jwks_uri`). Every key
    /// must name its algorithm (`alg`).
    ///
    /// # Errors
    ///
    /// [`JwtError`] when the text is not a JWK Set, or a key has no `alg`, or an unsupported one.
    pub fn with_jwks(mut self, jwks: &str) -> Result<Self, JwtError> {
        let set: jsonwebtoken::jwk::JwkSet =
            serde_json::from_str(jwks).map_err(|e| JwtError(format!("not a JWK Set: {e}")))?;
        for jwk in &set.keys {
            let kid = jwk.common.key_id.clone();
            let name = kid.as_deref().unwrap_or("(no kid)").to_owned();
            let algorithm = jwk
                .common
                .key_algorithm
                .ok_or_else(|| JwtError(format!("key {name} has no `alg`: say which algorithm it verifies")))
                .and_then(|a| {
                    Algorithm::try_from(a).map_err(|e| JwtError(format!("key {name}: unsupported `alg` {a}: {e}")))
                })?;
            let key = DecodingKey::from_jwk(jwk).map_err(|e| JwtError(format!("key {name}: {e}")))?;
            self.keys.push(JwtKey { kid, algorithm, key });
        }
        Ok(self)
    }

    /// Add one key, verifying tokens signed with `algorithm` (and only those), for tokens whose
    /// header names `kid` (or any token, with `None`).
    pub fn with_key(mut self, kid: Option<&str>, algorithm: Algorithm, key: DecodingKey) -> Self {
        self.keys.push(JwtKey {
            kid: kid.map(str::to_owned),
            algorithm,
            key,
        });
        self
    }

    /// Require these scopes in every token's `scope` claim.
    pub fn with_required_scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.required_scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Verify a token and return its principal (`sub`).
    ///
    /// # Errors
    ///
    /// [`AuthError::Invalid`] for a token that fails any check, [`AuthError::InsufficientScope`]
    /// for a valid one without a required scope.
    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Invalid("not a JWT".into()))?;
        let candidates: Vec<&JwtKey> = self
            .keys
            .iter()
            .filter(|k| k.algorithm == header.alg)
            .filter(|k| match (&header.kid, &k.kid) {
                (Some(want), Some(have)) => want == have,
                (_, None) => true,
                (None, Some(_)) => self.keys.len() == 1,
            })
            .collect();
        if candidates.is_empty() {
            return Err(AuthError::Invalid(
                "no key of this server verifies the token's algorithm and key id".into(),
            ));
        }
        let mut last = AuthError::Invalid("the signature does not verify".into());
        for key in candidates {
            let mut validation = Validation::new(key.algorithm);
            validation.set_issuer(&[&self.issuer]);
            validation.set_audience(&[&self.audience]);
            validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            validation.validate_nbf = true;
            match jsonwebtoken::decode::<Value>(token, &key.key, &validation) {
                Ok(data) => return self.principal_of(&data.claims),
                Err(e) => last = AuthError::Invalid(describe(&e)),
            }
        }
        Err(last)
    }

    fn principal_of(&self, claims: &Value) -> Result<Principal, AuthError> {
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| AuthError::Invalid("the token names no subject (`sub`)".into()))?;
        let granted: Vec<&str> = claims
            .get("scope")
            .and_then(Value::as_str)
            .map(|s| s.split(' ').collect())
            .unwrap_or_default();
        let missing: Vec<&str> = self
            .required_scopes
            .iter()
            .map(String::as_str)
            .filter(|s| !granted.contains(s))
            .collect();
        if !missing.is_empty() {
            return Err(AuthError::InsufficientScope(self.required_scopes.join(" ")));
        }
        Ok(Principal::new(sub))
    }
}

/// What went wrong with a token, in words safe to send back (never the token or its claims).
fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => "the token has expired".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (`nbf`)".into(),
        ErrorKind::InvalidIssuer => "the token is from another issuer".into(),
        ErrorKind::InvalidAudience => "the token is for another audience (resource)".into(),
        ErrorKind::InvalidSignature => "the signature does not verify".into(),
        ErrorKind::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
        ErrorKind::InvalidAlgorithm => "the token's algorithm is not the key's".into(),
        _ => "the token is malformed".into(),
    }
}

#[async_trait::async_trait]
impl Authenticator for JwtAuthenticator {
    async fn authenticate(&self, request: &Parts) -> Result<Principal, AuthError> {
        self.verify(bearer_token(request)?)
    }

    fn protected_resource(&self) -> Option<ProtectedResource> {
        Some(
            ProtectedResource::new(self.audience.clone())
                .with_authorization_servers([self.issuer.clone()])
                .with_scopes(self.required_scopes.clone()),
        )
    }
}

/// OAuth 2.0 Protected Resource Metadata (RFC 9728), served at
/// [`super::PROTECTED_RESOURCE_PATH`] (and at that path followed by `/mcp`): what MCP clients
/// read, after a `401`, to find the authorization server to get a token from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedResource {
    resource: String,
    authorization_servers: Vec<String>,
    scopes: Vec<String>,
}

impl ProtectedResource {
    /// The metadata of the resource `resource` (this MCP server's canonical URL, e.g.
    /// `https://mcp.example.com/mcp`: the audience its tokens are issued for).
    pub fn new(resource: impl Into<String>) -> Self {
        ProtectedResource {
            resource: resource.into(),
            authorization_servers: Vec::new(),
            scopes: Vec::new(),
        }
    }

    /// The issuer identifiers of the authorization servers that issue tokens for it.
    pub fn with_authorization_servers(mut self, servers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.authorization_servers = servers.into_iter().map(Into::into).collect();
        self
    }

    /// The scopes clients should ask for.
    pub fn with_scopes(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// The resource URL.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The URL of this metadata: RFC 9728's well-known path inserted between the resource's
    /// host and its path (`https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`).
    pub fn metadata_url(&self) -> String {
        let (origin, path) = match self.resource.find("://") {
            Some(i) => match self.resource[i + 3..].find('/') {
                Some(j) => self.resource.split_at(i + 3 + j),
                None => (self.resource.as_str(), ""),
            },
            None => (self.resource.as_str(), ""),
        };
        let path = path.trim_end_matches('/');
        format!("{origin}{}{path}", super::PROTECTED_RESOURCE_PATH)
    }

    /// The metadata document (JSON).
    pub fn to_json(&self) -> Value {
        let mut doc = json!({
            "resource": self.resource,
            "bearer_methods_supported": ["header"],
        });
        if !self.authorization_servers.is_empty() {
            doc["authorization_servers"] = json!(self.authorization_servers);
        }
        if !self.scopes.is_empty() {
            doc["scopes_supported"] = json!(self.scopes);
        }
        doc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};

    const SECRET: &[u8] = b"a test secret that is long enough";
    const ISS: &str = "https://auth.example.com";
    const AUD: &str = "https://mcp.example.com/mcp";

    fn auth() -> JwtAuthenticator {
        JwtAuthenticator::new(ISS, AUD).with_key(
            Some("k1"),
            Algorithm::HS256,
            DecodingKey::from_secret(SECRET).unwrap(),
        )
    }

    fn token(claims: Value, alg: Algorithm, kid: Option<&str>) -> String {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        encode(&header, &claims, &EncodingKey::from_secret(SECRET).unwrap()).unwrap()
    }

    fn claims() -> Value {
        let now = jsonwebtoken::get_current_timestamp();
        json!({"iss": ISS, "aud": AUD, "sub": "alice", "exp": now + 600, "scope": "mcp:tools other"})
    }

    #[test]
    fn a_valid_token_names_its_subject_and_every_wrong_one_is_refused() {
        let auth = auth();
        assert_eq!(
            auth.verify(&token(claims(), Algorithm::HS256, Some("k1")))
                .unwrap()
                .id(),
            "alice"
        );

        let with = |k: &str, v: Value| {
            let mut c = claims();
            c[k] = v;
            token(c, Algorithm::HS256, Some("k1"))
        };
        let now = jsonwebtoken::get_current_timestamp();
        for (what, t, says) in [
            (
                "issuer",
                with("iss", json!("https://evil.example.com")),
                "another issuer",
            ),
            (
                "audience",
                with("aud", json!("https://other.example.com/mcp")),
                "another audience",
            ),
            ("expired", with("exp", json!(now - 3600)), "expired"),
            ("not yet", with("nbf", json!(now + 3600)), "not valid yet"),
            ("kid", token(claims(), Algorithm::HS256, Some("k2")), "no key"),
            ("alg", token(claims(), Algorithm::HS384, Some("k1")), "no key"),
            ("garbage", "not.a.jwt".to_owned(), "not a JWT"),
        ] {
            match auth.verify(&t) {
                Err(AuthError::Invalid(m)) => assert!(m.contains(says), "{what}: {m}"),
                other => panic!("{what}: {other:?}"),
            }
        }
        let mut no_sub = claims();
        no_sub.as_object_mut().unwrap().remove("sub");
        assert!(matches!(
            auth.verify(&token(no_sub, Algorithm::HS256, Some("k1"))),
            Err(AuthError::Invalid(_))
        ));

        let forged = encode(
            &Header::new(Algorithm::HS256),
            &claims(),
            &EncodingKey::from_secret(b"another secret entirely, same length").unwrap(),
        )
        .unwrap();
        assert!(matches!(auth.verify(&forged), Err(AuthError::Invalid(_))));
    }

    #[test]
    fn scopes_are_required_and_a_jwks_needs_algorithms() {
        let auth = auth().with_required_scopes(["mcp:tools"]);
        assert!(auth.verify(&token(claims(), Algorithm::HS256, Some("k1"))).is_ok());
        let strict = auth.with_required_scopes(["admin"]);
        assert_eq!(
            strict.verify(&token(claims(), Algorithm::HS256, Some("k1"))),
            Err(AuthError::InsufficientScope("admin".into()))
        );

        // k = base64url("a test secret that is long enough")
        let jwks =
            r#"{"keys":[{"kty":"oct","kid":"k1","alg":"HS256","k":"YSB0ZXN0IHNlY3JldCB0aGF0IGlzIGxvbmcgZW5vdWdo"}]}"#;
        let from_set = JwtAuthenticator::new(ISS, AUD).with_jwks(jwks).unwrap();
        assert_eq!(
            from_set
                .verify(&token(claims(), Algorithm::HS256, Some("k1")))
                .unwrap()
                .id(),
            "alice"
        );
        let no_alg = r#"{"keys":[{"kty":"oct","kid":"k1","k":"c2VjcmV0"}]}"#;
        let err = JwtAuthenticator::new(ISS, AUD)
            .with_jwks(no_alg)
            .unwrap_err()
            .to_string();
        assert!(err.contains("has no `alg`"), "{err}");
    }

    #[tokio::test]
    async fn static_tokens_name_their_principal() {
        let tokens = BearerTokens::new().with_token("0123456789abcdef-alice", "alice");
        let parts = |auth: Option<&str>| {
            let mut b = axum::http::Request::builder();
            if let Some(a) = auth {
                b = b.header("authorization", a);
            }
            b.body(()).unwrap().into_parts().0
        };
        assert_eq!(
            tokens
                .authenticate(&parts(Some("Bearer 0123456789abcdef-alice")))
                .await
                .unwrap()
                .id(),
            "alice"
        );
        assert_eq!(
            tokens
                .authenticate(&parts(Some("bearer 0123456789abcdef-alice")))
                .await
                .unwrap()
                .id(),
            "alice"
        );
        assert_eq!(tokens.authenticate(&parts(None)).await, Err(AuthError::Missing));
        assert!(matches!(
            tokens.authenticate(&parts(Some("Bearer 0123456789abcdef-bob"))).await,
            Err(AuthError::Invalid(_))
        ));
        assert!(matches!(
            tokens.authenticate(&parts(Some("Basic YWxpY2U6eA=="))).await,
            Err(AuthError::Invalid(_))
        ));
        assert!(!format!("{tokens:?}").contains("0123456789abcdef"));
    }

    #[test]
    fn the_metadata_url_inserts_the_well_known_path_before_the_resource_path() {
        let pr = ProtectedResource::new("https://mcp.example.com/mcp").with_authorization_servers([ISS]);
        assert_eq!(
            pr.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            ProtectedResource::new("https://mcp.example.com").metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(pr.to_json()["authorization_servers"], json!([ISS]));
        assert_eq!(pr.to_json()["resource"], json!("https://mcp.example.com/mcp"));
    }
}
