use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::xml::{Kind, Name, NodeId};

const BPEL_NS: &str = "http://docs.oasis-open.org/wsbpel/2.0/process/executable";
const EXT_NS: &str = "urn:ext";

/// `r` holds every kind of node: elements, attributes, text, a comment, a PI, a namespace.
const TREE: &str = r#"<r><a id="1" x="p"><b>1</b><b>2</b><c><b>3</b></c></a><!--note--><?go now?><a id="2"><b>4</b>tail</a><t:e xmlns:t="urn:t" t:k="v">5</t:e></r>"#;

struct Cx {
    vars: HashMap<String, Value>,
    calls: RefCell<Vec<(Name, Vec<String>)>>,
}

impl Cx {
    fn new() -> Self {
        Cx {
            vars: HashMap::new(),
            calls: RefCell::new(Vec::new()),
        }
    }

    fn with(mut self, name: &str, v: Value) -> Self {
        self.vars.insert(name.to_string(), v);
        self
    }
}

impl Context for Cx {
    fn variable(&self, name: &str) -> Result<Value, XPathError> {
        self.vars.get(name).cloned().ok_or_else(|| {
            XPathError::Raised(
                Name::new(BPEL_NS, "uninitializedVariable"),
                name.to_string(),
            )
        })
    }

    fn function(&self, name: &Name, args: Vec<Value>) -> Result<Value, XPathError> {
        self.calls.borrow_mut().push((
            name.clone(),
            args.iter().map(Value::to_string_value).collect(),
        ));
        match name.local.as_str() {
            "twice" => Ok(Value::Number(args[0].to_number() * 2.0)),
            "fail" => Err(XPathError::Raised(
                Name::new(EXT_NS, "boom"),
                "failed".into(),
            )),
            _ => Ok(Value::String(format!(
                "{}({})",
                name.local,
                args.iter()
                    .map(Value::to_string_value)
                    .collect::<Vec<_>>()
                    .join(",")
            ))),
        }
    }
}

fn ns(prefix: &str) -> Option<String> {
    Some(
        match prefix {
            "t" | "tns" => "urn:t",
            "fn" => FN_NS,
            "xs" | "xsd" => XS_NS,
            "bpel" => BPEL_NS,
            "ext" => EXT_NS,
            _ => return None,
        }
        .to_string(),
    )
}

fn extension(name: &Name, arity: usize) -> bool {
    (name.is(BPEL_NS, "getVariableProperty") && arity == 2)
        || (name.ns == EXT_NS && ["twice", "fail"].contains(&name.local.as_str()))
}

fn compile(text: &str) -> Result<XPath, XPathError> {
    XPath::compile(
        text,
        &Env {
            ns: &ns,
            extension: &extension,
        },
    )
}

fn doc(text: &str) -> Arc<Doc> {
    Arc::new(Doc::parse(text).unwrap())
}

