//! TLS for the PostgreSQL journal: libpq's `sslmode` and `sslrootcert` on rustls (with the
//! `ring` provider, so nothing from the system's OpenSSL is needed to build or run).
//!
//! tokio-postgres understands only `sslmode=disable|prefer|require` and refuses parameters it
//! does not know, so the connection string is read here first: `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey` are taken out (in the URL form
//! `postgres://…?sslmode=verify-full&sslrootcert=/ca.pem` and in the key-value form
//! `host=… sslmode=verify-full sslrootcert=/ca.pem`), the rest goes to tokio-postgres
//! unchanged, and the mode is applied through the rustls configuration.
//!
//! # What is checked, as libpq checks it
//!
//! The root file is `sslrootcert` (the connection string's, else
//! [`PgOptions::ssl_root_cert`](super::PgOptions::ssl_root_cert), else `PGSSLROOTCERT`; an
//! empty value counts as none), else libpq's default `~/.postgresql/root.crt` (`HOME`) when
//! that file exists. `sslrootcert=system` names the platform's trusted roots instead (libpq 16).
//! The mode is `sslmode` (the string's, else `PgOptions::ssl_mode`, else `PGSSLMODE`), else
//! `prefer`, or `verify-full` with `sslrootcert=system`.
//!
//! | `sslmode`     | no root file                 | a root file                      | `sslrootcert=system`          |
//! |---------------|------------------------------|----------------------------------|-------------------------------|
//! | `disable`     | plain TCP                    | plain TCP                        | refused (as libpq)            |
//! | `prefer`      | TLS if offered, not checked  | TLS if offered, chain checked    | refused (as libpq)            |
//! | `require`     | TLS, not checked             | TLS, chain checked               | refused (as libpq)            |
//! | `verify-ca`   | refused: no root file        | TLS, chain checked               | refused (as libpq)            |
//! | `verify-full` | refused: no root file        | TLS, chain and host name checked | TLS, chain (platform's roots) and host name checked |
//!
//! - "Chain checked": the server's certificate must chain to a certificate of the root file
//!   (never to the platform's roots); "host name checked": it must name the host connected to
//!   (`host`, also when `hostaddr` gives the address), by a DNS or IP subject alternative name.
//! - `prefer` whose TLS attempt fails (a chain that does not check out included) connects in
//!   plain TCP, as libpq does (see `connect`): a root file does not make `prefer` safe against
//!   an impostor, only `verify-full` does.
//! - Where this differs from libpq: a root file *named* (not the default one) that does not
//!   exist or does not load is an error in every mode but `disable` (libpq skips a missing one
//!   in `prefer` and `require` and checks nothing: a typo in the path would silently turn the
//!   check off). The files are read once, when the store is made (libpq reads them per
//!   connection). Certificate revocation lists (`sslcrl`, `~/.postgresql/root.crl`) are not
//!   read, and a certificate that names its host only in its subject's common name (no subject
//!   alternative name) does not pass `verify-full` (rustls reads only the alternative names;
//!   libpq falls back to the common name).

use std::error::Error as StdError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::call::error::StoreError;

/// How a connection to PostgreSQL is secured: libpq's `sslmode`, given in the URL
/// (`?sslmode=verify-full`) or as [`PgOptions::ssl_mode`](super::PgOptions::ssl_mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SslMode {
    /// Plain TCP, never TLS.
    Disable,
    /// TLS if the server offers it, plain TCP if it does not or the TLS attempt fails (libpq's
    /// and tokio-postgres's default). The certificate is checked only when there is a root
    /// file (as with [`SslMode::Require`]), and a failed check falls back to plain TCP too.
    #[default]
    Prefer,
    /// TLS or no connection. As in libpq, the certificate is checked only when there is a root
    /// file (`sslrootcert`, [`PgOptions::ssl_root_cert`](super::PgOptions::ssl_root_cert),
    /// `PGSSLROOTCERT`, or `~/.postgresql/root.crt` when it exists): then it must chain to it,
    /// as with [`SslMode::VerifyCa`]. Without one this stops passive eavesdroppers, not an
    /// impostor server.
    Require,
    /// TLS, and the server's certificate must chain to the root file; the host name is not
    /// checked. Without a root file the store is not made.
    VerifyCa,
    /// TLS, the certificate must chain to the root file (or to the platform's roots with
    /// `sslrootcert=system`) and name the host connected to. Without a root file the store is
    /// not made.
    VerifyFull,
}

