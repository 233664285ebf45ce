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

use minijinja::value::Value;
use minijinja::{Environment, filters, tests};

use self::list::{dictsort, items, join, lines, list, map, range, reject, reverse, select, sort, split, unique};
use self::text::{
    capitalize, center, escape, indent, lower, replace, striptags, title, tojson, trim, truncate, upper, urlencode,
    wordwrap,
};

/// Charging the budget for a filter's result.
mod cost;
/// Filters that build lists, and `range()`.
mod list;
/// Filters that build strings.
mod text;

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
