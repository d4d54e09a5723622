//! TLS for the PostgreSQL journal: libpq's `sslmode` and `sslrootcert` on rustls (with the
//! `ring` provider, so nothing from the system's OpenSSL is needed to build or run).
//!
//! tokio-postgres understands only `sslmode=disable|prefer|require` and refuses parameters it
//! does not know, so the connection string is read here first: `sslmode` and `sslrootcert` are
//! taken out (in the URL form `postgres://…?sslmode=verify-full&sslrootcert=/ca.pem` and in the
//! key-value form `host=… sslmode=verify-full sslrootcert=/ca.pem`), the rest goes to
//! tokio-postgres unchanged, and the mode is applied through the rustls configuration.

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

use crate::error::StoreError;

/// How a connection to PostgreSQL is secured: libpq's `sslmode`, given in the URL
/// (`?sslmode=verify-full`) or as [`PgOptions::ssl_mode`](super::PgOptions::ssl_mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SslMode {
    /// Plain TCP, never TLS.
    Disable,
    /// TLS if the server offers it, plain TCP if it does not; the certificate is not checked
    /// (libpq's and tokio-postgres's default).
    #[default]
    Prefer,
    /// TLS or no connection; the certificate is not checked, as in libpq (this stops passive
    /// eavesdroppers, not an impostor server). With a root certificate given (`sslrootcert`,
    /// [`PgOptions::ssl_root_cert`](super::PgOptions::ssl_root_cert)) it checks the chain
    /// like [`SslMode::VerifyCa`], as libpq does.
    Require,
    /// TLS, and the server's certificate must chain to a trusted root; the host name is not
    /// checked.
    VerifyCa,
    /// TLS, the certificate must chain to a trusted root and name the host connected to.
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

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the trusted roots of `verify-ca` / `verify-full` come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Roots {
    /// No root named: the platform's trusted roots.
    Platform,
    /// `sslrootcert=system` (libpq 16): the platform's trusted roots, and `verify-full`.
    System,
    /// A PEM file of one or more root certificates.
    File(PathBuf),
}

/// The TLS settings of a journal's connections, from its URL and options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tls {
    /// The mode in force (`require` with a root file is already `verify-ca` here).
    pub mode: SslMode,
    /// The mode asked for, for messages.
    pub asked: SslMode,
    /// The roots of the verifying modes.
    pub roots: Roots,
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
    /// The home folder, for libpq's default client certificate (`~/.postgresql/postgresql.crt`).
    pub home: Option<&'a Path>,
}

