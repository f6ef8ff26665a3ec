//! Plugins from OCI registries: `capstan plugins publish` pushes a component as a
//! wasm OCI artifact, `capstan plugins add oci://...` pulls one (plugins_manage.rs
//! then adds it like a file), `capstan plugins keygen` and `trust` make and trust
//! the keys that sign them.
//!
//! Layout (the CNCF wasm OCI artifact layout that wkg and Spin use): one layer of
//! media type `application/wasm` holding the component, a config of media type
//! `application/vnd.wasm.config.v0+json` (architecture `wasm`, os `wasip2`, the
//! layer digest, the component's WIT imports and exports).
//!
//! Two signature formats are accepted, each checked against the keys in
//! `trusted-keys` in the user's config dir (never a workspace's):
//! - minisign (Ed25519, the `minisign` tool's format) of the component's bytes,
//!   carried (base64) in the manifest annotation `dev.capstan.plugin.minisign`,
//!   so the manifest digest pins the signature too;
//! - cosign key-pair signatures (ECDSA P-256, cosign.rs), stored as cosign
//!   stores them: an artifact tagged `sha256-<manifest hex>.sig` in the same
//!   repository whose layers are signed simple-signing payloads naming the
//!   manifest digest, so `cosign sign --key` and `cosign verify --key` work on
//!   the same artifacts.
//!
//! `add oci://` checks the bytes against the layer digest (always; there is
//! nothing to allow when a registry serves other bytes than its manifest names)
//! and the signatures. An unsigned component, one signed by a key not trusted,
//! or one whose bytes are not the ones signed is refused unless the person passes
//! `--allow-unverified`. Nothing but the registry is contacted, over TLS unless
//! it is on this machine or the person passes `--plain-http`, anonymously or
//! with the credentials `login_for` finds (environment, then Docker's config).

mod cosign;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Cursor, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use minisign::{KeyPair, PublicKey, SecretKey, SecretKeyBox, SignatureBox};
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::GlobalArgs;
use crate::dirs::Dirs;
use crate::outln;

pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The older wasm-to-oci layer type, still accepted when pulling.
const LEGACY_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The minisign signature of the component's bytes: the text of a `.minisig`
/// file, base64-encoded, since oci-client writes manifests as canonical JSON,
/// which leaves the newlines and tabs of that text raw and registries refuse them.
pub const SIGNATURE_ANNOTATION: &str = "dev.capstan.plugin.minisign";
/// Components bigger than this are not pulled.
const MAX_COMPONENT_BYTES: i64 = 256 << 20;

/// `oci://HOST[:PORT]/REPOSITORY[:TAG|@DIGEST]`, the host always written out: a
/// bare `oci://name` would otherwise mean Docker Hub.
pub fn parse_reference(s: &str) -> Result<Reference> {
    let rest = s
        .strip_prefix("oci://")
        .ok_or_else(|| anyhow!("`{s}`: an OCI reference starts with oci://"))?;
    let reference = rest.parse::<Reference>().map_err(|e| {
        anyhow!("`{s}` is not an OCI reference ({e}); write oci://HOST[:PORT]/NAME:TAG")
    })?;
    let host = rest.split('/').next().unwrap_or_default();
    if !rest.contains('/') || reference.registry() != host {
        bail!("`{s}` names no registry; write oci://HOST[:PORT]/NAME:TAG");
    }
    Ok(reference)
}

/// A registry on this machine (`localhost`, 127.0.0.0/8), where plain HTTP
/// crosses no network.
fn is_loopback(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => registry,
    };
    host == "localhost"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Plain HTTP only for a registry on this machine or when the person asked for
/// it; TLS everywhere else.
fn client_for(reference: &Reference, plain_http: bool) -> Client {
    let registry = reference.resolve_registry().to_string();
    let protocol = if plain_http || is_loopback(&registry) {
        ClientProtocol::HttpsExcept(vec![registry])
    } else {
        ClientProtocol::Https
    };
    Client::new(ClientConfig {
        protocol,
        ..Default::default()
    })
}

/// Credentials for a registry, and where they came from (never the secret
/// itself, which is never printed).
struct Login {
    auth: RegistryAuth,
    from: Option<String>,
}

/// `CAPSTAN_REGISTRY_USER` and `CAPSTAN_REGISTRY_PASSWORD`, else the registry's
/// `auth` entry in Docker's config.json (`$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`; what `docker login` writes when no credential
/// helper is configured), else anonymous.
fn login_for(reference: &Reference) -> Result<Login> {
    let user = std::env::var("CAPSTAN_REGISTRY_USER").ok();
    let password = std::env::var("CAPSTAN_REGISTRY_PASSWORD").ok();
    match (user, password) {
        (Some(u), Some(p)) => {
            return Ok(Login {
                auth: RegistryAuth::Basic(u, p),
                from: Some("CAPSTAN_REGISTRY_USER/CAPSTAN_REGISTRY_PASSWORD".into()),
            });
        }
        (Some(_), None) | (None, Some(_)) => bail!(
            "set both CAPSTAN_REGISTRY_USER and CAPSTAN_REGISTRY_PASSWORD (or neither, to use \
             `docker login`'s credentials or none)"
        ),
        (None, None) => {}
    }
    let file = match std::env::var_os("DOCKER_CONFIG") {
        Some(dir) => PathBuf::from(dir).join("config.json"),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".docker/config.json"),
            None => return Ok(anonymous()),
        },
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(anonymous()),
        Err(e) => bail!("cannot read {}: {e}", file.display()),
    };
    let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        anyhow!(
            "{} is not JSON ({e}); fix it, or set CAPSTAN_REGISTRY_USER and \
             CAPSTAN_REGISTRY_PASSWORD",
            file.display()
        )
    })?;
    let names = [reference.registry(), reference.resolve_registry()];
    let entry = config["auths"].as_object().and_then(|auths| {
        auths.iter().find_map(|(key, value)| {
            let host = key
                .trim_start_matches("https://")
                .trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap_or_default();
            names.contains(&host).then_some(value)
        })
    });
    let Some(encoded) = entry.and_then(|e| e["auth"].as_str()) else {
        return Ok(anonymous());
    };
    let decoded = B64
        .decode(encoded.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    let Some((u, p)) = decoded.as_deref().and_then(|d| d.split_once(':')) else {
        bail!(
            "{}: the `auth` of {} is not base64 of user:password; run `docker login {}` again",
            file.display(),
            reference.registry(),
            reference.registry()
        );
    };
    Ok(Login {
        auth: RegistryAuth::Basic(u.to_string(), p.to_string()),
        from: Some(file.display().to_string()),
    })
}

