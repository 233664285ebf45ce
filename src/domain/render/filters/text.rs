//! Filters that build strings: case mapping and trimming (charged once built, at most a few times their
//! input), and those that may grow far past their input (`replace`, `indent`, `escape`, `tojson`,
//! `urlencode`, `center`, `truncate`, `wordwrap`), sized before anything is built.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use minijinja::value::{Kwargs, StringInput, Value, ValueKind};
use minijinja::{Error, ErrorKind, State, filters};

use super::cost::{Counter, argument, built, filter, shallow_size, sized, write_error};
use crate::domain::render::budget::{charge, reserve, settle};

pub(super) fn capitalize(value: StringInput<'_>) -> Result<Value, Error> {
    built("capitalize", filters::capitalize(value))
}

pub(super) fn lower(value: StringInput<'_>) -> Result<Value, Error> {
    built("lower", filters::lower(value))
}

pub(super) fn upper(value: StringInput<'_>) -> Result<Value, Error> {
    built("upper", filters::upper(value))
}

pub(super) fn title(value: Cow<'_, str>) -> Result<Value, Error> {
    built("title", Value::from(filters::title(value)))
}

pub(super) fn trim(value: StringInput<'_>, chars: Option<Cow<'_, str>>) -> Result<Value, Error> {
    built("trim", filters::trim(value, chars))
}

/// `striptags`: removes `<…>` tags and `<!--…-->` comments and collapses whitespace to single spaces.
pub(super) fn striptags(value: StringInput<'_>) -> Result<Value, Error> {
    let text = value.as_str();
    let mut stripped = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        stripped.push_str(&rest[..start]);
        let tail = &rest[start..];
        let close = if tail.starts_with("<!--") {
            tail.find("-->").map(|end| end + 3)
        } else {
            tail.find('>').map(|end| end + 1)
        };
        rest = close.map_or("", |end| &tail[end..]);
    }
    stripped.push_str(rest);
    let mut collapsed = String::with_capacity(stripped.len());
    for word in stripped.split_whitespace() {
        if !collapsed.is_empty() {
            collapsed.push(' ');
        }
        collapsed.push_str(word);
    }
    built("striptags", Value::from(collapsed))
}

/// `replace(from, to)`: the input with every occurrence's bytes exchanged (an empty `from` matches between
/// every two characters and at both ends).
pub(super) fn replace(
    state: &State,
    value: StringInput<'_>,
    from: StringInput<'_>,
    to: StringInput<'_>,
) -> Result<Value, Error> {
    let (text, pattern) = (value.as_str(), from.as_str());
    let occurrences = if pattern.is_empty() { text.chars().count() + 1 } else { text.matches(pattern).count() };
    let kept = text.len() - occurrences * pattern.len();
    let size = occurrences.saturating_mul(to.as_str().len()).saturating_add(kept);
    charge(&filter("replace"), size)?;
    filters::replace(state, value, from, to)
}

/// `indent(width, first, blank)`: at most the input plus `width` spaces per line.
pub(super) fn indent(
    value: StringInput<'_>,
    width: Option<usize>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let width = argument(width, &kwargs, "width", || 4)?;
    let first = argument(first, &kwargs, "first", || false)?;
    let blank = argument(blank, &kwargs, "blank", || false)?;
    let text = value.as_str();
    let bound = text.split('\n').count().saturating_mul(width).saturating_add(text.len());
    let name = filter("indent");
    reserve(&name, bound)?;
    let output = filters::indent(value, Some(width), Some(first), Some(blank), kwargs)?;
    settle(&name, bound, shallow_size(&output))?;
    Ok(output)
}

/// HTML escaping, as `escape` applies it: each of `<>&"'/` becomes an entity.
pub(super) fn escaped_len(text: &str) -> usize {
    text.bytes()
        .map(|byte| match byte {
            b'<' | b'>' => 4,
            b'&' => 5,
            b'"' | b'\'' | b'/' => 6,
            _ => 1,
        })
        .fold(0usize, usize::saturating_add)
}

/// Counts the HTML-escaped size of what is written to it.
#[derive(Default)]
struct EscapedCounter(usize);

impl fmt::Write for EscapedCounter {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.0 = self.0.saturating_add(escaped_len(text));
        Ok(())
    }
}

/// `escape` / `e`: up to six bytes per input byte; a value already escaped is returned as is.
pub(super) fn escape(state: &State, value: &Value) -> Result<Value, Error> {
    if value.is_safe() {
        return Ok(value.clone());
    }
    let bound = match value.as_str() {
        Some(text) => escaped_len(text),
        None => {
            let mut counter = EscapedCounter::default();
            let _ = write!(counter, "{value}");
            counter.0
        }
    };
    let name = filter("escape");
    reserve(&name, bound)?;
    let output = filters::escape(state, value)?;
    settle(&name, bound, shallow_size(&output))?;
    Ok(output)
}

/// `tojson`: compact JSON (no `indent`), sized by serializing once into a counter.
pub(super) fn tojson(value: &Value) -> Result<Value, Error> {
    let failed = |error: serde_json::Error| {
        Error::new(ErrorKind::InvalidOperation, format!("cannot serialize to JSON: {error}"))
    };
    let mut counter = Counter::default();
    serde_json::to_writer(&mut counter, value).map_err(failed)?;
    charge(&filter("tojson"), counter.0)?;
    serde_json::to_string(value).map(Value::from).map_err(failed)
}