/// The TLS settings of a connection string's parameters (taken out by [`split_params`]) and of
/// `given` (the string's win).
pub(super) fn resolve(params: &Params, given: Given<'_>) -> Result<Tls, StoreError> {
    let url_mode = match params.get("sslmode") {
        Some(name) => Some(SslMode::parse(name).ok_or_else(|| {
            StoreError::Backend(format!(
                "invalid sslmode `{name}` in the PostgreSQL URL: use disable, prefer, require, verify-ca or verify-full"
            ))
        })?),
        None => None,
    };
    let roots = match params.get("sslrootcert") {
        Some("") => {
            return Err(StoreError::Backend(
                "empty sslrootcert in the PostgreSQL URL: give the path of a PEM file of the server's CA certificate (or `system`)".into(),
            ));
        }
        Some("system") => Roots::System,
        Some(path) => Roots::File(PathBuf::from(path)),
        None => given.root_cert.map_or(Roots::Platform, |p| Roots::File(p.to_owned())),
    };
    let asked = url_mode.or(given.mode);
    let mode = match (asked, &roots) {
        (None, Roots::System) => SslMode::VerifyFull,
        (Some(weak), Roots::System) if weak != SslMode::VerifyFull => {
            return Err(StoreError::Backend(format!(
                "sslmode={weak} cannot be used with sslrootcert=system (as in libpq): use sslmode=verify-full, or name a CA file in sslrootcert"
            )));
        }
        (Some(SslMode::Require), Roots::File(_)) => SslMode::VerifyCa,
        (mode, _) => mode.unwrap_or_default(),
    };
    let asked = asked.unwrap_or(mode);
    let client = client_cert(params, given)?;
    Ok(Tls {
        mode,
        asked,
        roots,
        client,
    })
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
        let verifier: Arc<dyn ServerCertVerifier> = if self.mode.verifies() {
            let roots = Arc::new(self.root_store()?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| StoreError::Backend(format!("cannot set up TLS certificate verification: {e}")))?;
            if self.mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            }
        } else {
            Arc::new(Unverified(provider))
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
            Roots::File(path) => {
                let shown = path.display();
                let certs = CertificateDer::pem_file_iter(path)
                    .map_err(|e| {
                        StoreError::Backend(format!(
                            "cannot read the root certificate file sslrootcert=`{shown}`: {e}; give the path of a PEM file holding the server's CA certificate"
                        ))
                    })?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        StoreError::Backend(format!(
                            "the root certificate file sslrootcert=`{shown}` is not valid PEM: {e}; give a PEM file (-----BEGIN CERTIFICATE-----)"
                        ))
                    })?;
                if certs.is_empty() {
                    return Err(StoreError::Backend(format!(
                        "the root certificate file sslrootcert=`{shown}` holds no certificate: give a PEM file with at least one -----BEGIN CERTIFICATE----- block"
                    )));
                }
                for cert in certs {
                    store.add(cert).map_err(|e| {
                        StoreError::Backend(format!(
                            "a certificate in sslrootcert=`{shown}` cannot be used as a root: {e}"
                        ))
                    })?;
                }
            }
            Roots::Platform | Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                store.add_parsable_certificates(found.certs);
                if store.is_empty() {
                    let why = found.errors.first().map(|e| format!(" ({e})")).unwrap_or_default();
                    return Err(StoreError::Backend(format!(
                        "sslmode={} needs trusted root certificates, and none were found on this machine{why}: pass sslrootcert=PATH (a PEM file of the server's CA) in the URL (or PgOptions::ssl_root_cert in code), or install the system's CA certificates (e.g. the ca-certificates package)",
                        self.mode
                    )));
                }
            }
        }
        Ok(store)
    }

    fn roots_shown(&self) -> String {
        match &self.roots {
            Roots::File(path) => format!("the CA certificates in sslrootcert=`{}`", path.display()),
            Roots::Platform | Roots::System => "the platform's trusted roots".to_owned(),
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
                    self.asked
                ));
            }
            if let Some(db) = e.downcast_ref::<tokio_postgres::error::DbError>()
                && db.message().contains("no encryption")
            {
                return Some(format!(
                    "the server refuses connections without TLS (sslmode={}): {}: {}; connect with sslmode=require, verify-ca or verify-full",
                    self.asked,
                    db.severity(),
                    db.message()
                ));
            }
            next = e.source();
        }
        None
    }

    fn explain_rustls(&self, err: &rustls::Error) -> String {
        let mode = if self.asked == self.mode {
            self.mode.to_string()
        } else {
            format!(
                "{} with a root certificate, which checks the chain as {} does",
                self.asked, self.mode
            )
        };
        let unverified = if self.asked == SslMode::Require {
            "or leave out the root certificate to encrypt without verifying the server"
        } else {
            "or sslmode=require (without a root certificate) to encrypt without verifying the server"
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
                "the server's TLS certificate is not trusted (sslmode={mode}, trusting {roots}): {err}; pass sslrootcert=PATH (a PEM file of the CA that signed the server's certificate) in the URL (or PgOptions::ssl_root_cert in code), {unverified}"
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

    #[test]
    fn modes_follow_libpq() {
        let mode = |url: &str, opt: Option<SslMode>, root: Option<&Path>| {
            let (_, params) = split_params(url)?;
            let given = Given {
                mode: opt,
                root_cert: root,
                ..Given::default()
            };
            resolve(&params, given)
        };
        let u = "postgres://u@h/db";
        assert_eq!(mode(u, None, None).unwrap().mode, SslMode::Prefer);
        assert_eq!(
            mode(u, Some(SslMode::VerifyFull), None).unwrap().mode,
            SslMode::VerifyFull
        );
        // The URL wins over the options.
        let t = mode(&format!("{u}?sslmode=disable"), Some(SslMode::VerifyFull), None).unwrap();
        assert_eq!(t.mode, SslMode::Disable);
        // require with a root file verifies the chain, as libpq does.
        let t = mode(&format!("{u}?sslmode=require&sslrootcert=/ca.pem"), None, None).unwrap();
        assert_eq!((t.mode, t.roots), (SslMode::VerifyCa, Roots::File("/ca.pem".into())));
        let t = mode(u, Some(SslMode::Require), Some(Path::new("/o.pem"))).unwrap();
        assert_eq!((t.mode, t.roots), (SslMode::VerifyCa, Roots::File("/o.pem".into())));
        let t = mode(&format!("{u}?sslrootcert=system"), None, None).unwrap();
        assert_eq!((t.mode, t.roots), (SslMode::VerifyFull, Roots::System));
        let err = mode(&format!("{u}?sslrootcert=system&sslmode=require"), None, None).unwrap_err();
        assert!(err.to_string().contains("verify-full"), "{err}");
        let err = mode(&format!("{u}?sslmode=verify_full"), None, None).unwrap_err();
        assert!(err.to_string().contains("invalid sslmode `verify_full`"), "{err}");
        for m in ["disable", "prefer", "require", "verify-ca", "verify-full"] {
            assert_eq!(SslMode::parse(m).unwrap().as_str(), m);
        }
    }

    #[test]
    fn a_missing_or_empty_root_file_is_explained() {
        let tls = Tls {
            mode: SslMode::VerifyFull,
            asked: SslMode::VerifyFull,
            roots: Roots::File("/nonexistent/effect-tool-ca.pem".into()),
            client: None,
        };
        let err = tls.connector().err().unwrap().to_string();
        assert!(
            err.contains("cannot read the root certificate file") && err.contains("PEM"),
            "{err}"
        );
        let dir = std::env::temp_dir().join(format!("et-tls-{}-{}", std::process::id(), fastrand::u64(..)));
        std::fs::write(&dir, "not a certificate\n").unwrap();
        let tls = Tls {
            mode: SslMode::VerifyCa,
            asked: SslMode::VerifyCa,
            roots: Roots::File(dir.clone()),
            client: None,
        };
        let err = tls.connector().err().unwrap().to_string();
        std::fs::remove_file(&dir).unwrap();
        assert!(err.contains("holds no certificate"), "{err}");
        // The unverified modes need no roots at all.
        let tls = Tls {
            mode: SslMode::Require,
            asked: SslMode::Require,
            roots: Roots::File("/nonexistent".into()),
            client: None,
        };
        assert!(tls.connector().is_ok());
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
