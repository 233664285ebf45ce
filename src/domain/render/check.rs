//! The subset of MiniJinja a template may use, checked on its syntax tree when it is stored (and again
//! before every render, for templates stored before a rule existed).
//!
//! What is left can only build a value from arguments, constants, loop items and filter results (whose size
//! the budget bounds): nothing can be assigned, so no value can grow from one loop iteration to the next,
//! and no expression can hold more than [`MAX_EXPRESSION_REFERENCES`] variables.

use minijinja::machinery::ast::{BinOpKind, CallArg, CallType, Expr, Stmt};
use minijinja::machinery::{Token, WhitespaceConfig, parse, tokenize};
use minijinja::syntax::SyntaxConfig;

use super::TemplateError;
use super::filters::{FILTERS, FUNCTIONS, TESTS};

/// Variable references (and calls of `range()`) a template may hold in all, so `a ~ a ~ …` cannot multiply
/// a large argument.
pub const MAX_VARIABLE_REFERENCES: usize = 256;
/// Variable references and calls one expression (an output, a condition, a loop's iterable) may hold: the
/// most copies of a value one expression can build.
pub const MAX_EXPRESSION_REFERENCES: usize = 16;
/// How deeply `for` loops may nest.
pub const MAX_LOOP_DEPTH: usize = 4;
/// Tokens one `{{ … }}` or `{% … %}` tag may hold. MiniJinja builds operator and filter chains into
/// syntax trees as deep as they are long, and walks and drops those trees recursively: this bounds their
/// depth before anything is parsed.
pub const MAX_TAG_TOKENS: usize = 1000;
/// How deeply one expression may nest (operators, filters, lookups, parentheses).
pub const MAX_EXPRESSION_DEPTH: usize = 64;

/// Parses `source` and refuses whatever lies outside the allowed subset; the error names the construct and
/// its line, e.g. "`{% set %}` is not allowed (line 3)".
pub fn check(source: &str) -> Result<(), TemplateError> {
    let mut tag: Option<(usize, u16)> = None;
    for token in tokenize(source, false, SyntaxConfig, WhitespaceConfig::default()) {
        let (token, span) = token.map_err(|error| super::describe(&error))?;
        match (token, &mut tag) {
            (Token::VariableStart | Token::BlockStart, _) => tag = Some((0, span.start_line)),
            (Token::VariableEnd | Token::BlockEnd, _) => tag = None,
            (_, Some((count, line))) => {
                *count += 1;
                if *count > MAX_TAG_TOKENS {
                    return Err(refuse(&format!("a tag of more than {MAX_TAG_TOKENS} tokens"), *line));
                }
            }
            (_, None) => {}
        }
    }
    let tree = parse(source, "<template>", SyntaxConfig, WhitespaceConfig::default())
        .map_err(|error| super::describe(&error))?;
    Checker::default().stmt(&tree)
}

fn refuse(construct: &str, line: u16) -> TemplateError {
    TemplateError::Refused { construct: construct.to_owned(), line }
}

/// Filter and test names are looked up without whitespace, as MiniJinja does.
fn normalize(name: &str) -> String {
    name.chars().filter(|c| !c.is_ascii_whitespace()).collect()
}

#[derive(Default)]
struct Checker {
    references: usize,
    in_expression: usize,
    loops: usize,
    depth: usize,
}