fn anonymous() -> Login {
    Login {
        auth: RegistryAuth::Anonymous,
        from: None,
    }
}

fn trusted_keys_file(dirs: &Dirs) -> PathBuf {
    dirs.config.join("trusted-keys")
}

/// minisign's key ID: the key number as it prints it (upper-case hex with no
/// leading zeros, so one key in sixteen has 15 digits), so the ID capstan
/// shows is the one in the key's own files.
fn key_id(keynum: &[u8]) -> String {
    let mut n = [0u8; 8];
    let len = keynum.len().min(8);
    n[..len].copy_from_slice(&keynum[..len]);
    format!("{:X}", u64::from_le_bytes(n))
}

/// A key the user can trust: minisign's or cosign's.
#[derive(Clone, PartialEq)]
enum AnyKey {
    Minisign(PublicKey),
    Cosign(p256::PublicKey),
}

impl AnyKey {
    /// How the key is named to people: minisign's key ID, or `cosign:` and a
    /// fingerprint.
    fn id(&self) -> String {
        match self {
            Self::Minisign(k) => key_id(k.keynum()),
            Self::Cosign(k) => cosign::key_id(k),
        }
    }

    /// The key as a trusted-keys line holds it: minisign's base64 key (RW...),
    /// or the base64 SPKI DER of a cosign key (MFkw..., the body of cosign.pub).
    fn to_line(&self) -> String {
        match self {
            Self::Minisign(k) => k.to_base64(),
            Self::Cosign(k) => B64.encode(cosign::spki_der(k)),
        }
    }

    fn from_line(key: &str) -> Option<Self> {
        if let Ok(k) = PublicKey::from_base64(key) {
            return Some(Self::Minisign(k));
        }
        let der = B64.decode(key).ok()?;
        cosign::from_spki_der(&der).ok().map(Self::Cosign)
    }
}

/// A public key file's text or a key itself: a cosign.pub (PEM `PUBLIC KEY`),
/// or a minisign `.pub` file / base64 key. A PEM key that is not one Capstan
/// verifies says why.
fn parse_any_public_key(text: &str) -> Result<Option<AnyKey>> {
    if cosign::is_public_key(text) {
        return cosign::parse_public_pem(text).map(|k| Some(AnyKey::Cosign(k)));
    }
    Ok(parse_public_key(text).map(AnyKey::Minisign))
}

/// A minisign public key: a `.pub` file's text (`untrusted comment:` line, then
/// the key) or the base64 key alone (what `minisign -P` takes).
fn parse_public_key(text: &str) -> Option<PublicKey> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("untrusted comment:"))?;
    let key = line.split_whitespace().next()?;
    PublicKey::from_base64(key).ok()
}

/// One line of the trusted-keys file.
struct TrustedKey {
    key: AnyKey,
    /// What the line says after the key (where it came from), for people.
    comment: String,
}

/// The keys in the user's trusted-keys file: one base64 public key a line
/// (minisign's, or a cosign key's SPKI DER), optionally followed by a comment;
/// `#` starts a comment line.
fn trusted_keys(dirs: &Dirs) -> Result<Vec<TrustedKey>> {
    let path = trusted_keys_file(dirs);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    };
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, comment) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let key = AnyKey::from_line(key).ok_or_else(|| {
            anyhow!(
                "{}:{}: not a public key; each line is `<base64 key> [comment]` (a minisign key \
                 starting with RW, or a cosign key starting with MFkw, as `capstan plugins \
                 trust` writes them); fix or delete that line",
                path.display(),
                i + 1
            )
        })?;
        keys.push(TrustedKey {
            key,
            comment: comment.trim().to_string(),
        });
    }
    Ok(keys)
}

