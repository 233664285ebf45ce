//! The size of every field a key can write: each has a configured limit (`limits.max_*_bytes`), checked
//! where a request body becomes a domain value, before anything else looks at the value (a template is
//! measured before it is compiled). A refusal names the field, its size and the limit's key.
//!
//! These limits bound what one item costs wherever it goes: in the database, in the registry cache, in a
//! list page, in a render. The byte quotas (`limits.max_agent_bytes`, `limits.max_total_bytes`) then bound
//! how many such items an agent and the gateway hold: the store counts every stored byte of an item against
//! them, not only a resource's content.

use std::fmt;
use std::io;

use serde::Serialize;

/// The kinds of field a key can write, each with a limit of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A `name`: of a resource, a template, a prompt argument, an agent or a key.
    Name,
    /// A `title`.
    Title,
    /// A `description` (of an agent too: modern clients get it as `instructions`).
    Description,
    /// A `mimeType`.
    MimeType,
    /// `_meta`, as JSON.
    Meta,
    /// `annotations`, as JSON.
    Annotations,
    /// A resource template's `uriTemplate`.
    UriTemplate,
    /// A MiniJinja source: a template's `text`, a templated field of a prompt message.
    TemplateText,
    /// A prompt's `arguments` and `messages` together, as JSON.
    Prompt,
    /// A prompt argument's `completions`, as JSON.
    Completions,
}

impl Field {
    /// The configuration key of this field's limit, under `limits.`.
    pub const fn key(self) -> &'static str {
        match self {
            Field::Name => "max_name_bytes",
            Field::Title => "max_title_bytes",
            Field::Description => "max_description_bytes",
            Field::MimeType => "max_mime_type_bytes",
            Field::Meta => "max_meta_bytes",
            Field::Annotations => "max_annotations_bytes",
            Field::UriTemplate => "max_uri_template_bytes",
            Field::TemplateText => "max_template_text_bytes",
            Field::Prompt => "max_prompt_bytes",
            Field::Completions => "max_completions_bytes",
        }
    }
}

/// The configured limit of each [`Field`], in bytes, and of the arguments one prompt may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLimits {
    pub name: usize,
    pub title: usize,
    pub description: usize,
    pub mime_type: usize,
    pub meta: usize,
    pub annotations: usize,
    pub uri_template: usize,
    pub template_text: usize,
    pub prompt: usize,
    pub completions: usize,
    /// Arguments one prompt may declare.
    pub prompt_arguments: usize,
}

/// A field over its limit: 413, naming the field (as a path into the body), its size and the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// Where the field is in the body, e.g. `description` or `arguments[2].name`.
    pub path: String,
    pub size: usize,
    pub limit: usize,
    /// The limit's configuration key, without `limits.`.
    pub key: &'static str,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is {} bytes; at most {} are allowed (limits.{})", self.path, self.size, self.limit, self.key)
    }
}

impl std::error::Error for TooLarge {}

impl FieldLimits {
    /// The limit of `field`.
    pub const fn of(&self, field: Field) -> usize {
        match field {
            Field::Name => self.name,
            Field::Title => self.title,
            Field::Description => self.description,
            Field::MimeType => self.mime_type,
            Field::Meta => self.meta,
            Field::Annotations => self.annotations,
            Field::UriTemplate => self.uri_template,
            Field::TemplateText => self.template_text,
            Field::Prompt => self.prompt,
            Field::Completions => self.completions,
        }
    }

    /// Checks a size of `field` found at `path`.
    pub fn size(&self, field: Field, path: &str, size: usize) -> Result<(), TooLarge> {
        let limit = self.of(field);
        if size <= limit {
            return Ok(());
        }
        Err(TooLarge { path: path.to_owned(), size, limit, key: field.key() })
    }

    /// Checks a text field, when present.
    pub fn text(&self, field: Field, path: &str, value: Option<&str>) -> Result<(), TooLarge> {
        value.map_or(Ok(()), |value| self.size(field, path, value.len()))
    }

    /// Checks a JSON field, when present, by the length of its compact JSON (as the store keeps it).
    pub fn json<T: Serialize + ?Sized>(&self, field: Field, path: &str, value: Option<&T>) -> Result<(), TooLarge> {
        value.map_or(Ok(()), |value| self.size(field, path, json_len(value)))
    }
}

/// The length of `value`'s compact JSON, counted without building it.
pub fn json_len<T: Serialize + ?Sized>(value: &T) -> usize {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail, and a `Serialize` of plain data (JSON values, strings) does not.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// An `io::Write` that only counts.
struct Counter(usize);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn limits(each: usize) -> FieldLimits {
        FieldLimits {
            name: each,
            title: each,
            description: each,
            mime_type: each,
            meta: each,
            annotations: each,
            uri_template: each,
            template_text: each,
            prompt: each,
            completions: each,
            prompt_arguments: each,
        }
    }

    #[test]
    fn a_field_over_its_limit_is_named_with_its_size_and_key() {
        let limits = limits(4);
        assert_eq!(limits.text(Field::Name, "name", Some("abcd")), Ok(()));
        assert_eq!(limits.text(Field::Name, "name", None), Ok(()));
        let error = limits.text(Field::Description, "arguments[1].description", Some("abcde")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "arguments[1].description is 5 bytes; at most 4 are allowed (limits.max_description_bytes)"
        );
        // Bytes, not characters.
        assert!(limits.text(Field::Title, "title", Some("ééé")).is_err());
    }

    #[test]
    fn json_is_measured_compact() {
        let value = json!({"a": [1, 2], "b": "é"});
        assert_eq!(json_len(&value), serde_json::to_vec(&value).expect("json").len());
        assert_eq!(limits(100).json(Field::Meta, "_meta", Some(&value)), Ok(()));
        let size = "{\"a\":[1,2],\"b\":\"é\"}".len();
        assert_eq!(limits(5).json(Field::Meta, "_meta", Some(&value)).map_err(|e| e.size), Err(size));
    }
}
