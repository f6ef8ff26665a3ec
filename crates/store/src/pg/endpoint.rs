//! Where the PostgreSQL store connects, and how: plain TCP or a Unix socket,
//! or TLS when the URL says `sslmode=require`.
//!
//! TLS here always verifies: the server's certificate must chain to a
//! trusted root and name the host in the URL. That is stricter than libpq,
//! whose `require` encrypts without checking whom it talks to; a store that
//! holds approvals and workspaces must not accept a man in the middle. The
//! roots are the system's (`rustls-native-certs`), or the CA file the URL
//! names with `sslrootcert=PATH` (a self-signed server's CA). `sslmode=prefer`
//! (tokio-postgres' default) and `disable` connect without TLS, as before.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::config::SslMode;
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::describe;
use crate::error::{Result, StoreError};
use crate::notify::Notifier;

/// A parsed store URL and the TLS it asks for.
#[derive(Clone)]
pub(crate) struct Endpoint {
    config: Config,
    tls: Option<MakeRustlsConnect>,
}

impl Endpoint {
    /// Parses `url`; `shown` is the URL without its password, for errors.
    pub(crate) fn parse(url: &str, shown: &str) -> Result<Endpoint> {
        let (url, root) = take_sslrootcert(url);
        let config: Config = url.parse().map_err(|e: tokio_postgres::Error| {
            StoreError::InvalidArgument(format!(
                "cannot read the PostgreSQL URL {shown}: {}; expected \
                 postgres://user:password@host:port/database[?sslmode=require\
                 &sslrootcert=/path/to/ca.pem]",
                describe(&e)
            ))
        })?;
        let tls = match config.get_ssl_mode() {
            SslMode::Require => Some(verifying(root.as_deref(), shown)?),
            _ if root.is_some() => {
                return Err(StoreError::InvalidArgument(format!(
                    "the PostgreSQL URL {shown} names sslrootcert but not sslmode=require: add \
                     sslmode=require to connect over TLS verified against that CA"
                )));
            }
            _ => None,
        };
        Ok(Endpoint { config, tls })
    }

    /// Connects. The connection's I/O runs as a task on the current
    /// runtime, which bumps `notifier` (when given) on every notification;
    /// the returned handle finishes when the connection ends.
    pub(crate) async fn connect(
        &self,
        notifier: Option<Arc<Notifier>>,
    ) -> std::result::Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
        match &self.tls {
            None => {
                let (client, connection) = self.config.connect(NoTls).await?;
                Ok((client, drive(connection, notifier)))
            }
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                Ok((client, drive(connection, notifier)))
            }
        }
    }
}

/// Runs a connection's I/O until it ends, bumping `notifier` on
/// notifications.
fn drive<S, T>(
    mut connection: Connection<S, T>,
    notifier: Option<Arc<Notifier>>,
) -> tokio::task::JoinHandle<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => {
                    if let Some(n) = &notifier {
                        n.bump();
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    })
}

/// Removes `sslrootcert=...` from a URL's query (tokio-postgres does not know
/// the key) and returns it.
fn take_sslrootcert(url: &str) -> (String, Option<PathBuf>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut root = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("sslrootcert=") {
            Some(path) => {
                root = Some(PathBuf::from(percent_decode(path)));
                false
            }
            None => true,
        })
        .collect();
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, root)
}

/// `%XX` escapes of a URL query value (a path may hold spaces).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A connector that verifies the server against `root` (a PEM file of CA
/// certificates) or, without one, the system's roots.
fn verifying(root: Option<&Path>, shown: &str) -> Result<MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    match root {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| {
                    StoreError::InvalidArgument(format!(
                        "cannot read sslrootcert {} of the PostgreSQL URL {shown}: {e}; give a \
                         PEM file holding the CA certificate that signed the server's",
                        path.display()
                    ))
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(StoreError::InvalidArgument(format!(
                    "sslrootcert {} of the PostgreSQL URL {shown} holds no usable CA \
                     certificate; give the PEM file of the CA that signed the server's",
                    path.display()
                )));
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                return Err(StoreError::InvalidArgument(format!(
                    "the PostgreSQL URL {shown} asks for TLS but this system has no trusted \
                     CA certificates to verify the server with; add \
                     sslrootcert=/path/to/ca.pem to the URL"
                )));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::InvalidArgument(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslrootcert_is_taken_off_the_url() {
        let (url, root) =
            take_sslrootcert("postgres://u@h/db?sslmode=require&sslrootcert=/a%20b/ca.pem");
        assert_eq!(url, "postgres://u@h/db?sslmode=require");
        assert_eq!(root, Some(PathBuf::from("/a b/ca.pem")));
        let (url, root) = take_sslrootcert("postgres://u@h/db?sslrootcert=/ca.pem");
        assert_eq!((url.as_str(), root.is_some()), ("postgres://u@h/db", true));
        let (url, root) = take_sslrootcert("postgres://u@h/db");
        assert_eq!((url.as_str(), root), ("postgres://u@h/db", None));
    }
}
