//! Matching URIs against RFC 6570 templates (levels 1–3, no explode or prefix modifiers): the reverse of
//! expansion, for template reads and for completing template variables from stored URIs.
//!
//! Parsing is [`crate::domain::UriTemplate`]'s; this module only walks its parts. Each variable of an
//! expression may be absent (undefined) or present; values are matched against the characters expansion
//! could have produced and then percent-decoded. Ambiguous templates (`{a}{b}`) are resolved by trying
//! longer values first; a step budget bounds the backtracking on hostile input, and a [`MatchBudget`]
//! shared by every match of one request bounds its total work, however many templates an agent has.
//!
//! [`MatchBudget`]: crate::mcp::uri_match::MatchBudget

use std::collections::BTreeMap;

use crate::domain::uri_template::{Expression, Operator, Part, UriTemplate};

/// Backtracking steps one match may take before giving up (no match).
const STEP_BUDGET: usize = 20_000;
/// Steps (backtracking steps and bytes scanned) all the matches of one request may take together.
pub const REQUEST_BUDGET: usize = 500_000;

/// What the matches of one request may still spend. Once it is spent, every further match fails.
#[derive(Debug)]
pub struct MatchBudget {
    left: usize,
}

impl MatchBudget {
    /// The budget of one request.
    pub fn per_request() -> Self {
        Self { left: REQUEST_BUDGET }
    }

    pub fn is_spent(&self) -> bool {
        self.left == 0
    }
}

/// The variables of `uri` under `template`, percent-decoded, or `None` when it does not match (or the
/// template uses modifiers this matcher does not support). Undefined variables are absent from the map.
pub fn match_uri(template: &UriTemplate, uri: &str) -> Option<BTreeMap<String, String>> {
    match_uri_within(template, uri, &mut MatchBudget::per_request())
}

/// [`match_uri`], spending from `budget` (shared by the matches of one request).
pub fn match_uri_within(
    template: &UriTemplate,
    uri: &str,
    budget: &mut MatchBudget,
) -> Option<BTreeMap<String, String>> {
    if !template.is_matchable() || budget.is_spent() {
        return None;
    }
    let limit = STEP_BUDGET.min(budget.left);
    let mut matcher = Matcher { uri: uri.as_bytes(), steps: 0, limit, bindings: Vec::new() };
    let matched = matcher.parts(template.parts(), 0);
    budget.left = budget.left.saturating_sub(matcher.steps.max(1));
    if !matched {
        return None;
    }
    let mut variables = BTreeMap::new();
    for (name, raw) in matcher.bindings {
        let value = percent_decode(raw)?;
        // A variable repeated in the template must have one value.
        if variables.get(&name).is_some_and(|existing| *existing != value) {
            return None;
        }
        variables.insert(name, value);
    }
    Some(variables)
}

struct Matcher<'u> {
    uri: &'u [u8],
    steps: usize,
    /// Steps this match may take.
    limit: usize,
    /// Variable name and the raw (still encoded) text it matched, in template order.
    bindings: Vec<(String, &'u str)>,
}

impl<'u> Matcher<'u> {
    fn tick(&mut self) -> bool {
        self.steps += 1;
        self.steps <= self.limit
    }

    /// Whether `parts` match `uri[at..]` exactly.
    fn parts(&mut self, parts: &[Part], at: usize) -> bool {
        if !self.tick() {
            return false;
        }
        match parts.split_first() {
            None => at == self.uri.len(),
            Some((Part::Literal(text), rest)) => {
                self.uri[at..].starts_with(text.as_bytes()) && self.parts(rest, at + text.len())
            }
            Some((Part::Expression(expression), rest)) => self.variables(expression, 0, false, rest, at),
        }
    }

    /// Matches the variables of `expression` from index `index` on, then the parts after it.
    fn variables(&mut self, expression: &Expression, index: usize, emitted: bool, rest: &[Part], at: usize) -> bool {
        let Some(variable) = expression.variables.get(index) else {
            return self.parts(rest, at);
        };
        if !self.tick() {
            return false;
        }
        let operator = expression.operator;
        let lead = if emitted { operator.separator() } else { operator.first() };
        if self.uri[at..].starts_with(lead.as_bytes()) {
            let mut start = at + lead.len();
            let mut named_empty = false;
            if operator.is_named() {
                let name = variable.name.as_bytes();
                if self.uri[start..].starts_with(name) {
                    start += name.len();
                    if self.uri[start..].starts_with(b"=") {
                        start += 1;
                    } else {
                        named_empty = true;
                    }
                } else {
                    start = usize::MAX;
                }
            }
            if start != usize::MAX {
                let end_max = if named_empty { start } else { self.value_end(operator, start) };
                // Scanning costs too: a long URI is not free to look at over and over.
                self.steps += (end_max - start) / 8;
                if self.steps > self.limit {
                    return false;
                }
                for end in (start..=end_max).rev() {
                    let raw = std::str::from_utf8(&self.uri[start..end]).unwrap_or_default();
                    self.bindings.push((variable.name.clone(), raw));
                    if self.variables(expression, index + 1, true, rest, end) {
                        return true;
                    }
                    self.bindings.pop();
                    if !self.tick() {
                        return false;
                    }
                }
            }
        }
        // The variable is undefined: expansion skips it entirely.
        self.variables(expression, index + 1, emitted, rest, at)
    }

