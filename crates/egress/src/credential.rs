//! Brokered credentials: the proxy adds a header (a token) to the requests a
//! sandboxed command sends to one host, so the command never holds the token.
//!
//! Invariants:
//! * Only a host with a [`Credential`] (and on its port, 443 unless the
//!   credential says otherwise) is terminated: the proxy answers the
//!   command's TLS with a leaf certificate for that host signed by the
//!   workspace's [`Ca`], and talks TLS to the real host itself, verifying it
//!   against the system roots (plus the upstream CAs the proxy was given).
//!   Every other host is a blind tunnel: the proxy never sees its bytes.
//! * The policy decides first: a credential never allows a host the policy
//!   refuses.
//! * The secret lives in the proxy's memory only ([`Secret`] never prints
//!   it). It is set on every request to the host, replacing any value the
//!   command sent for that header, and masked (`*` for every byte) wherever
//!   it appears in what the host answers, so an endpoint that echoes request
//!   headers does not hand it to the command. Compressed response bodies are
//!   not inspected: a host that echoes the token inside a gzip body would
//!   leak it.
//! * A credential is never sent over plain HTTP: a plain-HTTP request to a
//!   credential host is forwarded without it, and its record says so.
//! * The CA's key stays in the directory the host keeps it in (mode 0600,
//!   outside every workspace); the sandbox gets the CA certificate only.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::rules::Target;

/// What went wrong with a credential or the CA, as a sentence that says what
/// to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialError(pub String);

fn err(s: impl Into<String>) -> CredentialError {
    CredentialError(s.into())
}

/// A secret header value. Its `Debug` never shows it.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// A header value: not empty, no control characters (a line break would
    /// smuggle a header).
    pub fn new(value: impl Into<String>) -> Result<Secret, CredentialError> {
        let value = value.into();
        if value.trim().is_empty() {
            return Err(err("the credential value is empty"));
        }
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(err(
                "the credential value contains a control character (a line break?); \
                 a header value must be one line",
            ));
        }
        Ok(Secret(value))
    }

    /// The value of the environment variable `name` (the user's environment,
    /// never a workspace's).
    pub fn from_env(name: &str) -> Result<Secret, CredentialError> {
        match std::env::var(name) {
            Ok(v) => Secret::new(v).map_err(|e| err(format!("${name}: {e}"))),
            Err(_) => Err(err(format!(
                "the environment variable {name} is not set (or not UTF-8): set it in the \
                 environment Capstan runs in, or use a secret file"
            ))),
        }
    }

    /// The contents of a secret file (one trailing line break removed).
    pub fn from_file(path: &Path) -> Result<Secret, CredentialError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            err(format!(
                "cannot read the secret file {}: {e}",
                path.display()
            ))
        })?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        Secret::new(text).map_err(|e| err(format!("{}: {e}", path.display())))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

/// A header the proxy sets on every request to one host.
#[derive(Debug, Clone)]
pub struct Credential {
    /// A host name (lowercase, no trailing dot).
    pub host: String,
    /// The port it applies to (443 unless set).
    pub port: u16,
    /// The header name, as configured.
    pub header: String,
    value: Secret,
}

/// Headers that carry framing or routing: never a credential.
const RESERVED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "expect",
];

impl Credential {
    /// `header: value` on requests to `host` (port 443).
    pub fn new(host: &str, header: &str, value: Secret) -> Result<Credential, CredentialError> {
        let host = match Target::parse(host) {
            Some(Target::Name(n)) => n,
            Some(Target::Ip(_)) => {
                return Err(err(format!(
                    "credential host {host:?} is an IP address; use the host's name (the \
                     certificate the command checks is issued for a name)"
                )));
            }
            None => return Err(err(format!("credential host {host:?} is not a host name"))),
        };
        let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
        if header.is_empty() || !header.bytes().all(token) {
            return Err(err(format!(
                "credential header {header:?} is not a header name (letters, digits, '-')"
            )));
        }
        if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(header)) {
            return Err(err(format!(
                "credential header {header:?} controls HTTP framing or routing; use the header \
                 the service reads the token from (usually Authorization)"
            )));
        }
        Ok(Credential {
            host,
            port: 443,
            header: header.to_owned(),
            value,
        })
    }

    /// Applies to `port` instead of 443.
    pub fn on_port(mut self, port: u16) -> Credential {
        self.port = port;
        self
    }

    pub(crate) fn value(&self) -> &Secret {
        &self.value
    }

    pub(crate) fn matches(&self, host: &str, port: u16) -> bool {
        port == self.port && matches!(Target::parse(host), Some(Target::Name(n)) if n == self.host)
    }
}

