//! The sandboxed MiniJinja environment that renders prompt messages and resource-template texts.
//!
//! Templates come from agents and their arguments from clients, so one render's time and memory are bounded:
//! - when a template is stored, [`compile_check`] refuses whatever lies outside a small subset of MiniJinja
//!   (no assignments, macros, includes, repetition operators or method calls; only the filters, tests and
//!   functions of an allow-list; a limit on variable references per template and per expression; the
//!   `check` module has the rules). The same rules are checked again before a template is compiled for
//!   serving ([`Compiled`]) or rendered from its source;
//! - every byte of output and every byte a filter builds is charged to one [`Budget`] per request (all the
//!   messages of a prompt share one); a filter that can build more than its input sizes its result before
//!   building it and fails when the budget would be exceeded;
//! - fuel bounds the instructions one render executes, and there is no loader (nothing can be included).
//!
//! So every value a render holds is an argument, a constant of the template, an item of one of these, a
//! filter result (charged), the output (charged), or is built by one expression from at most
//! [`MAX_EXPRESSION_REFERENCES`] of these; nothing can be assigned, so only the expression being evaluated
//! and the iterables of the enclosing loops (at most [`MAX_LOOP_DEPTH`]) hold such built values at once.
//! A render's memory is thus bounded by its arguments, its source, twice its budget, and
//! `(1 + MAX_LOOP_DEPTH) × MAX_EXPRESSION_REFERENCES` times the largest of those values.
//!
//! Undefined values are lenient: a missing optional argument is falsy and renders empty.
//!
//! [`compile_check`]: crate::domain::render::compile_check
//! [`Compiled`]: crate::domain::render::Compiled
//! [`Budget`]: crate::domain::render::Budget
//! [`MAX_EXPRESSION_REFERENCES`]: crate::domain::render::MAX_EXPRESSION_REFERENCES
//! [`MAX_LOOP_DEPTH`]: crate::domain::render::MAX_LOOP_DEPTH

mod budget;
mod check;
mod filters;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::LazyLock;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};

pub use self::budget::Budget;
pub use self::check::{MAX_EXPRESSION_REFERENCES, MAX_LOOP_DEPTH, MAX_VARIABLE_REFERENCES};
pub use self::filters::{FILTERS, FUNCTIONS, MAX_RANGE, TESTS};

/// Why a template is refused when stored, or failed to render; `Display` is the message the caller sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A construct outside the allowed subset, e.g. "`{% set %}` is not allowed (line 3)".
    #[error("{construct} is not allowed (line {line})")]
    Refused { construct: String, line: u16 },
    /// MiniJinja's error: its kind, detail and line, e.g. `syntax error: unexpected end of input (line 1)`.
    #[error("{0}")]
    Engine(String),
    /// The render's budget refused a result, at the line MiniJinja was rendering when it knows it.
    #[error("{refusal}{}", line.map(|line| format!(" (line {line})")).unwrap_or_default())]
    Exceeded { refusal: String, line: Option<usize> },
}

/// Instructions one render may execute; enough for any reasonable prompt, not for a runaway loop.
pub const FUEL: u64 = 100_000;
/// Instructions a *quick* render ([`Budget::quick`]) may execute: a few microseconds, little enough to
/// render on an async worker (variable substitutions and short conditionals fit many times over).
pub const QUICK_FUEL: u64 = 2_000;
/// The default [`Budget`] of one request: the output and filter results of one `prompts/get` (all its
/// messages together) or of one resource-template read.
pub const BUDGET_BYTES: usize = 1024 * 1024;
/// How deeply blocks may nest.
const RECURSION_LIMIT: usize = 64;

/// One environment for the whole process: it holds no templates (a render compiles its own source, or
/// uses a [`Compiled`] set of its own), only configuration, so sharing it is safe.
static ENVIRONMENT: LazyLock<Environment<'static>> = LazyLock::new(|| build_environment(FUEL));
/// The same environment with [`QUICK_FUEL`], for quick budgets.
static QUICK_ENVIRONMENT: LazyLock<Environment<'static>> = LazyLock::new(|| build_environment(QUICK_FUEL));

/// An empty environment (no builtin filter, test or global) with only the allowed ones registered.
fn build_environment(fuel: u64) -> Environment<'static> {
    let mut env = Environment::empty();
    filters::register(&mut env);
    env.set_fuel(Some(fuel));
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_recursion_limit(RECURSION_LIMIT);
    // Output is plain text or a URI, never HTML: nothing is escaped.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_keep_trailing_newline(true);
    env
}

