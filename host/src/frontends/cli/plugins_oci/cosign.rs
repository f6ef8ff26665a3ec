//! cosign key-pair signatures, offline: the keys `cosign generate-key-pair` writes
//! (an ECDSA P-256 public key as PEM SPKI; the private key as PKCS#8, encrypted
//! with a scrypt-derived key in a NaCl secretbox, the password from
//! `COSIGN_PASSWORD`), the "simple signing" payload cosign signs for an image
//! digest, and ECDSA-P256-SHA256 signatures in ASN.1 DER, base64 in the layer
//! annotation `dev.cosignproject.cosign/signature`. Layout:
//! sigstore/cosign `specs/SIGNATURE_SPEC.md`. The registry side (the
//! `sha256-HEX.sig` tag) is in mod.rs.

use anyhow::{Result, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::{Nonce, XSalsa20Poly1305};
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding,
};
use p256::{PublicKey, SecretKey};
use serde::{Deserialize, Serialize};

/// Media type of the simple-signing payload layer in a `.sig` artifact.
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Layer annotation carrying the base64 DER signature of the payload.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// `critical.type` of a cosign image signature.
pub const SIGNATURE_TYPE: &str = "cosign container image signature";
/// The PEM labels cosign writes for its private keys: `SIGSTORE` since cosign
/// 2.0, `COSIGN` before; both are read the same way.
const PRIVATE_LABELS: [&str; 2] = [
    "ENCRYPTED SIGSTORE PRIVATE KEY",
    "ENCRYPTED COSIGN PRIVATE KEY",
];
/// scrypt cost cosign uses today (2^16; older keys have 2^15). Keys asking for
/// more than 2^20 (1 GiB of memory at r = 8) are refused rather than run.
const SCRYPT_LOG_N: u8 = 16;
const SCRYPT_MAX_LOG_N: u8 = 20;

/// Whether a text is a PEM block with this label (anywhere in it).
fn has_pem(text: &str, label: &str) -> bool {
    text.contains(&format!("-----BEGIN {label}-----"))
}

/// Whether this text is a cosign private key file (either label).
pub fn is_private_key(text: &str) -> bool {
    PRIVATE_LABELS.iter().any(|l| has_pem(text, l))
}

/// Whether this text is a PEM public key (what cosign.pub holds).
pub fn is_public_key(text: &str) -> bool {
    has_pem(text, "PUBLIC KEY")
}

/// The DER inside the first PEM block of `text` labelled `label`.
fn pem_body(text: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let b64: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    B64.decode(b64).ok()
}

/// A cosign public key: ECDSA P-256 in a PEM `PUBLIC KEY` block (cosign.pub).
pub fn parse_public_pem(text: &str) -> Result<PublicKey> {
    let der = pem_body(text, "PUBLIC KEY")
        .ok_or_else(|| anyhow!("the PUBLIC KEY block is not valid base64"))?;
    from_spki_der(&der)
}

/// A P-256 public key from its SPKI DER (the body of cosign.pub, and the form
/// the trusted-keys file stores).
pub fn from_spki_der(der: &[u8]) -> Result<PublicKey> {
    PublicKey::from_public_key_der(der).map_err(|e| {
        anyhow!(
            "not an ECDSA P-256 public key ({e}); Capstan verifies the keys \
             `cosign generate-key-pair` makes (RSA and Ed25519 cosign keys are not supported)"
        )
    })
}

/// The SPKI DER of a public key.
pub fn spki_der(key: &PublicKey) -> Vec<u8> {
    key.to_public_key_der()
        .map(|d| d.as_bytes().to_vec())
        .unwrap_or_default()
}

/// How a cosign key is named to people: `cosign:` and the start of the
/// SHA-256 of its SPKI DER (cosign has no key IDs; this one is stable and
/// `openssl pkey -pubin -in cosign.pub -outform DER | sha256sum` shows it).
pub fn key_id(key: &PublicKey) -> String {
    let hex = crate::plugins::manifest::sha256_hex(&spki_der(key));
    format!("cosign:{}", &hex[..16.min(hex.len())])
}

/// The PEM text of a public key, as cosign.pub holds it.
pub fn public_pem(key: &PublicKey) -> Result<String> {
    key.to_public_key_pem(LineEnding::LF)
        .map_err(|e| anyhow!("cannot encode the public key: {e}"))
}

