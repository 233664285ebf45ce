//! One pass over a request body's bytes before it is parsed, by the MCP endpoint and the admin API's body
//! extractor alike: how deeply it nests (`limits.max_json_depth`, so that a body too deep is refused before
//! the parser recurses into it) and whether any object has a key twice (the parser would keep the last value
//! silently, so that what a check saw and what is stored could differ).
//!
//! The bytes need not be valid JSON: only brackets, keys and strings are looked at, and parsing comes after
//! (and refuses what is not JSON; its error wins over a duplicate key's). The insides of strings, which make
//! up most of a large body, are skipped with `memchr`. Keys are compared as the parser would see them: a key
//! with escapes is decoded first, so `"a"` and `"\u0061"` are the same key. Each object's keys are compared
//! when it closes, sorted when it has more than a few, so a huge object costs `n log n`, not `n²`.

use std::borrow::Cow;

/// Keys of one object compared pairwise below this count; sorted from it on.
const SORT_FROM: usize = 16;
/// The most of a duplicate key's bytes an error repeats.
const MAX_REPORTED_KEY: usize = 100;

/// What the pass found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Arrays and objects nest deeper than the limit (`{}` is one level, a scalar none). The pass stops there.
    pub is_too_deep: bool,
    /// The first key found twice in one object, decoded (lossily when it is not UTF-8), at most its first
    /// `MAX_REPORTED_KEY` bytes.
    pub duplicate_key: Option<String>,
}

/// The deepest nesting the pass follows: one bit per level says whether it is an object.
const MAX_LEVELS: usize = 128;

/// A key: where its text (between the quotes) is in the body. A key at `usize::MAX` marks where an object's
/// keys start.
#[derive(Clone, Copy)]
struct Key {
    start: usize,
    end: usize,
    is_escaped: bool,
}

const OBJECT_START: Key = Key { start: usize::MAX, end: 0, is_escaped: false };

/// Scans `bytes` (see the module doc); `max_depth` levels of nesting are allowed (at most `MAX_LEVELS`).
pub fn scan(bytes: &[u8], max_depth: usize) -> Shape {
    let max_depth = max_depth.min(MAX_LEVELS);
    let mut shape = Shape::default();
    // Bit `n`: level `n` is an object. The keys of every open object, each object's after its start marker.
    let (mut depth, mut objects) = (0usize, 0u128);
    // Room for the keys of a JSON-RPC message and its params without growing.
    let mut keys: Vec<Key> = Vec::with_capacity(16);
    // Whether the next string is a key: after `{` or `,` in an object.
    let mut wants_key = false;
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        at += 1;
        match byte {
            b'[' | b'{' => {
                if depth >= max_depth {
                    shape.is_too_deep = true;
                    return shape;
                }
                if byte == b'{' {
                    objects |= 1 << depth;
                    keys.push(OBJECT_START);
                } else {
                    objects &= !(1 << depth);
                }
                depth += 1;
                wants_key = true;
            }
            b']' | b'}' => {
                let Some(level) = depth.checked_sub(1) else { continue };
                depth = level;
                wants_key = false;
                if objects & (1 << level) == 0 {
                    continue;
                }
                // The object's start marker: the last one (its own keys follow it; inner objects' are gone).
                let mut from = keys.len();
                while from > 0 {
                    from -= 1;
                    if keys[from].start == usize::MAX {
                        break;
                    }
                }
                if shape.duplicate_key.is_none()
                    && let Some(key) = duplicate(bytes, &keys[from + 1..])
                {
                    let reported = &key[..key.len().min(MAX_REPORTED_KEY)];
                    shape.duplicate_key = Some(String::from_utf8_lossy(reported).into_owned());
                }
                keys.truncate(from);
            }
            b',' => wants_key = true,
            b':' => wants_key = false,
            b'"' => {
                let start = at;
                let (end, is_escaped) = string_end(bytes, at);
                at = end;
                if wants_key && depth > 0 && objects & (1 << (depth - 1)) != 0 {
                    wants_key = false;
                    keys.push(Key { start, end: end.saturating_sub(1).max(start), is_escaped });
                }
            }
            _ => {}
        }
    }
    shape
}

/// A key found twice among `keys` (one object's), decoded.
fn duplicate<'b>(bytes: &'b [u8], keys: &[Key]) -> Option<Cow<'b, [u8]>> {
    if keys.len() < SORT_FROM {
        // Plain loops: this runs on every request body, and costs least so in every build.
        for later in 1..keys.len() {
            for earlier in 0..later {
                if is_same(bytes, &keys[earlier], &keys[later]) {
                    return Some(text(bytes, &keys[later]));
                }
            }
        }
        return None;
    }
    let mut texts: Vec<Cow<'_, [u8]>> = keys.iter().map(|key| text(bytes, key)).collect();
    texts.sort_unstable();
    let index = texts.windows(2).position(|pair| pair[0] == pair[1])?;
    Some(texts.swap_remove(index))
}

/// Whether two keys are the same once decoded; raw keys are compared as they are, without copying them.
fn is_same(bytes: &[u8], a: &Key, b: &Key) -> bool {
    if a.is_escaped || b.is_escaped {
        return text(bytes, a) == text(bytes, b);
    }
    a.end - a.start == b.end - b.start && bytes[a.start..a.end] == bytes[b.start..b.end]
}

