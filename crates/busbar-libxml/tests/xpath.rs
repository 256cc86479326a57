//! XPath 1.0 over a buyStocks SOAP request: a table of hand-checked results (namespaces,
//! axes, predicates, functions, every result type), and a differential run against
//! `xmllint --xpath` for the expressions whose output it prints plainly.

mod common;

use busbar_libxml::{Document, XPathExpr, XPathValue};
use common::{payload, run_tool, Scratch};

fn namespaces() -> Vec<(String, String)> {
    [
        ("soapenv", "http://schemas.xmlsoap.org/soap/envelope/"),
        ("m", "http://services.samples/xsd"),
        ("h", "http://someuri"),
    ]
    .iter()
    .map(|(p, u)| ((*p).to_owned(), (*u).to_owned()))
    .collect()
}

fn nodes(values: &[&str]) -> XPathValue {
    XPathValue::NodeSet(values.iter().map(|s| (*s).to_owned()).collect())
}

fn soap_1k() -> Document {
    // 1,024 bytes: seven orders IBM, MSFT, SUN, GOOG, IBM, MSFT, SUN; the last volume is
    // padded from 500 to 500000.
    Document::parse(&payload::buy_stocks(1024)).expect("payload parses")
}

#[test]
fn expressions_give_hand_checked_results() {
    let doc = soap_1k();
    let ns = namespaces();
    let num = XPathValue::Number;
    let s = |v: &str| XPathValue::String(v.to_owned());
    let table: Vec<(&str, XPathValue)> = vec![
        ("//order[1]/symbol", nodes(&["IBM"])),
        (
            "/soapenv:Envelope/soapenv:Body/m:buyStocks/order[1]/symbol",
            nodes(&["IBM"]),
        ),
        (
            "/soapenv:Envelope/soapenv:Header/h:routing",
            nodes(&["xadmin;server1;community#1.0##"]),
        ),
        ("//order[1]/symbol = 'IBM'", XPathValue::Boolean(true)),
        ("//order[2]/symbol = 'IBM'", XPathValue::Boolean(false)),
        ("count(//order)", num(7.0)),
        (
            "count(/soapenv:Envelope/soapenv:Body/m:buyStocks/order)",
            num(7.0),
        ),
        ("count(//buyStocks)", num(0.0)),
        ("string(//order[last()]/volume)", s("500000")),
        ("sum(//order[symbol='IBM']/volume)", num(4000.0)),
        ("count(//order[price > 50])", num(3.0)),
        (
            "//order[position() mod 2 = 0]/symbol",
            nodes(&["MSFT", "GOOG", "MSFT"]),
        ),
        (
            "//order[symbol='GOOG']/following-sibling::order[1]/buyerID",
            nodes(&["asankha"]),
        ),
        (
            "//order[3]/preceding-sibling::order/symbol",
            nodes(&["IBM", "MSFT"]),
        ),
        ("count(//order[1]/ancestor::*)", num(3.0)),
        ("name(/*)", s("soapenv:Envelope")),
        ("local-name(//m:buyStocks)", s("buyStocks")),
        (
            "namespace-uri(//*[local-name()='buyStocks'])",
            s("http://services.samples/xsd"),
        ),
        ("name(//order[1]/parent::*)", s("m:buyStocks")),
        ("string(//order[1])", s("IBMasankha140.342000")),
        (
            "concat(substring-before('a-b', '-'), translate('abc', 'b', 'B'))",
            s("aaBc"),
        ),
        ("normalize-space('  x   y ')", s("x y")),
        ("string-length(//order[2]/buyerID)", num(5.0)),
        ("substring(//order[1]/price, 2, 3)", s("40.")),
        (
            "contains(//order[1]/price, '.34') and starts-with(//order[4]/symbol, 'GO')",
            XPathValue::Boolean(true),
        ),
        ("round(2.5)", num(3.0)),
        ("floor(-1.5)", num(-2.0)),
        ("//order[2]/volume div 10", num(803.0)),
        ("boolean(//nothing)", XPathValue::Boolean(false)),
        ("not(//order)", XPathValue::Boolean(false)),
        ("//order[1]/symbol/text()", nodes(&["IBM"])),
        (
            "//m:buyStocks/order[symbol='SUN'][2]/buyerID",
            nodes(&["indika"]),
        ),
        ("count(//order/*[self::price or self::volume])", num(14.0)),
        // Envelope, Header, routing, Body, buyStocks, and 7 orders of 5 elements each.
        ("count(//node()[not(self::text())])", num(40.0)),
        ("id('nothing')", nodes(&[])),
    ];
    for (expr, expected) in table {
        let compiled = XPathExpr::compile(expr, &ns).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let got = doc
            .eval(&compiled)
            .unwrap_or_else(|e| panic!("{expr}: {e}"));
        assert_eq!(got, expected, "{expr}");
    }
}

