use super::*;

fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// `source` is refused when stored and when rendered, with `construct` and the line in the message.
#[track_caller]
fn refused(source: &str, construct: &str, line: u16) {
    let error = compile_check(source).expect_err(source).to_string();
    assert!(error.contains(construct), "{source}: {error}");
    assert!(error.ends_with(&format!("is not allowed (line {line})")), "{source}: {error}");
    assert_eq!(render(source, &args(&[])).map_err(|error| error.to_string()).as_ref(), Err(&error), "{source}");
}

/// `source` is accepted when stored but fails on the output budget when rendered with `values`.
#[track_caller]
fn over_budget(source: &str, values: &[(&str, &str)]) -> String {
    assert_eq!(compile_check(source), Ok(()), "{source}");
    let error = render(source, &args(values)).expect_err(source).to_string();
    assert!(error.contains("would exceed the output budget of 1048576 bytes"), "{source}: {error}");
    error
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
    let error = compile_check("Hello {{ name").expect_err("unclosed").to_string();
    assert!(error.contains("syntax error"), "{error}");
    assert!(error.contains("(line 1)"), "{error}");
}

#[test]
fn the_allowed_subset_renders() {
    let cases: &[(&str, &str)] = &[
        (
            "{{ a ~ '-' ~ b }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 7 - 2 }} {{ 7 // 2 }} {{ 7 % 2 }} {{ 1 / 2 }}",
            "A-B ab [1, 2] 5 3 1 0.5",
        ),
        ("{% if n == '1' %}one{% elif n == '2' %}two{% else %}many{% endif %}", "two"),
        ("{{ 1 < 2 }} {{ 'B' in b }} {{ 'z' not in b }} {{ a if a else 'no' }} {{ not a }}", "True True True A False"),
        (
            "{% for item in list|split(',') %}{{ loop.index }}/{{ loop.length }}:{{ item }}{% if not loop.last %}, {% endif %}{% endfor %}",
            "1/2:p, 2/2:q",
        ),
        ("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", "empty"),
        ("{% for i in range(3) if i != 1 %}{{ i + 1 }}{% endfor %}", "13"),
        ("{% for k, v in {'b': 1, 'a': 2}|dictsort %}{{ k }}={{ v }};{% endfor %}", "a=2;b=1;"),
        ("{% for pair in {'k': a}|items %}{{ pair[0] }}{{ pair.1 }}{% endfor %}", "kA"),
        ("{% for x in [a, b] %}{% for y in [x] %}{{ y }}{% endfor %}{% endfor %}", "AB"),
        (
            "{% if a is defined and a is string and missing is undefined and 3 is odd and 4 is divisibleby(2) %}ok{% endif %}",
            "ok",
        ),
        (
            "{% if a is startingwith('A') and b is endingwith('B') and 2 is number and none is none %}ok{% endif %}",
            "ok",
        ),
        (
            "{{ ' hello world '|trim|title }} {{ 'mIxEd'|lower }}{{ 'mIxEd'|upper }} {{ 'word'|capitalize }}",
            "Hello World mixedMIXED Word",
        ),
        ("{{ missing|default('none given') }} {{ missing|d('x') }} {{ a|default('unused') }}", "none given x A"),
        ("{{ 'abc'|length }} {{ [1, 2]|count }} {{ 'abc'|first }} {{ 'abc'|last }} {{ [1, 2]|first }}", "3 2 a c 1"),
        ("{{ ['x', 'y']|join(', ') }} {{ 'abc'|join('.') }} {{ range(3)|join }}", "x, y a.b.c 012"),
        ("{{ 'a-b-c'|replace('-', '+') }} {{ 'ab'|replace('', '.') }}", "a+b+c .a.b."),
        (
            "{{ 'Hello World, how are you'|truncate(10) }} {{ 'Hello World, how are you'|truncate(10, true, '!') }}",
            "Hello... Hello Wor!",
        ),
        (
            "{{ 'short'|truncate(10) }} {{ 'abcdefghijklmnop'|truncate(length=10, end='', leeway=0) }}",
            "short abcdefghij",
        ),
        ("{{ 'a\nb'|indent(2) }}|{{ 'a\nb'|indent(width=1, first=true) }}", "a\n  b| a\n b"),
        ("[{{ 'ab'|center(6) }}][{{ 'abc'|center(6) }}][{{ 'abcdef'|center(3) }}]", "[  ab  ][ abc  ][abcdef]"),
        (
            "{{ 'The quick brown fox'|wordwrap(10) }}|{{ 'abcdefgh'|wordwrap(3, wrapstring='/') }}",
            "The quick\nbrown fox|abc/def/gh",
        ),
        ("{{ 'a b'|wordwrap(3, false) }}|{{ 'abcdefgh'|wordwrap(3, break_long_words=false) }}", "a b|abcdefgh"),
        (
            "{{ 'abc'|list }} {{ 'a,b'|split(',') }} {{ 'a b  c'|split }} {{ 'x\ny'|lines }}",
            "[\"a\", \"b\", \"c\"] [\"a\", \"b\"] [\"a\", \"b\", \"c\"] [\"x\", \"y\"]",
        ),
        ("{{ '4'|int + 1 }} {{ '2.5'|float }} {{ -3|abs }} {{ 2.567|round(1) }} {{ 2.5|int }}", "5 2.5 3 2.6 2"),
        ("{{ {'a': [1, 'x\"y']}|tojson }} {{ q|tojson }}", "{\"a\":[1,\"x\\\"y\"]} \"<'&>\""),
        (
            "{{ q|escape }} {{ q|e|e }} {{ 'a b/c?d=é'|urlencode }} {{ {'k': 'v w', 'n': none}|urlencode }}",
            "&lt;&#x27;&amp;&gt; &lt;&#x27;&amp;&gt; a%20b/c%3Fd%3D%C3%A9 k=v%20w",
        ),
        (
            "{{ [3, 1, 3]|unique|sort|reverse|join(',') }} {{ 'abc'|reverse }} {{ [3, 1, 2]|min }}{{ [3, 1, 2]|max }}{{ [3, 1, 2]|sum }}",
            "3,1 cba 136",
        ),
        (
            "{{ range(6)|select('odd')|join(',') }} {{ range(6)|reject('even')|join(',') }} {{ range(4)|select|list }} {{ [1, 5]|select('>', 2)|list }}",
            "1,3,5 1,3,5 [1, 2, 3] [5]",
        ),
        (
            "{{ ['a', 'b']|map('upper')|join }} {{ [{'n': 'x'}, {'n': 'y'}]|map(attribute='n')|join }} {{ ['ab']|map('replace', 'a', 'c')|join }}",
            "AB xy cb",
        ),
        ("{{ [{'n': 2}, {'n': 1}]|sort(attribute='n')|map(attribute='n')|join }}", "12"),
        ("{{ '<p>Hello  <b>world</b><!-- note --></p>'|striptags }}", "Hello world"),
        ("{{ 'abcdef'[1:3] }} {{ list[0] }} {{ {'k': a}['k'] }} {{ {'k': a}.k }}", "bc p A A"),
        ("{% raw %}{{ kept }}{% endraw %}{# comment #}", "{{ kept }}"),
    ];
    let values = args(&[("a", "A"), ("b", "B"), ("n", "2"), ("list", "p,q"), ("q", "<'&>")]);
    for (source, expected) in cases {
        assert_eq!(compile_check(source), Ok(()), "{source}");
        assert_eq!(render(source, &values).as_deref(), Ok(*expected), "{source}");
    }
}