impl SslMode {
    /// libpq's name of the mode (`verify-full`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The mode libpq names `name` (`disable`, `prefer`, `require`, `verify-ca`,
    /// `verify-full`); `None` for any other text.
    pub fn parse(name: &str) -> Option<SslMode> {
        Some(match name {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The trusted roots, found as libpq finds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Roots {
    /// No root file: none named, and libpq's default (`~/.postgresql/root.crt`, the path kept
    /// here when there is a home folder) does not exist.
    Missing(Option<PathBuf>),
    /// `sslrootcert=system` (libpq 16): the platform's trusted roots, and `verify-full`.
    System,
    /// A PEM file of one or more root certificates: named (`sslrootcert`, `PGSSLROOTCERT`,
    /// `PgOptions::ssl_root_cert`), or libpq's default `~/.postgresql/root.crt`, which exists.
    File {
        /// The file.
        path: PathBuf,
        /// Whether it was named (else it is the default file, found in the home folder).
        named: bool,
    },
}

/// What is checked of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// Nothing (the handshake's signatures only): `prefer` and `require` without a root file.
    Nothing,
    /// That it chains to a root of [`Roots`]: `verify-ca`, and `prefer` / `require` with a
    /// root file.
    Chain,
    /// That it chains to a root and names the host connected to: `verify-full`.
    ChainAndName,
}

/// The TLS settings of a journal's connections, from its URL and options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tls {
    /// The mode asked for (or libpq's default).
    pub mode: SslMode,
    /// The trusted roots.
    pub roots: Roots,
    /// What is checked of the server's certificate (from the mode and the roots).
    pub check: Check,
    /// The certificate this client shows when the server asks for one (mTLS).
    pub client: Option<ClientCert>,
}

/// A client certificate (PEM, with its chain) and its private key (PEM: PKCS#8, PKCS#1 or
/// SEC1), for servers that require one (`clientcert=verify-ca|verify-full` or `cert`
/// authentication in `pg_hba.conf`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The connection-string parameters this crate reads itself (tokio-postgres refuses those it
/// does not know): libpq's TLS settings, and `pgbouncer` (see `PgOptions::transaction_pooler`).
const TAKEN: [&str; 5] = ["sslmode", "sslrootcert", "sslcert", "sslkey", "pgbouncer"];

/// The parameters of [`TAKEN`] found in a connection string, with their (decoded) values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Params(Vec<(&'static str, String)>);

impl Params {
    /// The value of `name` (one of [`TAKEN`]), the last one given.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    fn take(&mut self, key: &str, value: String) -> bool {
        match TAKEN.iter().find(|k| **k == key) {
            Some(k) => {
                self.0.push((k, value));
                true
            }
            None => false,
        }
    }
}

/// The TLS settings given outside the connection string ([`super::PgOptions`], then the `PG*`
/// environment variables); the string's own win.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Given<'a> {
    pub mode: Option<SslMode>,
    pub root_cert: Option<&'a Path>,
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
    /// The home folder, for libpq's default files (`~/.postgresql/root.crt`,
    /// `~/.postgresql/postgresql.crt`).
    pub home: Option<&'a Path>,
}