#[test]
fn special_numbers_follow_xpath_rules() {
    let doc = soap_1k();
    let eval = |e: &str| {
        doc.eval(&XPathExpr::compile(e, &[]).expect("compiles"))
            .expect("evaluates")
    };
    assert_eq!(eval("1 div 0").to_xpath_string(), "Infinity");
    assert_eq!(eval("-1 div 0").to_xpath_string(), "-Infinity");
    assert_eq!(eval("0 div 0").to_xpath_string(), "NaN");
    assert!(!eval("0 div 0").to_xpath_boolean());
    assert_eq!(eval("0.1 + 0.2").to_xpath_string(), "0.30000000000000004");
    assert_eq!(eval("//order[1]/price * 1").to_xpath_string(), "140.34");
    assert_eq!(eval("//order").to_xpath_string(), "IBMasankha140.342000");
    assert!(eval("//order").to_xpath_boolean());
    assert_eq!(eval("//none").to_xpath_string(), "");
    assert!(!eval("//none").to_xpath_boolean());
    assert!(!eval("''").to_xpath_boolean());
    assert_eq!(eval("1 = 1").to_xpath_string(), "true");
}

#[test]
fn scalar_results_match_xmllint() {
    let scratch = Scratch::new("xmllint");
    let input = payload::buy_stocks(10240);
    let path = scratch.write("in.xml", &input);
    let doc = Document::parse(&input).expect("parses");
    let exprs = [
        "count(//order)",
        "sum(//order/price)",
        "sum(//order/volume) div count(//order)",
        "string(//order[17]/buyerID)",
        "concat(//order[last()]/symbol, '-', count(//*))",
        "//order[1]/symbol = 'IBM'",
        "count(//order[symbol = 'GOOG' and volume > 100])",
        "local-name(//*[local-name() = 'routing'])",
        "namespace-uri(/*)",
        "string-length(normalize-space(string(/*)))",
        "round(sum(//price) * 100) div 100",
        "boolean(//order[price < 10])",
        "translate(//order[3]/buyerID, 'aeiou', 'AEIOU')",
        "substring-after(//*[local-name()='routing'], ';')",
    ];
    for expr in exprs {
        let out = run_tool(
            "xmllint",
            "libxml2-utils",
            &["--xpath", expr, path.to_str().expect("path")],
        );
        assert!(
            out.status.success(),
            "xmllint failed on {expr}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // xmllint ends each result with a newline of its own.
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let theirs = stdout.strip_suffix('\n').unwrap_or(&stdout).to_owned();
        let ours = doc
            .eval(&XPathExpr::compile(expr, &[]).expect("compiles"))
            .expect("evaluates");
        match ours {
            // xmllint prints numbers with printf's %g (six significant digits).
            XPathValue::Number(n) => {
                let t: f64 = theirs
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{expr}: {theirs:?}"));
                assert!(
                    (n - t).abs() <= 1e-5 * n.abs().max(1.0),
                    "{expr}: ours {n}, xmllint {t}"
                );
            }
            other => assert_eq!(other.to_xpath_string(), theirs, "{expr}"),
        }
    }
}