#[test]
fn every_allowed_filter_test_and_function_is_registered() {
    for name in FILTERS {
        let source = format!("{{{{ 'a'|{name} }}}}");
        assert_eq!(compile_check(&source), Ok(()), "{source}");
        if let Err(error) = render(&source, &args(&[])).map_err(|error| error.to_string()) {
            assert!(!error.contains("unknown"), "{source}: {error}");
        }
    }
    for name in TESTS {
        let source = format!("{{{{ ['a', 1]|select('{name}', 1)|list }}}}");
        assert_eq!(compile_check(&source), Ok(()), "{source}");
        if let Err(error) = render(&source, &args(&[])).map_err(|error| error.to_string()) {
            assert!(!error.contains("unknown"), "{source}: {error}");
        }
    }
    assert_eq!(FUNCTIONS, ["range"]);
}

#[test]
fn statements_operators_calls_and_unknown_names_are_refused() {
    // One-line sources: each refusal names line 1.
    let cases = [
        ("{% set x = 'a' %}{{ x }}", "`{% set %}`"),
        ("{% set x %}captured{% endset %}", "`{% set %}` (block form)"),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
            "`{% set %}`",
        ),
        ("{% with x = 'a' %}{{ x }}{% endwith %}", "`{% with %}`"),
        ("{% macro m(s) %}{{ m(s ~ s) }}{% endmacro %}{{ m(x) }}", "`{% macro %}`"),
        ("{% call f() %}x{% endcall %}", "`{% call %}`"),
        ("{% filter upper %}{% for i in range(9999) %}{{ x }}{% endfor %}{% endfilter %}", "`{% filter %}`"),
        ("{% do f() %}", "`{% do %}`"),
        ("{% autoescape true %}x{% endautoescape %}", "`{% autoescape %}`"),
        ("{% include 'other' %}", "`{% include %}`"),
        ("{% import 'other' as o %}", "`{% import %}`"),
        ("{% from 'other' import m %}", "`{% from … import %}`"),
        ("{% extends 'base' %}", "`{% extends %}`"),
        ("{% block b %}x{% endblock %}", "`{% block %}`"),
        ("{% for x in y recursive %}{{ loop(x) }}{% endfor %}", "a recursive `{% for %}` loop"),
        ("{{ 'x' * 100000000 }}", "the `*` operator"),
        ("{{ 'x' * 9 }}", "the `*` operator"),
        ("{{ [x] * 3 }}", "the `*` operator"),
        ("{{ 2 ** 3 }}", "the `**` operator"),
        ("{{ x.upper() }}", "the method call `.upper()`"),
        ("{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}", "the method call `.cycle()`"),
        ("{{ self.b() }}", "calling `self.b()`"),
        ("{{ x[0](1) }}", "calling a value"),
        ("{{ range(*x) }}", "argument unpacking"),
        ("{{ x|format(y) }}", "the filter `format`"),
        ("{{ x|pprint }}", "the filter `pprint`"),
        ("{{ x|batch(3) }}", "the filter `batch`"),
        ("{{ x is filter }}", "the test `filter`"),
        ("{{ x|map('format') }}", "the filter `format`"),
        ("{{ x|map(y) }}", "`map` with a filter name that is not a string constant"),
        ("{{ x|select('test') }}", "the test `test`"),
    ];
    for (source, construct) in cases {
        refused(source, construct, 1);
    }
    refused("line one\n\n{% set x = 1 %}", "`{% set %}`", 3);
}

