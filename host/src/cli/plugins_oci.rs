//! Plugins from OCI registries: `capstan plugins publish` pushes a component as a
//! wasm OCI artifact, `capstan plugins add oci://...` pulls one, and
//! `capstan plugins keygen` makes the ed25519 key pair that signs them.
//!
//! Layout (the CNCF wasm OCI artifact layout that wkg uses): one layer of media type
//! `application/wasm` holding the component, a config of media type
//! `application/vnd.wasm.config.v0+json` (architecture `wasm`, os `wasip2`, the
//! layer digest, the component's WIT imports and exports).
//!
//! Signatures: the publisher signs `capstan-plugin-signature-v1\n<layer digest>\n`
//! (the digest of the component's bytes) with ed25519; the signature and the public
//! key go in two manifest annotations. `add oci://` verifies the bytes against the
//! layer digest, and the signature against the keys listed in the user's
//! `trusted-keys` file (config dir). An unsigned component, one signed by a key not
//! trusted, or one whose bytes do not match the signature is refused unless the
//! person passes `--allow-unsigned`. No network beyond the registry.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::dirs::Dirs;
use crate::outln;

pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The older wasm-to-oci layer type, still accepted when pulling.
const LEGACY_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
pub const SIGNATURE_ANNOTATION: &str = "dev.capstan.plugin.signature.ed25519";
pub const SIGNER_ANNOTATION: &str = "dev.capstan.plugin.signer.ed25519";
/// Components bigger than this are not pulled.
const MAX_COMPONENT_BYTES: i64 = 256 << 20;

/// The bytes a signature covers.
fn signed_message(layer_digest: &str) -> String {
    format!("capstan-plugin-signature-v1\n{layer_digest}\n")
}

/// `oci://REGISTRY/REPOSITORY[:TAG|@DIGEST]`.
pub fn parse_reference(s: &str) -> Result<Reference> {
    let rest = s
        .strip_prefix("oci://")
        .ok_or_else(|| anyhow!("`{s}`: an OCI reference starts with oci://"))?;
    rest.parse::<Reference>().map_err(|e| {
        anyhow!("`{s}` is not an OCI reference ({e}); write oci://HOST[:PORT]/NAME:TAG")
    })
}

/// Plain HTTP only for a registry on this machine; TLS everywhere else.
fn client_for(reference: &Reference) -> Client {
    let registry = reference.resolve_registry().to_string();
    let host = registry
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&registry);
    let local = matches!(host, "127.0.0.1" | "localhost" | "[::1]");
    Client::new(ClientConfig {
        protocol: if local {
            ClientProtocol::HttpsExcept(vec![registry])
        } else {
            ClientProtocol::Https
        },
        ..Default::default()
    })
}

fn trusted_keys_file(dirs: &Dirs) -> PathBuf {
    dirs.config.join("trusted-keys")
}

/// A public key line: `ed25519 BASE64 [comment]`.
fn parse_public_key(line: &str) -> Option<VerifyingKey> {
    let mut parts = line.split_whitespace();
    if parts.next()? != "ed25519" {
        return None;
    }
    let bytes: [u8; 32] = B64.decode(parts.next()?).ok()?.try_into().ok()?;
    VerifyingKey::from_bytes(&bytes).ok()
}

fn key_text(key: &VerifyingKey) -> String {
    B64.encode(key.as_bytes())
}

/// The keys in the user's trusted-keys file (`#` starts a comment).
fn trusted_keys(dirs: &Dirs) -> Result<Vec<VerifyingKey>> {
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
        keys.push(parse_public_key(line).ok_or_else(|| {
            anyhow!(
                "{}:{}: not a key line; write `ed25519 <base64 public key> [comment]`",
                path.display(),
                i + 1
            )
        })?);
    }
    Ok(keys)
}

