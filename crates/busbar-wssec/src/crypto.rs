//! The fixed algorithm profile: each supported algorithm is an enum variant named by its URI,
//! and anything else is refused by the caller before it gets here.
//!
//! RSA private-key operations run in AWS-LC (constant time, blinded): through aws-lc-rs, except
//! RSA-SHA1 signing, which aws-lc-rs does not offer and busbar-awslc calls in the same library
//! (see [`PrivateKey::sign`]). Digests and AES come from RustCrypto.
//! RSA keys must have 2048 to 8192 bits, for signing, verifying and key transport alike.

use std::fmt;
use std::sync::Arc;

use aes_gcm::aead::{Aead, KeyInit};
use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::error::KeyRejected;
use aws_lc_rs::rsa::{
    OaepPrivateDecryptingKey, OaepPublicEncryptingKey, Pkcs1PrivateDecryptingKey,
    Pkcs1PublicEncryptingKey, PrivateDecryptingKey, PublicEncryptingKey, OAEP_SHA1_MGF1SHA1,
};
use aws_lc_rs::signature::{
    KeyPair as _, ParsedPublicKey, RsaKeyPair, RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
    RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256,
};
use busbar_awslc::RsaSha1Signer;
use cbc::cipher::{Array, BlockModeDecrypt, BlockModeEncrypt, KeyIvInit};
use sha1::Digest as _;

/// Why a cryptographic operation failed. The messages are deliberately generic: they may end
/// up in logs next to attacker-chosen input, and must not tell padding failures apart.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("malformed RSA key")]
    InvalidKey,
    #[error("not an RSA key")]
    NotRsa,
    #[error("RSA key shorter than 2048 bits")]
    KeyTooSmall,
    #[error("RSA key longer than 8192 bits")]
    KeyTooLarge,
    #[error("signing failed")]
    Sign,
    #[error("key transport failed")]
    KeyTransport,
    #[error("wrong key length for the cipher")]
    KeyLength,
    #[error("encryption failed")]
    Encrypt,
    #[error("decryption failed")]
    Decrypt,
}

impl From<KeyRejected> for CryptoError {
    fn from(e: KeyRejected) -> Self {
        // aws-lc-rs reports the reason only as a fixed description string.
        match e.description_() {
            "WrongAlgorithm" => CryptoError::NotRsa,
            "TooSmall" => CryptoError::KeyTooSmall,
            "TooLarge" => CryptoError::KeyTooLarge,
            _ => CryptoError::InvalidKey,
        }
    }
}

/// A message digest for `ds:DigestMethod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DigestAlg {
    Sha1,
    Sha256,
}

impl DigestAlg {
    pub fn uri(&self) -> &'static str {
        match self {
            DigestAlg::Sha1 => "http://www.w3.org/2000/09/xmldsig#sha1",
            DigestAlg::Sha256 => "http://www.w3.org/2001/04/xmlenc#sha256",
        }
    }

    pub fn from_uri(uri: &str) -> Option<Self> {
        [DigestAlg::Sha1, DigestAlg::Sha256]
            .into_iter()
            .find(|a| a.uri() == uri)
    }

    pub fn is_legacy(&self) -> bool {
        matches!(self, DigestAlg::Sha1)
    }

    pub fn output_len(&self) -> usize {
        match self {
            DigestAlg::Sha1 => 20,
            DigestAlg::Sha256 => 32,
        }
    }
}

pub fn digest(alg: DigestAlg, data: &[u8]) -> Vec<u8> {
    match alg {
        DigestAlg::Sha1 => sha1::Sha1::digest(data).to_vec(),
        DigestAlg::Sha256 => sha2::Sha256::digest(data).to_vec(),
    }
}

/// A signature algorithm for `ds:SignatureMethod`; both are RSASSA-PKCS1-v1_5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignatureAlg {
    RsaSha1,
    RsaSha256,
}

impl SignatureAlg {
    pub fn uri(&self) -> &'static str {
        match self {
            SignatureAlg::RsaSha1 => "http://www.w3.org/2000/09/xmldsig#rsa-sha1",
            SignatureAlg::RsaSha256 => "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256",
        }
    }

    pub fn from_uri(uri: &str) -> Option<Self> {
        [SignatureAlg::RsaSha1, SignatureAlg::RsaSha256]
            .into_iter()
            .find(|a| a.uri() == uri)
    }

    pub fn is_legacy(&self) -> bool {
        matches!(self, SignatureAlg::RsaSha1)
    }
}

