//! RFC 6570 URI templates, parsed into literals and expressions.
//!
//! The admin API accepts any valid template (levels 1–4). Templates that carry a `text` are also matched
//! against URIs on `resources/read`, which hivegate supports for levels 1–3 without the level-4 modifiers
//! (explode `*` and prefix `:N`); [`UriTemplate::is_matchable`] tells which templates qualify.

use std::fmt;

use super::id::{InvalidValue, MAX_URI_BYTES};

/// A parsed URI template. Valid once it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    source: String,
    parts: Vec<Part>,
}

/// A run of literal characters or one `{...}` expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(String),
    Expression(Expression),
}

/// `{` operator? variable-list `}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expression {
    pub operator: Operator,
    pub variables: Vec<VarSpec>,
}

/// One variable of an expression with its optional level-4 modifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarSpec {
    pub name: String,
    pub modifier: Option<Modifier>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modifier {
    /// `:N`, 1 ≤ N ≤ 9999: only the first N characters of the value.
    Prefix(u16),
    /// `*`: lists and maps expand to one item per member.
    Explode,
}

/// The expression operators of RFC 6570 §2.2, with the expansion rules of its Appendix A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `{var}` (level 1).
    Simple,
    /// `{+var}` (level 2): reserved characters pass unencoded.
    Reserved,
    /// `{#var}` (level 2).
    Fragment,
    /// `{.var}` (level 3).
    Label,
    /// `{/var}` (level 3).
    Path,
    /// `{;var}` (level 3).
    PathParameter,
    /// `{?var}` (level 3).
    Query,
    /// `{&var}` (level 3).
    QueryContinuation,
}

impl Operator {
    fn from_char(c: char) -> Option<Self> {
        Some(match c {
            '+' => Operator::Reserved,
            '#' => Operator::Fragment,
            '.' => Operator::Label,
            '/' => Operator::Path,
            ';' => Operator::PathParameter,
            '?' => Operator::Query,
            '&' => Operator::QueryContinuation,
            _ => return None,
        })
    }

    /// The string put before the first defined value (`first` in Appendix A).
    pub fn first(self) -> &'static str {
        match self {
            Operator::Simple | Operator::Reserved => "",
            Operator::Fragment => "#",
            Operator::Label => ".",
            Operator::Path => "/",
            Operator::PathParameter => ";",
            Operator::Query => "?",
            Operator::QueryContinuation => "&",
        }
    }

    /// The string between values (`sep`).
    pub fn separator(self) -> &'static str {
        match self {
            Operator::Simple | Operator::Reserved | Operator::Fragment => ",",
            Operator::Label => ".",
            Operator::Path => "/",
            Operator::PathParameter => ";",
            Operator::Query | Operator::QueryContinuation => "&",
        }
    }

    /// Whether values are written as `name=value` (`named`).
    pub fn is_named(self) -> bool {
        matches!(self, Operator::PathParameter | Operator::Query | Operator::QueryContinuation)
    }

    /// What follows the name of an empty value (`ifemp`): `;x` but `?x=`.
    pub fn if_empty(self) -> &'static str {
        match self {
            Operator::Query | Operator::QueryContinuation => "=",
            _ => "",
        }
    }

    /// Whether reserved characters and percent-encoded triplets pass unencoded (`allow`: U+R).
    pub fn allows_reserved(self) -> bool {
        matches!(self, Operator::Reserved | Operator::Fragment)
    }

    /// The lowest RFC 6570 level that has this operator.
    pub fn level(self) -> u8 {
        match self {
            Operator::Simple => 1,
            Operator::Reserved | Operator::Fragment => 2,
            _ => 3,
        }
    }
}