/// The JSON inside cosign's private key PEM (go-securesystemslib's
/// `encrypted` envelope); fields in its order, so keys written here match.
#[derive(Deserialize, Serialize)]
struct Encrypted {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Deserialize, Serialize)]
struct Kdf {
    name: String,
    params: ScryptParams,
    salt: String,
}

#[derive(Deserialize, Serialize)]
#[allow(non_snake_case)]
struct ScryptParams {
    N: u64,
    r: u32,
    p: u32,
}

#[derive(Deserialize, Serialize)]
struct Cipher {
    name: String,
    nonce: String,
}

/// Why a cosign private key could not be opened; `WrongPassword` is told apart
/// so the caller can say which password was tried.
#[derive(Debug)]
pub enum KeyError {
    WrongPassword,
    Invalid(String),
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::WrongPassword => write!(f, "the password does not open it"),
            Self::Invalid(why) => write!(f, "{why}"),
        }
    }
}

fn scrypt_key(
    password: &[u8],
    salt: &[u8],
    log_n: u8,
    r: u32,
    p: u32,
) -> Result<[u8; 32], KeyError> {
    let params = scrypt::Params::new(log_n, r, p, 32)
        .map_err(|e| KeyError::Invalid(format!("scrypt parameters: {e}")))?;
    let mut key = [0u8; 32];
    scrypt::scrypt(password, salt, &params, &mut key)
        .map_err(|e| KeyError::Invalid(format!("scrypt: {e}")))?;
    Ok(key)
}

/// Opens a cosign private key file with its password.
pub fn decrypt_private_key(text: &str, password: &[u8]) -> Result<SecretKey, KeyError> {
    let invalid = |why: &str| KeyError::Invalid(why.to_string());
    let label = PRIVATE_LABELS
        .iter()
        .find(|l| has_pem(text, l))
        .ok_or_else(|| invalid("no ENCRYPTED SIGSTORE (or COSIGN) PRIVATE KEY block"))?;
    let json = pem_body(text, label).ok_or_else(|| invalid("the PEM block is not valid base64"))?;
    let enc: Encrypted = serde_json::from_slice(&json)
        .map_err(|e| KeyError::Invalid(format!("the PEM block is not cosign's key JSON ({e})")))?;
    if enc.kdf.name != "scrypt" || enc.cipher.name != "nacl/secretbox" {
        return Err(KeyError::Invalid(format!(
            "key derivation `{}` with cipher `{}`; cosign keys use scrypt with nacl/secretbox",
            enc.kdf.name, enc.cipher.name
        )));
    }
    let n = enc.kdf.params.N;
    if !n.is_power_of_two() || n < 2 {
        return Err(invalid("scrypt N is not a power of two"));
    }
    let log_n = u8::try_from(n.trailing_zeros()).unwrap_or(u8::MAX);
    if log_n > SCRYPT_MAX_LOG_N {
        return Err(KeyError::Invalid(format!(
            "scrypt N = {n} asks for more memory than Capstan spends on a key (at most 2^{SCRYPT_MAX_LOG_N})"
        )));
    }
    let salt = B64
        .decode(&enc.kdf.salt)
        .map_err(|_| invalid("salt is not base64"))?;
    let nonce = B64
        .decode(&enc.cipher.nonce)
        .map_err(|_| invalid("nonce is not base64"))?;
    if nonce.len() != 24 {
        return Err(invalid("the secretbox nonce is not 24 bytes"));
    }
    let ciphertext = B64
        .decode(&enc.ciphertext)
        .map_err(|_| invalid("ciphertext is not base64"))?;
    let key = scrypt_key(password, &salt, log_n, enc.kdf.params.r, enc.kdf.params.p)?;
    let plain = XSalsa20Poly1305::new(&key.into())
        .decrypt(Nonce::from_slice(&nonce), ciphertext.as_slice())
        .map_err(|_| KeyError::WrongPassword)?;
    SecretKey::from_pkcs8_der(&plain).map_err(|e| {
        KeyError::Invalid(format!(
            "it holds no PKCS#8 ECDSA P-256 key ({e}); Capstan signs with the keys \
             `cosign generate-key-pair` makes"
        ))
    })
}

/// N random bytes from the OS.
fn random<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| anyhow!("no randomness from the OS: {e}"))?;
    Ok(b)
}

/// A new P-256 key.
pub fn generate() -> Result<SecretKey> {
    loop {
        // Nearly every 32-byte string is a valid scalar; the loop covers the rest.
        if let Ok(k) = SecretKey::from_slice(&random::<32>()?) {
            return Ok(k);
        }
    }
}