#[test]
fn every_unknown_function_is_refused() {
    for function in ["debug", "namespace", "cycler", "joiner", "lipsum", "dict"] {
        refused(&format!("{{{{ {function}() }}}}"), &format!("calling `{function}()`"), 1);
    }
}

#[test]
fn literals_hold_only_constants_and_variables() {
    refused("{% for t in [x ~ x] %}{{ t }}{% endfor %}", "a expression inside a list or map literal", 1);
    refused("{{ {'k': x|upper} }}", "a filter expression inside a list or map literal", 1);
    refused("{{ [range(3)] }}", "a call inside a list or map literal", 1);
    refused("{{ [x[1:]] }}", "inside a list or map literal", 1);
    assert_eq!(compile_check("{{ [x, x.y, x[0], [1, {'k': x}]] }}"), Ok(()));
}

#[test]
fn variable_references_are_limited() {
    let chain = vec!["a"; 17].join(" ~ ");
    refused(&format!("{{{{ {chain} }}}}"), "more than 16 variable references or calls in one expression", 1);
    let chain = vec!["a"; 1000].join(" ~ ");
    refused(&format!("{{{{ {chain} }}}}"), "a tag of more than 1000 tokens", 1);
    let sixteen = vec!["a"; 16].join(" ~ ");
    assert_eq!(compile_check(&format!("{{{{ {sixteen} }}}}")), Ok(()));
    let ranges = vec!["range(10000)"; 17].join(" + ");
    refused(&format!("{{{{ ({ranges}) ~ '' }}}}"), "more than 16 variable references or calls in one expression", 1);
    let many = "{{ a }}\n".repeat(257);
    refused(&many, "more than 256 variable references or calls in one template", 257);
    assert_eq!(compile_check(&"{{ a }}\n".repeat(256)), Ok(()));
}