/// `urlencode`: percent-encodes a string (all but ASCII letters, digits and `/._-`), or a map as a query
/// string; `none` and undefined encode as nothing.
pub(super) fn urlencode(value: &Value) -> Result<Value, Error> {
    fn encode(out: &mut dyn fmt::Write, text: &str) -> fmt::Result {
        for byte in text.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'/' | b'.' | b'-' | b'_') {
                out.write_char(char::from(byte))?;
            } else {
                write!(out, "%{byte:02X}")?;
            }
        }
        Ok(())
    }
    sized("urlencode", |out| {
        if value.kind() == ValueKind::Map {
            let mut first = true;
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                if item.is_none() || item.is_undefined() {
                    continue;
                }
                if !first {
                    out.write_char('&').map_err(write_error)?;
                }
                first = false;
                encode(out, &key.to_string()).map_err(write_error)?;
                out.write_char('=').map_err(write_error)?;
                encode(out, &item.to_string()).map_err(write_error)?;
            }
            Ok(())
        } else if value.is_none() || value.is_undefined() {
            Ok(())
        } else {
            match value.as_str() {
                Some(text) => encode(out, text),
                None => encode(out, &value.to_string()),
            }
            .map_err(write_error)
        }
    })
}

/// `center(width=80)`: pads with spaces on both sides to `width` characters, as Python's `str.center`.
pub(super) fn center(value: StringInput<'_>, width: Option<usize>) -> Result<Value, Error> {
    let text = value.as_str();
    let width = width.unwrap_or(80);
    let chars = text.chars().count();
    if width <= chars {
        return built("center", Value::from(text));
    }
    let padding = width - chars;
    charge(&filter("center"), text.len().saturating_add(padding))?;
    let left = padding / 2 + (padding & width & 1);
    let mut output = String::with_capacity(text.len() + padding);
    output.extend(std::iter::repeat_n(' ', left));
    output.push_str(text);
    output.extend(std::iter::repeat_n(' ', padding - left));
    Ok(Value::from(output))
}

/// `truncate(length=255, killwords=false, end='...', leeway=5)`, as Jinja's: a text longer than `length`
/// plus `leeway` characters is cut to `length` characters including `end`, at a space unless `killwords`.
pub(super) fn truncate(
    value: StringInput<'_>,
    length: Option<usize>,
    killwords: Option<bool>,
    end: Option<String>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let length = argument(length, &kwargs, "length", || 255)?;
    let killwords = argument(killwords, &kwargs, "killwords", || false)?;
    let end = argument(end, &kwargs, "end", || "...".to_owned())?;
    let leeway = kwargs.get::<Option<usize>>("leeway")?.unwrap_or(5);
    kwargs.assert_all_used()?;
    let text = value.as_str();
    let end_chars = end.chars().count();
    if length < end_chars {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("truncate needs a length of at least {end_chars}"),
        ));
    }
    if text.chars().count() <= length.saturating_add(leeway) {
        return built("truncate", Value::from(text));
    }
    let cut = text.char_indices().nth(length - end_chars).map_or(text.len(), |(index, _)| index);
    let mut kept = &text[..cut];
    if !killwords && let Some((before, _)) = kept.rsplit_once(' ') {
        kept = before;
    }
    charge(&filter("truncate"), kept.len().saturating_add(end.len()))?;
    Ok(Value::from(format!("{kept}{end}")))
}

/// `wordwrap(width=79, break_long_words=true, wrapstring='\n')`: each line of the input is filled with
/// whole words up to `width` characters (words are separated by single spaces); a longer word is cut
/// unless `break_long_words` is false; lines are joined by `wrapstring`.
pub(super) fn wordwrap(
    value: StringInput<'_>,
    width: Option<usize>,
    break_long_words: Option<bool>,
    wrapstring: Option<String>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let width = argument(width, &kwargs, "width", || 79)?;
    let break_long = argument(break_long_words, &kwargs, "break_long_words", || true)?;
    let wrap = argument(wrapstring, &kwargs, "wrapstring", || "\n".to_owned())?;
    kwargs.assert_all_used()?;
    if width == 0 {
        return Err(Error::new(ErrorKind::InvalidOperation, "wordwrap needs a width of at least 1"));
    }
    let text = value.as_str();
    sized("wordwrap", |out| wrap_text(out, text, width, break_long, &wrap).map_err(write_error))
}

pub(super) fn wrap_text(
    out: &mut dyn fmt::Write,
    text: &str,
    width: usize,
    break_long: bool,
    wrap: &str,
) -> fmt::Result {
    for (index, line) in text.lines().enumerate() {
        if index > 0 {
            out.write_str(wrap)?;
        }
        let mut column = 0;
        for word in line.split_whitespace() {
            let mut word = word;
            let mut chars = word.chars().count();
            if column > 0 && column + 1 + chars <= width {
                out.write_char(' ')?;
                column += 1;
            } else if column > 0 {
                out.write_str(wrap)?;
                column = 0;
            }
            while break_long && column + chars > width {
                let room = width - column;
                let cut = word.char_indices().nth(room).map_or(word.len(), |(index, _)| index);
                out.write_str(&word[..cut])?;
                out.write_str(wrap)?;
                word = &word[cut..];
                chars -= room;
                column = 0;
            }
            out.write_str(word)?;
            column += chars;
        }
    }
    Ok(())
}