/// A private key file as `cosign generate-key-pair` writes it (current label,
/// scrypt N = 2^16, r = 8, p = 1).
pub fn encrypt_private_key(key: &SecretKey, password: &[u8]) -> Result<String> {
    let der = key
        .to_pkcs8_der()
        .map_err(|e| anyhow!("cannot encode the private key: {e}"))?;
    let salt = random::<32>()?;
    let nonce = random::<24>()?;
    let k = scrypt_key(password, &salt, SCRYPT_LOG_N, 8, 1).map_err(|e| anyhow!("{e}"))?;
    let ciphertext = XSalsa20Poly1305::new(&k.into())
        .encrypt(Nonce::from_slice(&nonce), der.as_bytes())
        .map_err(|_| anyhow!("cannot encrypt the private key"))?;
    let json = Encrypted {
        kdf: Kdf {
            name: "scrypt".into(),
            params: ScryptParams {
                N: 1 << SCRYPT_LOG_N,
                r: 8,
                p: 1,
            },
            salt: B64.encode(salt),
        },
        cipher: Cipher {
            name: "nacl/secretbox".into(),
            nonce: B64.encode(nonce),
        },
        ciphertext: B64.encode(ciphertext),
    };
    let body = B64.encode(serde_json::to_vec(&json)?);
    let label = PRIVATE_LABELS[0];
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    Ok(out)
}

/// The simple-signing payload cosign signs for `docker_reference` (REGISTRY/
/// REPOSITORY) at `digest`, byte for byte what cosign writes (Go's encoding/json
/// of its struct: fields in this order, no spaces, `optional` null).
pub fn payload(docker_reference: &str, digest: &str) -> Vec<u8> {
    let s = |v: &str| serde_json::Value::String(v.to_string()).to_string();
    format!(
        r#"{{"critical":{{"identity":{{"docker-reference":{}}},"image":{{"docker-manifest-digest":{}}},"type":{}}},"optional":null}}"#,
        s(docker_reference),
        s(digest),
        s(SIGNATURE_TYPE)
    )
    .into_bytes()
}

/// Base64 of the ASN.1 DER ECDSA-P256-SHA256 signature of `message`.
pub fn sign(key: &SecretKey, message: &[u8]) -> String {
    let sig: Signature = SigningKey::from(key).sign(message);
    B64.encode(sig.to_der().as_bytes())
}

/// Whether `signature` (base64 DER, as in the annotation) is `key`'s signature
/// of `message`.
pub fn verify(key: &PublicKey, message: &[u8], signature: &str) -> bool {
    let Ok(der) = B64.decode(signature.trim()) else {
        return false;
    };
    let Ok(sig) = Signature::from_der(&der) else {
        return false;
    };
    VerifyingKey::from(key).verify(message, &sig).is_ok()
}