/// Reads every certificate of a PEM text (an upstream CA for the proxy to
/// trust, say).
pub fn certs_from_pem(pem: &str) -> Result<Vec<CertificateDer<'static>>, CredentialError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| err(format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(err(
            "no certificate in the PEM text (expected -----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

/// The file names in a CA directory: the CA certificate (PEM).
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA's private key (PEM, mode 0600); never shown to the sandbox.
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// The system trust store plus the CA, written by [`Ca::write_bundle`].
pub const CA_BUNDLE_FILE: &str = "ca-bundle.pem";

/// Where the system's root certificates usually are (Debian, Fedora,
/// openSUSE, Alpine).
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// How long a leaf certificate is valid, and when the proxy issues a new one.
const LEAF_DAYS: i64 = 7;
const LEAF_REISSUE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

type Leaf = (Instant, Arc<rustls::ServerConfig>);

/// A workspace's certificate authority: it signs the leaf certificates the
/// proxy shows the command for credential hosts. Create one per workspace in
/// Capstan's data directory (never in the workspace), and give the sandbox
/// [`Ca::sandbox_env`].
pub struct Ca {
    dir: PathBuf,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    /// One key for every leaf of this process.
    leaf_key: KeyPair,
    leaves: Mutex<HashMap<String, Leaf>>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("dir", &self.dir).finish()
    }
}