impl UriTemplate {
    /// Parses `source` per RFC 6570 (any level); the error says what is wrong and where.
    pub fn parse(source: &str) -> Result<Self, InvalidValue> {
        if source.is_empty() {
            return Err(InvalidValue("URI template must not be empty".to_owned()));
        }
        if source.len() > MAX_URI_BYTES {
            return Err(InvalidValue(format!("URI template is longer than {MAX_URI_BYTES} bytes")));
        }
        let fail = |at: usize, why: &str| InvalidValue(format!("invalid URI template at byte {at}: {why}"));
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = source.char_indices().peekable();
        while let Some((at, c)) = rest.next() {
            match c {
                '{' => {
                    let close = source[at..].find('}').ok_or_else(|| fail(at, "unclosed '{'"))?;
                    let body = &source[at + 1..at + close];
                    let expression = parse_expression(body).map_err(|why| fail(at, &why.to_string()))?;
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Expression(expression));
                    while rest.next_if(|(i, _)| *i <= at + close).is_some() {}
                }
                '}' => return Err(fail(at, "'}' without '{'")),
                '%' => {
                    let hex = source.get(at + 1..at + 3).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
                    let hex = hex.ok_or_else(|| fail(at, "'%' not followed by two hex digits"))?;
                    literal.push('%');
                    literal.push_str(hex);
                    rest.next();
                    rest.next();
                }
                c if is_literal_char(c) => literal.push(c),
                c => return Err(fail(at, &format!("character {c:?} is not allowed outside an expression"))),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Self { source: source.to_owned(), parts })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    pub fn expressions(&self) -> impl Iterator<Item = &Expression> {
        self.parts.iter().filter_map(|part| match part {
            Part::Expression(expression) => Some(expression),
            Part::Literal(_) => None,
        })
    }

    /// The variable names in order of first appearance, each once.
    pub fn variable_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for variable in self.expressions().flat_map(|e| &e.variables) {
            if !names.contains(&variable.name.as_str()) {
                names.push(&variable.name);
            }
        }
        names
    }

    /// How many literal characters the template has: the more, the more specific a match.
    pub fn literal_len(&self) -> usize {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Literal(text) => text.chars().count(),
                Part::Expression(_) => 0,
            })
            .sum()
    }

    /// The RFC 6570 level the template needs: 1 to 4 (4 when a prefix or explode modifier is used).
    pub fn level(&self) -> u8 {
        self.expressions()
            .map(|e| {
                if e.variables.iter().any(|v| v.modifier.is_some()) {
                    4
                } else if e.variables.len() > 1 {
                    e.operator.level().max(3)
                } else {
                    e.operator.level()
                }
            })
            .max()
            .unwrap_or(1)
    }

    /// Whether hivegate can match URIs against this template: levels 1–3, no explode or prefix modifiers.
    pub fn is_matchable(&self) -> bool {
        self.level() <= 3
    }
}

impl fmt::Display for UriTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// `literals` of RFC 6570 §2.1, except `%`, which the caller checks for a percent-encoded triplet.
fn is_literal_char(c: char) -> bool {
    if c.is_ascii() {
        !(c.is_ascii_control() || matches!(c, ' ' | '"' | '\'' | '%' | '<' | '>' | '\\' | '^' | '`' | '{' | '|' | '}'))
    } else {
        // ucschar and iprivate: everything beyond ASCII except the non-characters and controls.
        !c.is_control() && (c as u32 & 0xFFFE) != 0xFFFE && !('\u{FDD0}'..='\u{FDEF}').contains(&c)
    }
}

/// Why the inside of a `{...}` does not parse; `Display` is the reason the template's error gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ExpressionError {
    #[error("empty expression")]
    Empty,
    #[error("operator {0:?} is reserved")]
    ReservedOperator(char),
    #[error("prefix length {length:?} of {name:?} must be 1 to 9999")]
    PrefixLength { length: String, name: String },
    #[error("{0:?} is not a variable name")]
    NotAVariableName(String),
}

/// The inside of `{...}`: operator? varspec ("," varspec)*.
fn parse_expression(body: &str) -> Result<Expression, ExpressionError> {
    let mut chars = body.chars();
    let (operator, list) = match chars.next() {
        None => return Err(ExpressionError::Empty),
        Some(c @ ('=' | ',' | '!' | '@' | '|')) => return Err(ExpressionError::ReservedOperator(c)),
        Some(c) => match Operator::from_char(c) {
            Some(operator) => (operator, chars.as_str()),
            None => (Operator::Simple, body),
        },
    };
    let variables = list.split(',').map(parse_varspec).collect::<Result<Vec<_>, _>>()?;
    Ok(Expression { operator, variables })
}

/// varname [ ":" max-length / "*" ].
fn parse_varspec(spec: &str) -> Result<VarSpec, ExpressionError> {
    let (name, modifier) = if let Some(name) = spec.strip_suffix('*') {
        (name, Some(Modifier::Explode))
    } else if let Some((name, length)) = spec.split_once(':') {
        let valid = !length.is_empty()
            && length.len() <= 4
            && !length.starts_with('0')
            && length.bytes().all(|b| b.is_ascii_digit());
        let length: u16 = length
            .parse()
            .ok()
            .filter(|_| valid)
            .ok_or_else(|| ExpressionError::PrefixLength { length: length.to_owned(), name: name.to_owned() })?;
        (name, Some(Modifier::Prefix(length)))
    } else {
        (spec, None)
    };
    if !is_varname(name) {
        return Err(ExpressionError::NotAVariableName(name.to_owned()));
    }
    Ok(VarSpec { name: name.to_owned(), modifier })
}

