//! Every stylesheet of the corpus in tests/xslt/, applied to buyStocks payloads of several
//! sizes and to a document with mixed content, must produce exactly what Debian's xsltproc
//! produces, byte for byte.

mod common;

use std::path::Path;

use busbar_libxml::{Document, DocumentAccess, Param, Stylesheet, XPathExpr, XPathValue};
use common::{diff_message, payload, run_tool, xslt_dir, Scratch};

const SHEETS: &[&str] = &[
    "identity.xsl",
    "rename.xsl",
    "reorder.xsl",
    "sort.xsl",
    "numbers.xsl",
    "namespaces.xsl",
    "key.xsl",
    "params.xsl",
    "message.xsl",
    "html.xsl",
    "html-default.xsl",
    "indent.xsl",
    "latin1.xsl",
    "text-entities.xsl",
    "reverse-request.xsl",
];

const SIZES: &[usize] = &[512, 1024, 5120, 10240, 16384];

fn xsltproc(sheet: &Path, input: &Path, params: &[(&str, &str)]) -> Vec<u8> {
    let mut args: Vec<String> = Vec::new();
    for (k, v) in params {
        args.extend(["--stringparam".to_owned(), (*k).to_owned(), (*v).to_owned()]);
    }
    args.push(sheet.display().to_string());
    args.push(input.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_tool("xsltproc", "xsltproc", &args);
    assert!(
        out.status.success(),
        "xsltproc failed on {} {}: {}",
        sheet.display(),
        input.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn compile(name: &str) -> Stylesheet {
    let path = xslt_dir().join(name);
    Stylesheet::compile_file(&path, DocumentAccess::Off)
        .unwrap_or_else(|e| panic!("{name} must compile: {e}"))
}

fn assert_same(sheet: &str, input_name: &str, ours: &[u8], theirs: &[u8]) {
    assert!(
        ours == theirs,
        "{sheet} on {input_name} differs from xsltproc: {}",
        diff_message(ours, theirs)
    );
}

fn inputs(scratch: &Scratch) -> Vec<(String, Vec<u8>, std::path::PathBuf)> {
    let mut list = Vec::new();
    for &size in SIZES {
        let bytes = payload::buy_stocks(size);
        let name = format!("buyStocks-{size}.xml");
        let path = scratch.write(&name, &bytes);
        list.push((name, bytes, path));
    }
    let mixed = xslt_dir().join("mixed.xml");
    let bytes = std::fs::read(&mixed).expect("mixed.xml");
    list.push(("mixed.xml".to_owned(), bytes, mixed));
    list
}

#[test]
fn corpus_output_equals_xsltproc_byte_for_byte() {
    busbar_libxml::init();
    let scratch = Scratch::new("diff");
    let inputs = inputs(&scratch);
    let mut compared = 0;
    for sheet_name in SHEETS {
        let sheet = compile(sheet_name);
        let sheet_path = xslt_dir().join(sheet_name);
        for (input_name, bytes, path) in &inputs {
            let theirs = xsltproc(&sheet_path, path, &[]);
            let ours = sheet
                .transform_bytes(bytes, &[])
                .unwrap_or_else(|e| panic!("{sheet_name} on {input_name}: {e}"));
            assert_same(sheet_name, input_name, &ours.bytes, &theirs);
            // The borrowed-document path must agree with the bytes path.
            let doc = Document::parse(bytes).expect("input parses");
            let again = sheet
                .transform(&doc, &[])
                .expect("transform of parsed document");
            assert_same(sheet_name, input_name, &again.bytes, &theirs);
            compared += 1;
        }
    }
    assert_eq!(compared, SHEETS.len() * (SIZES.len() + 1));
}

#[test]
fn string_params_match_xsltproc_stringparam() {
    let scratch = Scratch::new("params");
    let input = payload::buy_stocks(5120);
    let path = scratch.write("in.xml", &input);
    let sheet = compile("params.xsl");
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("region", "eu")],
        &[("region", "it's"), ("symbol", "MSFT")],
        &[("note", "say \"hi\""), ("symbol", "GOOG")],
        &[("symbol", "NONE"), ("note", "")],
    ];
    for params in cases {
        let theirs = xsltproc(&xslt_dir().join("params.xsl"), &path, params);
        let ours_params: Vec<(String, String)> = params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Param::string(v)))
            .collect();
        let ours = sheet
            .transform_bytes(&input, &ours_params)
            .expect("transform with params");
        assert_same("params.xsl", &format!("{params:?}"), &ours.bytes, &theirs);
    }
    // xsltproc refuses a --stringparam holding both quote kinds; Param::string handles it.
    let both = vec![("note".to_owned(), Param::string("say \"hi\", it's"))];
    let ours = sheet
        .transform_bytes(&input, &both)
        .expect("both quote kinds");
    assert_eq!(
        String::from_utf8_lossy(&ours.bytes),
        "region=none note=[say \"hi\", it's] IBM orders: 12\n"
    );
}

#[test]
fn xsl_message_is_captured_not_printed() {
    let sheet = compile("message.xsl");
    let out = sheet
        .transform_bytes(&payload::buy_stocks(1024), &[])
        .expect("transform");
    assert_eq!(out.bytes, b"IBM\n");
    assert_eq!(
        out.messages,
        vec!["starting with 7 orders".to_owned(), "first: IBM".to_owned()]
    );
}