/// A key transport algorithm for `xenc:EncryptedKey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyTransport {
    /// RSAES-PKCS1-v1_5.
    Rsa15,
    /// RSAES-OAEP with SHA-1 as digest and in MGF1, and an empty label.
    RsaOaepMgf1p,
}

impl KeyTransport {
    pub fn uri(&self) -> &'static str {
        match self {
            KeyTransport::Rsa15 => "http://www.w3.org/2001/04/xmlenc#rsa-1_5",
            KeyTransport::RsaOaepMgf1p => "http://www.w3.org/2001/04/xmlenc#rsa-oaep-mgf1p",
        }
    }

    pub fn from_uri(uri: &str) -> Option<Self> {
        [KeyTransport::Rsa15, KeyTransport::RsaOaepMgf1p]
            .into_iter()
            .find(|a| a.uri() == uri)
    }

    pub fn is_legacy(&self) -> bool {
        matches!(self, KeyTransport::Rsa15)
    }
}

/// A block encryption algorithm for `xenc:EncryptedData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockCipher {
    Aes128Cbc,
    Aes256Cbc,
    Aes128Gcm,
    Aes256Gcm,
}

const CBC_IV_LEN: usize = 16;
const AES_BLOCK_LEN: usize = 16;
const GCM_IV_LEN: usize = 12;
const GCM_TAG_LEN: usize = 16;

impl BlockCipher {
    pub fn uri(&self) -> &'static str {
        match self {
            BlockCipher::Aes128Cbc => "http://www.w3.org/2001/04/xmlenc#aes128-cbc",
            BlockCipher::Aes256Cbc => "http://www.w3.org/2001/04/xmlenc#aes256-cbc",
            BlockCipher::Aes128Gcm => "http://www.w3.org/2009/xmlenc11#aes128-gcm",
            BlockCipher::Aes256Gcm => "http://www.w3.org/2009/xmlenc11#aes256-gcm",
        }
    }

    pub fn from_uri(uri: &str) -> Option<Self> {
        [
            BlockCipher::Aes128Cbc,
            BlockCipher::Aes256Cbc,
            BlockCipher::Aes128Gcm,
            BlockCipher::Aes256Gcm,
        ]
        .into_iter()
        .find(|a| a.uri() == uri)
    }

    /// Key length in bytes.
    pub fn key_len(&self) -> usize {
        match self {
            BlockCipher::Aes128Cbc | BlockCipher::Aes128Gcm => 16,
            BlockCipher::Aes256Cbc | BlockCipher::Aes256Gcm => 32,
        }
    }

    /// Whether the cipher authenticates its ciphertext.
    pub fn is_aead(&self) -> bool {
        matches!(self, BlockCipher::Aes128Gcm | BlockCipher::Aes256Gcm)
    }
}

/// `n` bytes from aws-lc's DRBG.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    if aws_lc_rs::rand::fill(&mut out).is_err() {
        // AWS-LC's RAND_bytes aborts by itself when it cannot get entropy and otherwise always
        // succeeds, so this is not reached; if that ever changes, stopping beats handing out
        // predictable bytes as keys and nonces.
        std::process::abort();
    }
    out
}

/// An RSA public key, as held in an X.509 certificate.
#[derive(Clone)]
pub struct PublicKey(Arc<PublicKeyInner>);

struct PublicKeyInner {
    /// Re-encoded by aws-lc, so that equal keys have equal bytes.
    spki: Vec<u8>,
    bits: usize,
    verify_sha1: ParsedPublicKey,
    verify_sha256: ParsedPublicKey,
    oaep: OaepPublicEncryptingKey,
    pkcs1: Pkcs1PublicEncryptingKey,
}