/// The TLS settings of a connection string's parameters (taken out by [`split_params`]) and of
/// `given` (the string's win), as libpq resolves them (see the [module docs](self)).
pub(super) fn resolve(params: &Params, given: Given<'_>) -> Result<Tls, StoreError> {
    let url_mode = match params.get("sslmode") {
        Some(name) => Some(SslMode::parse(name).ok_or_else(|| {
            StoreError::Backend(format!(
                "invalid sslmode `{name}` in the PostgreSQL URL: use disable, prefer, require, verify-ca or verify-full"
            ))
        })?),
        None => None,
    };
    let roots = roots(params, given);
    let mode = url_mode.or(given.mode).unwrap_or(if roots == Roots::System {
        SslMode::VerifyFull
    } else {
        SslMode::Prefer
    });
    let check = match (mode, &roots) {
        (SslMode::VerifyFull, Roots::System) => Check::ChainAndName,
        (weak, Roots::System) => {
            return Err(StoreError::Backend(format!(
                "sslmode={weak} cannot be used with sslrootcert=system (as in libpq): use sslmode=verify-full, or name a CA file in sslrootcert"
            )));
        }
        (SslMode::Disable, _) => Check::Nothing,
        (SslMode::VerifyFull, Roots::File { .. }) => Check::ChainAndName,
        (_, Roots::File { .. }) => Check::Chain,
        (SslMode::Prefer | SslMode::Require, Roots::Missing(_)) => Check::Nothing,
        (SslMode::VerifyCa | SslMode::VerifyFull, Roots::Missing(default)) => {
            let which = match default {
                Some(path) => format!("the root certificate file `{}` does not exist", path.display()),
                None => "no home folder is set (HOME), so libpq's root certificate file ~/.postgresql/root.crt cannot be found".to_owned(),
            };
            return Err(StoreError::Backend(format!(
                "sslmode={mode} checks the server's certificate against a CA you trust, and {which}: name the PEM file of the CA that signed the server's certificate with sslrootcert=PATH in the URL (or PgOptions::ssl_root_cert, or PGSSLROOTCERT), trust the platform's roots with sslrootcert=system (for a publicly signed server; implies verify-full), or use sslmode=require to encrypt without verifying the server"
            )));
        }
    };
    let client = client_cert(params, given)?;
    Ok(Tls {
        mode,
        roots,
        check,
        client,
    })
}

/// The roots as libpq finds them: `sslrootcert` in the string (empty counts as not given, as
/// in libpq), else given (`PgOptions`, `PGSSLROOTCERT`), else `~/.postgresql/root.crt` when it
/// exists; `system` names the platform's roots.
fn roots(params: &Params, given: Given<'_>) -> Roots {
    let named = params
        .get("sslrootcert")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            given
                .root_cert
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_owned)
        });
    match named {
        Some(path) if path.as_os_str() == "system" => Roots::System,
        Some(path) => Roots::File { path, named: true },
        None => {
            let default = given.home.map(|h| h.join(".postgresql").join("root.crt"));
            match default {
                // libpq takes the file when `stat` finds it (a folder too, which then fails
                // to load, as here).
                Some(path) if path.exists() => Roots::File { path, named: false },
                other => Roots::Missing(other),
            }
        }
    }
}

/// The client certificate and key, as libpq finds them: `sslcert`/`sslkey` in the string, else
/// given (`PgOptions`, `PGSSLCERT`/`PGSSLKEY`), else `~/.postgresql/postgresql.crt` and
/// `postgresql.key` when that certificate exists. A certificate named explicitly must exist
/// (libpq would go on without it: a refused connection then says less than this error).
fn client_cert(params: &Params, given: Given<'_>) -> Result<Option<ClientCert>, StoreError> {
    let default_dir = given.home.map(|h| h.join(".postgresql"));
    let named = params.get("sslcert").filter(|p| !p.is_empty()).map(PathBuf::from);
    let named = named.or_else(|| given.cert.map(Path::to_owned));
    let cert = match named {
        Some(path) => {
            if !path.exists() {
                return Err(StoreError::Backend(format!(
                    "the client certificate file sslcert=`{}` does not exist: give the path of a PEM file of this client's certificate, or leave sslcert out",
                    path.display()
                )));
            }
            path
        }
        None => match default_dir.as_ref().map(|d| d.join("postgresql.crt")) {
            Some(path) if path.exists() => path,
            _ => return Ok(None),
        },
    };
    let key = params
        .get("sslkey")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| given.key.map(Path::to_owned))
        .or_else(|| default_dir.map(|d| d.join("postgresql.key")))
        .ok_or_else(|| {
            StoreError::Backend(format!(
                "the client certificate sslcert=`{}` has no key: give sslkey=PATH (a PEM file of its private key)",
                cert.display()
            ))
        })?;
    Ok(Some(ClientCert { cert, key }))
}

/// `url` without the parameters this crate reads itself ([`TAKEN`]), and those parameters.
pub(super) fn split_params(url: &str) -> Result<(String, Params), StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url)
    } else {
        split_key_value(url)
    }
}

type Split = (String, Params);

fn split_url(url: &str) -> Result<Split, StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Params::default()));
    };
    let mut params = Params::default();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !params.take(&percent_decode(key)?, percent_decode(value)?) {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, params))
}

