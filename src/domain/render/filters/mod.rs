//! The filters, tests and functions templates may use, each charging the output budget for what it builds.
//!
//! Three kinds of filters:
//! - those that return a number, a boolean or a value that already exists (`length`, `default`, `first`, …)
//!   are MiniJinja's own and charge nothing;
//! - those that change a string's case or drop parts of it (`upper`, `title`, `trim`, `striptags`, …) build
//!   at most three times their input's bytes, and the result's size is charged once built;
//! - the others compute their result's size, or an upper bound of it, before building anything, and fail if
//!   it exceeds what is left of the budget: a list costs [`ITEM`] bytes per item (`list`, `split`, `sort`,
//!   `select`, `map`, …), a string its bytes (`join`, `replace`, `indent`, `escape`, `tojson`, `center`, …).

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::io;

use minijinja::value::{Kwargs, Rest, StringInput, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State, filters, functions, tests};

use super::budget::{charge, reserve, settle};

/// The filters templates may use.
pub const FILTERS: &[&str] = &[
    "abs",
    "capitalize",
    "center",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "reject",
    "replace",
    "reverse",
    "round",
    "select",
    "sort",
    "split",
    "striptags",
    "sum",
    "title",
    "tojson",
    "trim",
    "truncate",
    "unique",
    "upper",
    "urlencode",
    "wordwrap",
];

/// The tests templates may use (`x is defined`, `select('odd')`).
pub const TESTS: &[&str] = &[
    "!=",
    "<",
    "<=",
    "==",
    ">",
    ">=",
    "boolean",
    "defined",
    "divisibleby",
    "endingwith",
    "eq",
    "equalto",
    "escaped",
    "even",
    "false",
    "float",
    "ge",
    "greaterthan",
    "gt",
    "in",
    "int",
    "integer",
    "iterable",
    "le",
    "lessthan",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "safe",
    "sameas",
    "sequence",
    "startingwith",
    "string",
    "true",
    "undefined",
    "upper",
];

/// The functions templates may call.
pub const FUNCTIONS: &[&str] = &["range"];

/// The most items `range()` may produce.
pub const MAX_RANGE: usize = 10_000;

/// What one item of a list costs: a MiniJinja value (strings of up to 22 bytes are stored inline).
const ITEM: usize = std::mem::size_of::<Value>();

/// Registers everything in [`FILTERS`], [`TESTS`] and [`FUNCTIONS`] on an empty environment.
pub fn register(env: &mut Environment<'_>) {
    // A number, a boolean, or a value that already exists: nothing new to charge.
    env.add_filter("abs", filters::abs);
    env.add_filter("count", filters::length);
    env.add_filter("d", filters::default);
    env.add_filter("default", filters::default);
    env.add_filter("first", filters::first);
    env.add_filter("float", filters::float);
    env.add_filter("int", filters::int);
    env.add_filter("last", filters::last);
    env.add_filter("length", filters::length);
    env.add_filter("max", filters::max);
    env.add_filter("min", filters::min);
    env.add_filter("round", filters::round);
    env.add_filter("sum", filters::sum);

    // A string at most three times the input's bytes (case mapping, trimming), charged once built; or one
    // value per item of the input (`sort`, `select`, `map`, …), reserved before it is built.
    env.add_filter("capitalize", capitalize);
    env.add_filter("dictsort", dictsort);
    env.add_filter("items", items);
    env.add_filter("lower", lower);
    env.add_filter("map", map);
    env.add_filter("reject", reject);
    env.add_filter("reverse", reverse);
    env.add_filter("select", select);
    env.add_filter("sort", sort);
    env.add_filter("striptags", striptags);
    env.add_filter("title", title);
    env.add_filter("trim", trim);
    env.add_filter("unique", unique);
    env.add_filter("upper", upper);

    // Possibly far larger than the input: sized before anything is built.
    env.add_filter("center", center);
    env.add_filter("e", escape);
    env.add_filter("escape", escape);
    env.add_filter("indent", indent);
    env.add_filter("join", join);
    env.add_filter("lines", lines);
    env.add_filter("list", list);
    env.add_filter("replace", replace);
    env.add_filter("split", split);
    env.add_filter("tojson", tojson);
    env.add_filter("truncate", truncate);
    env.add_filter("urlencode", urlencode);
    env.add_filter("wordwrap", wordwrap);

    env.add_test("!=", tests::is_ne);
    env.add_test("ne", tests::is_ne);
    env.add_test("<", tests::is_lt);
    env.add_test("lt", tests::is_lt);
    env.add_test("lessthan", tests::is_lt);
    env.add_test("<=", tests::is_le);
    env.add_test("le", tests::is_le);
    env.add_test("==", tests::is_eq);
    env.add_test("eq", tests::is_eq);
    env.add_test("equalto", tests::is_eq);
    env.add_test(">", tests::is_gt);
    env.add_test("gt", tests::is_gt);
    env.add_test("greaterthan", tests::is_gt);
    env.add_test(">=", tests::is_ge);
    env.add_test("ge", tests::is_ge);
    env.add_test("boolean", tests::is_boolean);
    env.add_test("defined", tests::is_defined);
    env.add_test("divisibleby", tests::is_divisibleby);
    env.add_test("endingwith", tests::is_endingwith);
    env.add_test("escaped", tests::is_safe);
    env.add_test("even", tests::is_even);
    env.add_test("false", tests::is_false);
    env.add_test("float", tests::is_float);
    env.add_test("in", tests::is_in);
    env.add_test("int", tests::is_integer);
    env.add_test("integer", tests::is_integer);
    env.add_test("iterable", tests::is_iterable);
    env.add_test("lower", tests::is_lower);
    env.add_test("mapping", tests::is_mapping);
    env.add_test("none", tests::is_none);
    env.add_test("number", tests::is_number);
    env.add_test("odd", tests::is_odd);
    env.add_test("safe", tests::is_safe);
    env.add_test("sameas", tests::is_sameas);
    env.add_test("sequence", tests::is_sequence);
    env.add_test("startingwith", tests::is_startingwith);
    env.add_test("string", tests::is_string);
    env.add_test("true", tests::is_true);
    env.add_test("undefined", tests::is_undefined);
    env.add_test("upper", tests::is_upper);

    env.add_function("range", range);
}

