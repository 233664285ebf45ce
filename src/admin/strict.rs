//! A deserializer over a parsed JSON value that takes JSON's types at their word.
//!
//! serde's derived structs also accept a sequence (`[1, 2]` for `{"requestsPerSecond": 1, "burst": 2}`),
//! and so does `serde_json`. On the admin API an array where an object belongs is a value of the wrong
//! type (400), so request bodies are deserialised through `Strict`, which offers structs only maps.
//! Everything else behaves as `serde_json::from_value` does, with the same error messages, except that an
//! integer field also takes a number with a zero fraction (`5.0`), which JSON Schema counts as an integer.

use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Unexpected, Visitor};
use serde_json::{Map, Value};

type Error = serde_json::Error;

/// Deserialises `T` from `value`, refusing arrays for structs.
pub fn from_value<T: de::DeserializeOwned>(value: &Value) -> Result<T, Error> {
    T::deserialize(Strict(value))
}

/// A borrowed JSON value as a serde deserializer.
#[derive(Clone, Copy)]
struct Strict<'a>(&'a Value);

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (None, Some(i), _) => Unexpected::Signed(i),
            (None, None, Some(f)) => Unexpected::Float(f),
            _ => Unexpected::Other("number"),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// A number with a zero fraction that a double holds exactly (`5.0`, `1e3`), as the integer it is: JSON
/// Schema, and so the OpenAPI document, counts it as an integer.
fn whole(value: &Value) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    let f = value.as_f64().filter(|_| value.is_f64())?;
    if f.fract() != 0.0 || f.abs() > EXACT {
        return None;
    }
    // Exact: |f| is at most 2^53 and whole.
    #[allow(clippy::cast_possible_truncation)]
    Some(f as i64)
}

/// The integer methods of [`Strict`]: a whole float is read as its integer ([`whole`]), anything else as it is.
macro_rules! integers_take_whole_floats {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                match whole(self.0) {
                    Some(integer) => match u64::try_from(integer) {
                        Ok(unsigned) => visitor.visit_u64(unsigned),
                        Err(_) => visitor.visit_i64(integer),
                    },
                    None => self.deserialize_any(visitor),
                }
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for Strict<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (None, Some(i), _) => visitor.visit_i64(i),
                (None, None, Some(f)) => visitor.visit_f64(f),
                _ => Err(de::Error::custom("unrepresentable number")),
            },
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Seq(items.iter())),
            Value::Object(map) => visitor.visit_map(Fields::new(map)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(Fields::new(map)),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        // Only unit variants, written as strings, occur in request bodies (scopes, roles).
        match self.0 {
            Value::String(s) => visitor.visit_enum(IntoDeserializer::<Error>::into_deserializer(s.as_str())),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    integers_take_whole_floats! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_u8 deserialize_u16
        deserialize_u32 deserialize_u64
    }

    serde::forward_to_deserialize_any! {
        bool i128 u128 f32 f64 char str string bytes byte_buf unit unit_struct
        seq tuple tuple_struct map identifier ignored_any
    }
}

struct Seq<'a>(std::slice::Iter<'a, Value>);

impl<'de> de::SeqAccess<'de> for Seq<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.0.next().map(|item| seed.deserialize(Strict(item))).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Fields<'a> {
    entries: serde_json::map::Iter<'a>,
    value: Option<&'a Value>,
}

impl<'a> Fields<'a> {
    fn new(map: &'a Map<String, Value>) -> Self {
        Self { entries: map.iter(), value: None }
    }
}

impl<'de> de::MapAccess<'de> for Fields<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.value = Some(value);
        let key: StrDeserializer<'de, Error> = key.as_str().into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self.value.take().ok_or_else(|| <Error as de::Error>::custom("value without a key"))?;
        seed.deserialize(Strict(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;
    use crate::domain::Scope;
    use crate::domain::model::{PromptMessage, RateLimit};

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Body {
        name: String,
        limit: Option<RateLimit>,
        #[serde(default)]
        scopes: Vec<Scope>,
        extra: Option<Value>,
    }

    fn message(error: Error) -> String {
        error.to_string()
    }

    #[test]
    fn behaves_like_from_value_for_objects() {
        let value = json!({"name": "a", "limit": {"requestsPerSecond": 1, "burst": 2}, "scopes": ["mcp"],
                           "extra": {"k": [1, null, "x", 1.5, -3]}});
        let strict: Body = from_value(&value).expect("valid");
        let loose: Body = serde_json::from_value(value).expect("valid");
        assert_eq!(strict, loose);
        let message: PromptMessage =
            from_value(&json!({"role": "user", "content": {"type": "text", "text": "x"}})).expect("valid");
        assert_eq!(message.content["text"], "x");
    }

    #[test]
    fn whole_floats_are_integers() {
        let limit: RateLimit = from_value(&json!({"requestsPerSecond": 5.0, "burst": 1e3})).expect("whole");
        assert_eq!((limit.requests_per_second, limit.burst), (5, 1000));
        let error = message(from_value::<RateLimit>(&json!({"requestsPerSecond": 1.5, "burst": 1})).expect_err("frac"));
        assert!(error.starts_with("invalid type: floating point"), "{error}");
        let error = message(from_value::<RateLimit>(&json!({"requestsPerSecond": -1.0, "burst": 1})).expect_err("neg"));
        assert!(error.starts_with("invalid value: integer `-1`"), "{error}");
        let extra: Body = from_value(&json!({"name": "a", "extra": 2.0})).expect("valid");
        assert_eq!(extra.extra, Some(json!(2.0)), "values that are not integers keep their type");
    }

    #[test]
    fn arrays_are_not_structs() {
        let error = message(from_value::<Body>(&json!(["a", null, [], null])).expect_err("array"));
        assert!(error.starts_with("invalid type: sequence"), "{error}");
        let error = message(from_value::<Body>(&json!({"name": "a", "limit": [1, 2]})).expect_err("array"));
        assert!(error.starts_with("invalid type: sequence"), "{error}");
    }

    #[test]
    fn keeps_serde_messages() {
        let unknown = message(from_value::<Body>(&json!({"name": "a", "color": 1})).expect_err("unknown"));
        assert!(unknown.starts_with("unknown field `color`"), "{unknown}");
        let missing = message(from_value::<Body>(&json!({})).expect_err("missing"));
        assert!(missing.starts_with("missing field `name`"), "{missing}");
        let variant = message(from_value::<Body>(&json!({"name": "a", "scopes": ["root"]})).expect_err("variant"));
        assert!(variant.starts_with("unknown variant `root`"), "{variant}");
        let range = json!({"name": "a", "limit": {"requestsPerSecond": -1, "burst": 1}});
        assert!(message(from_value::<Body>(&range).expect_err("range")).starts_with("invalid value"));
        let float = json!({"name": "a", "limit": {"requestsPerSecond": 1.5, "burst": 1}});
        assert!(message(from_value::<Body>(&float).expect_err("float")).starts_with("invalid type"));
        let scope = message(from_value::<Body>(&json!({"name": "a", "scopes": [1]})).expect_err("type"));
        assert!(scope.starts_with("invalid type"), "{scope}");
    }
}
