//! TLS to PostgreSQL: a real cluster (Debian's `postgresql`, started by the
//! test) that accepts TCP clients only over TLS, with a certificate signed
//! by a CA the test makes. The store connects with `sslmode=require` and
//! that CA, is refused in plain, and refuses a server its CA did not sign.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use capstan_store::Store;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use common::pg::Cluster;

/// A CA: its PEM and the issuer to sign with.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

/// Writes `text` to `path`, readable by the server's user only.
fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    chown_to_server(path);
}

/// PostgreSQL runs as `postgres` when the tests run as root, and refuses a
/// key file it does not own.
fn chown_to_server(path: &Path) {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if root {
        let ok = std::process::Command::new("chown")
            .arg("postgres:postgres")
            .arg(path)
            .status()
            .unwrap()
            .success();
        assert!(ok, "chown postgres {}", path.display());
    }
}

#[test]
fn the_store_reaches_a_tls_only_server_over_verified_tls_and_never_in_plain() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (ca_pem, issuer) = ca("capstan test PostgreSQL CA");
    let (other_pem, _) = ca("someone else's CA");
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let p = |name: &str| dir.path().join(name);
    write_private(&p("server.crt"), &cert.pem());
    write_private(&p("server.key"), &key.serialize_pem());
    std::fs::write(p("ca.pem"), &ca_pem).unwrap();
    std::fs::write(p("other-ca.pem"), &other_pem).unwrap();
    // TCP clients only over TLS; the test's own tools use the Unix socket.
    let hba = "local all all trust\n\
               hostssl all all 127.0.0.1/32 trust\n\
               hostnossl all all 127.0.0.1/32 reject\n";
    write_private(&p("hba.conf"), hba);
    let arg = |k: &str, v: &Path| format!("{k}={}", v.display());
    let cluster = Cluster::start(&[
        "-c",
        "fsync=off",
        "-c",
        "ssl=on",
        "-c",
        &arg("ssl_cert_file", &p("server.crt")),
        "-c",
        &arg("ssl_key_file", &p("server.key")),
        "-c",
        &arg("hba_file", &p("hba.conf")),
    ]);
    let url = cluster.fresh_database();

    // Verified TLS with the server's CA: a working store.
    let tls = format!(
        "{url}?sslmode=require&sslrootcert={}",
        p("ca.pem").display()
    );
    let store = Store::open_url(&tls).unwrap();
    let s = store.create_session("over TLS", None).unwrap();
    assert_eq!(store.get_session(&s.id).unwrap().unwrap().title, "over TLS");
    drop(store);

    // Plain TCP: the server turns it away (the store does not fall back).
    let plain = Store::open_url(&url).unwrap_err().to_string();
    assert!(plain.contains("pg_hba.conf"), "{plain}");

    // A CA that did not sign the server's certificate: refused, with advice.
    let wrong = format!(
        "{url}?sslmode=require&sslrootcert={}",
        p("other-ca.pem").display()
    );
    let err = Store::open_url(&wrong).unwrap_err().to_string();
    assert!(
        err.contains("certificate") && err.contains("sslrootcert"),
        "{err}"
    );

    // Without sslrootcert the system's roots are used, and they do not know
    // this test's CA either.
    let err = Store::open_url(&format!("{url}?sslmode=require"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("certificate"), "{err}");

    // Mistakes in the URL are named.
    let err = Store::open_url(&format!("{url}?sslrootcert={}", p("ca.pem").display()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sslmode=require"), "{err}");
    let err = Store::open_url(&format!(
        "{url}?sslmode=require&sslrootcert={}",
        p("missing.pem").display()
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("missing.pem"), "{err}");
}