fn filter(name: &str) -> String {
    format!("the filter `{name}`")
}

/// Charges a result once built, for filters whose result is at most a few times their input: its bytes if a
/// string, one item per element if a list or map (the elements are shared with the input, or were charged by
/// the filter that built them).
fn built(name: &str, value: Value) -> Result<Value, Error> {
    charge(&filter(name), shallow_size(&value))?;
    Ok(value)
}

/// The items a filter iterating `value` sees: its characters, elements or keys.
fn item_count(value: &Value) -> usize {
    match value.as_str() {
        Some(text) => text.chars().count(),
        None => value.len().or_else(|| value.try_iter().ok().map(Iterator::count)).unwrap_or(0),
    }
}

/// A filter that builds a list of (at most) one value per item of its input, or a string no longer than
/// its input: one item per input item is reserved before it runs, and the charge settled to what it built.
fn collection(name: &str, input: &Value, build: impl FnOnce() -> Result<Value, Error>) -> Result<Value, Error> {
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
fn pairs(name: &str, input: &Value, build: impl FnOnce() -> Result<Value, Error>) -> Result<Value, Error> {
    charge(&filter(name), item_count(input).saturating_mul(4 * ITEM))?;
    build()
}

fn capitalize(value: StringInput<'_>) -> Result<Value, Error> {
    built("capitalize", filters::capitalize(value))
}

fn lower(value: StringInput<'_>) -> Result<Value, Error> {
    built("lower", filters::lower(value))
}

fn upper(value: StringInput<'_>) -> Result<Value, Error> {
    built("upper", filters::upper(value))
}

fn title(value: Cow<'_, str>) -> Result<Value, Error> {
    built("title", Value::from(filters::title(value)))
}

fn trim(value: StringInput<'_>, chars: Option<Cow<'_, str>>) -> Result<Value, Error> {
    built("trim", filters::trim(value, chars))
}

fn reverse(value: &Value) -> Result<Value, Error> {
    collection("reverse", &value.clone(), || filters::reverse(value))
}

fn sort(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    collection("sort", &value.clone(), || filters::sort(state, value, kwargs))
}

fn unique(state: &State, value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    collection("unique", &value.clone(), || filters::unique(state, value, kwargs))
}

fn select(state: &State, value: Value, test: Option<Cow<'_, str>>, args: Rest<Value>) -> Result<Value, Error> {
    collection("select", &value.clone(), || filters::select(state, value, test, args).map(Value::from))
}

fn reject(state: &State, value: Value, test: Option<Cow<'_, str>>, args: Rest<Value>) -> Result<Value, Error> {
    collection("reject", &value.clone(), || filters::reject(state, value, test, args).map(Value::from))
}

/// `map('filter', …)` or `map(attribute='name')`: a mapped filter charges its own results.
fn map(state: &State, value: Value, args: Rest<Value>) -> Result<Value, Error> {
    collection("map", &value.clone(), || filters::map(state, value, args).map(Value::from))
}

/// `items` and `dictsort`: a new two-item list per entry.
fn items(value: &Value) -> Result<Value, Error> {
    pairs("items", value, || filters::items(value))
}

fn dictsort(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    pairs("dictsort", value, || filters::dictsort(value, kwargs))
}

/// `striptags`: removes `<…>` tags and `<!--…-->` comments and collapses whitespace to single spaces.
fn striptags(value: StringInput<'_>) -> Result<Value, Error> {
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

fn shallow_size(value: &Value) -> usize {
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
struct Counter(usize);

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
fn display_len(value: &Value) -> usize {
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
fn sized(name: &str, build: impl Fn(&mut dyn fmt::Write) -> Result<(), Error>) -> Result<Value, Error> {
    let mut counter = Counter::default();
    build(&mut counter)?;
    charge(&filter(name), counter.0)?;
    let mut output = String::with_capacity(counter.0);
    build(&mut output)?;
    Ok(Value::from(output))
}

fn write_error(_: fmt::Error) -> Error {
    Error::new(ErrorKind::WriteFailure, "could not build the filter's result")
}

/// `list`: one item per character, element or key.
fn list(state: &State, value: Value) -> Result<Value, Error> {
    charge(&filter("list"), item_count(&value).saturating_mul(ITEM))?;
    filters::list(state, value)
}

/// `split(sep, maxsplits)`: the pieces' bytes (at most the input's) and one item per piece.
fn split(value: &Value, separator: Option<std::sync::Arc<str>>, maxsplits: Option<i64>) -> Result<Value, Error> {
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
fn lines(value: &Value) -> Result<Value, Error> {
    let Some(text) = value.as_str() else {
        return Err(Error::new(ErrorKind::InvalidOperation, "lines needs a string"));
    };
    charge(&filter("lines"), text.lines().count().saturating_mul(ITEM).saturating_add(text.len()))?;
    filters::lines(value)
}

/// `join(sep)`: every item's printed bytes plus the separator between each two.
fn join(state: &State, value: &Value, joiner: Option<StringInput<'_>>) -> Result<Value, Error> {
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

/// `replace(from, to)`: the input with every occurrence's bytes exchanged (an empty `from` matches between
/// every two characters and at both ends).
fn replace(state: &State, value: StringInput<'_>, from: StringInput<'_>, to: StringInput<'_>) -> Result<Value, Error> {
    let (text, pattern) = (value.as_str(), from.as_str());
    let occurrences = if pattern.is_empty() { text.chars().count() + 1 } else { text.matches(pattern).count() };
    let kept = text.len() - occurrences * pattern.len();
    let size = occurrences.saturating_mul(to.as_str().len()).saturating_add(kept);
    charge(&filter("replace"), size)?;
    filters::replace(state, value, from, to)
}

/// `indent(width, first, blank)`: at most the input plus `width` spaces per line.
fn indent(
    value: StringInput<'_>,
    width: Option<usize>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let width = match width {
        Some(width) => width,
        None => kwargs.get::<Option<usize>>("width")?.unwrap_or(4),
    };
    let first = match first {
        Some(first) => first,
        None => kwargs.get::<Option<bool>>("first")?.unwrap_or(false),
    };
    let blank = match blank {
        Some(blank) => blank,
        None => kwargs.get::<Option<bool>>("blank")?.unwrap_or(false),
    };
    let text = value.as_str();
    let bound = text.split('\n').count().saturating_mul(width).saturating_add(text.len());
    let name = filter("indent");
    reserve(&name, bound)?;
    let output = filters::indent(value, Some(width), Some(first), Some(blank), kwargs)?;
    settle(&name, bound, shallow_size(&output))?;
    Ok(output)
}

/// HTML escaping, as `escape` applies it: each of `<>&"'/` becomes an entity.
fn escaped_len(text: &str) -> usize {
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
fn escape(state: &State, value: &Value) -> Result<Value, Error> {
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
fn tojson(value: &Value) -> Result<Value, Error> {
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
fn urlencode(value: &Value) -> Result<Value, Error> {
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
fn center(value: StringInput<'_>, width: Option<usize>) -> Result<Value, Error> {
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
fn truncate(
    value: StringInput<'_>,
    length: Option<usize>,
    killwords: Option<bool>,
    end: Option<String>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let length = match length {
        Some(length) => length,
        None => kwargs.get::<Option<usize>>("length")?.unwrap_or(255),
    };
    let killwords = match killwords {
        Some(killwords) => killwords,
        None => kwargs.get::<Option<bool>>("killwords")?.unwrap_or(false),
    };
    let end = match end {
        Some(end) => end,
        None => kwargs.get::<Option<String>>("end")?.unwrap_or_else(|| "...".to_owned()),
    };
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
fn wordwrap(
    value: StringInput<'_>,
    width: Option<usize>,
    break_long_words: Option<bool>,
    wrapstring: Option<String>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let width = match width {
        Some(width) => width,
        None => kwargs.get::<Option<usize>>("width")?.unwrap_or(79),
    };
    let break_long = match break_long_words {
        Some(value) => value,
        None => kwargs.get::<Option<bool>>("break_long_words")?.unwrap_or(true),
    };
    let wrap = match wrapstring {
        Some(wrap) => wrap,
        None => kwargs.get::<Option<String>>("wrapstring")?.unwrap_or_else(|| "\n".to_owned()),
    };
    kwargs.assert_all_used()?;
    if width == 0 {
        return Err(Error::new(ErrorKind::InvalidOperation, "wordwrap needs a width of at least 1"));
    }
    let text = value.as_str();
    sized("wordwrap", |out| wrap_text(out, text, width, break_long, &wrap).map_err(write_error))
}

fn wrap_text(out: &mut dyn fmt::Write, text: &str, width: usize, break_long: bool, wrap: &str) -> fmt::Result {
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

/// `range(stop)`, `range(start, stop[, step])`, as MiniJinja's but of at most [`MAX_RANGE`] items.
fn range(lower: isize, upper: Option<isize>, step: Option<isize>) -> Result<Value, Error> {
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