/// Whether `source` compiles and stays within the allowed subset; the error is MiniJinja's message or the
/// refused construct, with the line, for a 422.
pub fn compile_check(source: &str) -> Result<(), TemplateError> {
    // The rules first: compiling folds constant expressions, which a refused operator could make huge.
    check::check(source)?;
    ENVIRONMENT.template_from_str(source).map(drop).map_err(|error| describe(&error))
}

/// The variables `source` reads that it does not bind itself (loop variables are bound), without the
/// functions every template may call: what its arguments must provide. `source` must pass
/// [`compile_check`].
pub fn free_variables(source: &str) -> Result<std::collections::BTreeSet<String>, TemplateError> {
    let template = ENVIRONMENT.template_from_str(source).map_err(|error| describe(&error))?;
    let mut variables: std::collections::BTreeSet<String> = template.undeclared_variables(false).into_iter().collect();
    for function in FUNCTIONS {
        variables.remove(*function);
    }
    Ok(variables)
}

/// Renders `source` alone, with a [`Budget`] of its own ([`BUDGET_BYTES`]).
pub fn render(source: &str, args: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    render_with_budget(source, args, &mut Budget::default())
}

/// Renders `source` with `args` as its variables, charging `budget` (which the renders of one request
/// share). Fails on a refused construct, a syntax error, a runtime error, exhausted fuel, or an exhausted
/// budget.
pub fn render_with_budget(
    source: &str,
    args: &BTreeMap<String, String>,
    budget: &mut Budget,
) -> Result<String, TemplateError> {
    check::check(source)?;
    let environment = if budget.is_quick() { &QUICK_ENVIRONMENT } else { &ENVIRONMENT };
    let template = environment.template_from_str(source).map_err(|error| describe(&error))?;
    render_template(&template, args, budget)
}

/// Templates checked and compiled once, to be rendered many times: a stored prompt's templated fields, kept
/// with it in the registry cache, so that a `prompts/get` neither parses nor checks them again.
///
/// A template is found by its source. A source that was not given, or that the rules or the compiler
/// refuse, is rendered by [`render_with_budget`] instead, which reports why it fails.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The quick environment with the templates added, each named by its own source.
    quick: Environment<'static>,
    /// The same compiled templates with [`FUEL`].
    full: Environment<'static>,
    /// The templates made only of text and `{{ name }}` (most prompts), by source: rendered by [`Plain`].
    plain: HashMap<Box<str>, Plain>,
}

impl Compiled {
    /// Checks and compiles `sources`.
    pub fn new<'a>(sources: impl IntoIterator<Item = &'a str>) -> Self {
        let mut quick = QUICK_ENVIRONMENT.clone();
        let mut plain = HashMap::new();
        for source in sources {
            // The rules first, as for every render: compiling folds constant expressions, which a refused
            // operator could make huge. One that fails is left to `render_with_budget` to report.
            if check::check(source).is_ok()
                && quick.add_template_owned(source.to_owned(), source.to_owned()).is_ok()
                && let Some(parts) = Plain::parse(source)
            {
                plain.insert(source.into(), parts);
            }
        }
        let mut full = quick.clone();
        full.set_fuel(Some(FUEL));
        Self { quick, full, plain }
    }

    /// The parts of `source` when it is a template of text and `{{ name }}` only, which [`Compiled::render`]
    /// renders by joining them (the arguments' values in their places, a missing one empty).
    pub fn plain_parts(&self, source: &str) -> Option<&[Part]> {
        self.plain.get(source).map(|plain| plain.parts.as_slice())
    }

    /// Renders `source` as [`render_with_budget`] does, from its compiled template when there is one.
    pub fn render(
        &self,
        source: &str,
        args: &BTreeMap<String, String>,
        budget: &mut Budget,
    ) -> Result<String, TemplateError> {
        if let Some(plain) = self.plain.get(source)
            && let Some(rendered) = plain.render(args, budget)
        {
            return Ok(rendered);
        }
        let environment = if budget.is_quick() { &self.quick } else { &self.full };
        match environment.get_template(source) {
            Ok(template) => render_template(&template, args, budget),
            Err(_) => render_with_budget(source, args, budget),
        }
    }
}