/// `OUT` with `.key` or `.pub` appended (not replacing an extension: `me.v2`
/// gives `me.v2.key`).
fn with_suffix(out: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = out.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The key formats `capstan plugins keygen` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyFormat {
    /// minisign (Ed25519): no password, the signature travels in the manifest.
    Minisign,
    /// cosign (ECDSA P-256): encrypted with COSIGN_PASSWORD, as
    /// `cosign generate-key-pair` writes it.
    Cosign,
}

/// Creates `path` with mode 0600 and writes `text`, never replacing a file.
fn write_secret(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// The password of a cosign private key: `COSIGN_PASSWORD`, where cosign reads
/// it too (set and empty means no password).
fn cosign_password(for_what: &str) -> Result<String> {
    std::env::var("COSIGN_PASSWORD").map_err(|_| {
        anyhow!(
            "{for_what}: set COSIGN_PASSWORD to the key's password (as for cosign; \
             COSIGN_PASSWORD= for a key without one)"
        )
    })
}

/// `capstan plugins keygen OUT`: OUT.key (secret, mode 0600) and OUT.pub. In
/// minisign's format (default) the secret key has no password; in cosign's it
/// is encrypted with COSIGN_PASSWORD, exactly as `cosign generate-key-pair`
/// writes it, so cosign signs and verifies with the same files.
pub fn keygen(global: &GlobalArgs, out: &Path, trust: bool, format: KeyFormat) -> Result<ExitCode> {
    let secret_path = with_suffix(out, ".key");
    let public_path = with_suffix(out, ".pub");
    for p in [&secret_path, &public_path] {
        if p.exists() {
            bail!(
                "{} exists; choose another name (keygen never overwrites a key)",
                p.display()
            );
        }
    }
    let (secret_text, public_text, id, sign_with) = match format {
        KeyFormat::Minisign => {
            let KeyPair { pk, sk } = KeyPair::generate_unencrypted_keypair()
                .map_err(|e| anyhow!("cannot make a key pair: {e}"))?;
            let public_text = pk
                .to_box()
                .map_err(|e| anyhow!("cannot encode the public key: {e}"))?
                .into_string();
            let secret_text = sk
                .to_box(Some(
                    "minisign secret key (not password-protected), from capstan plugins keygen",
                ))
                .map_err(|e| anyhow!("cannot encode the secret key: {e}"))?
                .into_string();
            (
                secret_text,
                public_text,
                key_id(pk.keynum()),
                "`capstan plugins publish --key` or `minisign -S -s`",
            )
        }
        KeyFormat::Cosign => {
            let password = cosign_password("keygen --format cosign")?;
            let sk = cosign::generate()?;
            let pk = sk.public_key();
            (
                cosign::encrypt_private_key(&sk, password.as_bytes())?,
                cosign::public_pem(&pk)?,
                cosign::key_id(&pk),
                "`capstan plugins publish --key` or `cosign sign --key`, with COSIGN_PASSWORD set",
            )
        }
    };
    write_secret(&secret_path, &secret_text)?;
    std::fs::write(&public_path, &public_text)
        .with_context(|| format!("writing {}", public_path.display()))?;
    outln!(
        "secret key: {} (keep it private; sign with {sign_with})",
        secret_path.display()
    );
    outln!(
        "public key: {} (key {id}; give it to the people who install your plugins)",
        public_path.display(),
    );
    if trust {
        trust_key(
            &global.dirs()?,
            &public_text,
            &public_path.display().to_string(),
        )?;
    } else {
        outln!(
            "to trust plugins it signs: capstan plugins trust {}",
            public_path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `capstan plugins trust FILE.pub|KEY`.
pub fn trust(global: &GlobalArgs, key: &str) -> Result<ExitCode> {
    let dirs = global.dirs()?;
    let path = Path::new(key);
    if path.exists() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        trust_key(&dirs, &text, &path.display().to_string())?;
    } else if parse_public_key(key).is_some() {
        trust_key(&dirs, key, "added with capstan plugins trust")?;
    } else {
        bail!(
            "`{key}` is neither a file nor a minisign public key; pass the publisher's public \
             key file (a minisign .pub, or a cosign.pub) or the minisign key itself (the line \
             starting with RW)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Appends a public key to the trusted-keys file.
fn trust_key(dirs: &Dirs, text: &str, origin: &str) -> Result<()> {
    let key = parse_any_public_key(text)
        .map_err(|e| anyhow!("{origin}: {e:#}"))?
        .ok_or_else(|| {
            anyhow!(
                "{origin}: not a public key Capstan knows: give a minisign .pub file (from \
                 `capstan plugins keygen` or `minisign -G`, or the base64 key starting with RW) \
                 or a cosign.pub (`-----BEGIN PUBLIC KEY-----`, from `cosign generate-key-pair` \
                 or `capstan plugins keygen --format cosign`)"
            )
        })?;
    let path = trusted_keys_file(dirs);
    if trusted_keys(dirs)?.iter().any(|t| t.key == key) {
        outln!("key {} is already trusted in {}", key.id(), path.display());
        return Ok(());
    }
    std::fs::create_dir_all(&dirs.config)
        .with_context(|| format!("creating {}", dirs.config.display()))?;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let comment: String = origin.chars().filter(|c| !c.is_control()).collect();
    writeln!(f, "{} {comment}", key.to_line())
        .with_context(|| format!("writing {}", path.display()))?;
    outln!(
        "trusted key {} in {} (plugins it signs can be added from OCI registries)",
        key.id(),
        path.display()
    );
    Ok(())
}

/// A signing key: minisign's, or cosign's (opened with COSIGN_PASSWORD).
enum AnySecret {
    Minisign(Box<SecretKey>),
    Cosign(p256::SecretKey),
}

fn load_any_secret(path: &Path) -> Result<AnySecret> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the secret key {}", path.display()))?;
    if cosign::is_public_key(&text) {
        bail!(
            "{} is a public key; --key takes the secret key (cosign.key, not cosign.pub)",
            path.display()
        );
    }
    if !cosign::is_private_key(&text) {
        return load_secret(path).map(|k| AnySecret::Minisign(Box::new(k)));
    }
    let password = cosign_password(&path.display().to_string())?;
    cosign::decrypt_private_key(&text, password.as_bytes())
        .map(AnySecret::Cosign)
        .map_err(|e| match e {
            cosign::KeyError::WrongPassword => anyhow!(
                "{}: COSIGN_PASSWORD does not open this cosign key; set it to the password \
                 the key was made with",
                path.display()
            ),
            cosign::KeyError::Invalid(why) => {
                anyhow!(
                    "{}: not a cosign private key Capstan can use: {why}",
                    path.display()
                )
            }
        })
}

/// A secret key from `capstan plugins keygen` or `minisign -G`. A
/// password-protected one asks for its password on the terminal.
fn load_secret(path: &Path) -> Result<SecretKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the secret key {}", path.display()))?;
    let not_a_key = || {
        anyhow!(
            "{}: neither a minisign secret key nor a cosign private key (make one with \
             `capstan plugins keygen`, or `cosign generate-key-pair`)",
            path.display()
        )
    };
    let encoded = text.lines().nth(1).ok_or_else(not_a_key)?;
    let raw = B64.decode(encoded.trim()).map_err(|_| not_a_key())?;
    // Bytes 2..4 name the key derivation: zero for a key stored in the clear.
    let encrypted = raw.get(2..4).ok_or_else(not_a_key)? != [0, 0];
    let sk_box = SecretKeyBox::from_string(&text).map_err(|_| not_a_key())?;
    if !encrypted {
        return SecretKey::from_unencrypted_box(sk_box).map_err(|e| {
            anyhow!(
                "{}: cannot read this secret key ({e}). Keys from `minisign -G -W` are not \
                 readable here: sign with `minisign -S -m COMPONENT.wasm` and pass --signature, \
                 or make a key with `capstan plugins keygen`",
                path.display()
            )
        });
    }
    if !std::io::stdin().is_terminal() {
        bail!(
            "{} is password-protected and there is no terminal to type the password on; \
             run this from a terminal, or sign elsewhere with `minisign -S` and pass --signature",
            path.display()
        );
    }
    SecretKey::from_box(sk_box, None).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// How `publish` signs: with a secret key, or with a signature made elsewhere.
pub enum Signing<'a> {
    None,
    Key(&'a Path),
    Detached(&'a Path),
}

/// `capstan plugins publish PATH oci://...`.
pub async fn publish(
    global: &GlobalArgs,
    path: &Path,
    target: &str,
    signing: Signing<'_>,
    plain_http: bool,
) -> Result<ExitCode> {
    let dirs = global.dirs()?;
    let reference = parse_reference(target)?;
    if reference.digest().is_some() {
        bail!("`{target}`: publish to a tag (oci://HOST/NAME:TAG); the registry gives the digest");
    }
    let arg = path.display().to_string();
    let src = super::plugins_manage::resolve_source(&dirs, &arg)?;
    if !matches!(
        src.source,
        crate::plugins::manifest::ComponentSource::File(_)
    ) {
        bail!("`{arg}`: publish a .wasm file (builtins ship inside Capstan)");
    }
    // Only a component Capstan can load is published: the same checks as `add`.
    let loaded = super::plugins_manage::probe(&dirs, &src.default_name, &arg, &src).await?;
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the component {}", path.display()))?;
    if crate::plugins::manifest::sha256_hex(&bytes) != loaded.sha256 {
        bail!("{arg} changed while it was being checked; try again");
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A cosign signature names the manifest digest, so it is made after the push.
    let mut cosign_key = None;
    let (signature, signed_by) = match signing {
        Signing::None => (None, None),
        Signing::Key(key_path) => match load_any_secret(key_path)? {
            AnySecret::Cosign(sk) => {
                let id = cosign::key_id(&sk.public_key());
                cosign_key = Some(sk);
                (None, Some(id))
            }
            AnySecret::Minisign(sk) => {
                let pk = PublicKey::from_secret_key(&sk)
                    .map_err(|e| anyhow!("{}: {e}", key_path.display()))?;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                // The same trusted comment `minisign -S` writes.
                let comment = format!("timestamp:{now}\tfile:{file_name}\thashed");
                let sig = minisign::sign(
                    Some(&pk),
                    &sk,
                    Cursor::new(&bytes[..]),
                    Some(comment.as_str()),
                    None,
                )
                .map_err(|e| anyhow!("signing with {}: {e}", key_path.display()))?;
                (Some(sig.into_string()), Some(key_id(pk.keynum())))
            }
        },
        Signing::Detached(sig_path) => {
            let text = std::fs::read_to_string(sig_path)
                .with_context(|| format!("cannot read the signature {}", sig_path.display()))?;
            let sig = SignatureBox::from_string(&text).map_err(|e| {
                anyhow!(
                    "{}: not a minisign signature ({e}); make one with `minisign -S -m {arg}`",
                    sig_path.display()
                )
            })?;
            (Some(text), Some(key_id(sig.keynum())))
        }
    };

    let layer = ImageLayer::new(bytes, LAYER_MEDIA_TYPE.to_string(), None);
    let layer_digest = layer.sha256_digest();
    let wit = &loaded.wit_version;
    let mut imports: Vec<String> = loaded
        .imports
        .iter()
        .map(|s| format!("capstan:plugin/{}@{wit}", s.interface()))
        .collect();
    imports.sort();
    let config = serde_json::json!({
        "created": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {
            "exports": [format!("capstan:plugin/capability@{wit}")],
            "imports": imports,
        },
    });
    let config = Config::new(
        serde_json::to_vec(&config)?,
        CONFIG_MEDIA_TYPE.to_string(),
        None,
    );
    let mut annotations = BTreeMap::new();
    annotations.insert(
        "org.opencontainers.image.title".to_string(),
        src.default_name.clone(),
    );
    annotations.insert(
        "dev.capstan.plugin.kinds".to_string(),
        loaded.kinds.join(","),
    );
    if let Some(sig) = &signature {
        annotations.insert(SIGNATURE_ANNOTATION.to_string(), B64.encode(sig));
    }
    let manifest =
        OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
    let client = client_for(&reference, plain_http);
    let login = login_for(&reference)?;
    let auth = &login.auth;
    client
        .push(&reference, &[layer], config, auth, Some(manifest))
        .await
        .map_err(|e| registry_error(target, "pushing to", &reference, &e, plain_http, &login))?;
    let (_, digest) = client
        .pull_image_manifest(&reference, auth)
        .await
        .map_err(|e| registry_error(target, "reading back", &reference, &e, plain_http, &login))?;
    if let Some(sk) = &cosign_key {
        push_cosign_signature(&client, auth, &reference, &digest, sk)
            .await
            .map_err(|e| {
                anyhow!(
                    "{target} was pushed ({digest}) but its cosign signature was not: {e:#}. \
                     Publish again, or sign it with `cosign sign --key`"
                )
            })?;
    }
    outln!(
        "published oci://{}/{}@{digest} (kinds {}; {})",
        reference.registry(),
        reference.repository(),
        loaded.kinds.join(", "),
        match &signed_by {
            Some(id) => format!("signed by key {id}"),
            None => "unsigned: `plugins add` refuses it unless --allow-unverified".into(),
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// `sha256-<hex>.sig`: the tag under which cosign keeps the signatures of the
/// manifest with this digest.
fn cosign_tag(reference: &Reference, digest: &str) -> Result<Reference> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| anyhow!("`{digest}` is not a sha256 manifest digest"))?;
    Ok(Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        format!("sha256-{hex}.sig"),
    ))
}

/// Whether a registry answered "no such manifest" (for the `.sig` tag: not signed).
fn is_not_found(e: &OciDistributionError) -> bool {
    use oci_client::errors::OciErrorCode as C;
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::ServerError { code: 404, .. } => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, C::ManifestUnknown | C::NotFound | C::NameUnknown)),
        _ => false,
    }
}

/// Pushes a cosign signature of `digest` the way `cosign sign --key` does: the
/// simple-signing payload as a layer of the `sha256-<hex>.sig` image, its
/// signature in the layer's `dev.cosignproject.cosign/signature` annotation.
/// Signatures already there (other signers) are kept, as cosign keeps them.
async fn push_cosign_signature(
    client: &Client,
    auth: &RegistryAuth,
    reference: &Reference,
    digest: &str,
    key: &p256::SecretKey,
) -> Result<()> {
    let sig_ref = cosign_tag(reference, digest)?;
    let docker_reference = format!("{}/{}", reference.registry(), reference.repository());
    let payload = cosign::payload(&docker_reference, digest);
    let signature = cosign::sign(key, &payload);
    let layer = ImageLayer::new(
        payload,
        cosign::PAYLOAD_MEDIA_TYPE.to_string(),
        Some(BTreeMap::from([(
            cosign::SIGNATURE_ANNOTATION.to_string(),
            signature,
        )])),
    );
    let new_digest = layer.sha256_digest();
    let mut kept = match client.pull_image_manifest(&sig_ref, auth).await {
        Ok((m, _)) => m.layers,
        Err(e) if is_not_found(&e) => vec![],
        Err(e) => bail!("reading the signatures already there: {e}"),
    };
    // Signing the same digest again with the same key gives the same layer
    // (RFC 6979 signatures are deterministic): keep one copy.
    kept.retain(|l| {
        l.digest != new_digest
            || l.annotations
                .as_ref()
                .and_then(|a| a.get(cosign::SIGNATURE_ANNOTATION))
                != layer
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(cosign::SIGNATURE_ANNOTATION))
    });
    let diff_ids: Vec<&str> = kept
        .iter()
        .map(|l| l.digest.as_str())
        .chain([new_digest.as_str()])
        .collect();
    // The config go-containerregistry writes for cosign's signature image;
    // nothing reads it, but registries and tools expect a valid image config.
    let config = serde_json::json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let config = Config::new(
        serde_json::to_vec(&config)?,
        "application/vnd.oci.image.config.v1+json".to_string(),
        None,
    );
    let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    // cosign's signature manifests name their media type in the body too.
    manifest.media_type = Some(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.to_string());
    kept.append(&mut manifest.layers);
    manifest.layers = kept;
    client
        .push(&sig_ref, &[layer], config, auth, Some(manifest))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// A registry error with its causes (reqwest keeps the reason, e.g. a refused
/// connection or a TLS failure, in the source chain) and what to do about the
/// usual ones.
fn registry_error(
    source: &str,
    doing: &str,
    reference: &Reference,
    e: &OciDistributionError,
    plain_http: bool,
    login: &Login,
) -> anyhow::Error {
    use std::error::Error as _;
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    let registry = reference.registry();
    let denied = matches!(
        e,
        OciDistributionError::AuthenticationFailure(_)
            | OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::ServerError {
                code: 401 | 403,
                ..
            }
    );
    let hint = if denied {
        match &login.from {
            Some(from) => format!(
                "{registry} refused the credentials from {from}: check the user, the password \
                 and that they may use this repository"
            ),
            None => format!(
                "Capstan found no credentials for {registry}: set CAPSTAN_REGISTRY_USER and \
                 CAPSTAN_REGISTRY_PASSWORD, or `docker login {registry}` (an `auths` entry in \
                 ~/.docker/config.json; credential helpers are not read)"
            ),
        }
    } else if plain_http || is_loopback(registry) {
        format!("is a registry running at {registry}, and is the name right?")
    } else {
        format!(
            "is the registry at {registry} up, and is the name right? Capstan speaks TLS to every \
             registry not on this machine; pass --plain-http only for one you know serves plain \
             HTTP on a network you trust"
        )
    };
    anyhow!("{doing} {source}: {text} ({hint})")
}

/// A component pulled and checked, as a file `plugins add` adds like any other.
pub struct Pulled {
    /// Holds the file; removed when this is dropped.
    _dir: tempfile::TempDir,
    pub file: PathBuf,
    /// `oci://REGISTRY/REPOSITORY@sha256:<manifest digest>`.
    pub pinned: String,
    /// What the signature check found, for people.
    pub signature: String,
}

/// Pulls `oci://...`, checks the bytes against the layer digest and the
/// signature against the trusted keys, and writes the component to a temp file
/// named after the repository's last segment.
pub async fn pull(
    dirs: &Dirs,
    source: &str,
    allow_unverified: bool,
    plain_http: bool,
) -> Result<Pulled> {
    let reference = parse_reference(source)?;
    let client = client_for(&reference, plain_http);
    let login = login_for(&reference)?;
    // When the reference has a digest, oci-client checks the manifest against it.
    let (manifest, digest) = client
        .pull_image_manifest(&reference, &login.auth)
        .await
        .map_err(|e| match e {
            OciDistributionError::DigestError(d) => anyhow!(
                "{source}: the manifest the registry served does not match its digest ({d}). \
                 Not added, whatever the flags: it is not the manifest you named"
            ),
            e => registry_error(source, "pulling", &reference, &e, plain_http, &login),
        })?;
    let wasm: Vec<_> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == LAYER_MEDIA_TYPE || l.media_type == LEGACY_LAYER_MEDIA_TYPE)
        .collect();
    let [layer] = wasm.as_slice() else {
        bail!(
            "{source} is not a wasm component artifact: expected one `{LAYER_MEDIA_TYPE}` layer, \
             found {} (publish components with `capstan plugins publish` or `wkg oci push`)",
            wasm.len()
        );
    };
    if !(0..=MAX_COMPONENT_BYTES).contains(&layer.size) {
        bail!(
            "{source}: the component is {} bytes, more than the {MAX_COMPONENT_BYTES} Capstan pulls",
            layer.size
        );
    }
    // Read as a stream and cut off past the manifest's size: a registry that
    // sends more than it declared must not fill memory or disk.
    let mut stream = client
        .pull_blob_stream(&reference, *layer)
        .await
        .map_err(|e| {
            registry_error(
                source,
                "pulling the component of",
                &reference,
                &e,
                plain_http,
                &login,
            )
        })?
        .stream;
    let declared = usize::try_from(layer.size).unwrap_or(0);
    let mut bytes = Vec::with_capacity(declared);
    {
        use futures::StreamExt as _;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                anyhow!(
                    "{source}: the download of the component broke off ({e}); try again, and \
                     tell the registry's operator if it persists"
                )
            })?;
            bytes.extend_from_slice(&chunk);
            if bytes.len() > declared {
                bail!(
                    "{source}: the registry sent more than the {declared} bytes its manifest \
                     declares for the component. Not added, whatever the flags: it is not \
                     serving the artifact its manifest names"
                );
            }
        }
    }
    let actual = format!("sha256:{}", crate::plugins::manifest::sha256_hex(&bytes));
    if actual != layer.digest {
        bail!(
            "{source}: the component's bytes ({actual}) do not match its digest in the manifest \
             ({}). Not added, whatever the flags: the registry did not serve the bytes its \
             manifest names",
            layer.digest
        );
    }
    let signature = match check_signatures(
        dirs,
        &client,
        &login.auth,
        &reference,
        &digest,
        &manifest,
        &bytes,
    )
    .await
    {
        Ok(found) => found,
        Err(why) if allow_unverified => {
            crate::errln!("warning: {source}: {why}; adding it anyway (--allow-unverified)");
            format!("NOT VERIFIED: {why}")
        }
        Err(why) => bail!(
            "{source}: {why}. Refused: {}, or pass --allow-unverified to add it anyway",
            why.remedy()
        ),
    };
    let name = reference
        .repository()
        .rsplit('/')
        .next()
        .unwrap_or("plugin")
        .to_string();
    // Under Capstan's cache dir rather than a shared /tmp; gone when `add` ends.
    let _ = std::fs::create_dir_all(&dirs.cache);
    let dir = tempfile::Builder::new()
        .prefix("oci-pull-")
        .tempdir_in(dirs.cache.as_path())
        .or_else(|_| tempfile::tempdir())
        .context("creating a temp dir for the pulled component")?;
    let file = dir.path().join(format!("{name}.wasm"));
    std::fs::write(&file, &bytes).with_context(|| format!("writing {}", file.display()))?;
    Ok(Pulled {
        _dir: dir,
        file,
        pinned: format!(
            "oci://{}/{}@{digest}",
            reference.registry(),
            reference.repository()
        ),
        signature,
    })
}

/// The component's signatures: its minisign annotation, then its cosign
/// `.sig` artifact. Accepted if either is by a trusted key and matches; else
/// the reason, the cosign one when there is a `.sig` (it is the newer).
async fn check_signatures(
    dirs: &Dirs,
    client: &Client,
    auth: &RegistryAuth,
    reference: &Reference,
    digest: &str,
    manifest: &OciImageManifest,
    bytes: &[u8],
) -> Result<String, Unverified> {
    let minisign = manifest
        .annotations
        .as_ref()
        .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        .map(|sig| verify(dirs, Some(sig), bytes));
    let minisign_failed = match minisign {
        Some(Ok(found)) => return Ok(found),
        Some(Err(why)) => Some(why),
        None => None,
    };
    match verify_cosign(dirs, client, auth, reference, digest).await {
        Ok(found) => Ok(found),
        Err(Unverified::Unsigned) => Err(minisign_failed.unwrap_or(Unverified::Unsigned)),
        Err(why) => Err(why),
    }
}

/// The largest simple-signing payload read (cosign's are a few hundred bytes).
const MAX_PAYLOAD_BYTES: i64 = 64 << 10;

/// A blob of at most MAX_PAYLOAD_BYTES whose bytes match its digest, else
/// None. Read as a stream and cut off at the limit, since a registry can send
/// more than the manifest's size says.
async fn pull_small_blob(
    client: &Client,
    reference: &Reference,
    layer: &oci_client::manifest::OciDescriptor,
) -> Option<Vec<u8>> {
    use futures::StreamExt as _;
    let limit = usize::try_from(MAX_PAYLOAD_BYTES).ok()?;
    // oci-client's stream checks the digest when it ends.
    let mut stream = client.pull_blob_stream(reference, layer).await.ok()?.stream;
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.ok()?);
        if out.len() > limit {
            return None;
        }
    }
    (format!("sha256:{}", crate::plugins::manifest::sha256_hex(&out)) == layer.digest)
        .then_some(out)
}