/// `capstan plugins keygen OUT`: OUT.key (secret, mode 0600) and OUT.pub.
pub fn keygen(dirs: &Dirs, out: &Path, trust: bool) -> Result<()> {
    let secret_path = out.with_extension("key");
    let public_path = out.with_extension("pub");
    for p in [&secret_path, &public_path] {
        if p.exists() {
            bail!("{} exists; choose another name", p.display());
        }
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow!("no randomness from the OS: {e}"))?;
    let key = SigningKey::from_bytes(&seed);
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let public_line = format!("ed25519 {} {name}\n", key_text(&key.verifying_key()));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret_path)
            .with_context(|| format!("creating {}", secret_path.display()))?;
        writeln!(f, "ed25519-secret {}", B64.encode(seed))?;
    }
    std::fs::write(&public_path, &public_line)
        .with_context(|| format!("writing {}", public_path.display()))?;
    outln!("secret key: {} (keep it private)", secret_path.display());
    outln!("public key: {}", public_path.display());
    if trust {
        trust_key(dirs, &public_line)?;
    } else {
        outln!(
            "to trust plugins it signs: capstan plugins trust {}",
            public_path.display()
        );
    }
    Ok(())
}

/// Adds a public key line to the trusted-keys file.
pub fn trust_key(dirs: &Dirs, line: &str) -> Result<()> {
    let key = parse_public_key(line.trim())
        .ok_or_else(|| anyhow!("not a public key line (`ed25519 <base64> [comment]`)"))?;
    let path = trusted_keys_file(dirs);
    if trusted_keys(dirs)?.contains(&key) {
        outln!("already trusted in {}", path.display());
        return Ok(());
    }
    std::fs::create_dir_all(&dirs.config)?;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{}", line.trim())?;
    outln!("trusted {} in {}", key_text(&key), path.display());
    Ok(())
}