fn eval_with(cx: &Cx, text: &str, node: Option<&NodeRef>) -> Result<Value, XPathError> {
    compile(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .eval(cx, node)
}

/// Evaluates at the document node of [`TREE`].
fn at_tree(text: &str) -> Value {
    let root = NodeRef::root(doc(TREE));
    eval_with(&Cx::new(), text, Some(&root)).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn s(text: &str) -> String {
    at_tree(text).to_string_value()
}

fn n(text: &str) -> f64 {
    at_tree(text).to_number()
}

fn b(text: &str) -> bool {
    match at_tree(text) {
        Value::Boolean(b) => b,
        v => panic!("{text}: not a boolean: {v:?}"),
    }
}

/// A short label per node: `name#id`, `name=text` for text-only elements, `@name=value`,
/// `"text"`, `<!--c-->`, `<?target?>`, `/`.
fn label(node: &NodeRef) -> String {
    let d = &node.doc;
    match d.kind(node.id) {
        Kind::Document => "/".into(),
        Kind::Element { name, .. } => match d.attr(node.id, "", "id") {
            Some(id) => format!("{name}#{id}"),
            None if d.children(node.id).len() == 1
                && matches!(d.kind(d.children(node.id)[0]), Kind::Text(_)) =>
            {
                format!("{name}={}", d.string_value(node.id))
            }
            None => name.to_string(),
        },
        Kind::Attribute { name, value } => format!("@{name}={value}"),
        Kind::Text(t) => format!("{t:?}"),
        Kind::Comment(c) => format!("<!--{c}-->"),
        Kind::Pi { target, .. } => format!("<?{target}?>"),
    }
}

fn labels(v: &Value) -> Vec<String> {
    match v {
        Value::NodeSet(nodes) => nodes.iter().map(label).collect(),
        v => panic!("not a node-set: {v:?}"),
    }
}

fn nodes(text: &str) -> Vec<String> {
    labels(&at_tree(text))
}

fn compile_err(text: &str) -> XPathError {
    match compile(text) {
        Ok(x) => panic!("{text} compiled: {x:?}"),
        Err(e) => e,
    }
}

fn syntax_at(text: &str) -> (usize, String) {
    match compile_err(text) {
        XPathError::Syntax { at, message, expr } => {
            assert_eq!(expr, text);
            (at, message)
        }
        e => panic!("{text}: not a syntax error: {e}"),
    }
}

#[test]
fn child_descendant_attribute_and_self_axes() {
    assert_eq!(nodes("/r/a"), ["a#1", "a#2"]);
    assert_eq!(nodes("/child::r/child::a/child::b"), ["b=1", "b=2", "b=4"]);
    assert_eq!(
        nodes("/r/node()"),
        ["a#1", "<!--note-->", "<?go?>", "a#2", "t:e=5"]
    );
    assert_eq!(nodes("/r/a[1]/descendant::*"), ["b=1", "b=2", "c", "b=3"]);
    assert_eq!(
        nodes("/r/a[1]/descendant-or-self::*"),
        ["a#1", "b=1", "b=2", "c", "b=3"]
    );
    assert_eq!(
        nodes("/r/a[2]/descendant::node()"),
        ["b=4", "\"4\"", "\"tail\""]
    );
    assert_eq!(nodes("/r/a/@*"), ["@id=1", "@x=p", "@id=2"]);
    assert_eq!(nodes("/r/a/attribute::x"), ["@x=p"]);
    assert_eq!(nodes("/r/a[1]/self::a"), ["a#1"]);
    assert!(nodes("/r/a[1]/self::b").is_empty());
    assert!(
        nodes("/r/a/@x/self::*").is_empty(),
        "self::* wants elements"
    );
    assert_eq!(nodes("/r/a/@x/self::node()"), ["@x=p"]);
    assert_eq!(nodes("/r/a[1]/."), ["a#1"]);
    assert_eq!(nodes("/"), ["/"]);
}

#[test]
fn parent_and_ancestor_axes_count_backwards() {
    assert_eq!(nodes("/r/a[1]/c/b/.."), ["c"]);
    assert_eq!(nodes("/r/a[1]/c/b/parent::c"), ["c"]);
    assert_eq!(nodes("//b/parent::*"), ["a#1", "c", "a#2"]);
    assert_eq!(nodes("/r/a[1]/c/b/ancestor::*"), ["r", "a#1", "c"]);
    assert_eq!(nodes("/r/a[1]/c/b/ancestor::*[1]"), ["c"]);
    assert_eq!(nodes("/r/a[1]/c/b/ancestor::node()[last()]"), ["/"]);
    assert_eq!(nodes("/r/a[1]/c/b/ancestor-or-self::*[2]"), ["c"]);
    assert_eq!(nodes("/r/a[1]/c/b/ancestor-or-self::*[1]"), ["b=3"]);
    assert_eq!(nodes("/r/a/@x/parent::*"), ["a#1"]);
    assert_eq!(nodes("/r/a/@x/ancestor::*"), ["r", "a#1"]);
}

#[test]
fn sibling_following_and_preceding_axes() {
    assert_eq!(nodes("/r/a[1]/b[1]/following-sibling::*"), ["b=2", "c"]);
    assert_eq!(nodes("/r/a[1]/b[1]/following-sibling::*[1]"), ["b=2"]);
    assert_eq!(nodes("/r/a[1]/b[1]/following-sibling::*[last()]"), ["c"]);
    assert_eq!(nodes("/r/a[1]/c/preceding-sibling::*"), ["b=1", "b=2"]);
    assert_eq!(nodes("/r/a[1]/c/preceding-sibling::*[1]"), ["b=2"]);
    assert!(nodes("/r/a/@x/following-sibling::node()").is_empty());
    assert_eq!(nodes("/r/a[1]/c/following::*"), ["a#2", "b=4", "t:e=5"]);
    assert_eq!(nodes("/r/a[1]/c/following::node()[1]"), ["<!--note-->"]);
    assert_eq!(nodes("/r/a[1]/b[2]/following::b"), ["b=3", "b=4"]);
    // An attribute is followed by its element's content.
    assert_eq!(
        nodes("/r/a[1]/@x/following::b"),
        ["b=1", "b=2", "b=3", "b=4"]
    );
    assert_eq!(nodes("/r/a[2]/preceding::b"), ["b=1", "b=2", "b=3"]);
    assert_eq!(nodes("/r/a[2]/preceding::b[1]"), ["b=3"]);
    assert_eq!(nodes("/r/a[2]/preceding::*[last()]"), ["a#1"]);
    assert_eq!(nodes("/r/a[2]/preceding::node()[1]"), ["<?go?>"]);
    assert!(
        nodes("/r/a[1]/@x/preceding::*").is_empty(),
        "ancestors do not precede"
    );
    assert_eq!(nodes("/r/a[2]/b/preceding::c"), ["c"]);
}

#[test]
fn node_tests_by_kind_name_and_namespace() {
    assert_eq!(nodes("/r/comment()"), ["<!--note-->"]);
    assert_eq!(nodes("/r/processing-instruction()"), ["<?go?>"]);
    assert_eq!(nodes("/r/processing-instruction('go')"), ["<?go?>"]);
    assert!(nodes("/r/processing-instruction('stop')").is_empty());
    assert_eq!(nodes("/r/a[2]/text()"), ["\"tail\""]);
    assert_eq!(nodes("//t:e"), ["t:e=5"]);
    assert_eq!(
        nodes("//tns:e"),
        ["t:e=5"],
        "prefixes resolve through the Env"
    );
    assert_eq!(nodes("/r/t:*"), ["t:e=5"]);
    assert!(
        nodes("//e").is_empty(),
        "an unprefixed name test means no namespace"
    );
    assert_eq!(nodes("//@t:k"), ["@t:k=v"]);
    assert_eq!(nodes("/r/*[not(self::a)]"), ["t:e=5"]);
}

#[test]
fn predicates_are_positional_and_nest() {
    assert_eq!(nodes("//b[1]"), ["b=1", "b=3", "b=4"]);
    assert_eq!(nodes("/descendant::b[3]"), ["b=3"]);
    assert_eq!(nodes("(//b)[2]"), ["b=2"]);
    assert_eq!(nodes("(//b)[last()]"), ["b=4"]);
    assert_eq!(nodes("(//b)[last() - 1]"), ["b=3"]);
    assert_eq!(nodes("//b[position() = last()]"), ["b=2", "b=3", "b=4"]);
    assert_eq!(nodes("//b[1.5]"), Vec::<String>::new());
    assert_eq!(nodes("/r/a[c]"), ["a#1"]);
    assert_eq!(nodes("/r/a[c/b = 3]"), ["a#1"]);
    assert_eq!(nodes("/r/a[b[2] = '2']"), ["a#1"]);
    assert_eq!(nodes("/r/a[b[. = 4]]/@id"), ["@id=2"]);
    assert_eq!(nodes("//a[@id = '2']/b"), ["b=4"]);
    // Each predicate renumbers what the one before kept.
    assert!(nodes("//b[. > 1][2]").is_empty());
    assert_eq!(nodes("(//b)[. > 1][2]"), ["b=3"]);
    assert_eq!(nodes("/r/a[1]/b[last()][1]"), ["b=2"]);
    assert_eq!(
        nodes("(/r/a[2]/preceding::b)[1]"),
        ["b=1"],
        "a filter counts in document order"
    );
}

#[test]
fn variables_filters_and_paths_from_expressions() {
    let d = doc(TREE);
    let r = d.root_element().unwrap();
    let reversed: Vec<NodeRef> = d
        .children(r)
        .iter()
        .rev()
        .map(|c| NodeRef::new(d.clone(), *c))
        .collect();
    let cx = Cx::new()
        .with("kids", Value::NodeSet(reversed))
        .with("n", Value::Number(3.0))
        .with("s", Value::String("x".into()));
    let run = |t: &str| eval_with(&cx, t, None).unwrap();
    assert_eq!(
        labels(&run("$kids")),
        ["a#1", "<!--note-->", "<?go?>", "a#2", "t:e=5"],
        "a variable's nodes come back in document order"
    );
    assert_eq!(labels(&run("$kids[2]")), ["<!--note-->"]);
    assert_eq!(labels(&run("$kids[self::a][2]/b")), ["b=4"]);
    assert_eq!(labels(&run("$kids//b")), ["b=1", "b=2", "b=3", "b=4"]);
    assert_eq!(labels(&run("($kids)[last()]/@t:k")), ["@t:k=v"]);
    assert_eq!(labels(&run("$kids/..")), ["r"]);
    assert_eq!(labels(&run("$kids[1]/ancestor::node()")), ["/", "r"]);
    assert_eq!(run("count($kids/b) + $n").to_number(), 6.0);
    assert_eq!(run("concat($s, $n)").to_string_value(), "x3");
}

#[test]
fn unions_are_deduplicated_and_ordered_across_documents() {
    let one = doc("<x><i>1</i><i>2</i></x>");
    let two = doc("<y><j>3</j><j>4</j></y>");
    let cx = Cx::new()
        .with("one", Value::NodeSet(vec![NodeRef::root(one.clone())]))
        .with("two", Value::NodeSet(vec![NodeRef::root(two.clone())]));
    let got = eval_with(&cx, "$two//j | $one//i[2] | $one//i | $two//j[1]", None).unwrap();
    let (first, second) = if Arc::as_ptr(&one) < Arc::as_ptr(&two) {
        (["i=1", "i=2"], ["j=3", "j=4"])
    } else {
        (["j=3", "j=4"], ["i=1", "i=2"])
    };
    assert_eq!(labels(&got), [first, second].concat());
    assert_eq!(
        labels(&at_tree("//c | //b | /r/a[1]/b[1] | //@x")),
        ["@x=p", "b=1", "b=2", "c", "b=3", "b=4"]
    );
    let same = NodeRef::new(one.clone(), NodeId::ROOT);
    assert_eq!(same, NodeRef::root(one.clone()));
    assert_ne!(
        same,
        NodeRef::root(Arc::new(Doc::parse("<x><i>1</i><i>2</i></x>").unwrap()))
    );
}

#[test]
fn node_sets_compare_existentially() {
    assert!(b("//b = 3"));
    assert!(!b("//b = 7"));
    assert!(b("//b != 3"), "some b is not 3");
    assert!(b("//b = '4'"));
    assert!(b("'4' = //b"));
    assert!(b("//b < 2"));
    assert!(!b("//b > 4"));
    assert!(b("2 > //b"));
    assert!(!b("4 < //b"));
    assert!(b("//b >= 4"));
    assert!(b("//b = //a/b"));
    assert!(!b("/r/a[1]/b = /r/a[2]/b"));
    assert!(b("/r/a[1]/b != /r/a[2]/b"));
    assert!(b("/r/a[1]/b < /r/a[2]/b"));
    assert!(!b("/r/a[1]/b > /r/a[2]/b"));
    assert!(!b("//none = //none"));
    assert!(!b("//none != //none"));
    assert!(!b("//none = ''"), "an empty node-set equals no string");
    assert!(b("//b = true()"));
    assert!(b("//none = false()"));
    assert!(!b("//none != false()"));
    assert!(
        b("//b > false()"),
        "relational: both sides as numbers, 1 > 0"
    );
    assert!(b("/r/a/@id = 2"));
}

#[test]
fn other_values_compare_by_the_strongest_type() {
    assert!(b("1 = '1'"));
    assert!(b("'1.0' = 1"));
    assert!(!b("'1.0' = '1'"));
    assert!(b("true() = 'x'"));
    assert!(b("false() = ''"));
    assert!(b("true() = 2"));
    assert!(b("1 < '2'"));
    assert!(
        !b("'a' < 'b'"),
        "relational compares numbers, NaN < NaN is false"
    );
    assert!(b("true() > false()"));
    assert!(b("0 div 0 != 0 div 0"));
    assert!(!b("0 div 0 = 0 div 0"));
    assert!(
        b("1 < 2 = true()"),
        "relational binds tighter than equality"
    );
    assert!(!b("3 > 2 > 1"));
}

#[test]
fn arithmetic_and_precedence() {
    assert_eq!(n("1 + 2 * 3"), 7.0);
    assert_eq!(n("(1 + 2) * 3"), 9.0);
    assert_eq!(n("7 mod 3"), 1.0);
    assert_eq!(n("-7 mod 3"), -1.0);
    assert_eq!(n("7 mod -3"), 1.0);
    assert_eq!(n("5.5 mod 2"), 1.5);
    assert_eq!(n("1 div 4"), 0.25);
    assert_eq!(s("1 div 0"), "Infinity");
    assert_eq!(s("-1 div 0"), "-Infinity");
    assert_eq!(n("-3 - -2"), -1.0);
    assert_eq!(n("- - 1"), 1.0);
    assert_eq!(n("1--1"), 2.0);
    assert_eq!(n("10 - 2 - 3"), 5.0, "left associative");
    assert_eq!(n("12 div 2 div 3"), 2.0);
    assert!(b("1 = 1 and 2 < 1 or true()"));
    assert!(!b("false() and (1 div 0 = 0)"));
    assert!(b("1 > 2 or 2 > 1"));
    assert_eq!(n("-count(//b) + 1"), -3.0);
    assert_eq!(n("'3' * '4'"), 12.0);
    assert!(n("'x' + 1").is_nan());
}

#[test]
fn operator_names_and_star_depend_on_the_token_before() {
    let d =
        doc("<x><div>6</div><mod>4</mod><and>1</and><or>0</or><a>10</a><b>4</b><a-b>3</a-b></x>");
    let x = NodeRef::new(d.clone(), d.root_element().unwrap());
    let cx = Cx::new();
    let run = |t: &str| eval_with(&cx, t, Some(&x)).unwrap();
    assert_eq!(run("div div div").to_number(), 1.0);
    assert_eq!(run("mod mod mod").to_number(), 0.0);
    assert_eq!(run("div * mod").to_number(), 24.0);
    assert_eq!(
        run("* * *").to_number(),
        36.0,
        "name test, multiply, name test"
    );
    assert_eq!(run("2*3").to_number(), 6.0);
    assert_eq!(run("count(*)").to_number(), 7.0);
    assert_eq!(run("count(child::*)*2").to_number(), 14.0);
    assert!(run("and and and").to_bool());
    assert!(
        run("or or or").to_bool(),
        "a non-empty node-set is true, whatever it holds"
    );
    assert_eq!(run("a-b").to_number(), 3.0, "a name may contain '-'");
    assert_eq!(run("a - b").to_number(), 6.0);
    assert_eq!(run("a -b").to_number(), 6.0);
    assert_eq!(run("a[. = 10]/following-sibling::*[1]").to_number(), 4.0);
    assert_eq!(run("count(div | mod)").to_number(), 2.0);
    assert_eq!(run("count(div|div)").to_number(), 1.0);
    assert_eq!(run("div[. div 2 = 3]").to_number(), 6.0);
}

#[test]
fn numbers_are_written_the_xpath_way() {
    assert_eq!(s("1"), "1");
    assert_eq!(s("1.0"), "1");
    assert_eq!(s("1.5"), "1.5");
    assert_eq!(s("-0"), "0");
    assert_eq!(s("0 div 0"), "NaN");
    assert_eq!(s(".000001"), "0.000001");
    assert_eq!(s("0.1 + 0.2"), "0.30000000000000004");
    assert_eq!(
        s("1000000 * 1000000 * 1000000 * 1000"),
        "1000000000000000000000"
    );
    assert_eq!(s("true()"), "true");
    assert_eq!(format_number(1e21), "1000000000000000000000");
    assert_eq!(format_number(1e-7), "0.0000001");
    assert_eq!(format_number(-2.5), "-2.5");
    assert_eq!(format_number(f64::NEG_INFINITY), "-Infinity");
    assert_eq!(format_number(123456789.0), "123456789");
}

#[test]
fn strings_become_numbers_only_by_the_xpath_grammar() {
    assert_eq!(n("number(' 12 ')"), 12.0);
    assert_eq!(n("number('\n-1.5\t')"), -1.5);
    assert_eq!(n("number('.5')"), 0.5);
    assert_eq!(n("number('5.')"), 5.0);
    for bad in [
        "'+1'",
        "'1e3'",
        "''",
        "'-'",
        "'.'",
        "'1.2.3'",
        "'- 1'",
        "'Infinity'",
        "'NaN'",
        "'0x10'",
    ] {
        assert!(n(&format!("number({bad})")).is_nan(), "{bad}");
    }
    assert_eq!(n("number(true())"), 1.0);
    assert_eq!(n("number(//b)"), 1.0);
    assert!(n("number(/r)").is_nan());
    assert_eq!(parse_number("007"), 7.0);
}

#[test]
fn node_name_functions() {
    assert_eq!(s("local-name(//t:e)"), "e");
    assert_eq!(s("name(//t:e)"), "t:e");
    assert_eq!(s("namespace-uri(//t:e)"), "urn:t");
    assert_eq!(s("name(//@t:k)"), "t:k");
    assert_eq!(s("namespace-uri(/r)"), "");
    assert_eq!(s("local-name(/r/processing-instruction())"), "go");
    assert_eq!(s("name(//none)"), "");
    assert_eq!(s("local-name(/r/a)"), "a");
    assert_eq!(s("local-name()"), "", "the document node has no name");
    assert_eq!(nodes("//*[local-name() = 'e']"), ["t:e=5"]);
    assert_eq!(
        nodes("/r/*[name() = 't:e']/@*[namespace-uri() = 'urn:t']"),
        ["@t:k=v"]
    );
}

#[test]
fn count_position_last_sum_and_id() {
    assert_eq!(n("count(//b)"), 4.0);
    assert_eq!(n("count(//none)"), 0.0);
    assert_eq!(n("count(//node())"), 17.0);
    assert_eq!(n("last()"), 1.0);
    assert_eq!(n("position()"), 1.0);
    assert_eq!(nodes("//b[position() = 2]"), ["b=2"]);
    assert_eq!(n("sum(//b)"), 10.0);
    assert_eq!(n("sum(//none)"), 0.0);
    assert!(n("sum(/r/a)").is_nan());
    let d = doc(r#"<r><p xml:id="a1">x</p><p xml:id="b2">y</p><q>b2</q></r>"#);
    let root = NodeRef::root(d);
    let cx = Cx::new();
    let run = |t: &str| labels(&eval_with(&cx, t, Some(&root)).unwrap());
    assert_eq!(run("id('b2 a1')"), ["p=x", "p=y"]);
    assert_eq!(run("id(/r/q)"), ["p=y"]);
    assert!(run("id('zz')").is_empty());
}

#[test]
fn string_functions() {
    assert_eq!(s("string(//b)"), "1");
    assert_eq!(s("string(/r/a[2])"), "4tail");
    assert_eq!(s("concat('a', 1, true(), //b)"), "a1true1");
    assert!(b("starts-with('abc', 'ab')"));
    assert!(b("starts-with('abc', '')"));
    assert!(!b("starts-with('abc', 'b')"));
    assert!(b("contains('abc', 'bc')"));
    assert!(!b("contains('abc', 'x')"));
    assert_eq!(s("substring-before('1999/04/01', '/')"), "1999");
    assert_eq!(s("substring-after('1999/04/01', '/')"), "04/01");
    assert_eq!(s("substring-before('abc', 'x')"), "");
    assert_eq!(s("substring-after('abc', 'x')"), "");
    assert_eq!(s("substring-before('abc', '')"), "");
    assert_eq!(s("substring-after('abc', '')"), "abc");
    assert_eq!(n("string-length('héllo')"), 5.0);
    assert_eq!(n("string-length('')"), 0.0);
    assert_eq!(s("normalize-space('  a \t b\n\n c  ')"), "a b c");
    assert_eq!(s("normalize-space('   ')"), "");
    assert_eq!(s("translate('bar', 'abc', 'ABC')"), "BAr");
    assert_eq!(s("translate('--aaa--', 'abc-', 'ABC')"), "AAA");
    assert_eq!(
        s("translate('aba', 'aa', 'xy')"),
        "xbx",
        "the first occurrence wins"
    );
    assert_eq!(s("string(//none)"), "");
}

#[test]
fn substring_follows_the_rounding_rules() {
    for (expr, want) in [
        ("substring('12345', 2, 3)", "234"),
        ("substring('12345', 2)", "2345"),
        ("substring('12345', 1.5, 2.6)", "234"),
        ("substring('12345', 0, 3)", "12"),
        ("substring('12345', 0 div 0, 3)", ""),
        ("substring('12345', 1, 0 div 0)", ""),
        ("substring('12345', -42, 1 div 0)", "12345"),
        ("substring('12345', -1 div 0, 1 div 0)", ""),
        ("substring('12345', 1 div 0)", ""),
        ("substring('12345', 5, 10)", "5"),
        ("substring('12345', 3, -1)", ""),
        ("substring('héllo', 2, 2)", "él"),
    ] {
        assert_eq!(s(expr), want, "{expr}");
    }
}

#[test]
fn functions_of_the_context_node() {
    let d = doc(r#"<r xml:lang="en-GB"><p>  two  words </p><q xml:lang="fr"><s>7</s></q></r>"#);
    let p = NodeRef::new(d.clone(), d.children(d.root_element().unwrap())[0]);
    let s7 = NodeRef::new(
        d.clone(),
        d.child(d.children(d.root_element().unwrap())[1], "", "s")
            .unwrap(),
    );
    let cx = Cx::new();
    let at = |t: &str, node: &NodeRef| eval_with(&cx, t, Some(node)).unwrap();
    assert_eq!(at("string()", &p).to_string_value(), "  two  words ");
    assert_eq!(at("string-length()", &p).to_number(), 13.0);
    assert_eq!(at("normalize-space()", &p).to_string_value(), "two words");
    assert_eq!(at("number()", &s7).to_number(), 7.0);
    assert_eq!(at("name()", &s7).to_string_value(), "s");
    assert!(at("lang('en')", &p).to_bool());
    assert!(at("lang('EN-gb')", &p).to_bool());
    assert!(!at("lang('en-G')", &p).to_bool());
    assert!(
        !at("lang('en')", &s7).to_bool(),
        "the nearest xml:lang wins"
    );
    assert!(at("lang('fr')", &s7).to_bool());
    assert_eq!(at(". + 1", &s7).to_number(), 8.0);
    assert_eq!(
        at("/r/p", &s7).to_string_value(),
        "  two  words ",
        "'/' is the node's document"
    );
}

#[test]
fn boolean_and_number_functions() {
    assert!(!b("boolean('')"));
    assert!(b("boolean('0')"));
    assert!(!b("boolean(0)"));
    assert!(!b("boolean(0 div 0)"));
    assert!(b("boolean(//b)"));
    assert!(!b("boolean(//none)"));
    assert!(b("not(0 div 0)"));
    assert!(b("true()"));
    assert!(!b("false()"));
    assert_eq!(n("floor(-1.5)"), -2.0);
    assert_eq!(n("floor(2.7)"), 2.0);
    assert_eq!(n("ceiling(1.1)"), 2.0);
    assert_eq!(s("1 div ceiling(-0.5)"), "-Infinity");
    assert_eq!(n("round(2.5)"), 3.0);
    assert_eq!(n("round(-2.5)"), -2.0);
    assert_eq!(n("round(1.4999)"), 1.0);
    assert_eq!(s("round(-0.5)"), "0");
    assert_eq!(
        s("1 div round(-0.5)"),
        "-Infinity",
        "round(-0.5) is negative zero"
    );
    assert_eq!(s("1 div round(-0.2)"), "-Infinity");
    assert_eq!(n("round(0.49999999999999994)"), 0.0);
    assert!(n("round(0 div 0)").is_nan());
    assert_eq!(s("round(1 div 0)"), "Infinity");
}

#[test]
fn xpath_2_functions() {
    assert_eq!(n("abs(-2.5)"), 2.5);
    assert_eq!(n("fn:abs(3)"), 3.0);
    assert_eq!(s("upper-case('aBc')"), "ABC");
    assert_eq!(s("lower-case('aBc')"), "abc");
    assert!(b("ends-with('abc', 'bc')"));
    assert!(!b("fn:ends-with('abc', 'b')"));
    assert_eq!(s("string-join(//b, ', ')"), "1, 2, 3, 4");
    assert_eq!(s("string-join(//none, ',')"), "");
    assert_eq!(s("fn:concat('a', fn:string(fn:count(//b)))"), "a4");
    assert_eq!(n("fn:string-length('abc')"), 3.0);
    let now = s("current-dateTime()");
    assert_eq!(now.len(), "2024-01-01T00:00:00.000Z".len(), "{now}");
    assert_eq!(s(&format!("xs:dateTime('{now}')")), now);
    assert!(b("xs:date(current-date()) = current-date()"));
    assert!(s("fn:current-time()").ends_with('Z'));
    assert!(b("xs:time(current-time()) = current-time()"));
}

#[test]
fn utc_dates_from_the_epoch() {
    let at = |secs: u64, millis: u32| {
        let (d, t) = functions::utc(Duration::new(secs, millis * 1_000_000));
        format!("{d}T{t}")
    };
    assert_eq!(at(0, 0), "1970-01-01T00:00:00.000");
    assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005");
    assert_eq!(at(1_700_000_000, 999), "2023-11-14T22:13:20.999");
    assert_eq!(at(951_782_400 + 86_399, 0), "2000-02-29T23:59:59.000");
}

#[test]
fn schema_casts_check_their_lexical_forms() {
    let ok = |t: &str| at_tree(t);
    assert_eq!(ok("xs:integer('42')").to_number(), 42.0);
    assert_eq!(ok("xs:integer(' -7 ')").to_number(), -7.0);
    assert_eq!(ok("xs:integer(3.7)").to_number(), 3.0);
    assert_eq!(ok("xsd:int(-3.7)").to_number(), -3.0);
    assert_eq!(ok("xs:long('9000000000')").to_number(), 9e9);
    assert_eq!(ok("xs:short(//b)").to_number(), 1.0);
    assert_eq!(ok("xs:nonNegativeInteger('0')").to_number(), 0.0);
    assert_eq!(ok("xs:positiveInteger('+5')").to_number(), 5.0);
    assert_eq!(ok("xs:double('1e3')").to_number(), 1000.0);
    assert_eq!(ok("xs:float('-1.5E-1')").to_number(), -0.15);
    assert_eq!(ok("xs:double('INF')").to_number(), f64::INFINITY);
    assert!(ok("xs:double('NaN')").to_number().is_nan());
    assert_eq!(ok("xs:decimal('-.5')").to_number(), -0.5);
    assert_eq!(ok("xs:decimal(2)").to_number(), 2.0);
    assert!(ok("xs:boolean('true')").to_bool());
    assert!(ok("xs:boolean(' 1 ')").to_bool());
    assert!(!ok("xs:boolean('0')").to_bool());
    assert!(!ok("xs:boolean('false')").to_bool());
    assert!(
        ok("xs:boolean(/r/a[1]/b[1])").to_bool(),
        "the node holds '1'"
    );
    assert_eq!(ok("xs:string(1.50)").to_string_value(), "1.5");
    assert!(matches!(ok("xs:string(1)"), Value::String(_)));
    for good in [
        "xs:dateTime('2024-02-29T10:00:00Z')",
        "xs:dateTime('2024-01-31T23:59:59.125+05:30')",
        "xs:dateTime('-0044-03-15T12:00:00')",
        "xs:dateTime('2024-01-01T24:00:00')",
        "xs:date('2024-01-01+01:00')",
        "xs:date('12024-01-01')",
        "xs:time('24:00:00')",
        "xs:time('13:20:00-14:00')",
        "xs:duration('P1Y2M3DT4H5M6.5S')",
        "xs:duration('-P1D')",
        "xs:duration('PT0S')",
        "xs:dayTimeDuration('P3DT2H')",
        "xs:dayTimeDuration('PT1.5S')",
        "xs:yearMonthDuration('P1Y2M')",
    ] {
        let v = ok(good);
        assert!(matches!(v, Value::String(_)), "{good}");
    }
    for bad in [
        "xs:integer('3.7')",
        "xs:integer('')",
        "xs:integer('1e3')",
        "xs:integer(1 div 0)",
        "xs:int('3000000000')",
        "xs:short('40000')",
        "xs:nonNegativeInteger('-1')",
        "xs:positiveInteger('0')",
        "xs:decimal('1e3')",
        "xs:double('1e')",
        "xs:double('abc')",
        "xs:boolean('yes')",
        "xs:dateTime('2023-02-29T10:00:00Z')",
        "xs:dateTime('2024-01-01 10:00:00')",
        "xs:dateTime('2024-01-01T10:00')",
        "xs:dateTime('24-01-01T10:00:00')",
        "xs:dateTime('2024-13-01T10:00:00')",
        "xs:dateTime('2024-01-01T10:00:00+15:00')",
        "xs:date('2024-04-31')",
        "xs:time('25:00:00')",
        "xs:time('24:00:01')",
        "xs:time('10:60:00')",
        "xs:time('10:00:00.')",
        "xs:duration('P')",
        "xs:duration('PT')",
        "xs:duration('P1YT')",
        "xs:duration('P1.5Y')",
        "xs:duration('P1D2Y')",
        "xs:duration('1D')",
        "xs:dayTimeDuration('P1Y')",
        "xs:yearMonthDuration('P1D')",
        "xs:yearMonthDuration('P1YT1H')",
    ] {
        let root = NodeRef::root(doc(TREE));
        match eval_with(&Cx::new(), bad, Some(&root)) {
            Err(XPathError::Type(m)) => assert!(
                m.contains("not a valid") || m.contains("out of range"),
                "{bad}: {m}"
            ),
            other => panic!("{bad}: {other:?}"),
        }
    }
    let root = NodeRef::root(doc(TREE));
    assert_eq!(
        eval_with(&Cx::new(), "xs:int('x1')", Some(&root))
            .unwrap_err()
            .to_string(),
        "'x1' is not a valid xs:int"
    );
}

#[test]
fn extension_functions_go_to_the_context() {
    let d = doc("<v><p>21</p></v>");
    let cx = Cx::new().with("in", Value::NodeSet(vec![NodeRef::root(d)]));
    let got = eval_with(&cx, "bpel:getVariableProperty('v', 'ns:prop')", None).unwrap();
    assert_eq!(got.to_string_value(), "getVariableProperty(v,ns:prop)");
    assert_eq!(
        eval_with(&cx, "ext:twice($in/v/p) + 1", None)
            .unwrap()
            .to_number(),
        43.0
    );
    let calls = cx.calls.borrow();
    assert_eq!(
        calls[0].0,
        Name::new(BPEL_NS, "getVariableProperty").with_prefix("bpel")
    );
    assert_eq!(calls[0].1, ["v", "ns:prop"]);
    assert!(calls[1].0.is(EXT_NS, "twice"));
    assert_eq!(calls[1].1, ["21"]);
}

#[test]
fn raised_faults_pass_through_unchanged() {
    let cx = Cx::new();
    assert_eq!(
        eval_with(&cx, "1 + ext:fail()", None).unwrap_err(),
        XPathError::Raised(Name::new(EXT_NS, "boom"), "failed".into())
    );
    let e = eval_with(&cx, "count($missing/x)", None).unwrap_err();
    assert_eq!(
        e,
        XPathError::Raised(
            Name::new(BPEL_NS, "uninitializedVariable"),
            "missing".into()
        )
    );
    // `or` stops at the first true operand, so a fault on the right is never raised.
    assert!(eval_with(&cx, "true() or $missing", None)
        .unwrap()
        .to_bool());
}

#[test]
fn type_errors_at_run_time() {
    let cx = Cx::new()
        .with("num", Value::Number(1.0))
        .with("str", Value::String("a".into()));
    let type_err = |t: &str| match eval_with(&cx, t, None) {
        Err(XPathError::Type(m)) => m,
        other => panic!("{t}: {other:?}"),
    };
    assert_eq!(
        type_err("$num/a"),
        "a location step needs a node-set, not the number 1"
    );
    assert!(type_err("$str[1]").contains("needs a node-set"));
    assert!(type_err("1 | $num").contains("'|'"));
    assert!(type_err("count(1)").contains("count()"));
    assert!(type_err("sum('1')").contains("sum()"));
    assert!(type_err("local-name('x')").contains("local-name()"));
    assert_eq!(
        type_err("/a"),
        "a path starting with '/' needs a context node"
    );
    assert_eq!(
        type_err("a/b"),
        "a relative location path needs a context node"
    );
    assert!(type_err("string()").contains("context node"));
    assert!(type_err("lang('en')").contains("context node"));
}

#[test]
fn bpel_style_expressions() {
    let payload = doc(
        r#"<tns:order xmlns:tns="urn:t"><tns:item id="A"/><tns:item id="B"/><lines><line/><line/><line/><line/></lines></tns:order>"#,
    );
    let order = payload.root_element().unwrap();
    let lines = payload.child(order, "", "lines").unwrap();
    let cx = Cx::new()
        .with("tmpVar", Value::String("Hello".into()))
        .with(
            "input.payload",
            Value::NodeSet(vec![NodeRef::new(payload.clone(), order)]),
        )
        .with(
            "order.lines",
            Value::NodeSet(vec![NodeRef::new(payload.clone(), lines)]),
        )
        .with(
            "counter",
            Value::NodeSet(vec![NodeRef::new(payload.clone(), order)]),
        );
    let run = |t: &str| eval_with(&cx, t, None).unwrap();
    assert_eq!(
        run("concat($tmpVar, ' World')").to_string_value(),
        "Hello World"
    );
    assert_eq!(labels(&run("$input.payload/tns:item[2]/@id")), ["@id=B"]);
    assert!(run("count($order.lines/line) > 3").to_bool());
    assert!(run("number($counter) + 1").to_number().is_nan());
    let cx = Cx::new().with("counter", Value::String("41".into()));
    assert_eq!(
        eval_with(&cx, "number($counter) + 1", None)
            .unwrap()
            .to_number(),
        42.0
    );
}

#[test]
fn syntax_errors_say_where() {
    assert_eq!(
        syntax_at("1 +"),
        (4, "expected an expression, found the end".into())
    );
    assert_eq!(syntax_at("foo bar").0, 5);
    assert!(syntax_at("foo bar")
        .1
        .contains("expected an operator, found 'bar'"));
    assert_eq!(syntax_at("//b[1").0, 6);
    assert_eq!(syntax_at("//b[1").1, "expected ']', found the end");
    assert_eq!(syntax_at("'abc").0, 1);
    assert_eq!(syntax_at("a/").0, 3);
    assert_eq!(syntax_at("$").0, 1);
    assert_eq!(syntax_at("1 ! 2"), (3, "unexpected character '!'".into()));
    assert_eq!(syntax_at("()").0, 2);
    assert_eq!(syntax_at("").1, "empty expression");
    assert_eq!(syntax_at("   ").1, "empty expression");
    assert_eq!(
        syntax_at("'é' = é)").0,
        8,
        "positions count characters, not bytes"
    );
    assert_eq!(
        syntax_at("a]").1,
        "unexpected ']' after the end of the expression"
    );
    assert_eq!(syntax_at("p:").1, "expected a local name or '*' after ':'");
    assert_eq!(
        syntax_at("/r/namespace::*"),
        (4, "namespace axis is not supported".into())
    );
    assert_eq!(syntax_at("/r/sideways::*").1, "unknown axis 'sideways'");
    assert_eq!(
        syntax_at("a/count(b)").1,
        "expected a node test, found 'count'"
    );
    assert_eq!(
        syntax_at("concat('a')"),
        (1, "concat() takes at least 2 argument(s), not 1".into())
    );
    assert_eq!(syntax_at("1 + true(1)").0, 5);
    assert!(syntax_at("substring('a')").1.contains("2 to 3"));
    assert!(syntax_at("xs:integer()").1.contains("takes 1 argument"));
    assert!(syntax_at(&"(".repeat(200)).1.contains("nested deeper"));
    let deep = format!("{}1{}", "(".repeat(30), ")".repeat(30));
    assert_eq!(n(&deep), 1.0);
    let e = compile_err("1 +");
    assert_eq!(
        e.to_string(),
        "XPath syntax error at character 4 of '1 +': expected an expression, found the end"
    );
}

#[test]
fn unknown_functions_and_unbound_prefixes_fail_to_compile() {
    assert_eq!(
        compile_err("foo()"),
        XPathError::UnknownFunction("foo".into())
    );
    assert_eq!(
        compile_err("fn:foo(1)"),
        XPathError::UnknownFunction("fn:foo".into())
    );
    assert_eq!(
        compile_err("xs:foo(1)"),
        XPathError::UnknownFunction("xs:foo".into())
    );
    assert_eq!(
        compile_err("ext:missing(1)"),
        XPathError::UnknownFunction("ext:missing".into())
    );
    assert_eq!(
        compile_err("bpel:getVariableProperty('v')"),
        XPathError::UnknownFunction("bpel:getVariableProperty".into()),
        "extensions are checked with their arity"
    );
    assert_eq!(
        compile_err("nope:f()"),
        XPathError::UnboundPrefix("nope".into())
    );
    assert_eq!(
        compile_err("/nope:a"),
        XPathError::UnboundPrefix("nope".into())
    );
    assert_eq!(
        compile_err("//nope:*"),
        XPathError::UnboundPrefix("nope".into())
    );
    assert_eq!(
        compile_err("count(//x[nope:y])"),
        XPathError::UnboundPrefix("nope".into())
    );
    assert_eq!(compile_err("foo()").to_string(), "unknown function foo");
}

#[test]
fn variables_are_listed_once_in_order() {
    let x = compile("concat($a, $b.c, $a) + count($p:q/x[$i]) + $b.c").unwrap();
    assert_eq!(x.variables(), ["a", "b.c", "p:q", "i"]);
    assert!(compile("1 + 2").unwrap().variables().is_empty());
    assert_eq!(x.text(), "concat($a, $b.c, $a) + count($p:q/x[$i]) + $b.c");
}

#[test]
fn paths_are_recognised_as_assign_targets() {
    for path in [
        "$v.part/a/b",
        "/a/b",
        "a/@x",
        "$v",
        "$v[1]/a",
        ".",
        "//a[2]",
        "$v.part/tns:a[@id='x']",
    ] {
        assert!(compile(path).unwrap().is_path(), "{path}");
    }
    for not in [
        "count(a)",
        "a | b",
        "1",
        "concat('a', 'b')",
        "$a + 1",
        "'x'",
        "string($v)/a",
    ] {
        assert!(!compile(not).unwrap().is_path(), "{not}");
    }
}

#[test]
fn compiled_expressions_are_shareable() {
    fn send_sync<T: Send + Sync + Clone>() {}
    send_sync::<XPath>();
    let x = compile("count(//b)").unwrap();
    let root = NodeRef::root(doc(TREE));
    let handle = std::thread::spawn(move || x.eval(&Cx::new(), Some(&root)).unwrap().to_number());
    assert_eq!(handle.join().unwrap(), 4.0);
}

#[test]
fn whitespace_is_allowed_between_tokens_but_not_inside_names() {
    assert_eq!(nodes(" / r / a [ 1 ] / child :: b [ last ( ) ]"), ["b=2"]);
    assert_eq!(nodes("/r/a[2]/text ( )"), ["\"tail\""]);
    assert_eq!(nodes("/r/processing-instruction( \"go\" )"), ["<?go?>"]);
    assert_eq!(nodes("/r/a[1]/@ x"), ["@x=p"]);
    assert_eq!(n(".5 + .5"), 1.0);
    assert!(nodes("//b[0]").is_empty());
    assert!(nodes("//b[-1]").is_empty());
    assert_eq!(syntax_at("/r/t :e"), (6, "unexpected character ':'".into()));
    assert_eq!(syntax_at("$ x").0, 1);
}

#[test]
fn values_convert_like_the_xpath_functions() {
    let d = doc("<r><x>2</x><y>text</y></r>");
    let r = d.root_element().unwrap();
    let kids: Vec<NodeRef> = d
        .children(r)
        .iter()
        .rev()
        .map(|c| NodeRef::new(d.clone(), *c))
        .collect();
    let set = Value::NodeSet(kids);
    assert_eq!(
        set.to_string_value(),
        "2",
        "the first node in document order, even unsorted"
    );
    assert_eq!(set.to_number(), 2.0);
    assert!(set.to_bool());
    assert!(!Value::NodeSet(Vec::new()).to_bool());
    assert_eq!(Value::NodeSet(Vec::new()).to_string_value(), "");
    assert!(Value::NodeSet(Vec::new()).to_number().is_nan());
    assert_eq!(Value::Boolean(true).to_number(), 1.0);
    assert_eq!(Value::Boolean(false).to_string_value(), "false");
    assert!(!Value::Number(f64::NAN).to_bool());
    assert!(Value::Number(-0.5).to_bool());
    assert_eq!(Value::Number(-0.0).to_string_value(), "0");
    assert!(!Value::String(String::new()).to_bool());
    assert!(Value::String("false".into()).to_bool());
    assert_eq!(Value::String(" 3.25 ".into()).to_number(), 3.25);
}