#[test]
fn deep_expressions_are_refused_before_they_are_compiled() {
    // Chains of up to 1000 tokens parse; beyond 64 levels the checker refuses them.
    let deep = format!("{{{{ 'a'{} }}}}", "|upper".repeat(400));
    refused(&deep, "an expression nested more than 64 deep", 1);
    let chain = format!("{{{{ '' {} }}}}", "~ 'a' ".repeat(499));
    refused(&chain, "an expression nested more than 64 deep", 1);
    // MiniJinja's parser and dropping its tree recurse once per operator: a long chain is refused unparsed.
    let huge = format!("{{{{ '' {} }}}}", "~ 'a' ".repeat(200_000));
    refused(&huge, "a tag of more than 1000 tokens", 1);
    let nested = format!("{}x{}", "{% if a %}".repeat(40), "{% endif %}".repeat(40));
    assert_eq!(compile_check(&nested), Ok(()));
}

#[test]
fn loops_nest_at_most_four_deep() {
    let nested = |depth: usize| format!("{}x{}", "{% for i in range(2) %}".repeat(depth), "{% endfor %}".repeat(depth));
    assert_eq!(compile_check(&nested(MAX_LOOP_DEPTH)), Ok(()));
    refused(&nested(MAX_LOOP_DEPTH + 1), "nesting `{% for %}` loops more than 4 deep", 1);
}

#[test]
fn filters_that_amplify_are_sized_before_building() {
    let big = "x".repeat(64 * 1024);
    over_budget("{{ x|indent(1000000000) }}", &[("x", "a\nb")]);
    over_budget("{{ x|indent(width=1000000000, first=true) }}", &[("x", "a")]);
    over_budget("{{ x|center(1000000000) }}", &[("x", "a")]);
    over_budget("{{ x|replace('', y) }}", &[("x", &big), ("y", &big)]);
    over_budget("{{ x|replace('x', y) }}", &[("x", &big), ("y", &big)]);
    over_budget("{{ x|list|join(y) }}", &[("x", &"x".repeat(10 * 1024)), ("y", &big)]);
    over_budget("{{ x|list }}", &[("x", &big)]);
    over_budget("{{ x|split('') }}", &[("x", &big)]);
    let error = over_budget("{{ x|sort|length }}", &[("x", &big)]);
    assert!(error.contains("the filter `sort`"), "{error}");
    over_budget("{{ x|select|length }}", &[("x", &big)]);
    over_budget("{{ x|map('upper')|length }}", &[("x", &big)]);
    over_budget("{{ x|wordwrap(1, wrapstring=y) }}", &[("x", &big), ("y", &big)]);
    over_budget("{{ x|urlencode }}", &[("x", &"?".repeat(512 * 1024))]);
    let quotes = "\"".repeat(100 * 1024);
    let error = over_budget("{{ (x|tojson|tojson|tojson|tojson|tojson|tojson)|length }}", &[("x", &quotes)]);
    assert!(error.contains("the filter `tojson`"), "{error}");
    let angles = "<".repeat(200 * 1024);
    over_budget("{{ x|e|e|e|e|e|e|e|e }}", &[("x", &angles)]);
    let error = over_budget("{{ (x|e|e|e)|length }}{{ (x|escape)|length }}{{ (x|escape)|length }}", &[("x", &angles)]);
    assert!(error.contains("the filter `escape`"), "{error}");
    // The refusal names the filter and the line.
    let error = over_budget("line one\n{{ x|indent(1000000000) }}", &[("x", "a\nb")]);
    assert!(error.starts_with("the filter `indent` would exceed"), "{error}");
    assert!(error.ends_with("(line 2)"), "{error}");
}

#[test]
fn filter_results_count_even_when_not_output() {
    // 20 × 64 KiB of uppercase text is built, though only its length is output.
    let big = "x".repeat(64 * 1024);
    let error = over_budget("{% for i in range(20) %}{{ (x|upper)|length }}{% endfor %}", &[("x", &big)]);
    assert!(error.contains("the filter `upper`"), "{error}");
}

#[test]
fn output_is_capped() {
    let kib = "x".repeat(1024);
    let error = over_budget("{% for i in range(2000) %}{{ x }}{% endfor %}", &[("x", &kib)]);
    assert!(error.starts_with("the rendered output would exceed"), "{error}");
    let exact = "{% for i in range(1024) %}{{ x }}{% endfor %}";
    assert_eq!(render(exact, &args(&[("x", &kib)])).map(|text| text.len()), Ok(1024 * 1024));
}