/// varchar *( ["."] varchar ), varchar = ALPHA / DIGIT / "_" / pct-encoded.
fn is_varname(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut i = 0;
    let mut after_char = false;
    while i < bytes.len() {
        match bytes[i] {
            b if b.is_ascii_alphanumeric() || b == b'_' => after_char = true,
            b'%' if bytes.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) => {
                after_char = true;
                i += 2;
            }
            b'.' if after_char && i + 1 < bytes.len() => after_char = false,
            _ => return false,
        }
        i += 1;
    }
    after_char
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(source: &str) -> UriTemplate {
        UriTemplate::parse(source).expect("valid template")
    }

    #[test]
    fn parses_literals_and_expressions() {
        let template = parse("test://template/{id}/data");
        assert_eq!(template.parts().len(), 3);
        assert_eq!(template.parts()[0], Part::Literal("test://template/".to_owned()));
        assert_eq!(
            template.parts()[1],
            Part::Expression(Expression {
                operator: Operator::Simple,
                variables: vec![VarSpec { name: "id".to_owned(), modifier: None }],
            })
        );
        assert_eq!(template.variable_names(), ["id"]);
        assert_eq!(template.literal_len(), "test://template/".len() + "/data".len());
        assert_eq!(template.level(), 1);
    }

    #[test]
    fn levels() {
        assert_eq!(parse("x://{+path}/here").level(), 2);
        assert_eq!(parse("x://a{#frag}").level(), 2);
        assert_eq!(parse("x://{x,y}").level(), 3);
        assert_eq!(parse("x://a{/seg}{?q,r}{&s}{;p}{.ext}").level(), 3);
        assert_eq!(parse("x://{var:3}").level(), 4);
        assert_eq!(parse("x://{/list*}").level(), 4);
        assert_eq!(parse("x://static").level(), 1);
        assert!(parse("x://{a}/{b}{?c,d}").is_matchable());
        assert!(!parse("x://{a*}").is_matchable());
        assert!(!parse("x://{a:10}").is_matchable());
    }

    #[test]
    fn level_four_syntax_is_valid() {
        let template = parse("x://{+path:6}/{list*}{?keys*}");
        let modifiers: Vec<_> = template.expressions().flat_map(|e| &e.variables).map(|v| v.modifier).collect();
        assert_eq!(modifiers, [Some(Modifier::Prefix(6)), Some(Modifier::Explode), Some(Modifier::Explode)]);
        assert!(UriTemplate::parse("x://{a.b}{c%20d}{_1}").is_ok());
        assert!(UriTemplate::parse("x://%2Fa{b}").is_ok());
        assert!(UriTemplate::parse("x://é/{b}").is_ok());
    }

    #[test]
    fn rejects_invalid_templates() {
        for bad in [
            "",
            "x://{",
            "x://}",
            "x://{}",
            "x://{a",
            "x://{a b}",
            "x://{=a}",
            "x://{|a}",
            "x://{a,}",
            "x://{,a}",
            "x://{a:0}",
            "x://{a:10000}",
            "x://{a:}",
            "x://{a:01}",
            "x://{a.}",
            "x://{.}",
            "x://{a..b}",
            "x://a b",
            "x://a%zz",
            "x://a%2",
            "x://{a{b}}",
            "x://<a>",
            "x://{a*b}",
            "x://{a-b}",
        ] {
            assert!(UriTemplate::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn error_names_the_position() {
        let error = UriTemplate::parse("x://ok/{a b}").expect_err("invalid");
        assert!(error.0.contains("byte 7"), "{}", error.0);
    }

    #[test]
    fn operator_table() {
        assert_eq!(Operator::Query.first(), "?");
        assert_eq!(Operator::Query.separator(), "&");
        assert!(Operator::Query.is_named());
        assert_eq!(Operator::PathParameter.if_empty(), "");
        assert!(Operator::Reserved.allows_reserved());
        assert!(!Operator::Simple.allows_reserved());
    }
}
