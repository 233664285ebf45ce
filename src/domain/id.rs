use std::fmt;

use serde::Serialize;

/// Why a value was refused; the message is shown to the caller as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidValue(pub String);

/// `Deserialize` through the type's own parsing (`$parse` turns the string into `Option<Self>`), so that an
/// id read from outside, such as a bus message, is as valid as one parsed from a request.
macro_rules! deserialize_parsed {
    ($type:ty, $parse:expr) => {
        impl<'de> serde::Deserialize<'de> for $type {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = <String as serde::Deserialize>::deserialize(deserializer)?;
                let parse: fn(&str) -> Option<$type> = $parse;
                parse(&value)
                    .ok_or_else(|| serde::de::Error::custom(format!("{value:?} is not a valid {}", stringify!($type))))
            }
        }
    };
}
pub(crate) use deserialize_parsed;
/// Whether `value` is 1 to `max_len` bytes, its first byte one `first` takes and every other one `rest`
/// takes: the syntax of a name, `^[first][rest]{0,max_len-1}$`.
fn has_syntax(value: &str, max_len: usize, first: impl Fn(u8) -> bool, rest: impl Fn(u8) -> bool) -> bool {
    let bytes = value.as_bytes();
    bytes.first().is_some_and(|&b| first(b)) && bytes.len() <= max_len && bytes[1..].iter().all(|&b| rest(b))
}

/// Names that `/{agent_id}` cannot take because the gateway routes them itself.
const RESERVED_AGENT_IDS: [&str; 5] = ["admin", "healthz", "readyz", "metrics", "static"];

/// An agent id: `^[a-z0-9][a-z0-9_-]{0,62}$`, not one of the reserved names.
///
/// Held inline when it is at most 24 bytes (most ids): every request looks its agent up in maps keyed by
/// it, and an inline id is compared and copied without a trip to memory of its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AgentId(compact_str::CompactString);

impl AgentId {
    pub fn parse(value: &str) -> Result<Self, InvalidValue> {
        let first = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        if !has_syntax(value, 63, first, |b| first(b) || matches!(b, b'_' | b'-')) {
            return Err(InvalidValue(format!("agent id {value:?} must match ^[a-z0-9][a-z0-9_-]{{0,62}}$")));
        }
        if RESERVED_AGENT_IDS.contains(&value) {
            return Err(InvalidValue(format!("agent id {value:?} is reserved")));
        }
        Ok(Self(value.into()))
    }
}

deserialize_parsed!(AgentId, |value| AgentId::parse(value).ok());

/// A prompt name: `^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct PromptName(String);

impl PromptName {
    pub fn parse(value: &str) -> Result<Self, InvalidValue> {
        let first = |b: u8| b.is_ascii_alphanumeric();
        if !has_syntax(value, 128, first, |b| first(b) || matches!(b, b'_' | b'.' | b'-')) {
            return Err(InvalidValue(format!("prompt name {value:?} must match ^[A-Za-z0-9][A-Za-z0-9_.-]{{0,127}}$")));
        }
        Ok(Self(value.to_owned()))
    }
}

/// The longest resource URI the gateway accepts, in bytes.
pub const MAX_URI_BYTES: usize = 2048;

/// A resource URI: an absolute URI per RFC 3986 (scheme required), at most 2048 bytes.
/// It is an opaque key and never touches the gateway's filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ResourceUri(String);

impl ResourceUri {
    pub fn parse(value: &str) -> Result<Self, InvalidValue> {
        Self::check_length(value)?;
        // Checked in place: the borrowed form validates without a copy of its own.
        match iri_string::types::UriAbsoluteStr::new(value) {
            Ok(_) => Ok(Self(value.to_owned())),
            Err(_) => {
                Err(InvalidValue(format!("resource URI {value:?} is not an absolute URI (RFC 3986, scheme required)")))
            }
        }
    }

    /// Refuses a `value` longer than any resource URI may be, whatever it holds.
    pub fn check_length(value: &str) -> Result<(), InvalidValue> {
        if value.len() > MAX_URI_BYTES {
            return Err(InvalidValue(format!(
                "resource URI is {} bytes; at most {MAX_URI_BYTES} are allowed",
                value.len()
            )));
        }
        Ok(())
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

deserialize_parsed!(ResourceUri, |value| ResourceUri::parse(value).ok());

/// What every identifier has besides its own `parse`: its text, shown as it is.
macro_rules! identifier_text {
    ($($id:ident),+) => {$(
        impl $id {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $id {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    )+};
}

identifier_text!(AgentId, PromptName, ResourceUri);

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that `parse` accepts every one of `valid` and refuses every one of `invalid`.
    fn parses<T, E>(parse: impl Fn(&str) -> Result<T, E>, valid: &[&str], invalid: &[&str]) {
        for value in valid {
            assert!(parse(value).is_ok(), "{value:?} is valid");
        }
        for value in invalid {
            assert!(parse(value).is_err(), "{value:?} is refused");
        }
    }

    #[test]
    fn agent_ids() {
        let (longest, too_long) = ("a".repeat(63), "a".repeat(64));
        parses(AgentId::parse, &["research-bot", "a", &longest], &[&too_long, "-a", "Abc", "admin", ""]);
    }

    #[test]
    fn prompt_names() {
        parses(PromptName::parse, &["test_simple_prompt", "a.b-c"], &[".a", "a b"]);
    }

    #[test]
    fn resource_uris() {
        let too_long = format!("x://{}", "a".repeat(2050));
        let valid = ["test://static-text", "file:///etc/hosts", "https://example.com/a?b=c"];
        parses(ResourceUri::parse, &valid, &["relative/path", "has space://x", &too_long]);
    }
}