#[test]
fn a_budget_is_shared_by_the_renders_given_it() {
    let kib = "x".repeat(1024);
    let values = args(&[("x", &kib)]);
    let text = "{% for i in range(600) %}{{ x }}{% endfor %}";
    let mut budget = Budget::default();
    assert_eq!(render_with_budget(text, &values, &mut budget).map(|text| text.len()), Ok(600 * 1024));
    assert_eq!(budget.remaining(), BUDGET_BYTES - 600 * 1024);
    let error = render_with_budget(text, &values, &mut budget).expect_err("over the shared budget").to_string();
    assert!(error.contains("output budget"), "{error}");
    assert!(budget.is_spent(), "a render refused for want of bytes spends the budget");
    let mut small = Budget::new(10);
    assert_eq!(render_with_budget("0123456789", &values, &mut small).as_deref(), Ok("0123456789"));
    assert!(render_with_budget("a", &values, &mut small).is_err());
}

#[test]
fn concurrent_renders_have_their_own_budgets() {
    let kib = "x".repeat(1024);
    let text = "{% for i in range(1000) %}{{ x }}{% endfor %}";
    std::thread::scope(|scope| {
        let renders: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| (0..3).map(|_| render(text, &args(&[("x", &kib)])).map(|t| t.len())).collect::<Vec<_>>())
            })
            .collect();
        for handle in renders {
            assert_eq!(handle.join().expect("no panic"), vec![Ok(1000 * 1024); 3]);
        }
    });
}

#[test]
fn ranges_are_capped() {
    assert_eq!(render("{{ range(10000)|length }}", &args(&[])).as_deref(), Ok("10000"));
    let error = render("{{ range(10001)|length }}", &args(&[])).expect_err("too long").to_string();
    assert!(error.contains("at most 10000"), "{error}");
    assert!(render("{{ range(0, 100000, 10)|length }}", &args(&[])).is_ok());
    assert!(render("{{ range(100000, 0, -1)|length }}", &args(&[])).is_err());
}

#[test]
fn list_items_cost_one_value_each() {
    assert_eq!(std::mem::size_of::<minijinja::Value>(), 24, "the README states 24 bytes per item");
    let values = args(&[("x", "abc")]);
    assert!(render_with_budget("{{ (x|list)|length }}", &values, &mut Budget::new(3 * 24 + 1)).is_ok());
    assert!(render_with_budget("{{ (x|list)|length }}", &values, &mut Budget::new(3 * 24)).is_err());
}

#[test]
fn runaway_loops_run_out_of_fuel() {
    let mut budget = Budget::default();
    let text = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}";
    let error = render_with_budget(text, &args(&[]), &mut budget).expect_err("out of fuel").to_string();
    assert!(error.contains("fuel"), "{error}");
    assert!(budget.is_spent(), "running out of fuel is a render limit");
    let mut budget = Budget::default();
    assert!(render_with_budget("{{ 1 + }}", &args(&[]), &mut budget).is_err());
    assert!(!budget.is_spent(), "a broken template is not a render limit");
}

#[test]
fn quick_renders_give_what_full_renders_give_or_ask_for_more_fuel() {
    let values = args(&[("topic", "bees"), ("depth", "deep")]);
    // Within the quick fuel: the full render's output, and nothing more wanted.
    let mut quick = Budget::quick();
    assert_eq!(render_with_budget(RESEARCH, &values, &mut quick), render(RESEARCH, &values));
    assert!(!quick.wants_more_fuel());
    assert_eq!(quick.remaining(), BUDGET_BYTES - render(RESEARCH, &values).expect("renders").len());

    // More than the quick fuel, far less than the full fuel: the quick render asks for more.
    let heavy = "{% for i in range(1000) %}{{ i }}{% endfor %}";
    let mut quick = Budget::quick();
    let error = render_with_budget(heavy, &values, &mut quick).expect_err("out of quick fuel").to_string();
    assert!(error.contains("fuel"), "{error}");
    assert!(quick.wants_more_fuel());
    assert_eq!(
        render(heavy, &values).expect("the full fuel suffices").len(),
        (0..1000).map(|i| i.to_string().len()).sum::<usize>()
    );

    // Any other failure is the full render's failure, and does not ask for more fuel.
    for source in ["{{ topic|nosuchfilter }}", "{% for i in range(10) %}{{ 'x' * 2 }}{% endfor %}", "{{ topic"] {
        let mut quick = Budget::quick();
        assert_eq!(render_with_budget(source, &values, &mut quick), render(source, &values), "{source}");
        assert!(!quick.wants_more_fuel(), "{source}");
    }
    let mut small = Budget::new(4);
    assert!(!small.wants_more_fuel());
    assert!(render_with_budget("{{ topic }}{{ topic }}", &values, &mut small).is_err());
    assert!(!small.wants_more_fuel(), "only quick budgets ask for more fuel");
}