    /// The furthest position a value starting at `start` can reach with the characters `operator` emits.
    fn value_end(&self, operator: Operator, start: usize) -> usize {
        let mut end = start;
        while end < self.uri.len() {
            let byte = self.uri[end];
            if byte == b'%' {
                if self.uri.get(end + 1..end + 3).is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                    end += 3;
                    continue;
                }
                break;
            }
            let allowed = is_unreserved(byte) || (operator.allows_reserved() && is_reserved(byte)) || byte >= 0x80;
            if !allowed {
                break;
            }
            end += 1;
        }
        end
    }
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn is_reserved(byte: u8) -> bool {
    matches!(
        byte,
        b':' | b'/'
            | b'?'
            | b'#'
            | b'['
            | b']'
            | b'@'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
    )
}

/// Decodes `%XX` triplets; `None` when the result is not UTF-8.
pub fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = raw.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            decoded.push(byte);
            i += 3;
            continue;
        }
        decoded.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(decoded).ok()
}

/// The literal text before the template's first expression: every matching URI starts with it.
pub fn literal_prefix(template: &UriTemplate) -> &str {
    match template.parts().first() {
        Some(Part::Literal(text)) => text,
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(template: &str, uri: &str) -> Option<Vec<(String, String)>> {
        let template = UriTemplate::parse(template).expect("template");
        match_uri(&template, uri).map(|map| map.into_iter().collect())
    }

    fn pairs(items: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
        Some(items.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    #[test]
    fn level_one() {
        assert_eq!(vars("test://template/{id}/data", "test://template/123/data"), pairs(&[("id", "123")]));
        assert_eq!(vars("test://template/{id}/data", "test://template/1/2/data"), None);
        assert_eq!(vars("test://template/{id}/data", "test://other/1/data"), None);
        assert_eq!(vars("x://{name}", "x://hello%20world"), pairs(&[("name", "hello world")]));
        assert_eq!(vars("x://{name}", "x://caf%C3%A9"), pairs(&[("name", "café")]));
        assert_eq!(vars("x://{name}", "x://%FF"), None);
    }

    #[test]
    fn level_two() {
        assert_eq!(vars("file:///{+path}", "file:///a/b/c.txt"), pairs(&[("path", "a/b/c.txt")]));
        assert_eq!(vars("x://a{#frag}", "x://a#top"), pairs(&[("frag", "top")]));
        assert_eq!(vars("x://a{#frag}", "x://a"), pairs(&[]));
    }

    #[test]
    fn level_three() {
        assert_eq!(vars("x://s{?q,lang}", "x://s?q=bees&lang=en"), pairs(&[("lang", "en"), ("q", "bees")]));
        assert_eq!(vars("x://s{?q,lang}", "x://s?lang=en"), pairs(&[("lang", "en")]));
        assert_eq!(vars("x://s{?q,lang}", "x://s"), pairs(&[]));
        assert_eq!(vars("x://s{?q}{&page}", "x://s?q=a&page=2"), pairs(&[("page", "2"), ("q", "a")]));
        assert_eq!(vars("x://m{/a,b}", "x://m/1/2"), pairs(&[("a", "1"), ("b", "2")]));
        assert_eq!(vars("x://m{;x,y}", "x://m;x=1;y"), pairs(&[("x", "1"), ("y", "")]));
        assert_eq!(vars("x://f{.ext}", "x://f.json"), pairs(&[("ext", "json")]));
        assert_eq!(vars("x://{a,b}", "x://1,2"), pairs(&[("a", "1"), ("b", "2")]));
    }

    #[test]
    fn modifiers_are_not_matched() {
        assert_eq!(vars("x://{a*}", "x://1"), None);
        assert_eq!(vars("x://{a:2}", "x://12"), None);
    }

    #[test]
    fn hostile_input_is_bounded() {
        let template = "x://{a}{b}{c}{d}{e}!";
        let uri = format!("x://{}", "a".repeat(2000));
        assert_eq!(vars(template, &uri), None);
    }

    #[test]
    fn a_request_budget_bounds_many_hostile_templates() {
        let template = UriTemplate::parse("x://{a}{b}{c}{d}{e}!").expect("template");
        let uri = format!("x://{}", "a".repeat(2000));
        let mut budget = MatchBudget::per_request();
        let mut tried = 0;
        while !budget.is_spent() {
            assert_eq!(match_uri_within(&template, &uri, &mut budget), None);
            tried += 1;
            assert!(tried < 1000, "the budget must run out long before 1000 hostile templates");
        }
        // Spent: even a template that would match is not tried any more.
        let easy = UriTemplate::parse("x://{a}").expect("template");
        assert_eq!(match_uri_within(&easy, "x://1", &mut budget), None);
        assert!(match_uri(&easy, "x://1").is_some(), "a fresh budget matches");
    }

    #[test]
    fn prefixes() {
        let template = UriTemplate::parse("test://template/{id}/data").expect("template");
        assert_eq!(literal_prefix(&template), "test://template/");
        assert_eq!(literal_prefix(&UriTemplate::parse("{+base}/x").expect("template")), "");
    }
}