impl PublicKey {
    /// Parses a DER `SubjectPublicKeyInfo` holding an RSA key of 2048 to 8192 bits.
    pub fn from_spki_der(der: &[u8]) -> Result<Self, CryptoError> {
        let encrypting = PublicEncryptingKey::from_der(der)?;
        let bits = encrypting.key_size_bits();
        let spki = encrypting
            .as_der()
            .map_err(|_| CryptoError::InvalidKey)?
            .as_ref()
            .to_vec();
        let verify_sha1 =
            ParsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY, &spki)?;
        let verify_sha256 = ParsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &spki)?;
        let oaep = OaepPublicEncryptingKey::new(encrypting.clone())
            .map_err(|_| CryptoError::InvalidKey)?;
        let pkcs1 =
            Pkcs1PublicEncryptingKey::new(encrypting).map_err(|_| CryptoError::InvalidKey)?;
        Ok(PublicKey(Arc::new(PublicKeyInner {
            spki,
            bits,
            verify_sha1,
            verify_sha256,
            oaep,
            pkcs1,
        })))
    }

    pub fn bits(&self) -> usize {
        self.0.bits
    }

    /// The key as a DER `SubjectPublicKeyInfo`, in aws-lc's canonical encoding.
    pub fn spki_der(&self) -> &[u8] {
        &self.0.spki
    }

    pub fn verify(&self, alg: SignatureAlg, data: &[u8], signature: &[u8]) -> bool {
        let key = match alg {
            SignatureAlg::RsaSha1 => &self.0.verify_sha1,
            SignatureAlg::RsaSha256 => &self.0.verify_sha256,
        };
        key.verify_sig(data, signature).is_ok()
    }

    /// Encrypts a session key for the holder of the private key.
    pub fn wrap_key(&self, kt: KeyTransport, key: &[u8]) -> Result<Vec<u8>, CryptoError> {
        match kt {
            KeyTransport::RsaOaepMgf1p => {
                let oaep = &self.0.oaep;
                if key.len() > oaep.max_plaintext_size(&OAEP_SHA1_MGF1SHA1) {
                    return Err(CryptoError::KeyTransport);
                }
                let mut out = vec![0u8; oaep.ciphertext_size()];
                let len = oaep
                    .encrypt(&OAEP_SHA1_MGF1SHA1, key, &mut out, None)
                    .map_err(|_| CryptoError::KeyTransport)?
                    .len();
                out.truncate(len);
                Ok(out)
            }
            KeyTransport::Rsa15 => {
                let pkcs1 = &self.0.pkcs1;
                if key.len() > pkcs1.max_plaintext_size() {
                    return Err(CryptoError::KeyTransport);
                }
                let mut out = vec![0u8; pkcs1.ciphertext_size()];
                let len = pkcs1
                    .encrypt(key, &mut out)
                    .map_err(|_| CryptoError::KeyTransport)?
                    .len();
                out.truncate(len);
                Ok(out)
            }
        }
    }
}

impl PartialEq for PublicKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.spki == other.0.spki
    }
}

impl Eq for PublicKey {}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey")
            .field("bits", &self.0.bits)
            .finish_non_exhaustive()
    }
}

/// An RSA private key, for signing and for unwrapping session keys.
pub struct PrivateKey {
    signing: RsaKeyPair,
    /// aws-lc-rs has no PKCS#1 v1.5 signing with SHA-1; see [`PrivateKey::sign`].
    legacy_signing: RsaSha1Signer,
    oaep: OaepPrivateDecryptingKey,
    pkcs1: Pkcs1PrivateDecryptingKey,
    public: PublicKey,
    /// Keys the replacement for an RSA-1.5 session key that does not decrypt; derived from the
    /// private key, so a ciphertext gets the same replacement in every process.
    rejection: aws_lc_rs::hmac::Key,
}

