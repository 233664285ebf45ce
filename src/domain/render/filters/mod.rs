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

/// Declares an allow-list and how it is registered, so that each name is written once: `$list` holds the
/// names, and `$register` adds each name's implementation to an environment with `$add`.
macro_rules! allow_list {
    ($(#[$doc:meta])* $list:ident, $register:ident, $add:ident { $($name:literal => $f:expr,)+ }) => {
        $(#[$doc])*
        pub const $list: &[&str] = &[$($name),+];

        fn $register(env: &mut Environment<'_>) {
            $(env.$add($name, $f);)+
        }
    };
}

allow_list! {
    /// The filters templates may use.
    FILTERS, register_filters, add_filter {
        // A number, a boolean, or a value that already exists: nothing new to charge.
        "abs" => filters::abs,
        "count" => filters::length,
        "d" => filters::default,
        "default" => filters::default,
        "first" => filters::first,
        "float" => filters::float,
        "int" => filters::int,
        "last" => filters::last,
        "length" => filters::length,
        "max" => filters::max,
        "min" => filters::min,
        "round" => filters::round,
        "sum" => filters::sum,

        // A string at most three times the input's bytes (case mapping, trimming), charged once built; or one
        // value per item of the input (`sort`, `select`, `map`, …), reserved before it is built.
        "capitalize" => capitalize,
        "dictsort" => dictsort,
        "items" => items,
        "lower" => lower,
        "map" => map,
        "reject" => reject,
        "reverse" => reverse,
        "select" => select,
        "sort" => sort,
        "striptags" => striptags,
        "title" => title,
        "trim" => trim,
        "unique" => unique,
        "upper" => upper,

        // Possibly far larger than the input: sized before anything is built.
        "center" => center,
        "e" => escape,
        "escape" => escape,
        "indent" => indent,
        "join" => join,
        "lines" => lines,
        "list" => list,
        "replace" => replace,
        "split" => split,
        "tojson" => tojson,
        "truncate" => truncate,
        "urlencode" => urlencode,
        "wordwrap" => wordwrap,
    }
}

allow_list! {
    /// The tests templates may use (`x is defined`, `select('odd')`).
    TESTS, register_tests, add_test {
        "!=" => tests::is_ne,
        "ne" => tests::is_ne,
        "<" => tests::is_lt,
        "lt" => tests::is_lt,
        "lessthan" => tests::is_lt,
        "<=" => tests::is_le,
        "le" => tests::is_le,
        "==" => tests::is_eq,
        "eq" => tests::is_eq,
        "equalto" => tests::is_eq,
        ">" => tests::is_gt,
        "gt" => tests::is_gt,
        "greaterthan" => tests::is_gt,
        ">=" => tests::is_ge,
        "ge" => tests::is_ge,
        "boolean" => tests::is_boolean,
        "defined" => tests::is_defined,
        "divisibleby" => tests::is_divisibleby,
        "endingwith" => tests::is_endingwith,
        "escaped" => tests::is_safe,
        "even" => tests::is_even,
        "false" => tests::is_false,
        "float" => tests::is_float,
        "in" => tests::is_in,
        "int" => tests::is_integer,
        "integer" => tests::is_integer,
        "iterable" => tests::is_iterable,
        "lower" => tests::is_lower,
        "mapping" => tests::is_mapping,
        "none" => tests::is_none,
        "number" => tests::is_number,
        "odd" => tests::is_odd,
        "safe" => tests::is_safe,
        "sameas" => tests::is_sameas,
        "sequence" => tests::is_sequence,
        "startingwith" => tests::is_startingwith,
        "string" => tests::is_string,
        "true" => tests::is_true,
        "undefined" => tests::is_undefined,
        "upper" => tests::is_upper,
    }
}

/// The functions templates may call.
pub const FUNCTIONS: &[&str] = &["range"];

/// The most items `range()` may produce.
pub const MAX_RANGE: usize = 10_000;

/// What one item of a list costs: a MiniJinja value (strings of up to 22 bytes are stored inline).
const ITEM: usize = std::mem::size_of::<Value>();

/// Registers everything in [`FILTERS`], [`TESTS`] and [`FUNCTIONS`] on an empty environment.
pub fn register(env: &mut Environment<'_>) {
    register_filters(env);
    register_tests(env);
    env.add_function("range", range);
}
