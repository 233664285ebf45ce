//! The sandboxed MiniJinja environment that renders prompt messages and resource-template texts.
//!
//! Templates come from agents, so they run with a budget: no loader (no `include`, `import` or
//! `extends` can reach anything), a fuel limit on instructions, a recursion limit, and a cap on the
//! rendered output. Undefined values are lenient: a missing optional argument is falsy and renders empty.

use std::collections::BTreeMap;
use std::io;
use std::sync::LazyLock;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};

/// Instructions one render may execute; enough for any reasonable prompt, not for a runaway loop.
pub const FUEL: u64 = 100_000;
/// The largest output one render may produce.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// How deeply blocks and macros may nest.
const RECURSION_LIMIT: usize = 64;

/// One environment for the whole process: it holds no templates (each render compiles its own
/// source), only configuration, so sharing it is safe.
static ENVIRONMENT: LazyLock<Environment<'static>> = LazyLock::new(build_environment);

fn build_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL));
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_recursion_limit(RECURSION_LIMIT);
    // Output is plain text or a URI, never HTML: nothing is escaped.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_keep_trailing_newline(true);
    env
}

/// The shared sandboxed environment, for callers that need more than [`compile_check`] and [`render`].
pub fn environment<'a>() -> &'a Environment<'a> {
    &ENVIRONMENT
}

/// Whether `source` compiles; the error is MiniJinja's message, with the line, for a 422.
pub fn compile_check(source: &str) -> Result<(), String> {
    environment().template_from_str(source).map(|_| ()).map_err(|error| describe(&error))
}

/// Renders `source` with `args` as its variables. Fails on a syntax error, a runtime error, exhausted
/// fuel, or output larger than [`MAX_OUTPUT_BYTES`].
pub fn render(source: &str, args: &BTreeMap<String, String>) -> Result<String, String> {
    let template = environment().template_from_str(source).map_err(|error| describe(&error))?;
    let mut output = CappedWriter { buffer: Vec::new(), limit: MAX_OUTPUT_BYTES, exceeded: false };
    if let Err(error) = template.render_captured_to(args, &mut output) {
        if output.exceeded {
            return Err(format!("rendered output is larger than {MAX_OUTPUT_BYTES} bytes"));
        }
        return Err(describe(&error));
    }
    // Templates and arguments are UTF-8 and MiniJinja writes whole strings, so this cannot fail; a lossy
    // conversion keeps it that way without a panic path.
    Ok(String::from_utf8(output.buffer).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// The error's kind, detail and line, e.g. `syntax error: unexpected end of input (line 1)`.
fn describe(error: &minijinja::Error) -> String {
    let mut text = error.kind().to_string();
    if let Some(detail) = error.detail() {
        text.push_str(": ");
        text.push_str(detail);
    }
    if let Some(line) = error.line() {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

/// Collects output and fails the render once it grows past `limit`.
struct CappedWriter {
    buffer: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.buffer.len() + bytes.len() > self.limit {
            self.exceeded = true;
            return Err(io::Error::other("output limit exceeded"));
        }
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    const RESEARCH: &str =
        "Research {{ topic }}.{% if depth == 'deep' %} Cover recent advances, key players and applications.{% endif %}";

    #[test]
    fn renders_arguments() {
        assert_eq!(
            render(RESEARCH, &args(&[("topic", "bees"), ("depth", "deep")])).as_deref(),
            Ok("Research bees. Cover recent advances, key players and applications.")
        );
    }

    #[test]
    fn missing_optional_arguments_are_falsy_and_empty() {
        assert_eq!(render(RESEARCH, &args(&[("topic", "bees")])).as_deref(), Ok("Research bees."));
        assert_eq!(render("[{{ nothing }}]", &args(&[])).as_deref(), Ok("[]"));
    }

    #[test]
    fn nothing_is_escaped() {
        assert_eq!(render("{{ x }}", &args(&[("x", "<a href=\"&\">")])).as_deref(), Ok("<a href=\"&\">"));
    }

    #[test]
    fn compile_errors_are_reported() {
        assert!(compile_check("Hello {{ name }}").is_ok());
        assert!(compile_check("{% if x %}never closed").is_err());
        let error = compile_check("Hello {{ name").expect_err("unclosed");
        assert!(error.contains("syntax error"), "{error}");
    }

    #[test]
    fn includes_have_nothing_to_load() {
        assert!(compile_check("{% include 'other' %}").is_ok());
        assert!(render("{% include 'other' %}", &args(&[])).is_err());
    }

    #[test]
    fn runaway_loops_run_out_of_fuel() {
        let error =
            render("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", &args(&[]))
                .expect_err("out of fuel");
        assert!(error.contains("fuel"), "{error}");
    }

    #[test]
    fn output_is_capped() {
        let error = render("{{ 'x' * 2000000 }}", &args(&[])).expect_err("too large");
        assert!(error.contains("larger than"), "{error}");
    }
}