impl PrivateKey {
    /// Parses a DER PKCS#8 `PrivateKeyInfo` holding an RSA key of 2048 to 8192 bits.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<Self, CryptoError> {
        let signing = RsaKeyPair::from_pkcs8(der)?;
        let decrypting = PrivateDecryptingKey::from_pkcs8(der)?;
        let legacy_signing = RsaSha1Signer::from_pkcs8_der(der).map_err(|e| match e {
            busbar_awslc::Error::NotRsa => CryptoError::NotRsa,
            busbar_awslc::Error::KeyTooSmall => CryptoError::KeyTooSmall,
            busbar_awslc::Error::KeyTooLarge => CryptoError::KeyTooLarge,
            busbar_awslc::Error::InvalidKey | busbar_awslc::Error::Sign => CryptoError::InvalidKey,
        })?;
        let spki = signing
            .public_key()
            .as_der()
            .map_err(|_| CryptoError::InvalidKey)?;
        let public = PublicKey::from_spki_der(spki.as_ref())?;
        let oaep = OaepPrivateDecryptingKey::new(decrypting.clone())
            .map_err(|_| CryptoError::InvalidKey)?;
        let pkcs1 =
            Pkcs1PrivateDecryptingKey::new(decrypting).map_err(|_| CryptoError::InvalidKey)?;
        let mut secret = sha2::Sha256::new();
        secret.update(b"busbar RSA-1.5 implicit rejection\0");
        secret.update(der);
        let rejection = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &secret.finalize());
        Ok(PrivateKey {
            signing,
            legacy_signing,
            oaep,
            pkcs1,
            public,
            rejection,
        })
    }

    /// Parses a DER PKCS#1 `RSAPrivateKey` (PEM label "RSA PRIVATE KEY").
    pub fn from_pkcs1_der(der: &[u8]) -> Result<Self, CryptoError> {
        let key = RsaKeyPair::from_der(der)?;
        let pkcs8 = key.as_der().map_err(|_| CryptoError::InvalidKey)?;
        Self::from_pkcs8_der(pkcs8.as_ref())
    }

    pub fn bits(&self) -> usize {
        self.public.bits()
    }

    pub fn public_key(&self) -> PublicKey {
        self.public.clone()
    }

    /// RSASSA-PKCS1-v1_5 signature over `data`.
    ///
    /// aws-lc-rs signs PKCS#1 v1.5 only with SHA-256 and longer digests, and its safe API has no
    /// raw RSA operation to build the SHA-1 encoding on. RSA-SHA1 therefore goes through
    /// busbar-awslc, which calls AWS-LC's `RSA_sign` with SHA-1 on the same key in the same
    /// library build: the private-key operation aws-lc-rs's SHA-256 signing runs (constant-time,
    /// blinded, result checked), with only the `DigestInfo` prefix differing. It is used only
    /// when a legacy peer is configured to receive RSA-SHA1 signatures.
    pub fn sign(&self, alg: SignatureAlg, data: &[u8]) -> Result<Vec<u8>, CryptoError> {
        match alg {
            SignatureAlg::RsaSha256 => {
                let mut sig = vec![0u8; self.signing.public_modulus_len()];
                self.signing
                    .sign(
                        &RSA_PKCS1_SHA256,
                        &aws_lc_rs::rand::SystemRandom::new(),
                        data,
                        &mut sig,
                    )
                    .map_err(|_| CryptoError::Sign)?;
                Ok(sig)
            }
            SignatureAlg::RsaSha1 => self
                .legacy_signing
                .sign_sha1(data)
                .map_err(|_| CryptoError::Sign),
        }
    }

    /// Decrypts a session key wrapped for this key.
    ///
    /// RSA-OAEP failures are errors. RSA-1.5 never fails on attacker-controlled input: any
    /// failure (bad padding, wrong length of either the ciphertext or the result) yields a
    /// replacement key of `expected_len` bytes, the same for the same ciphertext, chosen without
    /// branching on the secret outcome, so the caller fails later at data decryption exactly as
    /// it would with a wrong key. This is
    /// the RFC 3218 / TLS defence against Bleichenbacher-style padding oracles. What remains is
    /// inside aws-lc: its PKCS#1 check is constant-time but returns its verdict as an error,
    /// which takes a slightly different path than success.
    pub fn unwrap_key(
        &self,
        kt: KeyTransport,
        wrapped: &[u8],
        expected_len: usize,
    ) -> Result<Vec<u8>, CryptoError> {
        match kt {
            KeyTransport::RsaOaepMgf1p => {
                let mut out = vec![0u8; self.oaep.min_output_size()];
                let key = self
                    .oaep
                    .decrypt(&OAEP_SHA1_MGF1SHA1, wrapped, &mut out, None)
                    .map_err(|_| CryptoError::KeyTransport)?;
                if key.len() != expected_len {
                    return Err(CryptoError::KeyTransport);
                }
                Ok(key.to_vec())
            }
            KeyTransport::Rsa15 => {
                // A caller asking for no key or one that cannot fit is a programming error,
                // independent of the message, so it may fail openly.
                if expected_len == 0 || expected_len > self.pkcs1.key_size_bytes() - 11 {
                    return Err(CryptoError::KeyTransport);
                }
                let fallback = self.replacement_key(wrapped, expected_len);
                let mut out = vec![0u8; self.pkcs1.min_output_size()];
                let (decrypted, len) = match self.pkcs1.decrypt(wrapped, &mut out) {
                    Ok(key) => (1u8, key.len()),
                    Err(_) => (0u8, 0),
                };
                let good = decrypted & ct_eq_usize(len, expected_len);
                Ok(ct_select(good, &out[..expected_len], &fallback))
            }
        }
    }
}