fn percent_decode(s: &str) -> Result<String, StoreError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = hex else {
                return Err(StoreError::Backend(format!(
                    "invalid percent-encoding in the PostgreSQL URL parameter `{s}`: write `%` as `%25`"
                )));
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| {
        StoreError::Backend(format!(
            "the PostgreSQL URL parameter `{s}` does not decode to UTF-8 text"
        ))
    })
}

/// The key-value form (`host=db user=app sslmode=verify-full`), with libpq's quoting
/// (`key='a value'`, `\'` and `\\` inside).
fn split_key_value(s: &str) -> Result<Split, StoreError> {
    let invalid = |what: &str| {
        StoreError::Backend(format!(
            "invalid PostgreSQL connection string ({what}): expected postgres://user:password@host:port/database or `key=value` pairs"
        ))
    };
    let mut params = Params::default();
    let mut kept: Vec<&str> = Vec::new();
    let mut chars = s.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else { break };
        let mut key_end = start;
        while let Some((i, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key_end = i + c.len_utf8();
        }
        let key = &s[start..key_end];
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(invalid(&format!("`{key}` has no `=value`")));
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        let mut closed = !quoted;
        while let Some(&(_, c)) = chars.peek() {
            if !quoted && c.is_whitespace() {
                break;
            }
            chars.next();
            match c {
                '\\' => match chars.next() {
                    Some((_, escaped)) => value.push(escaped),
                    None => return Err(invalid("a trailing `\\`")),
                },
                '\'' if quoted => {
                    closed = true;
                    break;
                }
                c => value.push(c),
            }
        }
        if !closed {
            return Err(invalid(&format!("the value of `{key}` has no closing quote")));
        }
        let end = chars.peek().map_or(s.len(), |&(i, _)| i);
        if !params.take(key, value) {
            kept.push(&s[start..end]);
        }
    }
    Ok((kept.join(" "), params))
}