/// What a verified payload must say: a cosign image signature of exactly
/// `digest`. `docker-reference` is not compared (cosign ignores it too: an
/// image copied to another registry keeps its signatures).
pub fn check_payload(payload: &[u8], digest: &str) -> Result<()> {
    let v: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| anyhow!("the signed payload is not JSON ({e})"))?;
    let critical = &v["critical"];
    let kind = critical["type"].as_str().unwrap_or_default();
    if kind != SIGNATURE_TYPE {
        bail!("the signed payload is a `{kind}`, not a `{SIGNATURE_TYPE}`");
    }
    match critical["image"]["docker-manifest-digest"].as_str() {
        Some(d) if d == digest => Ok(()),
        Some(d) => bail!(
            "the signature is for manifest {d}, not this one ({digest}): a valid signature \
             moved to another component"
        ),
        None => bail!("the signed payload names no docker-manifest-digest"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/cosign");

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("{FIXTURES}/{name}"))
            .unwrap_or_else(|e| panic!("{FIXTURES}/{name}: {e}"))
    }

    /// A signature made by real cosign (the sigstore-rs test vector) over a
    /// simple-signing payload verifies with its public key, and nothing else does.
    #[test]
    fn a_real_cosign_signature_verifies_and_a_changed_payload_does_not() {
        let key = parse_public_pem(&fixture("busybox.pub")).unwrap();
        let payload = fixture("busybox.payload.json");
        let payload = payload.trim_end().as_bytes();
        let sig = fixture("busybox.sig.b64");
        assert!(verify(&key, payload, &sig));
        check_payload(
            payload,
            "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b",
        )
        .unwrap();
        let err = check_payload(payload, "sha256:00").unwrap_err().to_string();
        assert!(err.contains("not this one"), "{err}");

        let mut changed = payload.to_vec();
        let at = changed.len() - 10;
        changed[at] ^= 1;
        assert!(!verify(&key, &changed, &sig));
        let other = parse_public_pem(&fixture("cosign-hello.pub")).unwrap();
        assert!(!verify(&other, payload, &sig));
        assert!(!verify(&key, payload, "not base64!"));
    }

    /// Private keys from cosign's own test data (both PEM labels, password
    /// "hello") and one `cosign generate-key-pair` made with an empty password
    /// decrypt; each signs, and the signature verifies with the public key that
    /// `openssl` derived from it independently (see the fixtures' README).
    #[test]
    fn real_cosign_private_keys_decrypt_sign_and_verify_with_their_public_keys() {
        for (key, password, public) in [
            ("cosign-hello.key", "hello", "cosign-hello.pub"),
            ("cosign-label-hello.key", "hello", "cosign-label-hello.pub"),
            ("cosign-empty.key", "", "cosign-empty.pub"),
        ] {
            let text = fixture(key);
            assert!(is_private_key(&text), "{key}");
            let sk = decrypt_private_key(&text, password.as_bytes())
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            let pk = parse_public_pem(&fixture(public)).unwrap();
            assert_eq!(sk.public_key(), pk, "{key} does not match {public}");
            let payload = payload("127.0.0.1:5000/plugins/hello", "sha256:ab");
            let sig = sign(&sk, &payload);
            assert!(verify(&pk, &payload, &sig), "{key}");
            assert!(matches!(
                decrypt_private_key(&text, b"wrong"),
                Err(KeyError::WrongPassword)
            ));
        }
    }

    /// What keygen writes opens again, with the right password only, and its
    /// public key round-trips through the PEM and the trusted-keys form.
    #[test]
    fn generated_keys_round_trip() {
        let sk = generate().unwrap();
        let text = encrypt_private_key(&sk, b"pw").unwrap();
        assert!(text.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n"));
        // The JSON cosign writes, in its field order.
        let json = String::from_utf8(pem_body(&text, PRIVATE_LABELS[0]).unwrap()).unwrap();
        assert!(
            json.starts_with(
                r#"{"kdf":{"name":"scrypt","params":{"N":65536,"r":8,"p":1},"salt":""#
            ),
            "{json}"
        );
        assert!(
            json.contains(r#""cipher":{"name":"nacl/secretbox","nonce":""#),
            "{json}"
        );
        assert_eq!(decrypt_private_key(&text, b"pw").unwrap(), sk);
        assert!(matches!(
            decrypt_private_key(&text, b"pW"),
            Err(KeyError::WrongPassword)
        ));
        let pk = sk.public_key();
        let pem = public_pem(&pk).unwrap();
        assert!(is_public_key(&pem));
        assert_eq!(parse_public_pem(&pem).unwrap(), pk);
        assert_eq!(from_spki_der(&spki_der(&pk)).unwrap(), pk);
    }

    /// The payload is byte for byte the one cosign writes (cosign's own test
    /// vector, pkg/cosign/obsolete_test.go).
    #[test]
    fn the_payload_is_cosigns() {
        assert_eq!(
            String::from_utf8(payload(
                "index.docker.io/namespace/image",
                "sha256:4aa3054270f7a70b4528f2064ee90961788e1e1518703592ae4463de3b889dec"
            ))
            .unwrap(),
            r#"{"critical":{"identity":{"docker-reference":"index.docker.io/namespace/image"},"image":{"docker-manifest-digest":"sha256:4aa3054270f7a70b4528f2064ee90961788e1e1518703592ae4463de3b889dec"},"type":"cosign container image signature"},"optional":null}"#
        );
        let wrong_type = br#"{"critical":{"image":{"docker-manifest-digest":"sha256:ab"},"type":"atomic container signature"}}"#;
        let err = check_payload(wrong_type, "sha256:ab")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not a `cosign container image signature`"),
            "{err}"
        );
    }

    /// Keys cosign can make but Capstan does not verify are refused by name.
    #[test]
    fn non_p256_keys_are_refused_with_the_reason() {
        // An Ed25519 SPKI (RFC 8410 example key).
        let ed = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        let err = parse_public_pem(ed).unwrap_err().to_string();
        assert!(err.contains("not an ECDSA P-256 public key"), "{err}");
    }
}
