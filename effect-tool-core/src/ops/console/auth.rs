//! Who an operator is: every request to the console is identified before anything is read or
//! done, by one of two means.
//!
//! - [`StaticTokens`]: bearer tokens from a file, for small teams. One line per person,
//!   `token name role,role as=id,id` (`#` starts a comment; roles and `as=` are optional):
//!   `as=` names the MCP principals the same person calls tools as, for four eyes. Compared in
//!   constant time. The file must be readable by its owner only.
//! - [`TrustedHeader`]: an authenticating proxy in front (oauth2-proxy before an OIDC provider,
//!   say) sets the user and groups headers; they are believed only from the proxy's addresses.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use axum::http::HeaderMap;

/// An authenticated operator: a name (what the audit trail records), roles, and the other
/// names under which the same person requests tool calls (four eyes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Who (recorded as `by` in the audit trail).
    pub name: String,
    /// The roles they hold (e.g. `manager`, `operator`).
    pub roles: BTreeSet<String>,
    /// The ids under which this person also calls tools (an MCP principal's id, e.g. a JWT's
    /// `sub`, when it is not [`Identity::name`]). Four eyes refuses their approval of a call
    /// in a run scoped to their name or to any of these; see the console's module docs.
    pub principals: BTreeSet<String>,
}

impl Identity {
    /// `name` holding `roles`.
    pub fn new(name: impl Into<String>, roles: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Identity {
            name: name.into(),
            roles: roles.into_iter().map(Into::into).collect(),
            principals: BTreeSet::new(),
        }
    }

    /// The same person, who also calls tools as MCP principal (or application run scope)
    /// `id`: four eyes then keeps them from approving calls of `id`'s runs too.
    pub fn calling_tools_as(mut self, id: impl Into<String>) -> Self {
        self.principals.insert(id.into());
        self
    }

    /// Whether they hold `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.contains(role)
    }
}

/// Finds the operator behind a request, or none (the request is refused with 401).
pub trait OperatorAuth: Send + Sync + 'static {
    /// The identity of the request with `headers`, from `peer` (the TCP peer, when the server
    /// was started with connect info).
    fn identify(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Option<Identity>;

    /// The names (lower-case) of the request headers that carry the identity, e.g.
    /// `authorization`. The console refuses a request that carries one of them more than once
    /// (400) before it asks [`OperatorAuth::identify`]: a proxy that adds its header after the
    /// client's, instead of replacing it, would otherwise let the client's copy count. None by
    /// default.
    fn identity_headers(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The value of `name` when the request carries it exactly once.
fn once<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h axum::http::HeaderValue> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    values.next().is_none().then_some(first)
}

/// Why a tokens file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.describe())]
pub struct TokensError {
    /// The file.
    pub path: String,
    /// The line (1-based; 0 when the file as a whole could not be used: unreadable, or open to
    /// its group or others).
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

impl TokensError {
    fn describe(&self) -> String {
        if self.line == 0 {
            format!("tokens file {}: {}", self.path, self.why)
        } else {
            format!(
                "tokens file {}, line {}: {} (each line is `token name role,role`)",
                self.path, self.line, self.why
            )
        }
    }
}

/// Bearer tokens of named operators (see the module docs).
#[derive(Clone, Default)]
pub struct StaticTokens {
    tokens: Vec<(Vec<u8>, Identity)>,
}

impl std::fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tokens.iter().map(|(_, i)| i.name.as_str()).collect();
        f.debug_struct("StaticTokens")
            .field("operators", &names)
            .finish_non_exhaustive()
    }
}

impl StaticTokens {
    /// No tokens yet.
    pub fn new() -> Self {
        StaticTokens::default()
    }

    /// Accept `token` as `identity`.
    pub fn with(mut self, token: impl Into<String>, identity: Identity) -> Self {
        self.tokens.push((token.into().into_bytes(), identity));
        self
    }

    /// Read a tokens file (`token name role,role` per line). Tokens shorter than 16 characters
    /// are refused: they can be guessed. On Unix, a file its group or others may read or write
    /// is refused too (the tokens are operators' credentials), as libpq refuses such a
    /// `.pgpass`: `chmod 0600` it.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokensError> {
        use std::io::Read;
        let path = path.as_ref();
        let error = |why: String| TokensError {
            path: path.display().to_string(),
            line: 0,
            why,
        };
        let mut file = std::fs::File::open(path).map_err(|e| error(e.to_string()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // The mode of the file opened, not of whatever the path names a moment later.
            let mode = file.metadata().map_err(|e| error(e.to_string()))?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(error(format!(
                    "its group or others may read or write it (mode {:04o}), and the tokens in it let anyone who reads them act as an operator: chmod 0600 it (libpq refuses a .pgpass file the same way)",
                    mode & 0o7777
                )));
            }
        }
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(|e| error(e.to_string()))?;
        Self::parse(&text).map_err(|(line, why)| TokensError {
            path: path.display().to_string(),
            line,
            why,
        })
    }

    /// Parse the text of a tokens file: `Err((line, why))`.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut tokens = StaticTokens::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(token), Some(name)) = (parts.next(), parts.next()) else {
                return Err((n + 1, "a token and a name are needed".into()));
            };
            if token.len() < 16 {
                return Err((n + 1, "the token is shorter than 16 characters".into()));
            }
            let (mut roles, mut principals): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
            let mut seen_roles = false;
            for part in parts {
                if let Some(ids) = part.strip_prefix("as=") {
                    if !principals.is_empty() {
                        return Err((n + 1, "`as=` is given once, comma-separated".into()));
                    }
                    principals = ids.split(',').filter(|p| !p.is_empty()).collect();
                    if principals.is_empty() {
                        return Err((n + 1, "`as=` needs at least one principal id".into()));
                    }
                } else if seen_roles {
                    return Err((n + 1, "roles are one comma-separated word".into()));
                } else {
                    seen_roles = true;
                    roles = part.split(',').filter(|r| !r.is_empty()).collect();
                }
            }
            let identity = principals
                .into_iter()
                .fold(Identity::new(name, roles), Identity::calling_tools_as);
            tokens = tokens.with(token, identity);
        }
        Ok(tokens)
    }
}