impl PrivateKey {
    /// The key an RSA-1.5 unwrap of `wrapped` yields when it fails: pseudorandom, but the same
    /// for the same ciphertext each time. A fresh random key would give it away: a ciphertext
    /// that decrypts would behave the same on every try, one that does not differently each
    /// time (the "implicit rejection" of the Marvin attack's write-up, draft-irtf-cfrg-rsa-guidance).
    fn replacement_key(&self, wrapped: &[u8], len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 32);
        let mut block: u32 = 0;
        while out.len() < len {
            let mut mac = aws_lc_rs::hmac::Context::with_key(&self.rejection);
            mac.update(&block.to_be_bytes());
            mac.update(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
            mac.update(wrapped);
            out.extend_from_slice(mac.sign().as_ref());
            block += 1;
        }
        out.truncate(len);
        out
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateKey")
            .field("bits", &self.bits())
            .finish_non_exhaustive()
    }
}

/// 1 if `a == b`, else 0, without a data-dependent branch.
fn ct_eq_usize(a: usize, b: usize) -> u8 {
    let diff = a ^ b;
    // `diff | -diff` has its top bit set exactly when diff != 0.
    let nonzero = (diff | diff.wrapping_neg()) >> (usize::BITS - 1);
    (1 ^ nonzero) as u8
}

/// `a` if `choice` is 1, `b` if it is 0, selected bytewise through a mask.
fn ct_select(choice: u8, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mask = std::hint::black_box(choice).wrapping_neg();
    a.iter()
        .zip(b)
        .map(|(x, y)| (x & mask) | (y & !mask))
        .collect()
}

