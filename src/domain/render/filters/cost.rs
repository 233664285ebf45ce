//! What a filter's result costs the output budget: its size charged once built, an upper bound reserved
//! before it is built and settled after, or its exact size counted by writing it once into a [`Counter`].

use std::fmt::{self, Write as _};
use std::io;

use minijinja::value::{ArgType, Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::ITEM;
use crate::domain::render::budget::{charge, reserve, settle};

/// How a filter is named in a budget error.
pub(super) fn filter(name: &str) -> String {
    format!("the filter `{name}`")
}

/// Charges a result once built, for filters whose result is at most a few times their input: its bytes if a
/// string, one item per element if a list or map (the elements are shared with the input, or were charged by
/// the filter that built them).
pub(super) fn built(name: &str, value: Value) -> Result<Value, Error> {
    charge(&filter(name), shallow_size(&value))?;
    Ok(value)
}

/// The items a filter iterating `value` sees: its characters, elements or keys.
pub(super) fn item_count(value: &Value) -> usize {
    match value.as_str() {
        Some(text) => text.chars().count(),
        None => value.len().or_else(|| value.try_iter().ok().map(Iterator::count)).unwrap_or(0),
    }
}

/// A filter that builds a list of (at most) one value per item of its input, or a string no longer than
/// its input: one item per input item is reserved before it runs, and the charge settled to what it built.
pub(super) fn collection(
    name: &str,
    input: &Value,
    build: impl FnOnce() -> Result<Value, Error>,
) -> Result<Value, Error> {
    let name = filter(name);
    let bound = match input.as_str() {
        Some(text) => text.len().max(item_count(input).saturating_mul(ITEM)),
        None => item_count(input).saturating_mul(ITEM),
    };
    reserve(&name, bound)?;
    let output = build()?;
    settle(&name, bound, shallow_size(&output))?;
    Ok(output)
}

/// `items` and `dictsort`: a new two-item list per entry of a map.
pub(super) fn pairs(name: &str, input: &Value, build: impl FnOnce() -> Result<Value, Error>) -> Result<Value, Error> {
    charge(&filter(name), item_count(input).saturating_mul(4 * ITEM))?;
    build()
}

pub(super) fn shallow_size(value: &Value) -> usize {
    match value.kind() {
        ValueKind::String => value.as_str().map_or(0, str::len),
        ValueKind::Bytes => value.as_bytes().map_or(0, <[u8]>::len),
        ValueKind::Seq | ValueKind::Iterable | ValueKind::Map => {
            let items = value.len().or_else(|| value.try_iter().ok().map(Iterator::count)).unwrap_or(0);
            items.saturating_mul(ITEM)
        }
        _ => 0,
    }
}

/// Counts the bytes written to it instead of keeping them, to size a result before building it.
#[derive(Default)]
pub(super) struct Counter(pub(super) usize);

impl fmt::Write for Counter {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.0 = self.0.saturating_add(text.len());
        Ok(())
    }
}

impl io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 = self.0.saturating_add(bytes.len());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The bytes `value` prints as.
pub(super) fn display_len(value: &Value) -> usize {
    match value.as_str() {
        Some(text) => text.len(),
        None => {
            let mut counter = Counter::default();
            let _ = write!(counter, "{value}");
            counter.0
        }
    }
}

/// Runs `build` twice: once into a [`Counter`] to size the result, then, if the budget allows it, into a
/// string.
pub(super) fn sized(name: &str, build: impl Fn(&mut dyn fmt::Write) -> Result<(), Error>) -> Result<Value, Error> {
    let mut counter = Counter::default();
    build(&mut counter)?;
    charge(&filter(name), counter.0)?;
    let mut output = String::with_capacity(counter.0);
    build(&mut output)?;
    Ok(Value::from(output))
}

pub(super) fn write_error(_: fmt::Error) -> Error {
    Error::new(ErrorKind::WriteFailure, "could not build the filter's result")
}

/// A filter's argument given by position, else by keyword `name`, else `default`.
pub(super) fn argument<'a, T>(
    given: Option<T>,
    kwargs: &'a Kwargs,
    name: &'a str,
    default: impl FnOnce() -> T,
) -> Result<T, Error>
where
    Option<T>: ArgType<'a, Output = Option<T>>,
{
    match given {
        Some(given) => Ok(given),
        None => Ok(kwargs.get::<Option<T>>(name)?.unwrap_or_else(default)),
    }
}