/// Checks the cosign signatures of the manifest `digest`: each layer of its
/// `sha256-<hex>.sig` artifact is a payload (checked against its digest) and
/// a signature; one by a trusted cosign key whose payload names exactly this
/// digest accepts it.
async fn verify_cosign(
    dirs: &Dirs,
    client: &Client,
    auth: &RegistryAuth,
    reference: &Reference,
    digest: &str,
) -> Result<String, Unverified> {
    let sig_ref = cosign_tag(reference, digest).map_err(|e| Unverified::Lookup(e.to_string()))?;
    let tag = sig_ref.tag().unwrap_or_default().to_string();
    let sig_manifest = match client.pull_image_manifest(&sig_ref, auth).await {
        Ok((m, _)) => m,
        Err(e) if is_not_found(&e) => return Err(Unverified::Unsigned),
        Err(e) => {
            return Err(Unverified::Lookup(format!(
                "its cosign signatures (tag {tag}) could not be read: {e}"
            )));
        }
    };
    let trusted = trusted_keys(dirs).map_err(|e| Unverified::NoTrustFile(format!("{e:#}")))?;
    let keys: Vec<(&p256::PublicKey, &str)> = trusted
        .iter()
        .filter_map(|t| match &t.key {
            AnyKey::Cosign(k) => Some((k, t.comment.as_str())),
            AnyKey::Minisign(_) => None,
        })
        .collect();
    let mut signatures = 0;
    let mut wrong_subject = None;
    for layer in &sig_manifest.layers {
        let Some(signature) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(cosign::SIGNATURE_ANNOTATION))
        else {
            continue;
        };
        if layer.media_type != cosign::PAYLOAD_MEDIA_TYPE {
            continue;
        }
        signatures += 1;
        if keys.is_empty() || !(0..=MAX_PAYLOAD_BYTES).contains(&layer.size) {
            continue;
        }
        // A payload that is too big or does not match its digest is one
        // nobody signed, so it just does not count.
        let Some(payload) = pull_small_blob(client, &sig_ref, layer).await else {
            continue;
        };
        for (key, comment) in &keys {
            if !cosign::verify(key, &payload, signature) {
                continue;
            }
            let id = cosign::key_id(key);
            match cosign::check_payload(&payload, digest) {
                Ok(()) => {
                    return Ok(format!(
                        "signed by trusted key {id}{} (cosign signature, tag {tag})",
                        if comment.is_empty() {
                            String::new()
                        } else {
                            format!(" ({comment})")
                        }
                    ));
                }
                Err(why) => wrong_subject = Some((id, format!("{why:#}"))),
            }
        }
    }
    if let Some((key, why)) = wrong_subject {
        return Err(Unverified::WrongSubject { key, why });
    }
    if signatures == 0 {
        return Err(Unverified::NoCosignSignature(format!(
            "its cosign artifact (tag {tag}) holds no `{}` layer with a signature",
            cosign::PAYLOAD_MEDIA_TYPE
        )));
    }
    Err(Unverified::CosignUntrusted {
        signatures,
        keys: keys.len(),
        file: trusted_keys_file(dirs),
    })
}