/// Encrypts in the XML Encryption layout: CBC is IV ‖ ciphertext, GCM is IV ‖ ciphertext ‖ tag,
/// with a fresh random IV each time.
pub fn encrypt(cipher: BlockCipher, key: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, CryptoError> {
    if key.len() != cipher.key_len() {
        return Err(CryptoError::KeyLength);
    }
    match cipher {
        BlockCipher::Aes128Cbc => cbc_encrypt::<aes::Aes128>(key, plaintext),
        BlockCipher::Aes256Cbc => cbc_encrypt::<aes::Aes256>(key, plaintext),
        BlockCipher::Aes128Gcm => gcm_encrypt::<aes_gcm::Aes128Gcm>(key, plaintext),
        BlockCipher::Aes256Gcm => gcm_encrypt::<aes_gcm::Aes256Gcm>(key, plaintext),
    }
}

/// Reverses [`encrypt`]. Every failure is the same [`CryptoError::Decrypt`].
pub fn decrypt(cipher: BlockCipher, key: &[u8], data: &[u8]) -> Result<Vec<u8>, CryptoError> {
    if key.len() != cipher.key_len() {
        return Err(CryptoError::KeyLength);
    }
    match cipher {
        BlockCipher::Aes128Cbc => cbc_decrypt::<aes::Aes128>(key, data),
        BlockCipher::Aes256Cbc => cbc_decrypt::<aes::Aes256>(key, data),
        BlockCipher::Aes128Gcm => gcm_decrypt::<aes_gcm::Aes128Gcm>(key, data),
        BlockCipher::Aes256Gcm => gcm_decrypt::<aes_gcm::Aes256Gcm>(key, data),
    }
}

fn cbc_encrypt<C>(key: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, CryptoError>
where
    cbc::Encryptor<C>: KeyIvInit + BlockModeEncrypt<BlockSize = cbc::cipher::consts::U16>,
    C: cbc::cipher::BlockCipherEncrypt<BlockSize = cbc::cipher::consts::U16>,
{
    let iv = random_bytes(CBC_IV_LEN);
    let mut enc =
        cbc::Encryptor::<C>::new_from_slices(key, &iv).map_err(|_| CryptoError::KeyLength)?;
    // XML Encryption reads only the last byte (the pad length, 1 to 16) and leaves the others
    // free; filling them with that same length makes it PKCS#7 too, for peers that check that.
    let pad = AES_BLOCK_LEN - plaintext.len() % AES_BLOCK_LEN;
    let mut out = Vec::with_capacity(CBC_IV_LEN + plaintext.len() + pad);
    out.extend_from_slice(&iv);
    out.extend_from_slice(plaintext);
    // pad is 1..=16, so the cast is lossless.
    out.resize(out.len() + pad, pad as u8);
    let (blocks, rest) = Array::slice_as_chunks_mut(&mut out[CBC_IV_LEN..]);
    debug_assert!(rest.is_empty());
    enc.encrypt_blocks(blocks);
    Ok(out)
}

fn cbc_decrypt<C>(key: &[u8], data: &[u8]) -> Result<Vec<u8>, CryptoError>
where
    cbc::Decryptor<C>: KeyIvInit + BlockModeDecrypt<BlockSize = cbc::cipher::consts::U16>,
    C: cbc::cipher::BlockCipherDecrypt<BlockSize = cbc::cipher::consts::U16>,
{
    if data.len() < CBC_IV_LEN + AES_BLOCK_LEN || !data.len().is_multiple_of(AES_BLOCK_LEN) {
        return Err(CryptoError::Decrypt);
    }
    let (iv, ciphertext) = data.split_at(CBC_IV_LEN);
    let mut dec =
        cbc::Decryptor::<C>::new_from_slices(key, iv).map_err(|_| CryptoError::Decrypt)?;
    let mut out = ciphertext.to_vec();
    let (blocks, _) = Array::slice_as_chunks_mut(&mut out);
    dec.decrypt_blocks(blocks);
    let pad = usize::from(out.last().copied().unwrap_or(0));
    if !(1..=AES_BLOCK_LEN).contains(&pad) {
        return Err(CryptoError::Decrypt);
    }
    out.truncate(out.len() - pad);
    Ok(out)
}

fn gcm_encrypt<A>(key: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, CryptoError>
where
    A: Aead + KeyInit + aes_gcm::AeadCore<NonceSize = aes_gcm::aead::consts::U12>,
{
    let aead = A::new_from_slice(key).map_err(|_| CryptoError::KeyLength)?;
    let iv = random_bytes(GCM_IV_LEN);
    let nonce = aes_gcm::Nonce::<aes_gcm::aead::consts::U12>::try_from(iv.as_slice())
        .map_err(|_| CryptoError::Encrypt)?;
    let sealed = aead
        .encrypt(&nonce, plaintext)
        .map_err(|_| CryptoError::Encrypt)?;
    let mut out = iv;
    out.extend_from_slice(&sealed);
    Ok(out)
}

fn gcm_decrypt<A>(key: &[u8], data: &[u8]) -> Result<Vec<u8>, CryptoError>
where
    A: Aead + KeyInit + aes_gcm::AeadCore<NonceSize = aes_gcm::aead::consts::U12>,
{
    if data.len() < GCM_IV_LEN + GCM_TAG_LEN {
        return Err(CryptoError::Decrypt);
    }
    let aead = A::new_from_slice(key).map_err(|_| CryptoError::Decrypt)?;
    let (iv, sealed) = data.split_at(GCM_IV_LEN);
    let nonce = aes_gcm::Nonce::<aes_gcm::aead::consts::U12>::try_from(iv)
        .map_err(|_| CryptoError::Decrypt)?;
    aead.decrypt(&nonce, sealed)
        .map_err(|_| CryptoError::Decrypt)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip() {
        for a in [DigestAlg::Sha1, DigestAlg::Sha256] {
            assert_eq!(DigestAlg::from_uri(a.uri()), Some(a));
        }
        for a in [SignatureAlg::RsaSha1, SignatureAlg::RsaSha256] {
            assert_eq!(SignatureAlg::from_uri(a.uri()), Some(a));
        }
        for a in [KeyTransport::Rsa15, KeyTransport::RsaOaepMgf1p] {
            assert_eq!(KeyTransport::from_uri(a.uri()), Some(a));
        }
        for a in [
            BlockCipher::Aes128Cbc,
            BlockCipher::Aes256Cbc,
            BlockCipher::Aes128Gcm,
            BlockCipher::Aes256Gcm,
        ] {
            assert_eq!(BlockCipher::from_uri(a.uri()), Some(a));
        }
        assert_eq!(
            SignatureAlg::from_uri("http://www.w3.org/2000/09/xmldsig#hmac-sha1"),
            None
        );
        assert!(SignatureAlg::RsaSha1.is_legacy() && !SignatureAlg::RsaSha256.is_legacy());
        assert!(KeyTransport::Rsa15.is_legacy() && !KeyTransport::RsaOaepMgf1p.is_legacy());
        assert!(DigestAlg::Sha1.is_legacy() && !DigestAlg::Sha256.is_legacy());
    }

    #[test]
    fn digests_match_known_answers() {
        assert_eq!(
            hex(&digest(DigestAlg::Sha1, b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&digest(DigestAlg::Sha256, b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn constant_time_helpers_select_correctly() {
        assert_eq!(ct_eq_usize(16, 16), 1);
        assert_eq!(ct_eq_usize(16, 32), 0);
        assert_eq!(ct_eq_usize(0, usize::MAX), 0);
        assert_eq!(ct_select(1, &[1, 2], &[3, 4]), vec![1, 2]);
        assert_eq!(ct_select(0, &[1, 2], &[3, 4]), vec![3, 4]);
    }

    #[test]
    fn ciphers_round_trip_every_length_around_a_block() {
        for cipher in [
            BlockCipher::Aes128Cbc,
            BlockCipher::Aes256Cbc,
            BlockCipher::Aes128Gcm,
            BlockCipher::Aes256Gcm,
        ] {
            let key = random_bytes(cipher.key_len());
            for len in 0..=33 {
                let plaintext = random_bytes(len);
                let sealed = encrypt(cipher, &key, &plaintext).unwrap();
                assert_eq!(
                    decrypt(cipher, &key, &sealed).unwrap(),
                    plaintext,
                    "{cipher:?}"
                );
            }
        }
    }

    #[test]
    fn cbc_accepts_any_pad_bytes_but_a_valid_final_length() {
        let key = [7u8; 16];
        let iv = [9u8; 16];
        // "hello" + ten arbitrary bytes + pad length 11: valid XML Encryption, not PKCS#7.
        let mut block = [0xAAu8; 16];
        block[..5].copy_from_slice(b"hello");
        block[15] = 11;
        let mut enc = cbc::Encryptor::<aes::Aes128>::new_from_slices(&key, &iv).unwrap();
        let (blocks, _) = Array::slice_as_chunks_mut(&mut block[..]);
        enc.encrypt_blocks(blocks);
        let mut data = iv.to_vec();
        data.extend_from_slice(&block);
        assert_eq!(
            decrypt(BlockCipher::Aes128Cbc, &key, &data).unwrap(),
            b"hello"
        );

        for bad_last in [0u8, 17, 255] {
            let mut block = [0u8; 16];
            block[15] = bad_last;
            let mut enc = cbc::Encryptor::<aes::Aes128>::new_from_slices(&key, &iv).unwrap();
            let (blocks, _) = Array::slice_as_chunks_mut(&mut block[..]);
            enc.encrypt_blocks(blocks);
            let mut data = iv.to_vec();
            data.extend_from_slice(&block);
            assert!(matches!(
                decrypt(BlockCipher::Aes128Cbc, &key, &data),
                Err(CryptoError::Decrypt)
            ));
        }
    }

    #[test]
    fn malformed_ciphertexts_get_the_generic_error() {
        let key = [1u8; 32];
        for cipher in [BlockCipher::Aes256Cbc, BlockCipher::Aes256Gcm] {
            for data in [&[][..], &[0u8; 16][..], &[0u8; 27][..], &[0u8; 33][..]] {
                assert!(matches!(
                    decrypt(cipher, &key, data),
                    Err(CryptoError::Decrypt)
                ));
            }
        }
        assert!(matches!(
            encrypt(BlockCipher::Aes128Gcm, &key, b"x"),
            Err(CryptoError::KeyLength)
        ));
    }

    #[test]
    fn gcm_rejects_any_flipped_bit() {
        let key = random_bytes(16);
        let sealed = encrypt(BlockCipher::Aes128Gcm, &key, b"<Body>secret</Body>").unwrap();
        for i in 0..sealed.len() {
            let mut tampered = sealed.clone();
            tampered[i] ^= 0x01;
            assert!(
                decrypt(BlockCipher::Aes128Gcm, &key, &tampered).is_err(),
                "byte {i}"
            );
        }
    }

    #[test]
    fn keys_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PrivateKey>();
        assert_send_sync::<PublicKey>();
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
