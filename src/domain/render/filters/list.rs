//! Filters that build lists (and `join`, which prints one): one [`ITEM`](super::ITEM) charged per item
//! they may produce, before anything is built; and `range()`, bounded by [`MAX_RANGE`].

use std::borrow::Cow;

use minijinja::value::{Kwargs, Rest, StringInput, Value};
use minijinja::{Error, ErrorKind, State, filters, functions};

use super::cost::{collection, display_len, filter, item_count, pairs};
use super::{ITEM, MAX_RANGE};
use crate::domain::render::budget::charge;

pub(super) fn reverse(value: &Value) -> Result<Value, Error> {
    collection("reverse", &value.clone(), || filters::reverse(value))
}

pub(super) fn sort(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    collection("sort", &value.clone(), || filters::sort(state, value, kwargs))
}

pub(super) fn unique(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    collection("unique", &value.clone(), || filters::unique(state, value, kwargs))
}

/// `select(test, …)` and `reject(test, …)`: the items a test keeps, or those it drops; each wraps
/// MiniJinja's filter of the same name.
macro_rules! by_test {
    ($($name:ident),+) => {$(
        pub(super) fn $name(
            state: &State,
            value: Value,
            test: Option<Cow<'_, str>>,
            args: Rest<Value>,
        ) -> Result<Value, Error> {
            collection(stringify!($name), &value.clone(), || filters::$name(state, value, test, args).map(Value::from))
        }
    )+};
}

by_test!(select, reject);

/// `map('filter', …)` or `map(attribute='name')`: a mapped filter charges its own results.
pub(super) fn map(state: &State, value: Value, args: Rest<Value>) -> Result<Value, Error> {
    collection("map", &value.clone(), || filters::map(state, value, args).map(Value::from))
}

/// `items` and `dictsort`: a new two-item list per entry.
pub(super) fn items(value: &Value) -> Result<Value, Error> {
    pairs("items", value, || filters::items(value))
}

pub(super) fn dictsort(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    pairs("dictsort", value, || filters::dictsort(value, kwargs))
}

/// `list`: one item per character, element or key.
pub(super) fn list(state: &State, value: Value) -> Result<Value, Error> {
    charge(&filter("list"), item_count(&value).saturating_mul(ITEM))?;
    filters::list(state, value)
}

/// `split(sep, maxsplits)`: the pieces' bytes (at most the input's) and one item per piece.
pub(super) fn split(
    value: &Value,
    separator: Option<std::sync::Arc<str>>,
    maxsplits: Option<i64>,
) -> Result<Value, Error> {
    let Some(text) = value.as_str() else {
        return Err(Error::new(ErrorKind::InvalidOperation, "split needs a string"));
    };
    let pieces = match separator.as_deref() {
        None => text.split_whitespace().count(),
        // "ab".split("") yields "", "a", "b", "".
        Some("") => text.chars().count() + 2,
        Some(separator) => text.matches(separator).count() + 1,
    };
    let pieces = match maxsplits.and_then(|n| usize::try_from(n).ok()) {
        Some(n) => pieces.min(n.saturating_add(1)),
        None => pieces,
    };
    charge(&filter("split"), pieces.saturating_mul(ITEM).saturating_add(text.len()))?;
    filters::split(value, separator, maxsplits)
}

/// `lines`: the lines' bytes (at most the input's) and one item per line.
pub(super) fn lines(value: &Value) -> Result<Value, Error> {
    let Some(text) = value.as_str() else {
        return Err(Error::new(ErrorKind::InvalidOperation, "lines needs a string"));
    };
    charge(&filter("lines"), text.lines().count().saturating_mul(ITEM).saturating_add(text.len()))?;
    filters::lines(value)
}

/// `join(sep)`: every item's printed bytes plus the separator between each two.
pub(super) fn join(state: &State, value: &Value, joiner: Option<StringInput<'_>>) -> Result<Value, Error> {
    let separator = joiner.as_ref().map_or(0, |joiner| joiner.as_str().len());
    let (mut items, mut bytes) = (0usize, 0usize);
    if let Ok(iter) = value.try_iter() {
        for item in iter {
            items += 1;
            bytes = bytes.saturating_add(display_len(&item));
        }
    }
    let size = bytes.saturating_add(items.saturating_sub(1).saturating_mul(separator));
    charge(&filter("join"), size)?;
    filters::join(state, value, joiner)
}

/// `range(stop)`, `range(start, stop[, step])`, as MiniJinja's but of at most [`MAX_RANGE`] items.
pub(super) fn range(lower: isize, upper: Option<isize>, step: Option<isize>) -> Result<Value, Error> {
    let (start, stop) = match upper {
        Some(upper) => (lower as i128, upper as i128),
        None => (0, lower as i128),
    };
    let step_by = step.unwrap_or(1) as i128;
    let items = match step_by {
        0 => 0,
        s if s > 0 && stop > start => (stop - start + s - 1) / s,
        s if s < 0 && start > stop => (start - stop - s - 1) / -s,
        _ => 0,
    };
    if items > MAX_RANGE as i128 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("range() of {items} items; at most {MAX_RANGE} are allowed"),
        ));
    }
    functions::range(lower, upper, step)
}