#[test]
fn output_settings_reflect_xsl_output() {
    let html = compile("html.xsl");
    assert_eq!(html.output().method.as_deref(), Some("html"));
    let out = html
        .transform_bytes(&payload::buy_stocks(512), &[])
        .expect("html");
    assert_eq!(
        (out.method.as_str(), out.media_type.as_str()),
        ("html", "text/html")
    );

    let default_html = compile("html-default.xsl");
    assert_eq!(default_html.output().method, None);
    let out = default_html
        .transform_bytes(&payload::buy_stocks(512), &[])
        .expect("html");
    assert_eq!(
        (out.method.as_str(), out.media_type.as_str()),
        ("html", "text/html")
    );

    let indent = compile("indent.xsl");
    assert!(indent.output().indent);
    assert!(!indent.output().omit_xml_declaration);
    assert_eq!(
        indent.output().media_type.as_deref(),
        Some("application/xml")
    );

    let latin1 = compile("latin1.xsl");
    let out = latin1
        .transform_bytes(&payload::buy_stocks(512), &[])
        .expect("latin1");
    assert_eq!(out.encoding.as_deref(), Some("ISO-8859-1"));
    assert_eq!(
        (out.method.as_str(), out.media_type.as_str()),
        ("xml", "text/xml")
    );

    let text = compile("sort.xsl");
    let out = text
        .transform_bytes(&payload::buy_stocks(512), &[])
        .expect("text");
    assert_eq!(
        (out.method.as_str(), out.media_type.as_str()),
        ("text", "text/plain")
    );

    let reverse = compile("reverse-request.xsl");
    assert!(reverse.output().omit_xml_declaration);
    assert!(!reverse.output().indent);
}

fn tuples(doc: &Document, path: &str, fields: [&str; 4]) -> Vec<[String; 4]> {
    let ns = [
        (
            "s".to_owned(),
            "http://schemas.xmlsoap.org/soap/envelope/".to_owned(),
        ),
        ("m".to_owned(), "http://services.samples/xsd".to_owned()),
    ];
    let column = |field: &str| -> Vec<String> {
        let expr = XPathExpr::compile(&format!("{path}/{field}"), &ns).expect("compiles");
        match doc.eval(&expr).expect("evaluates") {
            XPathValue::NodeSet(v) => v,
            other => panic!("expected a node-set, got {other:?}"),
        }
    };
    let cols = fields.map(column);
    (0..cols[0].len())
        .map(|i| [0, 1, 2, 3].map(|c| cols[c].get(i).cloned().unwrap_or_default()))
        .collect()
}

#[test]
fn reverse_pair_round_trips_orders_and_matches_xsltproc() {
    let scratch = Scratch::new("reverse");
    let request = compile("reverse-request.xsl");
    let response = compile("reverse-response.xsl");
    for size in [1024usize, 10240, 102400] {
        let input = payload::buy_stocks(size);
        let in_path = scratch.write("in.xml", &input);
        let to_backend = request
            .transform_bytes(&input, &[])
            .expect("request transform");
        assert_same(
            "reverse-request.xsl",
            &format!("{size} B"),
            &to_backend.bytes,
            &xsltproc(&xslt_dir().join("reverse-request.xsl"), &in_path, &[]),
        );
        let text = String::from_utf8(to_backend.bytes.clone()).expect("utf-8");
        assert!(text.starts_with("<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><m:skcotSyub xmlns:m=\"http://services.samples/xsd\"><redro><lobmys>IBM</lobmys><DIreyub>asankha</DIreyub><ecirp>140.34</ecirp><emulov>2000</emulov></redro>"), "{text:.300}");
        assert!(!text.contains("Header") && !text.contains("<?xml") && !text.contains("\n<"));

        let mid_path = scratch.write("mid.xml", &to_backend.bytes);
        let to_client = response
            .transform_bytes(&to_backend.bytes, &[])
            .expect("response");
        assert_same(
            "reverse-response.xsl",
            &format!("{size} B"),
            &to_client.bytes,
            &xsltproc(&xslt_dir().join("reverse-response.xsl"), &mid_path, &[]),
        );

        let sent = tuples(
            &Document::parse(&input).expect("input"),
            "/s:Envelope/s:Body/m:buyStocks/order",
            ["symbol", "buyerID", "price", "volume"],
        );
        let mid = tuples(
            &Document::parse(&to_backend.bytes).expect("mid"),
            "/s:Envelope/s:Body/m:skcotSyub/redro",
            ["lobmys", "DIreyub", "ecirp", "emulov"],
        );
        let back = tuples(
            &Document::parse(&to_client.bytes).expect("back"),
            "/s:Envelope/s:Body/m:buyStocks/order",
            ["symbol", "buyerID", "price", "volume"],
        );
        assert_eq!(sent.len(), payload::orders_of(size));
        assert_eq!(
            sent, mid,
            "request transform changed the orders at {size} B"
        );
        assert_eq!(sent, back, "round trip changed the orders at {size} B");
        println!(
            "reverse sizes: {size} B in -> {} B to back end -> {} B to client",
            to_backend.bytes.len(),
            to_client.bytes.len()
        );
    }
}
