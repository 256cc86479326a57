//! One Stylesheet and one XPathExpr shared by eight threads give the same results as a single
//! thread, and each thread's diagnostics stay its own.

mod common;

use std::sync::Arc;

use busbar_libxml::{Document, DocumentAccess, Param, Stylesheet, XPathExpr, XPathValue};
use common::{payload, xslt_dir};

const THREADS: usize = 8;
const ROUNDS: usize = 150;

#[test]
fn shared_stylesheet_and_expression_agree_across_eight_threads() {
    busbar_libxml::init();
    let sheet = Arc::new(
        Stylesheet::compile_file(&xslt_dir().join("reverse-request.xsl"), DocumentAccess::Off)
            .expect("compiles"),
    );
    let chatty = Arc::new(
        Stylesheet::compile_bytes(
            br#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
                 <xsl:param name="who"/><xsl:output method="text"/>
                 <xsl:template match="/"><xsl:message>from <xsl:value-of select="$who"/></xsl:message>
                   <xsl:if test="$who = 'stop'"><xsl:message terminate="yes">stopped</xsl:message></xsl:if>
                   <xsl:value-of select="$who"/></xsl:template>
               </xsl:stylesheet>"#,
            "chatty.xsl",
            DocumentAccess::Off,
        )
        .expect("compiles"),
    );
    let ns = vec![("m".to_owned(), "http://services.samples/xsd".to_owned())];
    let expr =
        Arc::new(XPathExpr::compile("//m:skcotSyub/redro[last()]/emulov", &ns).expect("compiles"));
    let inputs: Arc<Vec<Vec<u8>>> = Arc::new(
        [1024usize, 5120, 10240]
            .iter()
            .map(|&s| payload::buy_stocks(s))
            .collect(),
    );
    let expected: Arc<Vec<(Vec<u8>, XPathValue)>> = Arc::new(
        inputs
            .iter()
            .map(|input| {
                let out = sheet.transform_bytes(input, &[]).expect("transform");
                let doc = Document::parse(&out.bytes).expect("result parses");
                let value = doc.eval(&expr).expect("eval");
                (out.bytes, value)
            })
            .collect(),
    );

    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (sheet, chatty, expr, inputs, expected) = (
                sheet.clone(),
                chatty.clone(),
                expr.clone(),
                inputs.clone(),
                expected.clone(),
            );
            std::thread::spawn(move || {
                let mut mismatches = 0usize;
                for round in 0..ROUNDS {
                    let i = (t + round) % inputs.len();
                    let out = sheet.transform_bytes(&inputs[i], &[]).expect("transform");
                    let doc = Document::parse(&out.bytes).expect("parse");
                    let value = doc.eval(&expr).expect("eval");
                    if out.bytes != expected[i].0 || value != expected[i].1 {
                        mismatches += 1;
                    }
                    let me = format!("thread-{t}");
                    let said = chatty
                        .transform_bytes(b"<r/>", &[("who".to_owned(), Param::string(&me))])
                        .expect("chatty transform");
                    if said.messages != vec![format!("from {me}")] || said.bytes != me.as_bytes() {
                        mismatches += 1;
                    }
                    if round % 10 == 0 {
                        let err = chatty
                            .transform_bytes(b"<r/>", &[("who".to_owned(), Param::string("stop"))])
                            .expect_err("terminates");
                        if !err.message.contains("stopped") {
                            mismatches += 1;
                        }
                    }
                }
                mismatches
            })
        })
        .collect();
    let mismatches: usize = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    assert_eq!(mismatches, 0, "results differed between threads");
}

#[test]
fn documents_move_between_threads() {
    let doc = Document::parse(&payload::buy_stocks(512)).expect("parses");
    let expr = XPathExpr::compile("count(//order)", &[]).expect("compiles");
    let value = std::thread::spawn(move || doc.eval(&expr).expect("eval"))
        .join()
        .expect("join");
    assert_eq!(value, XPathValue::Number(2.0));
}