/// A template of text and `{{ name }}` substitutions only, the shape of most prompts, rendered by
/// concatenation: what MiniJinja renders for it (this environment escapes nothing, keeps a trailing newline
/// and renders a missing argument empty), for a fraction of the instructions. A name MiniJinja would not take
/// from the arguments alone (a constant, a function, a special variable) keeps the template on MiniJinja.
#[derive(Debug, Clone)]
struct Plain {
    parts: Vec<Part>,
}

/// A part of a plain template ([`Compiled::plain_parts`]).
#[derive(Debug, Clone)]
pub enum Part {
    /// Text, rendered as it is.
    Text(Box<str>),
    /// `{{ name }}`: the argument's value, or nothing when it is not given.
    Argument(Box<str>),
}

/// Names a plain substitution may not take: MiniJinja's constants, special variables and the functions.
const NOT_PLAIN: &[&str] =
    &["true", "false", "none", "True", "False", "None", "self", "super", "loop", "varargs", "kwargs", "caller"];

impl Plain {
    /// The parts of `source`, if it is only text and `{{ name }}`.
    fn parse(source: &str) -> Option<Self> {
        if source.contains("{%") || source.contains("{#") {
            return None;
        }
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(start) = rest.find("{{") {
            let (text, tag) = rest.split_at(start);
            let end = tag.find("}}")?;
            let name = tag[2..end].trim_matches(|c: char| c.is_ascii_whitespace());
            let mut chars = name.chars();
            let is_name = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !is_name || NOT_PLAIN.contains(&name) || FUNCTIONS.contains(&name) {
                return None;
            }
            if !text.is_empty() {
                parts.push(Part::Text(text.into()));
            }
            parts.push(Part::Argument(name.into()));
            rest = &tag[end + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.into()));
        }
        Some(Self { parts })
    }

    /// The rendered text, charged to `budget`; `None` when it would exceed the budget, so that MiniJinja
    /// renders it and reports the refusal as for any template.
    fn render(&self, args: &BTreeMap<String, String>, budget: &mut Budget) -> Option<String> {
        let length = self.parts.iter().map(|part| part.text(args).len()).sum::<usize>();
        budget.take(length)?;
        let mut output = String::with_capacity(length);
        for part in &self.parts {
            output.push_str(part.text(args));
        }
        Some(output)
    }
}

impl Part {
    /// What the part renders as: its text, or the argument's value (empty when it is missing).
    fn text<'a>(&'a self, args: &'a BTreeMap<String, String>) -> &'a str {
        match self {
            Part::Text(text) => text,
            Part::Argument(name) => args.get(&**name).map_or("", String::as_str),
        }
    }
}

/// Renders a compiled template within `budget` (see [`render_with_budget`]).
fn render_template(
    template: &minijinja::Template<'_, '_>,
    args: &BTreeMap<String, String>,
    budget: &mut Budget,
) -> Result<String, TemplateError> {
    let mut output = MeteredWriter { buffer: Vec::new() };
    let scope = budget::Scope::enter(budget);
    let rendered = template.render_captured_to(args, &mut output);
    let exceeded = scope.exceeded();
    drop(scope);
    if let Err(error) = rendered {
        if budget.is_quick() && exceeded.is_none() && error.kind() == minijinja::ErrorKind::OutOfFuel {
            // Not a limit of the prompt's: the quick fuel only. The caller renders again with the full fuel.
            budget.ran_out_of_quick_fuel();
        } else if exceeded.is_some() || error.kind() == minijinja::ErrorKind::OutOfFuel {
            budget.spend();
        }
        return Err(match exceeded {
            Some(refusal) => TemplateError::Exceeded { refusal, line: error.line() },
            None => describe(&error),
        });
    }
    // Templates and arguments are UTF-8 and MiniJinja writes whole strings, so this cannot fail; a lossy
    // conversion keeps it that way without a panic path.
    Ok(String::from_utf8(output.buffer).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// The error's kind, detail and line, e.g. `syntax error: unexpected end of input (line 1)`.
fn describe(error: &minijinja::Error) -> TemplateError {
    let mut text = error.kind().to_string();
    if let Some(detail) = error.detail() {
        text.push_str(": ");
        text.push_str(detail);
    }
    if let Some(line) = error.line() {
        text.push_str(&format!(" (line {line})"));
    }
    TemplateError::Engine(text)
}

/// Collects output, charging every byte to the budget of the running render.
struct MeteredWriter {
    buffer: Vec<u8>,
}

impl io::Write for MeteredWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        budget::charge("the rendered output", bytes.len()).map_err(io::Error::other)?;
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