impl Checker {
    fn body(&mut self, stmts: &[Stmt<'_>]) -> Result<(), TemplateError> {
        stmts.iter().try_for_each(|stmt| self.stmt(stmt))
    }

    fn stmt(&mut self, stmt: &Stmt<'_>) -> Result<(), TemplateError> {
        match stmt {
            Stmt::Template(template) => self.body(&template.children),
            Stmt::EmitExpr(emit) => self.top(&emit.expr),
            Stmt::EmitRaw(_) => Ok(()),
            Stmt::ForLoop(for_loop) => {
                let line = for_loop.span().start_line;
                if for_loop.recursive {
                    return Err(refuse("a recursive `{% for %}` loop", line));
                }
                if self.loops >= MAX_LOOP_DEPTH {
                    return Err(refuse(&format!("nesting `{{% for %}}` loops more than {MAX_LOOP_DEPTH} deep"), line));
                }
                self.top(&for_loop.iter)?;
                if let Some(condition) = &for_loop.filter_expr {
                    self.top(condition)?;
                }
                self.loops += 1;
                self.body(&for_loop.body)?;
                self.loops -= 1;
                self.body(&for_loop.else_body)
            }
            Stmt::IfCond(if_cond) => {
                self.top(&if_cond.expr)?;
                self.body(&if_cond.true_body)?;
                self.body(&if_cond.false_body)
            }
            Stmt::WithBlock(s) => Err(refuse("`{% with %}`", s.span().start_line)),
            Stmt::Set(s) => Err(refuse("`{% set %}`", s.span().start_line)),
            Stmt::SetBlock(s) => Err(refuse("`{% set %}` (block form)", s.span().start_line)),
            Stmt::AutoEscape(s) => Err(refuse("`{% autoescape %}`", s.span().start_line)),
            Stmt::FilterBlock(s) => Err(refuse("`{% filter %}`", s.span().start_line)),
            Stmt::Block(s) => Err(refuse("`{% block %}`", s.span().start_line)),
            Stmt::Import(s) => Err(refuse("`{% import %}`", s.span().start_line)),
            Stmt::FromImport(s) => Err(refuse("`{% from … import %}`", s.span().start_line)),
            Stmt::Extends(s) => Err(refuse("`{% extends %}`", s.span().start_line)),
            Stmt::Include(s) => Err(refuse("`{% include %}`", s.span().start_line)),
            Stmt::Macro(s) => Err(refuse("`{% macro %}`", s.span().start_line)),
            Stmt::CallBlock(s) => Err(refuse("`{% call %}`", s.span().start_line)),
            Stmt::Do(s) => Err(refuse("`{% do %}`", s.span().start_line)),
        }
    }

    /// A whole expression: an output, a condition, a loop's iterable or its `if` filter.
    fn top(&mut self, expr: &Expr<'_>) -> Result<(), TemplateError> {
        self.in_expression = 0;
        self.expr(expr)
    }

    fn reference(&mut self, line: u16) -> Result<(), TemplateError> {
        self.references += 1;
        self.in_expression += 1;
        if self.references > MAX_VARIABLE_REFERENCES {
            return Err(refuse(
                &format!("more than {MAX_VARIABLE_REFERENCES} variable references or calls in one template"),
                line,
            ));
        }
        if self.in_expression > MAX_EXPRESSION_REFERENCES {
            return Err(refuse(
                &format!("more than {MAX_EXPRESSION_REFERENCES} variable references or calls in one expression"),
                line,
            ));
        }
        Ok(())
    }

    fn expr(&mut self, expr: &Expr<'_>) -> Result<(), TemplateError> {
        if self.depth >= MAX_EXPRESSION_DEPTH {
            return Err(refuse(
                &format!("an expression nested more than {MAX_EXPRESSION_DEPTH} deep"),
                expr.span().start_line,
            ));
        }
        self.depth += 1;
        let checked = self.node(expr);
        self.depth -= 1;
        checked
    }

    fn node(&mut self, expr: &Expr<'_>) -> Result<(), TemplateError> {
        let line = expr.span().start_line;
        match expr {
            Expr::Var(_) => self.reference(line),
            Expr::Const(_) => Ok(()),
            Expr::Slice(slice) => {
                self.expr(&slice.expr)?;
                [&slice.start, &slice.stop, &slice.step].into_iter().flatten().try_for_each(|part| self.expr(part))
            }
            Expr::UnaryOp(op) => self.expr(&op.expr),
            Expr::BinOp(op) => {
                match op.op {
                    BinOpKind::Mul => return Err(refuse("the `*` operator", line)),
                    BinOpKind::Pow => return Err(refuse("the `**` operator", line)),
                    _ => {}
                }
                self.expr(&op.left)?;
                self.expr(&op.right)
            }
            Expr::Compare(compare) => {
                self.expr(&compare.expr)?;
                compare.ops.iter().try_for_each(|op| self.expr(&op.expr))
            }
            Expr::IfExpr(if_expr) => {
                self.expr(&if_expr.test_expr)?;
                self.expr(&if_expr.true_expr)?;
                if_expr.false_expr.as_ref().map_or(Ok(()), |other| self.expr(other))
            }
            Expr::Filter(filter) => {
                let name = normalize(filter.name);
                if !FILTERS.contains(&name.as_str()) {
                    return Err(refuse(&format!("the filter `{name}`"), line));
                }
                match name.as_str() {
                    "map" => self.named_argument(&name, "filter", FILTERS, &filter.args, line)?,
                    "select" | "reject" => self.named_argument(&name, "test", TESTS, &filter.args, line)?,
                    _ => {}
                }
                if let Some(input) = &filter.expr {
                    self.expr(input)?;
                }
                self.arguments(&filter.args, line)
            }
            Expr::Test(test) => {
                let name = normalize(test.name);
                if !TESTS.contains(&name.as_str()) {
                    return Err(refuse(&format!("the test `{name}`"), line));
                }
                self.expr(&test.expr)?;
                self.arguments(&test.args, line)
            }
            Expr::GetAttr(get) => self.expr(&get.expr),
            Expr::GetItem(get) => {
                self.expr(&get.expr)?;
                self.expr(&get.subscript_expr)
            }
            Expr::Call(call) => {
                match call.identify_call() {
                    CallType::Function(name) if FUNCTIONS.contains(&name) => {}
                    CallType::Function(name) => return Err(refuse(&format!("calling `{name}()`"), line)),
                    CallType::Method(_, name) => return Err(refuse(&format!("the method call `.{name}()`"), line)),
                    CallType::Block(name) => return Err(refuse(&format!("calling `self.{name}()`"), line)),
                    CallType::Object(_) => return Err(refuse("calling a value", line)),
                }
                self.reference(line)?;
                self.arguments(&call.args, line)
            }
            Expr::List(list) => list.items.iter().try_for_each(|item| self.literal_item(item)),
            Expr::Map(map) => map.keys.iter().chain(&map.values).try_for_each(|item| self.literal_item(item)),
        }
    }

    /// An item of a list or map literal: a constant, a variable, an attribute or item of one, or a nested
    /// literal. Anything that builds a new value (an operator, a filter, a call, a slice) could be bound to
    /// a loop variable and grow from one nested loop to the next.
    fn literal_item(&mut self, item: &Expr<'_>) -> Result<(), TemplateError> {
        let mut base = item;
        loop {
            match base {
                Expr::GetAttr(get) => base = &get.expr,
                Expr::GetItem(get) => base = &get.expr,
                Expr::Const(_) | Expr::Var(_) | Expr::List(_) | Expr::Map(_) => return self.expr(item),
                other => {
                    return Err(refuse(
                        &format!(
                            "a {} inside a list or map literal (items may only be constants, variables and their \
                             attributes)",
                            other.description()
                        ),
                        other.span().start_line,
                    ));
                }
            }
        }
    }

    fn arguments(&mut self, args: &[CallArg<'_>], line: u16) -> Result<(), TemplateError> {
        args.iter().try_for_each(|arg| match arg {
            CallArg::Pos(expr) | CallArg::Kwarg(_, expr) => self.expr(expr),
            CallArg::PosSplat(_) | CallArg::KwargSplat(_) => Err(refuse("argument unpacking with `*` or `**`", line)),
        })
    }

    /// `map('upper')`, `select('odd')`: the name must be a string constant naming an allowed filter or test.
    fn named_argument(
        &self,
        filter: &str,
        kind: &str,
        allowed: &[&str],
        args: &[CallArg<'_>],
        line: u16,
    ) -> Result<(), TemplateError> {
        let Some(first) = args.first() else { return Ok(()) };
        let CallArg::Pos(expr) = first else { return Ok(()) };
        let Expr::Const(constant) = expr else {
            return Err(refuse(&format!("`{filter}` with a {kind} name that is not a string constant"), line));
        };
        let Some(name) = constant.value.as_str() else {
            return Err(refuse(&format!("`{filter}` with a {kind} name that is not a string constant"), line));
        };
        let name = normalize(name);
        if allowed.contains(&name.as_str()) { Ok(()) } else { Err(refuse(&format!("the {kind} `{name}`"), line)) }
    }
}