/// Whether `a` and `b` are equal, in time that depends only on their lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl OperatorAuth for StaticTokens {
    fn identify(&self, headers: &HeaderMap, _peer: Option<IpAddr>) -> Option<Identity> {
        let value = once(headers, "authorization")?.to_str().ok()?;
        let token = value.strip_prefix("Bearer ")?.trim().as_bytes();
        // Every token is compared, so the time does not tell which one matched.
        let mut found = None;
        for (t, identity) in &self.tokens {
            if same(t, token) && found.is_none() {
                found = Some(identity.clone());
            }
        }
        found
    }

    fn identity_headers(&self) -> Vec<String> {
        vec!["authorization".into()]
    }
}

/// Identity from headers an authenticating proxy sets, believed only from its addresses (and,
/// with [`TrustedHeader::with_secret`], only with the secret the proxy alone knows).
#[derive(Clone)]
pub struct TrustedHeader {
    user: String,
    groups: String,
    proxies: Vec<IpAddr>,
    secret: Option<(String, Vec<u8>)>,
}

impl std::fmt::Debug for TrustedHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedHeader")
            .field("user", &self.user)
            .field("groups", &self.groups)
            .field("proxies", &self.proxies)
            .field("secret_header", &self.secret.as_ref().map(|(h, _)| h))
            .finish()
    }
}

impl TrustedHeader {
    /// oauth2-proxy's headers (`X-Forwarded-User`, `X-Forwarded-Groups`), from `proxies` only.
    pub fn new(proxies: impl IntoIterator<Item = IpAddr>) -> Self {
        TrustedHeader {
            user: "x-forwarded-user".into(),
            groups: "x-forwarded-groups".into(),
            proxies: proxies.into_iter().collect(),
            secret: None,
        }
    }

    /// Believe the headers only when the request also carries `header` with the value `secret`
    /// (compared in constant time), which the proxy adds to every request it forwards (nginx:
    /// `proxy_set_header`; oauth2-proxy: `injectRequestHeaders`). Without it, every process that
    /// can connect from the proxy's address is the proxy: with `127.0.0.1`, every local process
    /// and user.
    pub fn with_secret(mut self, header: &str, secret: impl Into<String>) -> Self {
        self.secret = Some((header.to_ascii_lowercase(), secret.into().into_bytes()));
        self
    }

    /// Other header names (the user's, and the comma-separated groups', read as roles).
    pub fn with_headers(mut self, user: &str, groups: &str) -> Self {
        self.user = user.to_ascii_lowercase();
        self.groups = groups.to_ascii_lowercase();
        self
    }
}

