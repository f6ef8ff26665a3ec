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
//! Signatures are minisign signatures (Ed25519, the format of the `minisign` tool)
//! of the component's bytes, carried (base64) in the manifest annotation
//! `dev.capstan.plugin.minisign`, so the manifest digest pins the signature too.
//! `add oci://` checks the bytes against the layer digest (always; there is
//! nothing to allow when a registry serves other bytes than its manifest names)
//! and the signature against the keys in `trusted-keys` in the user's config dir,
//! never a workspace's. An unsigned component, one signed by a key not trusted,
//! or one whose bytes are not the ones signed is refused unless the person passes
//! `--allow-unverified`. Nothing but the registry is contacted, over TLS unless
//! it is on this machine or the person passes `--plain-http`.

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

fn trusted_keys_file(dirs: &Dirs) -> PathBuf {
    dirs.config.join("trusted-keys")
}

/// minisign's key ID: the key number as it prints it.
fn key_id(keynum: &[u8]) -> String {
    let mut n = [0u8; 8];
    let len = keynum.len().min(8);
    n[..len].copy_from_slice(&keynum[..len]);
    format!("{:016X}", u64::from_le_bytes(n))
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
    key: PublicKey,
    /// What the line says after the key (where it came from), for people.
    comment: String,
}

/// The keys in the user's trusted-keys file: one base64 minisign public key a
/// line, optionally followed by a comment; `#` starts a comment line.
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
        let key = PublicKey::from_base64(key).map_err(|e| {
            anyhow!(
                "{}:{}: not a minisign public key ({e}); each line is `<base64 key> [comment]` \
                 (the second line of a .pub file); fix or delete that line",
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

/// `capstan plugins keygen OUT`: OUT.key (secret, mode 0600, not
/// password-protected) and OUT.pub, both in minisign's format.
pub fn keygen(global: &GlobalArgs, out: &Path, trust: bool) -> Result<ExitCode> {
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
    if let Some(dir) = secret_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret_path)
            .with_context(|| format!("creating {}", secret_path.display()))?;
        f.write_all(secret_text.as_bytes())
            .with_context(|| format!("writing {}", secret_path.display()))?;
    }
    std::fs::write(&public_path, &public_text)
        .with_context(|| format!("writing {}", public_path.display()))?;
    outln!(
        "secret key: {} (keep it private; sign with `capstan plugins publish --key` or `minisign -S -s`)",
        secret_path.display()
    );
    outln!(
        "public key: {} (key ID {}; give it to the people who install your plugins)",
        public_path.display(),
        key_id(pk.keynum())
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
            "`{key}` is neither a file nor a minisign public key; pass the publisher's .pub file \
             or the key itself (the line starting with RW)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Appends a public key to the trusted-keys file.
fn trust_key(dirs: &Dirs, text: &str, origin: &str) -> Result<()> {
    let key = parse_public_key(text).ok_or_else(|| {
        anyhow!(
            "{origin}: not a minisign public key (a .pub file from `capstan plugins keygen` or \
             `minisign -G`, or the base64 key starting with RW)"
        )
    })?;
    let path = trusted_keys_file(dirs);
    if trusted_keys(dirs)?.iter().any(|t| t.key == key) {
        outln!(
            "key {} is already trusted in {}",
            key_id(key.keynum()),
            path.display()
        );
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
    writeln!(f, "{} {comment}", key.to_base64())
        .with_context(|| format!("writing {}", path.display()))?;
    outln!(
        "trusted key {} in {} (plugins it signs can be added from OCI registries)",
        key_id(key.keynum()),
        path.display()
    );
    Ok(())
}

/// A secret key from `capstan plugins keygen` or `minisign -G`. A
/// password-protected one asks for its password on the terminal.
fn load_secret(path: &Path) -> Result<SecretKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the secret key {}", path.display()))?;
    let not_a_key = || {
        anyhow!(
            "{}: not a minisign secret key (make one with `capstan plugins keygen`)",
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
    let (signature, signed_by) = match signing {
        Signing::None => (None, None),
        Signing::Key(key_path) => {
            let sk = load_secret(key_path)?;
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
    client
        .push(
            &reference,
            &[layer],
            config,
            &RegistryAuth::Anonymous,
            Some(manifest),
        )
        .await
        .map_err(|e| registry_error(target, "pushing to", &reference, &e, plain_http))?;
    let (_, digest) = client
        .pull_image_manifest(&reference, &RegistryAuth::Anonymous)
        .await
        .map_err(|e| registry_error(target, "reading back", &reference, &e, plain_http))?;
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

/// A registry error with its causes (reqwest keeps the reason, e.g. a refused
/// connection or a TLS failure, in the source chain) and what to do about the
/// usual ones.
fn registry_error(
    source: &str,
    doing: &str,
    reference: &Reference,
    e: &OciDistributionError,
    plain_http: bool,
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
        "Capstan talks to registries anonymously: use a registry (or repository) that allows \
         anonymous pulls and pushes"
            .to_string()
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
    // When the reference has a digest, oci-client checks the manifest against it.
    let (manifest, digest) = client
        .pull_image_manifest(&reference, &RegistryAuth::Anonymous)
        .await
        .map_err(|e| match e {
            OciDistributionError::DigestError(d) => anyhow!(
                "{source}: the manifest the registry served does not match its digest ({d}). \
                 Not added, whatever the flags: it is not the manifest you named"
            ),
            e => registry_error(source, "pulling", &reference, &e, plain_http),
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
    let mut bytes = Vec::new();
    // oci-client checks the bytes against the layer digest as they arrive.
    client
        .pull_blob(&reference, *layer, &mut bytes)
        .await
        .map_err(|e| match e {
            OciDistributionError::DigestError(d) => anyhow!(
                "{source}: the component's bytes do not match its digest ({d}). Not added, \
                 whatever the flags: the registry did not serve the bytes its manifest names; \
                 try again, and tell the registry's operator if it persists"
            ),
            e => registry_error(
                source,
                "pulling the component of",
                &reference,
                &e,
                plain_http,
            ),
        })?;
    let actual = format!("sha256:{}", crate::plugins::manifest::sha256_hex(&bytes));
    if actual != layer.digest {
        bail!(
            "{source}: the component's bytes ({actual}) do not match its digest in the manifest \
             ({}). Not added, whatever the flags: the registry did not serve the bytes its \
             manifest names",
            layer.digest
        );
    }
    let annotations = manifest.annotations.clone().unwrap_or_default();
    let signature = match verify(dirs, annotations.get(SIGNATURE_ANNOTATION), &bytes) {
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

/// Why a component's signature was not accepted.
#[derive(Debug)]
enum Unverified {
    Unsigned,
    Malformed(String),
    Untrusted { key: String, file: PathBuf },
    Mismatch { key: String, why: String },
    NoTrustFile(String),
}

impl Unverified {
    /// What the person can do about it.
    fn remedy(&self) -> &'static str {
        match self {
            Self::Unsigned | Self::Malformed(_) => {
                "ask its publisher to sign it (`capstan plugins publish --key`)"
            }
            Self::Untrusted { .. } => {
                "if you trust its publisher, get their public key and run \
                 `capstan plugins trust KEY.pub`"
            }
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
            Self::NoTrustFile(e) => write!(f, "{e}"),
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
    let candidates: Vec<&TrustedKey> = trusted
        .iter()
        .filter(|t| t.key.keynum() == sig.keynum())
        .collect();
    if candidates.is_empty() {
        return Err(Unverified::Untrusted {
            key,
            file: trusted_keys_file(dirs),
        });
    }
    let mut why = String::new();
    for t in candidates {
        match minisign::verify(&t.key, &sig, Cursor::new(bytes), true, false, true) {
            Ok(()) => {
                let comment = sig.trusted_comment().unwrap_or_default();
                return Ok(format!(
                    "signed by trusted key {key}{}{}",
                    if t.comment.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", t.comment)
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