/// A key's text as the parser decodes it (as it is when it has no escapes, or is not a valid JSON string).
fn text<'b>(bytes: &'b [u8], key: &Key) -> Cow<'b, [u8]> {
    let raw = &bytes[key.start..key.end];
    if !key.is_escaped {
        return Cow::Borrowed(raw);
    }
    let quoted = &bytes[key.start - 1..(key.end + 1).min(bytes.len())];
    serde_json::from_slice::<String>(quoted).map_or(Cow::Borrowed(raw), |key| Cow::Owned(key.into_bytes()))
}

/// The index just past the closing quote of the string whose contents start at `from` (the end of `bytes`
/// when it is not closed), and whether the string has escapes.
fn string_end(bytes: &[u8], mut from: usize) -> (usize, bool) {
    let mut is_escaped = false;
    loop {
        let Some(rest) = bytes.get(from..) else { return (bytes.len(), is_escaped) };
        match memchr::memchr2(b'"', b'\\', rest) {
            None => return (bytes.len(), is_escaped),
            // An escape: skip the escaped byte, which may be a quote.
            Some(offset) if rest[offset] == b'\\' => {
                is_escaped = true;
                from += offset + 2;
            }
            Some(offset) => return (from + offset + 1, is_escaped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn too_deep(bytes: &[u8], max: usize) -> bool {
        scan(bytes, max).is_too_deep
    }

    fn duplicate_of(text: &str) -> Option<String> {
        scan(text.as_bytes(), 127).duplicate_key
    }

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert!(!too_deep(b"1", 0));
        assert!(too_deep(b"{}", 0));
        assert!(!too_deep(b"{}", 1));
        assert!(!too_deep(br#"{"a": [1, {"b": []}], "c": {}}"#, 4));
        assert!(too_deep(br#"{"a": [1, {"b": []}], "c": {}}"#, 3));
        assert!(!too_deep(br#"{"a": "[[[[{{{{"}"#, 1), "brackets in strings do not count");
        assert!(!too_deep(br#"{"a": "\"[[[[", "b": "\\", "c": 1}"#, 1), "escaped quotes stay inside");
        assert!(too_deep(br#"{"a": "\\", "b": [[1]]}"#, 2), "an escaped backslash ends no string");
        assert!(!too_deep(br#"{"a": "unterminated [[[["#, 1));
        assert!(!too_deep(b"]]]]{", 1), "stray closers do not go below zero");
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert!(too_deep(deep.as_bytes(), 64));
        assert!(!too_deep(deep.as_bytes(), 65));
    }

    #[test]
    fn depth_agrees_with_the_parser() {
        // What the scan lets through at the parser's own limit, the parser takes; one more level it refuses.
        let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        let deepest = (1..200).take_while(|&n| serde_json::from_str::<serde_json::Value>(&nested(n)).is_ok()).last();
        assert_eq!(deepest, Some(crate::config::MAX_JSON_DEPTH), "serde_json's recursion limit moved");
    }

    #[test]
    fn duplicate_keys_anywhere() {
        assert_eq!(duplicate_of(r#"{"a": 1, "b": 2}"#), None);
        assert_eq!(duplicate_of(r#"{"a": 1, "a": 2}"#).as_deref(), Some("a"));
        assert_eq!(duplicate_of(r#"{"p": {"x": {"y": [1, {"k": 1, "k": 2}]}}}"#).as_deref(), Some("k"));
        assert_eq!(duplicate_of(r#"[{"a": 1}, {"a": 2}]"#), None, "objects of their own");
        assert_eq!(duplicate_of(r#"{"a": {"a": {"a": 1}}}"#), None, "nested objects have their own keys");
        assert_eq!(duplicate_of(r#"{"a": {"b": 1}, "b": 2}"#), None, "an inner object's keys are not the outer's");
        assert_eq!(duplicate_of(r#"{"a": "a", "b": "a"}"#), None, "values are not keys");
        assert_eq!(duplicate_of(r#"{"a": ["a", "a"]}"#), None);
        assert_eq!(duplicate_of(r#"{"\u0061": 1, "a": 2}"#).as_deref(), Some("a"), "escapes are decoded");
        assert_eq!(duplicate_of(r#"{"a\"b": 1, "a\"b": 2}"#).as_deref(), Some("a\"b"));
        assert_eq!(duplicate_of(r#"{"a": 1, "A": 2}"#), None, "keys are case-sensitive");
        assert_eq!(duplicate_of(r#"{"": 1, "": 2}"#).as_deref(), Some(""));
        assert_eq!(duplicate_of(r#"{"a": 1, "a"#), None, "an object left open is not compared");
    }

    #[test]
    fn large_objects_are_sorted() {
        let keys: Vec<String> = (0..5000).map(|i| format!("\"k{i}\": {i}")).collect();
        let unique = format!("{{{}}}", keys.join(","));
        assert_eq!(duplicate_of(&unique), None);
        let twice = format!("{{{}, \"k4321\": 0}}", keys.join(","));
        assert_eq!(duplicate_of(&twice).as_deref(), Some("k4321"));
    }
}