#[test]
fn compiled_templates_render_as_their_sources_do() {
    let heavy = "{% for i in range(1000) %}{{ i }}{% endfor %}";
    let runaway = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}";
    let refused = "{% set x = 1 %}{{ x }}";
    let broken = "{{ topic";
    let unknown = "{{ topic|nosuchfilter }}";
    let amplified = "{{ topic|indent(2000000) }}";
    let compiled = Compiled::new([RESEARCH, heavy, runaway, refused, broken, unknown, amplified]);
    let values = args(&[("topic", "bees"), ("depth", "deep")]);
    // Every source, compiled or not (refused and broken ones are left out, and one never given is rendered
    // from its source), gives what a render from source gives, with the same budget afterwards, whether the
    // budget is quick or full.
    for source in [RESEARCH, heavy, runaway, refused, broken, unknown, amplified, "not given {{ topic }}"] {
        for budget in [Budget::quick(), Budget::default(), Budget::new(8)] {
            let (mut from_source, mut from_compiled) = (budget.clone(), budget);
            assert_eq!(
                compiled.render(source, &values, &mut from_compiled),
                render_with_budget(source, &values, &mut from_source),
                "{source}"
            );
            assert_eq!(from_compiled, from_source, "{source}");
        }
    }
    let mut quick = Budget::quick();
    assert!(compiled.render(heavy, &values, &mut quick).is_err());
    assert!(quick.wants_more_fuel(), "the compiled quick render has only the quick fuel");
    let full = compiled.render(heavy, &values, &mut Budget::default()).expect("the full fuel suffices");
    assert_eq!(full.len(), (0..1000).map(|i| i.to_string().len()).sum::<usize>());
    // The compiled environments hold the sources that passed the rules and compiled, and nothing else.
    for (source, is_compiled) in
        [(RESEARCH, true), (heavy, true), (refused, false), (broken, false), ("not given {{ topic }}", false)]
    {
        assert_eq!(compiled.quick.get_template(source).is_ok(), is_compiled, "{source}");
        assert_eq!(compiled.full.get_template(source).is_ok(), is_compiled, "{source}");
    }
}

#[test]
fn plain_templates_render_as_minijinja_renders_them() {
    let sources = [
        ("Research {{ topic }} in {{depth}} depth.\n", true),
        ("{{ topic }}{{ topic }}", true),
        ("{{\n\ttopic\n}} and {{ missing }} }} {", true),
        ("no substitution at all\r\n\n", true),
        ("", true),
        ("{{ _x1 }}", true),
        ("{{ true }} {{ none }} {{ range }} {{ loop }}", false),
        ("{{ topic|upper }}", false),
        ("{{- topic -}} x", false),
        ("{{ topic }} {% if depth %}{{ depth }}{% endif %}", false),
        ("{# note #}{{ topic }}", false),
        ("{{ '}}' }}", false),
        ("{{ topic.x }}", false),
    ];
    let values = [
        args(&[("topic", "quantum computing"), ("depth", "deep")]),
        args(&[("topic", "{{ depth }} <b>&</b>"), ("_x1", "é")]),
        args(&[]),
    ];
    for (source, plain) in sources {
        let compiled = Compiled::new([source]);
        assert_eq!(compiled.plain.contains_key(source), plain, "{source:?}");
        for values in &values {
            let (mut fast, mut slow) = (Budget::default(), Budget::default());
            let expected = render_with_budget(source, values, &mut slow);
            assert_eq!(compiled.render(source, values, &mut fast), expected, "{source:?} with {values:?}");
            assert_eq!(fast, slow, "{source:?} charges the same");
        }
    }
    // Over the budget, the refusal is MiniJinja's.
    let source = "Research {{ topic }} in {{ depth }} depth.";
    let (mut fast, mut slow) = (Budget::new(12), Budget::new(12));
    let expected = render_with_budget(source, &values[0], &mut slow);
    assert!(expected.is_err());
    assert_eq!(Compiled::new([source]).render(source, &values[0], &mut fast), expected);
    assert_eq!(fast, slow);
}