impl Tls {
    /// The mode to give tokio-postgres: whether to ask for TLS, and whether to insist.
    pub(super) fn tokio_mode(&self) -> tokio_postgres::config::SslMode {
        match self.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => tokio_postgres::config::SslMode::Require,
        }
    }

    /// The rustls connector of these settings (roots are read here, once per store).
    pub(super) fn connector(&self) -> Result<MakeRustlsConnect, StoreError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Backend(format!("cannot set up TLS: {e}")))?;
        let verifier: Arc<dyn ServerCertVerifier> = match self.check {
            Check::Nothing => Arc::new(Unverified(provider)),
            Check::Chain | Check::ChainAndName => {
                let roots = Arc::new(self.root_store()?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| StoreError::Backend(format!("cannot set up TLS certificate verification: {e}")))?;
                if self.check == Check::ChainAndName {
                    webpki
                } else {
                    Arc::new(ChainOnly(webpki))
                }
            }
        };
        let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
        let mut config = match &self.client {
            None => builder.with_no_client_auth(),
            Some(client) => {
                let (certs, key) = client.read()?;
                builder.with_client_auth_cert(certs, key).map_err(|e| {
                    StoreError::Backend(format!(
                        "the client certificate sslcert=`{}` and key sslkey=`{}` cannot be used together: {e}; give the key of that certificate",
                        client.cert.display(),
                        client.key.display()
                    ))
                })?
            }
        };
        // As libpq 17 does: required by servers that take TLS directly (sslnegotiation=direct),
        // ignored by older servers.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(MakeRustlsConnect::new(config))
    }

    fn root_store(&self) -> Result<RootCertStore, StoreError> {
        let mut store = RootCertStore::empty();
        match &self.roots {
            Roots::File { path, .. } => {
                let shown = self.root_file_shown(path);
                let certs = CertificateDer::pem_file_iter(path)
                    .map_err(|e| {
                        StoreError::Backend(format!(
                            "cannot read the root certificate file {shown}: {e}; give the path of a PEM file holding the server's CA certificate"
                        ))
                    })?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        StoreError::Backend(format!(
                            "the root certificate file {shown} is not valid PEM: {e}; give a PEM file (-----BEGIN CERTIFICATE-----)"
                        ))
                    })?;
                if certs.is_empty() {
                    return Err(StoreError::Backend(format!(
                        "the root certificate file {shown} holds no certificate: give a PEM file with at least one -----BEGIN CERTIFICATE----- block"
                    )));
                }
                for cert in certs {
                    store.add(cert).map_err(|e| {
                        StoreError::Backend(format!(
                            "a certificate in the root certificate file {shown} cannot be used as a root: {e}"
                        ))
                    })?;
                }
            }
            // `resolve` checks nothing without roots; this is for a `Tls` built otherwise.
            Roots::Missing(_) => {
                return Err(StoreError::Backend(format!(
                    "sslmode={} checks the server's certificate, and no root certificate file was found: name one with sslrootcert=PATH",
                    self.mode
                )));
            }
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                store.add_parsable_certificates(found.certs);
                if store.is_empty() {
                    let why = found.errors.first().map(|e| format!(" ({e})")).unwrap_or_default();
                    return Err(StoreError::Backend(format!(
                        "sslrootcert=system trusts the platform's root certificates, and none were found on this machine{why}: install the system's CA certificates (e.g. the ca-certificates package), or name the PEM file of the server's CA with sslrootcert=PATH in the URL (or PgOptions::ssl_root_cert in code)"
                    )));
                }
            }
        }
        Ok(store)
    }

    /// The roots, for messages.
    fn roots_shown(&self) -> String {
        match &self.roots {
            Roots::File { path, .. } => format!("the CA certificates in {}", self.root_file_shown(path)),
            Roots::System => "the platform's trusted roots (sslrootcert=system)".to_owned(),
            Roots::Missing(_) => "no root certificate".to_owned(),
        }
    }

    /// The root file, for messages: how it was found.
    fn root_file_shown(&self, path: &Path) -> String {
        match self.roots {
            Roots::File { named: false, .. } => format!("`{}` (libpq's default root file)", path.display()),
            _ => format!("sslrootcert=`{}`", path.display()),
        }
    }

    /// A message saying what went wrong and what to do, if `err` (from connecting) is a TLS
    /// problem.
    pub(super) fn explain(&self, err: &(dyn StdError + 'static)) -> Option<String> {
        let mut next: Option<&(dyn StdError + 'static)> = Some(err);
        while let Some(e) = next {
            let tls = e.downcast_ref::<rustls::Error>().or_else(|| {
                e.downcast_ref::<std::io::Error>()
                    .and_then(|io| io.get_ref())
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            });
            if let Some(tls) = tls {
                return Some(self.explain_rustls(tls));
            }
            if e.to_string() == "server does not support TLS" {
                return Some(format!(
                    "the server does not offer TLS but sslmode={}: turn on `ssl` in the server's postgresql.conf, or connect with sslmode=prefer or sslmode=disable on a network you trust",
                    self.mode
                ));
            }
            if let Some(db) = e.downcast_ref::<tokio_postgres::error::DbError>()
                && db.message().contains("no encryption")
            {
                return Some(format!(
                    "the server refuses connections without TLS (sslmode={}): {}: {}; connect with sslmode=require, verify-ca or verify-full",
                    self.mode,
                    db.severity(),
                    db.message()
                ));
            }
            next = e.source();
        }
        None
    }

    fn explain_rustls(&self, err: &rustls::Error) -> String {
        let mode = match (self.mode, self.check) {
            (SslMode::Prefer | SslMode::Require, Check::Chain) => {
                format!(
                    "{} with a root certificate, which checks the chain as verify-ca does",
                    self.mode
                )
            }
            (mode, _) => mode.to_string(),
        };
        let trust = match &self.roots {
            Roots::File { path, named: false } => format!(
                "put the PEM file of the CA that signed the server's certificate at `{}`, or name it with sslrootcert=PATH in the URL (or PgOptions::ssl_root_cert in code)",
                path.display()
            ),
            Roots::System => "the platform does not trust the server's CA: name its PEM file with sslrootcert=PATH in the URL (or PgOptions::ssl_root_cert in code)".to_owned(),
            _ => "pass sslrootcert=PATH (a PEM file of the CA that signed the server's certificate) in the URL (or PgOptions::ssl_root_cert in code)".to_owned(),
        };
        let unverified = match (&self.roots, self.mode) {
            (Roots::File { named: true, .. }, SslMode::Prefer | SslMode::Require) => {
                "or leave out the root certificate to encrypt without verifying the server".to_owned()
            }
            (Roots::File { path, named: false }, SslMode::Prefer | SslMode::Require) => format!(
                "or move `{}` away to encrypt without verifying the server (as libpq, sslmode={} checks the chain against it when it exists)",
                path.display(),
                self.mode
            ),
            _ => {
                "or sslmode=require (with no root certificate file) to encrypt without verifying the server".to_owned()
            }
        };
        let roots = self.roots_shown();
        match err {
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => format!(
                "the server's TLS certificate does not name the host connected to (sslmode={mode}): {err}; connect with a host name the certificate names, or use sslmode=verify-ca to check only that it chains to a trusted root"
            ),
            rustls::Error::InvalidCertificate(
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. },
            ) => format!(
                "the server's TLS certificate is expired or not yet valid (sslmode={mode}): {err}; renew the server's certificate, or check this machine's clock"
            ),
            rustls::Error::InvalidCertificate(_) => format!(
                "the server's TLS certificate is not trusted (sslmode={mode}, trusting {roots}): {err}; {trust}, {unverified}"
            ),
            _ => format!(
                "the TLS handshake with the server failed (sslmode={mode}): {err}; check that the server's TLS setup is valid, or connect with sslmode=disable on a network you trust"
            ),
        }
    }
}