/// The CA's parameters, derived from its key alone (so a loaded CA signs
/// with the same issuer name as the one it was created with).
fn ca_params(key: &KeyPair) -> Result<CertificateParams, CredentialError> {
    let mut p = CertificateParams::new(Vec::<String>::new())
        .map_err(|e| err(format!("CA parameters: {e}")))?;
    let id = p.key_identifier(key);
    let short: String = id.iter().take(6).map(|b| format!("{b:02x}")).collect();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, format!("Capstan workspace CA {short}"));
    p.distinguished_name
        .push(DnType::OrganizationName, "Capstan");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(p)
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), CredentialError> {
    let fail = |e: std::io::Error| err(format!("cannot write {}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(fail)?;
    // `mode` applies on creation only: a file that existed gets it too.
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail)?;
    f.write_all(data).map_err(fail)?;
    f.sync_all().map_err(fail)
}

impl Ca {
    /// Creates a new CA in `dir` (made with mode 0700 if missing): the key in
    /// `ca-key.pem` (0600), the certificate in `ca.pem`. Refuses to replace
    /// an existing key (use [`Ca::open_or_create`]).
    pub fn create(dir: &Path) -> Result<Ca, CredentialError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                err(format!(
                    "cannot create the CA directory {}: {e}",
                    dir.display()
                ))
            })?;
        let key_path = dir.join(CA_KEY_FILE);
        if key_path.exists() {
            return Err(err(format!(
                "{} already exists: load that CA (Ca::load) or remove the directory to make a new \
                 one (the sandbox must then be given the new certificate)",
                key_path.display()
            )));
        }
        let key = KeyPair::generate().map_err(|e| err(format!("cannot generate a key: {e}")))?;
        let mut params = ca_params(&key)?;
        params.not_before = now() - time::Duration::days(1);
        params.not_after = now() + time::Duration::days(3650);
        let cert = params
            .self_signed(&key)
            .map_err(|e| err(format!("cannot sign the CA certificate: {e}")))?;
        write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
        write_file(&dir.join(CA_CERT_FILE), cert.pem().as_bytes(), 0o644)?;
        Self::from_parts(dir, key, cert.pem())
    }

    /// Loads the CA that [`Ca::create`] wrote into `dir`.
    pub fn load(dir: &Path) -> Result<Ca, CredentialError> {
        let key_path = dir.join(CA_KEY_FILE);
        let meta = std::fs::metadata(&key_path).map_err(|e| {
            err(format!(
                "cannot read the CA key {}: {e}",
                key_path.display()
            ))
        })?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(err(format!(
                "the CA key {} is readable by others (mode {:o}); run chmod 600 on it",
                key_path.display(),
                meta.permissions().mode() & 0o777
            )));
        }
        let key_pem = std::fs::read_to_string(&key_path).map_err(|e| {
            err(format!(
                "cannot read the CA key {}: {e}",
                key_path.display()
            ))
        })?;
        let key = KeyPair::from_pem(&key_pem)
            .map_err(|e| err(format!("{} is not a key: {e}", key_path.display())))?;
        let cert_path = dir.join(CA_CERT_FILE);
        let cert_pem = std::fs::read_to_string(&cert_path).map_err(|e| {
            err(format!(
                "cannot read the CA certificate {}: {e}",
                cert_path.display()
            ))
        })?;
        Self::from_parts(dir, key, cert_pem)
    }

    /// Loads the CA in `dir`, or creates it there when there is none.
    pub fn open_or_create(dir: &Path) -> Result<Ca, CredentialError> {
        if dir.join(CA_KEY_FILE).exists() {
            Self::load(dir)
        } else {
            Self::create(dir)
        }
    }

    fn from_parts(dir: &Path, key: KeyPair, cert_pem: String) -> Result<Ca, CredentialError> {
        let cert_der = certs_from_pem(&cert_pem)
            .map_err(|e| err(format!("{}: {e}", dir.join(CA_CERT_FILE).display())))?
            .remove(0);
        // The certificate must carry this key (a key and a certificate of two
        // different CAs would sign leaves nobody trusts).
        let public = key.public_key_raw();
        if !cert_der.windows(public.len()).any(|w| w == public) {
            return Err(err(format!(
                "{} and {} do not belong together; remove the directory to make a new CA",
                dir.join(CA_CERT_FILE).display(),
                dir.join(CA_KEY_FILE).display()
            )));
        }
        let params = ca_params(&key)?;
        let leaf_key =
            KeyPair::generate().map_err(|e| err(format!("cannot generate a key: {e}")))?;
        Ok(Ca {
            dir: dir.to_owned(),
            cert_pem,
            cert_der,
            issuer: Issuer::new(params, key),
            leaf_key,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The directory the CA lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM), the one file the sandbox may see.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CA_CERT_FILE)
    }

    /// The CA certificate as PEM text (the content of [`CA_CERT_FILE`]).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes `ca-bundle.pem`: the system's root certificates (the first of
    /// [`SYSTEM_BUNDLES`] that exists, or `system` when given) followed by
    /// this CA. `SSL_CERT_FILE` replaces OpenSSL's whole trust store, so the
    /// sandbox needs both. Returns its path.
    pub fn write_bundle(&self, system: Option<&Path>) -> Result<PathBuf, CredentialError> {
        let system = match system {
            Some(p) => Some(p.to_owned()),
            None => SYSTEM_BUNDLES
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file()),
        };
        let mut text = match &system {
            Some(p) => std::fs::read_to_string(p).map_err(|e| {
                err(format!(
                    "cannot read the system certificates {}: {e}",
                    p.display()
                ))
            })?,
            None => {
                tracing::warn!(target: "capstan_egress", "no system certificate bundle found: the sandbox trusts the Capstan CA only");
                String::new()
            }
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("# Capstan workspace CA (credential brokering)\n");
        text.push_str(&self.cert_pem);
        let path = self.dir.join(CA_BUNDLE_FILE);
        write_file(&path, text.as_bytes(), 0o644)?;
        Ok(path)
    }

    /// The environment variables that make the usual tools trust this CA:
    /// the bundle ([`Ca::write_bundle`]) for the variables that replace the
    /// trust store, the CA alone for Node's, which adds to its own.
    pub fn sandbox_env(&self, bundle: &Path) -> Vec<(&'static str, PathBuf)> {
        let b = bundle.to_owned();
        vec![
            ("SSL_CERT_FILE", b.clone()),
            ("REQUESTS_CA_BUNDLE", b.clone()),
            ("CURL_CA_BUNDLE", b.clone()),
            ("GIT_SSL_CAINFO", b.clone()),
            ("CARGO_HTTP_CAINFO", b),
            ("NODE_EXTRA_CA_CERTS", self.cert_path()),
        ]
    }

    /// The TLS server configuration for `host`: a leaf certificate for it,
    /// issued once and reused for a day.
    pub(crate) fn server_config(
        &self,
        host: &str,
    ) -> Result<Arc<rustls::ServerConfig>, CredentialError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, cfg)) = leaves.get(host)
            && at.elapsed() < LEAF_REISSUE
        {
            return Ok(cfg.clone());
        }
        let mut p = CertificateParams::new(vec![host.to_owned()])
            .map_err(|e| err(format!("{host:?} cannot be a certificate name: {e}")))?;
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, host);
        p.not_before = now() - time::Duration::hours(1);
        p.not_after = now() + time::Duration::days(LEAF_DAYS);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.use_authority_key_identifier_extension = true;
        let leaf = p
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(|e| err(format!("cannot issue a certificate for {host}: {e}")))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| err(format!("TLS configuration: {e}")))?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), self.cert_der.clone()], key)
            .map_err(|e| err(format!("TLS configuration for {host}: {e}")))?;
        // The proxy reads HTTP/1.1 inside: never let the command pick h2.
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let cfg = Arc::new(cfg);
        leaves.insert(host.to_owned(), (Instant::now(), cfg.clone()));
        Ok(cfg)
    }
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The TLS client configuration for credential hosts: the system's roots
/// plus `extra`.
pub(crate) fn client_config(
    extra: &[CertificateDer<'static>],
) -> Result<Arc<rustls::ClientConfig>, CredentialError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    if !native.errors.is_empty() {
        tracing::warn!(target: "capstan_egress", errors = ?native.errors, "some system root certificates could not be loaded");
    }
    roots.add_parsable_certificates(native.certs);
    for c in extra {
        roots
            .add(c.clone())
            .map_err(|e| err(format!("an upstream CA certificate is not usable: {e}")))?;
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| err(format!("TLS configuration: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_key_is_private_and_a_loaded_ca_matches() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        let ca = Ca::create(&ca_dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&ca_dir.join(CA_KEY_FILE)), 0o600);
        assert_eq!(mode(&ca_dir), 0o700);
        assert!(Ca::create(&ca_dir).is_err(), "never replaces a key");
        let again = Ca::load(&ca_dir).unwrap();
        assert_eq!(again.cert_pem(), ca.cert_pem());
        assert!(again.server_config("api.example").is_ok());
        // A key others can read is refused with the fix.
        std::fs::set_permissions(
            ca_dir.join(CA_KEY_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let e = Ca::load(&ca_dir).unwrap_err();
        assert!(e.0.contains("chmod 600"), "{e}");
        // A certificate of another CA does not pass for this key's.
        std::fs::set_permissions(
            ca_dir.join(CA_KEY_FILE),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let other = Ca::create(&dir.path().join("other")).unwrap();
        std::fs::write(ca_dir.join(CA_CERT_FILE), other.cert_pem()).unwrap();
        assert!(Ca::load(&ca_dir).is_err());
    }

    #[test]
    fn the_bundle_holds_the_system_roots_and_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::create(dir.path()).unwrap();
        let system = dir.path().join("system.pem");
        std::fs::write(&system, "SYSTEM ROOTS").unwrap();
        let bundle = ca.write_bundle(Some(&system)).unwrap();
        let text = std::fs::read_to_string(&bundle).unwrap();
        assert!(text.starts_with("SYSTEM ROOTS\n"));
        assert!(text.ends_with(ca.cert_pem()));
        let env = ca.sandbox_env(&bundle);
        assert!(env.contains(&("SSL_CERT_FILE", bundle.clone())));
        assert!(env.contains(&("NODE_EXTRA_CA_CERTS", ca.cert_path())));
        assert_eq!(env.len(), 6);
    }

    #[test]
    fn credentials_refuse_bad_hosts_headers_and_values() {
        let s = || Secret::new("t0ken").unwrap();
        assert!(Credential::new("10.0.0.1", "Authorization", s()).is_err());
        assert!(Credential::new("API.GitHub.com.", "Authorization", s()).is_ok());
        assert!(Credential::new("api.github.com", "Bad Header", s()).is_err());
        assert!(Credential::new("api.github.com", "Content-Length", s()).is_err());
        assert!(Secret::new("a\r\nX-Evil: 1").is_err());
        assert!(Secret::new("  ").is_err());
        assert_eq!(format!("{:?}", s()), "Secret(<redacted>)");
        let c = Credential::new("API.GitHub.com.", "Authorization", s()).unwrap();
        assert!(c.matches("api.github.com", 443));
        assert!(!c.matches("api.github.com", 8443));
        assert!(!c.matches("github.com", 443));
    }
}
