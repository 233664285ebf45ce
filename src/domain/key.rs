use std::fmt;

use hmac::{Hmac, Mac};
use rand::Rng;
use rand::distr::Alphanumeric;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Every agent key starts with this, so leaked keys are easy to recognise and scan for.
pub const KEY_PREFIX: &str = "bak_";
/// Random base62 characters after the prefix: 43 × log2(62) ≈ 256 bits, as many as 32 random bytes.
const KEY_RANDOM_CHARS: usize = 43;
/// How many leading characters of a key are kept for display.
pub const DISPLAY_PREFIX_CHARS: usize = 12;

/// A plain agent key. It exists only while a request is handled or in the response that creates it.
pub struct ApiKey(SecretString);

impl ApiKey {
    /// A new key from the thread-local CSPRNG (ChaCha seeded by the operating system).
    pub fn generate() -> Self {
        Self(SecretString::from(random_token(KEY_PREFIX)))
    }

    /// A presented key; anything that does not have a key's shape cannot be one and is refused early.
    pub fn parse(value: &str) -> Option<Self> {
        let rest = value.strip_prefix(KEY_PREFIX)?;
        let well_formed = rest.len() >= 32 && rest.len() <= 128 && rest.bytes().all(|b| b.is_ascii_alphanumeric());
        well_formed.then(|| Self(SecretString::from(value.to_owned())))
    }

    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// The first characters of the key, shown in listings so people can tell keys apart.
    pub fn display_prefix(&self) -> String {
        self.expose().chars().take(DISPLAY_PREFIX_CHARS).collect()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(redacted)")
    }
}

/// `prefix` followed by 43 random base62 characters.
pub fn random_token(prefix: &str) -> String {
    let mut rng = rand::rng();
    let mut token = String::with_capacity(prefix.len() + KEY_RANDOM_CHARS);
    token.push_str(prefix);
    token.extend((0..KEY_RANDOM_CHARS).map(|_| char::from(rng.sample(Alphanumeric))));
    token
}

/// The stored form of a secret: SHA-256, or HMAC-SHA-256 under the configured pepper.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    pub fn to_hex(self) -> String {
        crate::domain::hex(self.0)
    }

    pub fn from_hex(value: &str) -> Option<Self> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(value, &mut bytes).ok()?;
        Some(Self(bytes))
    }

    /// Constant-time equality, for comparing a presented secret with a stored one.
    pub fn ct_eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyDigest({}…)", &self.to_hex()[..8])
    }
}

/// Turns secrets into digests. With a pepper, a stolen database alone cannot be used to test guesses.
#[derive(Clone)]
pub struct KeyHasher {
    pepper: Option<SecretString>,
}

impl KeyHasher {
    pub fn new(pepper: Option<SecretString>) -> Self {
        Self { pepper: pepper.filter(|p| !p.expose_secret().is_empty()) }
    }

    pub fn digest(&self, secret: &str) -> KeyDigest {
        match &self.pepper {
            Some(pepper) => {
                let mut mac = Hmac::<Sha256>::new_from_slice(pepper.expose_secret().as_bytes())
                    .expect("HMAC accepts keys of any length");
                mac.update(secret.as_bytes());
                KeyDigest(mac.finalize().into_bytes().into())
            }
            None => KeyDigest(Sha256::digest(secret.as_bytes()).into()),
        }
    }
}

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read the agent's registry over MCP.
    Mcp,
    /// Manage the agent's resources, templates and prompts through the admin API.
    Registry,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Mcp => "mcp",
            Scope::Registry => "registry",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "mcp" => Some(Scope::Mcp),
            "registry" => Some(Scope::Registry),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_contract_shape() {
        let key = ApiKey::generate();
        assert!(key.expose().starts_with("bak_"));
        assert_eq!(key.expose().len(), 4 + 43);
        assert!(ApiKey::parse(key.expose()).is_some());
        assert_eq!(key.display_prefix().len(), 12);
        assert_ne!(ApiKey::generate().expose(), key.expose());
    }

    #[test]
    fn malformed_keys_are_refused() {
        assert!(ApiKey::parse("bak_short").is_none());
        assert!(ApiKey::parse(&format!("xyz_{}", "a".repeat(40))).is_none());
        assert!(ApiKey::parse(&format!("bak_{}!", "a".repeat(40))).is_none());
    }

    #[test]
    fn pepper_changes_the_digest() {
        let plain = KeyHasher::new(None).digest("bak_x");
        let peppered = KeyHasher::new(Some(SecretString::from("pepper"))).digest("bak_x");
        assert!(!plain.ct_eq(&peppered));
        assert_eq!(KeyDigest::from_hex(&plain.to_hex()), Some(plain));
    }
}