impl ClientCert {
    /// The certificate chain and the key, read from their files. As libpq, a key file that
    /// the group or others may read is refused (0600, or 0640 when owned by root).
    fn read(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), StoreError> {
        let cert = self.cert.display();
        let certs = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                StoreError::Backend(format!(
                    "cannot read the client certificate file sslcert=`{cert}`: {e}; give a PEM file (-----BEGIN CERTIFICATE-----)"
                ))
            })?;
        if certs.is_empty() {
            return Err(StoreError::Backend(format!(
                "the client certificate file sslcert=`{cert}` holds no certificate: give a PEM file with a -----BEGIN CERTIFICATE----- block"
            )));
        }
        let shown = self.key.display();
        #[cfg(unix)]
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let meta = std::fs::metadata(&self.key).map_err(|e| {
                StoreError::Backend(format!(
                    "cannot read the client key file sslkey=`{shown}`: {e}; give the path of the PEM file of the private key of sslcert=`{cert}`"
                ))
            })?;
            let mode = meta.permissions().mode();
            let allowed = if meta.uid() == 0 { 0o037 } else { 0o077 };
            if mode & allowed != 0 {
                return Err(StoreError::Backend(format!(
                    "the client key file sslkey=`{shown}` has group or world access (mode {:o}), which libpq refuses too: chmod 0600 it (or 0640 when it is owned by root)",
                    mode & 0o777
                )));
            }
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| {
            StoreError::Backend(format!(
                "cannot read the client key file sslkey=`{shown}`: {e}; give a PEM file of an unencrypted private key (PKCS#8, PKCS#1 or SEC1)"
            ))
        })?;
        Ok((certs, key))
    }
}