fn load_secret(path: &Path) -> Result<SigningKey> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let b64 = text
        .split_whitespace()
        .skip_while(|w| *w != "ed25519-secret")
        .nth(1)
        .ok_or_else(|| {
            anyhow!(
                "{}: not a secret key from `capstan plugins keygen`",
                path.display()
            )
        })?;
    let seed: [u8; 32] = B64
        .decode(b64)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| anyhow!("{}: the secret key is damaged", path.display()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// `capstan plugins publish PATH oci://...`: returns the pinned reference
/// (`oci://REGISTRY/REPO@sha256:...`).
pub async fn publish(
    bytes: Vec<u8>,
    component: &crate::runtime::LoadedPlugin,
    target: &str,
    key: Option<&Path>,
) -> Result<String> {
    let reference = parse_reference(target)?;
    let layer = ImageLayer::new(bytes, LAYER_MEDIA_TYPE.to_string(), None);
    let layer_digest = layer.sha256_digest();
    let mut imports: Vec<String> = component
        .imports
        .iter()
        .map(|s| format!("capstan:plugin/{s}@{}", component.wit_version))
        .collect();
    imports.sort();
    let config = serde_json::json!({
        "created": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {
            "exports": [format!("capstan:plugin/capability@{}", component.wit_version)],
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
        component.name().to_string(),
    );
    annotations.insert(
        "dev.capstan.plugin.kinds".to_string(),
        component.kinds.join(","),
    );
    if let Some(key_path) = key {
        let key = load_secret(key_path)?;
        let signature = key.sign(signed_message(&layer_digest).as_bytes());
        annotations.insert(
            SIGNATURE_ANNOTATION.into(),
            B64.encode(signature.to_bytes()),
        );
        annotations.insert(SIGNER_ANNOTATION.into(), key_text(&key.verifying_key()));
    }
    let mut manifest = OciImageManifest::build(
        std::slice::from_ref(&layer),
        &config,
        Some(annotations),
    );
    manifest.artifact_type = Some(CONFIG_MEDIA_TYPE.to_string());
    let client = client_for(&reference);
    client
        .push(
            &reference,
            &[layer],
            config,
            &RegistryAuth::Anonymous,
            Some(manifest),
        )
        .await
        .map_err(|e| anyhow!("pushing to {target}: {e}"))?;
    let (_, digest) = client
        .pull_image_manifest(&reference, &RegistryAuth::Anonymous)
        .await
        .map_err(|e| anyhow!("reading back {target}: {e}"))?;
    Ok(format!(
        "oci://{}/{}@{digest}",
        reference.registry(),
        reference.repository()
    ))
}

/// A component pulled and checked.
pub struct Pulled {
    pub bytes: Vec<u8>,
    /// `oci://REGISTRY/REPO@sha256:<manifest digest>`.
    pub pinned: String,
    /// The last path segment of the repository.
    pub name: String,
    /// Who signed it, for people.
    pub signer: String,
}

/// Pulls `oci://...`, checks the bytes against the layer digest and the signature
/// against the trusted keys.
pub async fn pull(dirs: &Dirs, source: &str, allow_unsigned: bool) -> Result<Pulled> {
    let reference = parse_reference(source)?;
    let client = client_for(&reference);
    let (manifest, digest) = client
        .pull_image_manifest(&reference, &RegistryAuth::Anonymous)
        .await
        .map_err(|e| anyhow!("{source}: {e}"))?;
    let wasm: Vec<_> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == LAYER_MEDIA_TYPE || l.media_type == LEGACY_LAYER_MEDIA_TYPE)
        .collect();
    let [layer] = wasm.as_slice() else {
        bail!(
            "{source}: not a wasm component artifact (expected one `{LAYER_MEDIA_TYPE}` layer, found {})",
            wasm.len()
        );
    };
    if layer.size > MAX_COMPONENT_BYTES || layer.size < 0 {
        bail!(
            "{source}: the component is {} bytes, more than {MAX_COMPONENT_BYTES}",
            layer.size
        );
    }
    let mut bytes = Vec::new();
    client
        .pull_blob(&reference, *layer, &mut bytes)
        .await
        .map_err(|e| anyhow!("{source}: pulling the component: {e}"))?;
    let actual = format!("sha256:{}", crate::runtime::sha256_hex(&bytes));
    if actual != layer.digest {
        bail!(
            "{source}: the component's bytes ({actual}) do not match its digest in the manifest ({})",
            layer.digest
        );
    }
    let annotations = manifest.annotations.clone().unwrap_or_default();
    let signer = match (
        annotations.get(SIGNATURE_ANNOTATION),
        annotations.get(SIGNER_ANNOTATION),
    ) {
        (Some(sig), Some(signer)) => {
            match verify(dirs, sig, signer, &actual) {
                Ok(desc) => desc,
                Err(why) if allow_unsigned => {
                    crate::errln!("warning: {source}: {why}; adding it anyway (--allow-unsigned)");
                    format!("NOT VERIFIED ({why})")
                }
                Err(why) => bail!(
                    "{source}: {why}. Refusing it; pass --allow-unsigned only if you trust it anyway"
                ),
            }
        }
        _ if allow_unsigned => {
            crate::errln!("warning: {source} is not signed; adding it anyway (--allow-unsigned)");
            "unsigned".into()
        }
        _ => bail!(
            "{source} is not signed. Refusing it; ask its publisher to sign it \
             (capstan plugins publish --key), or pass --allow-unsigned if you trust it anyway"
        ),
    };
    let name = reference
        .repository()
        .rsplit('/')
        .next()
        .unwrap_or("plugin")
        .to_string();
    Ok(Pulled {
        bytes,
        pinned: format!(
            "oci://{}/{}@{digest}",
            reference.registry(),
            reference.repository()
        ),
        name,
        signer,
    })
}

/// Checks a signature over the component digest against the trusted keys.
fn verify(dirs: &Dirs, sig: &str, signer: &str, layer_digest: &str) -> Result<String, String> {
    let key = B64
        .decode(signer)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
        .ok_or("its signer annotation is not an ed25519 public key")?;
    let trusted = trusted_keys(dirs).map_err(|e| e.to_string())?;
    if !trusted.contains(&key) {
        return Err(format!(
            "it is signed by key {}, which is not in {}",
            key_text(&key),
            trusted_keys_file(dirs).display()
        ));
    }
    let signature = B64
        .decode(sig)
        .ok()
        .and_then(|b| Signature::from_slice(&b).ok())
        .ok_or("its signature annotation is not an ed25519 signature")?;
    key.verify_strict(signed_message(layer_digest).as_bytes(), &signature)
        .map_err(|_| {
            format!(
                "its signature does not match its bytes ({layer_digest}): the component changed after it was signed"
            )
        })?;
    Ok(format!("signed by trusted key {}", key_text(&key)))
}