/// Why a component's signature was not accepted.
#[derive(Debug)]
enum Unverified {
    Unsigned,
    Malformed(String),
    Untrusted {
        key: String,
        file: PathBuf,
    },
    Mismatch {
        key: String,
        why: String,
    },
    NoTrustFile(String),
    /// cosign signatures, none verifying with a trusted cosign key.
    CosignUntrusted {
        signatures: usize,
        keys: usize,
        file: PathBuf,
    },
    /// A trusted key's cosign signature, of another manifest (or not an image
    /// signature).
    WrongSubject {
        key: String,
        why: String,
    },
    /// The registry did not answer for the signatures.
    Lookup(String),
    /// A `.sig` artifact with no cosign signature layer in it.
    NoCosignSignature(String),
}

impl Unverified {
    /// What the person can do about it.
    fn remedy(&self) -> &'static str {
        match self {
            Self::Unsigned | Self::Malformed(_) | Self::NoCosignSignature(_) => {
                "ask its publisher to sign it (`capstan plugins publish --key`, or \
                 `cosign sign --key` on its digest)"
            }
            Self::Untrusted { .. } => {
                "if you trust its publisher, get their public key and run \
                 `capstan plugins trust KEY.pub`"
            }
            Self::CosignUntrusted { .. } => {
                "if you trust its publisher, get their cosign public key and run \
                 `capstan plugins trust cosign.pub`"
            }
            Self::WrongSubject { .. } => {
                "ask its publisher to sign this component's digest (`capstan plugins publish \
                 --key`, or `cosign sign --key` on the digest shown)"
            }
            Self::Lookup(_) => "check that the registry is reachable and try again",
            Self::Mismatch { .. } => {
                "ask its publisher to publish it again, signed (`capstan plugins publish --key`)"
            }
            Self::NoTrustFile(_) => "fix the trusted-keys file named above",
        }
    }
}