impl OperatorAuth for TrustedHeader {
    fn identify(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Option<Identity> {
        if !peer.is_some_and(|p| self.proxies.contains(&p)) {
            return None;
        }
        if let Some((header, secret)) = &self.secret
            && !same(once(headers, header)?.as_bytes(), secret)
        {
            return None;
        }
        let user = once(headers, &self.user)?.to_str().ok()?.trim();
        if user.is_empty() {
            return None;
        }
        // Groups sent twice are no groups: the client's copy may be one of them.
        let groups = match headers.get_all(self.groups.as_str()).iter().count() {
            0 => "",
            1 => once(headers, &self.groups)?.to_str().ok()?,
            _ => return None,
        };
        Some(Identity::new(
            user,
            groups.split(',').map(str::trim).filter(|g| !g.is_empty()),
        ))
    }

    fn identity_headers(&self) -> Vec<String> {
        let mut names = vec![self.user.clone(), self.groups.clone()];
        names.extend(self.secret.as_ref().map(|(h, _)| h.clone()));
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn tokens_file_lines_name_an_operator_and_their_roles() {
        let tokens =
            StaticTokens::parse("# team\ntok-maria-0123456789 maria manager,operator\ntok-olaf-01234567890 olaf\n")
                .unwrap();
        let maria = tokens
            .identify(&headers(&[("authorization", "Bearer tok-maria-0123456789")]), None)
            .unwrap();
        assert_eq!(maria, Identity::new("maria", ["manager", "operator"]));
        let olaf = tokens
            .identify(&headers(&[("authorization", "Bearer tok-olaf-01234567890")]), None)
            .unwrap();
        assert!(olaf.roles.is_empty());
        assert_eq!(
            tokens.identify(&headers(&[("authorization", "Bearer tok-maria-012345678")]), None),
            None
        );
        assert_eq!(
            tokens.identify(&headers(&[("authorization", "tok-maria-0123456789")]), None),
            None
        );
        assert_eq!(tokens.identify(&HeaderMap::new(), None), None);
        assert_eq!(StaticTokens::parse("short maria").unwrap_err().0, 1);
        assert_eq!(StaticTokens::parse("\nlong-enough-token-here").unwrap_err().0, 2);
        assert!(StaticTokens::parse("long-enough-token-here maria a b").is_err());
    }

    #[test]
    fn a_tokens_line_names_the_principals_its_operator_calls_tools_as() {
        let tokens = StaticTokens::parse(
            "tok-maria-0123456789 maria manager as=00u1abc,maria@example.com\ntok-olaf-01234567890 olaf as=olaf-bot\n",
        )
        .unwrap();
        let maria = tokens
            .identify(&headers(&[("authorization", "Bearer tok-maria-0123456789")]), None)
            .unwrap();
        assert_eq!(
            maria,
            Identity::new("maria", ["manager"])
                .calling_tools_as("00u1abc")
                .calling_tools_as("maria@example.com")
        );
        let olaf = tokens
            .identify(&headers(&[("authorization", "Bearer tok-olaf-01234567890")]), None)
            .unwrap();
        assert!(olaf.roles.is_empty() && olaf.principals.contains("olaf-bot"));
        assert!(StaticTokens::parse("long-enough-token-here maria as=").is_err());
        assert!(StaticTokens::parse("long-enough-token-here maria as=a as=b").is_err());
    }

    #[test]
    fn an_identity_header_sent_twice_identifies_nobody() {
        let proxy: IpAddr = "127.0.0.1".parse().unwrap();
        let auth = TrustedHeader::new([proxy]);
        let mut h = headers(&[("x-forwarded-user", "mallory")]);
        h.append("x-forwarded-user", "maria".parse().unwrap());
        assert_eq!(auth.identify(&h, Some(proxy)), None);
        let mut h = headers(&[("x-forwarded-user", "maria"), ("x-forwarded-groups", "ops")]);
        h.append("x-forwarded-groups", "manager".parse().unwrap());
        assert_eq!(auth.identify(&h, Some(proxy)), None);
        assert_eq!(auth.identity_headers(), ["x-forwarded-user", "x-forwarded-groups"]);
        let tokens = StaticTokens::new().with("tok-maria-0123456789", Identity::new("maria", ["manager"]));
        let mut h = headers(&[("authorization", "Bearer tok-ivy-000000000000")]);
        h.append("authorization", "Bearer tok-maria-0123456789".parse().unwrap());
        assert_eq!(tokens.identify(&h, None), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_tokens_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("effect-tool-{}-operators.tokens", std::process::id()));
        std::fs::write(&path, "tok-maria-0123456789 maria manager\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = StaticTokens::from_file(&path).unwrap_err();
            assert_eq!(e.line, 0);
            assert!(e.to_string().contains("chmod 0600"), "{e}");
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(StaticTokens::from_file(&path).is_ok());
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_trusted_header_counts_only_from_the_proxy() {
        let proxy: IpAddr = "10.0.0.2".parse().unwrap();
        let auth = TrustedHeader::new([proxy]);
        let h = headers(&[
            ("x-forwarded-user", "maria@example.com"),
            ("x-forwarded-groups", "manager, ops"),
        ]);
        assert_eq!(
            auth.identify(&h, Some(proxy)),
            Some(Identity::new("maria@example.com", ["manager", "ops"]))
        );
        assert_eq!(
            auth.identify(&h, Some("10.0.0.3".parse().unwrap())),
            None,
            "not the proxy"
        );
        assert_eq!(auth.identify(&h, None), None, "no peer address");
        assert_eq!(auth.identify(&headers(&[("x-forwarded-user", " ")]), Some(proxy)), None);

        // With a secret, the proxy's address is not enough: any local process has it.
        let auth = auth.with_secret("X-Proxy-Secret", "s3cret-of-the-proxy");
        assert_eq!(auth.identify(&h, Some(proxy)), None, "no secret");
        let mut wrong = h.clone();
        wrong.insert("x-proxy-secret", "s3cret-of-the-proxz".parse().unwrap());
        assert_eq!(auth.identify(&wrong, Some(proxy)), None, "a wrong secret");
        let mut right = h.clone();
        right.insert("x-proxy-secret", "s3cret-of-the-proxy".parse().unwrap());
        assert!(auth.identify(&right, Some(proxy)).is_some());
        assert!(!format!("{auth:?}").contains("s3cret"), "{auth:?}");
        assert!(auth.identity_headers().contains(&"x-proxy-secret".to_owned()));
    }
}