/// `verify-ca`: the chain is checked, the host name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain is checked before the name: a name error means the chain was good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` / `require`: any certificate is accepted (as libpq does); the handshake's own
/// signatures are still checked, so the session key is the server's.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, Option<String>, Option<String>) {
        let (rest, params) = split_params(url).unwrap();
        let get = |k: &str| params.get(k).map(str::to_owned);
        (rest, get("sslmode"), get("sslrootcert"))
    }

    #[test]
    fn url_parameters_are_taken_out() {
        assert_eq!(
            split("postgres://u@h/db?sslmode=verify-full&application_name=x&sslrootcert=%2Ftmp%2Fca%20x.pem"),
            (
                "postgres://u@h/db?application_name=x".into(),
                Some("verify-full".into()),
                Some("/tmp/ca x.pem".into())
            )
        );
        assert_eq!(
            split("postgresql://u@h/db?sslmode=require"),
            ("postgresql://u@h/db".into(), Some("require".into()), None)
        );
        assert_eq!(split("postgres://u@h/db"), ("postgres://u@h/db".into(), None, None));
        assert!(split_params("postgres://u@h/db?sslrootcert=%zz").is_err());
    }

    #[test]
    fn key_value_parameters_are_taken_out() {
        assert_eq!(
            split("host=h  user=u sslmode = verify-ca sslrootcert='/a b/c\\'s.pem' password='p w'"),
            (
                "host=h user=u password='p w'".into(),
                Some("verify-ca".into()),
                Some("/a b/c's.pem".into())
            )
        );
        assert_eq!(split("host=h"), ("host=h".into(), None, None));
        assert!(split_params("host=h sslmode").is_err());
        assert!(split_params("host='h").is_err());
    }

    /// A home folder of a test's own, with `~/.postgresql/root.crt` or without; removed when
    /// dropped.
    struct Home(PathBuf);

    impl Home {
        fn new(root_crt: bool) -> Home {
            let dir = std::env::temp_dir().join(format!("et-home-{}-{}", std::process::id(), fastrand::u64(..)));
            std::fs::create_dir_all(dir.join(".postgresql")).unwrap();
            if root_crt {
                std::fs::write(dir.join(".postgresql/root.crt"), "").unwrap();
            }
            Home(dir)
        }

        fn root_crt(&self) -> PathBuf {
            self.0.join(".postgresql/root.crt")
        }
    }

    impl Drop for Home {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The mode, roots and check of `url` with `given` settings, or the error's text.
    fn resolved(url: &str, given: Given<'_>) -> Result<(SslMode, Roots, Check), String> {
        let (_, params) = split_params(url).map_err(|e| e.to_string())?;
        resolve(&params, given)
            .map(|t| (t.mode, t.roots, t.check))
            .map_err(|e| e.to_string())
    }

    /// libpq's table (its docs, "SSL Support": `sslmode` and the root file), case by case.
    #[test]
    fn modes_follow_libpq() {
        use Check::*;
        use SslMode::*;
        let (with, without) = (Home::new(true), Home::new(false));
        fn home(h: &Home) -> Given<'_> {
            Given {
                home: Some(&h.0),
                ..Given::default()
            }
        }
        let u = "postgres://u@h/db";
        let default_file = Roots::File {
            path: with.root_crt(),
            named: false,
        };
        let named = |p: &str| Roots::File {
            path: p.into(),
            named: true,
        };
        // No root file anywhere: prefer and require check nothing, the verifying modes fail
        // and name the file libpq looks for.
        assert_eq!(
            resolved(u, home(&without)).unwrap(),
            (Prefer, Roots::Missing(Some(without.root_crt())), Nothing)
        );
        assert_eq!(
            resolved(&format!("{u}?sslmode=require"), home(&without)).unwrap().2,
            Nothing
        );
        for mode in ["verify-ca", "verify-full"] {
            let err = resolved(&format!("{u}?sslmode={mode}"), home(&without)).unwrap_err();
            assert!(
                err.contains(&format!("sslmode={mode}"))
                    && err.contains(&format!("`{}` does not exist", without.root_crt().display()))
                    && err.contains("sslrootcert=system"),
                "{err}"
            );
            let err = resolved(&format!("{u}?sslmode={mode}"), Given::default()).unwrap_err();
            assert!(err.contains("no home folder"), "{err}");
        }
        // ~/.postgresql/root.crt exists: every mode but disable checks the chain against it.
        for (mode, check) in [
            ("disable", Nothing),
            ("prefer", Chain),
            ("require", Chain),
            ("verify-ca", Chain),
            ("verify-full", ChainAndName),
        ] {
            assert_eq!(
                resolved(&format!("{u}?sslmode={mode}"), home(&with)).unwrap(),
                (SslMode::parse(mode).unwrap(), default_file.clone(), check),
                "{mode}"
            );
        }
        // A named file wins over the default one, and is used the same way.
        for (mode, check) in [
            ("prefer", Chain),
            ("require", Chain),
            ("verify-ca", Chain),
            ("verify-full", ChainAndName),
        ] {
            assert_eq!(
                resolved(&format!("{u}?sslmode={mode}&sslrootcert=/ca.pem"), home(&with)).unwrap(),
                (SslMode::parse(mode).unwrap(), named("/ca.pem"), check),
                "{mode}"
            );
        }
        // Given (PgOptions, PGSSLROOTCERT), and an empty sslrootcert counts as not given.
        let given = Given {
            mode: Some(Require),
            root_cert: Some(Path::new("/o.pem")),
            ..home(&with)
        };
        assert_eq!(resolved(u, given).unwrap(), (Require, named("/o.pem"), Chain));
        assert_eq!(
            resolved(&format!("{u}?sslrootcert="), home(&with)).unwrap().1,
            default_file
        );
        // The URL's mode wins over the given one.
        assert_eq!(
            resolved(
                &format!("{u}?sslmode=disable"),
                Given {
                    mode: Some(VerifyFull),
                    ..home(&with)
                }
            )
            .unwrap()
            .2,
            Nothing
        );
        // sslrootcert=system (also given, as PGSSLROOTCERT=system): verify-full by default, and
        // no weaker mode.
        assert_eq!(
            resolved(&format!("{u}?sslrootcert=system"), home(&without)).unwrap(),
            (VerifyFull, Roots::System, ChainAndName)
        );
        let system = Given {
            root_cert: Some(Path::new("system")),
            ..home(&without)
        };
        assert_eq!(resolved(u, system).unwrap(), (VerifyFull, Roots::System, ChainAndName));
        for weak in ["disable", "prefer", "require", "verify-ca"] {
            let err = resolved(&format!("{u}?sslrootcert=system&sslmode={weak}"), home(&with)).unwrap_err();
            assert!(
                err.contains(&format!("sslmode={weak} cannot be used with sslrootcert=system")),
                "{err}"
            );
        }
        let err = resolved(&format!("{u}?sslmode=verify_full"), Given::default()).unwrap_err();
        assert!(err.contains("invalid sslmode `verify_full`"), "{err}");
        for m in ["disable", "prefer", "require", "verify-ca", "verify-full"] {
            assert_eq!(SslMode::parse(m).unwrap().as_str(), m);
        }
    }

    #[test]
    fn a_missing_or_empty_root_file_is_explained() {
        let tls = |mode, check, path: &Path| Tls {
            mode,
            roots: Roots::File {
                path: path.to_owned(),
                named: true,
            },
            check,
            client: None,
        };
        let missing = Path::new("/nonexistent/effect-tool-ca.pem");
        let err = tls(SslMode::VerifyFull, Check::ChainAndName, missing)
            .connector()
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("cannot read the root certificate file sslrootcert=`/nonexistent/effect-tool-ca.pem`")
                && err.contains("PEM"),
            "{err}"
        );
        // A named file that is not there is an error for require too (libpq would go on
        // without checking: a typo would silently turn the check off).
        let err = tls(SslMode::Require, Check::Chain, missing)
            .connector()
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("cannot read the root certificate file"), "{err}");
        let file = std::env::temp_dir().join(format!("et-tls-{}-{}", std::process::id(), fastrand::u64(..)));
        std::fs::write(&file, "not a certificate\n").unwrap();
        let err = tls(SslMode::VerifyCa, Check::Chain, &file)
            .connector()
            .err()
            .unwrap()
            .to_string();
        std::fs::remove_file(&file).unwrap();
        assert!(err.contains("holds no certificate"), "{err}");
        // Without a check no roots are read.
        assert!(tls(SslMode::Require, Check::Nothing, missing).connector().is_ok());
    }

    #[test]
    fn client_certificates_are_found_as_libpq_finds_them() {
        let dir = std::env::temp_dir().join(format!("et-mtls-{}-{}", std::process::id(), fastrand::u64(..)));
        std::fs::create_dir_all(dir.join(".postgresql")).unwrap();
        let cert = |url: &str, given: Given<'_>| {
            let (rest, params) = split_params(url).unwrap();
            assert!(!rest.contains("sslcert") && !rest.contains("sslkey"), "{rest}");
            resolve(&params, given).map(|t| t.client)
        };
        let home = Given {
            home: Some(&dir),
            ..Given::default()
        };
        assert_eq!(cert("host=h", home).unwrap(), None, "no certificate anywhere: none");
        let err = cert("host=h sslcert=/nonexistent/c.crt", home).unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");
        let default = dir.join(".postgresql/postgresql.crt");
        std::fs::write(&default, "").unwrap();
        assert_eq!(
            cert("host=h", home).unwrap(),
            Some(ClientCert {
                cert: default.clone(),
                key: dir.join(".postgresql/postgresql.key")
            }),
            "libpq's default files"
        );
        let named = format!("postgres://u@h/db?sslcert={}&sslkey=%2Fk.pem", default.display());
        assert_eq!(
            cert(
                &named,
                Given {
                    key: Some(Path::new("/given.key")),
                    ..home
                }
            )
            .unwrap(),
            Some(ClientCert {
                cert: default.clone(),
                key: "/k.pem".into()
            }),
            "the string's key wins"
        );
        let given = Given {
            cert: Some(&default),
            key: Some(Path::new("/given.key")),
            ..Given::default()
        };
        assert_eq!(cert("host=h", given).unwrap().unwrap().key, PathBuf::from("/given.key"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