impl std::fmt::Display for Unverified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unsigned => write!(f, "it is not signed, so nothing says who made it"),
            Self::Malformed(e) => write!(
                f,
                "its `{SIGNATURE_ANNOTATION}` annotation is not a minisign signature ({e})"
            ),
            Self::Untrusted { key, file } => write!(
                f,
                "it is signed by minisign key {key}, which is not among your trusted keys ({})",
                file.display()
            ),
            Self::Mismatch { key, why } => write!(
                f,
                "its signature by trusted key {key} does not match its bytes ({why}): \
                 the component changed after it was signed"
            ),
            Self::NoTrustFile(e) | Self::Lookup(e) | Self::NoCosignSignature(e) => {
                write!(f, "{e}")
            }
            Self::CosignUntrusted {
                signatures,
                keys,
                file,
            } => write!(
                f,
                "it has {signatures} cosign signature(s), none by a key among your trusted keys \
                 ({}, {keys} cosign key(s)): signed by a key you do not trust, or the signed \
                 payload changed",
                file.display()
            ),
            Self::WrongSubject { key, why } => write!(
                f,
                "its cosign signature by trusted key {key} is not for this component: {why}"
            ),
        }
    }
}

/// Checks a component's minisign signature against the trusted keys; on
/// success says who signed it.
fn verify(dirs: &Dirs, signature: Option<&String>, bytes: &[u8]) -> Result<String, Unverified> {
    let Some(encoded) = signature else {
        return Err(Unverified::Unsigned);
    };
    let text = B64
        .decode(encoded.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| Unverified::Malformed("not base64 of a .minisig file".into()))?;
    let sig = SignatureBox::from_string(&text).map_err(|e| Unverified::Malformed(e.to_string()))?;
    let key = key_id(sig.keynum());
    let trusted = trusted_keys(dirs).map_err(|e| Unverified::NoTrustFile(format!("{e:#}")))?;
    let candidates: Vec<(&PublicKey, &str)> = trusted
        .iter()
        .filter_map(|t| match &t.key {
            AnyKey::Minisign(k) if k.keynum() == sig.keynum() => Some((k, t.comment.as_str())),
            _ => None,
        })
        .collect();
    if candidates.is_empty() {
        return Err(Unverified::Untrusted {
            key,
            file: trusted_keys_file(dirs),
        });
    }
    let mut why = String::new();
    for (k, t_comment) in candidates {
        match minisign::verify(k, &sig, Cursor::new(bytes), true, false, true) {
            Ok(()) => {
                let comment = sig.trusted_comment().unwrap_or_default();
                return Ok(format!(
                    "signed by trusted key {key}{}{}",
                    if t_comment.is_empty() {
                        String::new()
                    } else {
                        format!(" ({t_comment})")
                    },
                    if comment.is_empty() {
                        String::new()
                    } else {
                        format!("; trusted comment: {}", comment.replace('\t', " "))
                    }
                ));
            }
            Err(e) => why = e.to_string(),
        }
    }
    Err(Unverified::Mismatch { key, why })
}

#[cfg(test)]
mod tests {
    use super::key_id;

    #[test]
    fn a_minisign_key_id_is_printed_as_minisign_prints_it() {
        // The key number is little-endian; minisign prints it with `%X`, so a
        // number whose top nibble is zero has 15 digits in its `.pub` file.
        let keynum = [0x0B, 0x3F, 0x70, 0xA4, 0x9C, 0x90, 0x46, 0x04];
        assert_eq!(key_id(&keynum), "446909CA4703F0B");
        let keynum = [0x0B, 0x3F, 0x70, 0xA4, 0x9C, 0x90, 0x46, 0x14];
        assert_eq!(key_id(&keynum), "1446909CA4703F0B");
    }
}
