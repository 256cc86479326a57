//! Every failure comes back as a LibxmlError of the right kind, and none of them writes a
//! byte to stderr (checked by re-running the cases in a child process).

mod common;

use std::process::Command;

use busbar_libxml::{
    Document, DocumentAccess, ErrorKind, Stylesheet, XPathExpr, MAX_DOCUMENT_BYTES,
};
use common::Scratch;

const XSL_NS: &str = "xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\"";

fn sheet(body: &str) -> String {
    format!("<xsl:stylesheet version=\"1.0\" {XSL_NS} xmlns:exsl=\"http://exslt.org/common\" extension-element-prefixes=\"exsl\">{body}</xsl:stylesheet>")
}

fn transform_error(body: &str, access: DocumentAccess) -> busbar_libxml::LibxmlError {
    let style = Stylesheet::compile_bytes(sheet(body).as_bytes(), "inline.xsl", access)
        .unwrap_or_else(|e| panic!("stylesheet should compile: {e}"));
    style
        .transform_bytes(b"<r/>", &[])
        .expect_err("transform should fail")
}

#[test]
fn malformed_xml_is_a_parse_error_with_a_line() {
    let err = Document::parse(b"<a>\n<b></a>").expect_err("mismatched tags");
    assert_eq!(err.kind, ErrorKind::Parse);
    assert_eq!(err.line, Some(2), "{err}");
    assert!(err.message.contains("mismatch"), "{err}");
}

#[test]
fn doctype_with_external_entity_is_forbidden() {
    let xxe = b"<!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><r>&x;</r>";
    let err = Document::parse(xxe).expect_err("XXE refused");
    assert_eq!(err.kind, ErrorKind::Forbidden, "{err}");
    assert!(err.message.contains("DOCTYPE"), "{err}");
}

#[test]
fn entity_expansion_bomb_is_forbidden_before_expansion() {
    let bomb = b"<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\"><!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">]><l>&c;</l>";
    assert_eq!(
        Document::parse(bomb).expect_err("bomb").kind,
        ErrorKind::Forbidden
    );
}

#[test]
fn excessive_nesting_and_size_are_limits() {
    let deep = format!("{}{}", "<a>".repeat(300), "</a>".repeat(300));
    assert_eq!(
        Document::parse(deep.as_bytes()).expect_err("too deep").kind,
        ErrorKind::Limit
    );
    let huge = vec![b' '; MAX_DOCUMENT_BYTES + 1];
    assert_eq!(
        Document::parse(&huge).expect_err("too big").kind,
        ErrorKind::Limit
    );
}

#[test]
fn unknown_xpath_prefix_fails_at_compile() {
    let ns = [(
        "soapenv".to_owned(),
        "http://schemas.xmlsoap.org/soap/envelope/".to_owned(),
    )];
    let err = XPathExpr::compile("/soapenv:Envelope/soapenv:Body/m:buyStocks", &ns)
        .expect_err("m is unbound");
    assert_eq!(err.kind, ErrorKind::XPathCompile);
    assert!(err.message.contains("'m'"), "{err}");
}

#[test]
fn xpath_syntax_error_fails_at_compile() {
    let err = XPathExpr::compile("//order[", &[]).expect_err("unterminated predicate");
    assert_eq!(err.kind, ErrorKind::XPathCompile);
    assert!(err.message.contains("//order["), "{err}");
}

#[test]
fn unknown_xpath_functions_and_variables_fail_at_compile() {
    for expr in [
        "no-such-function(1)",
        "false() and no-such-function(1)",
        "$v",
    ] {
        let err = XPathExpr::compile(expr, &[]).expect_err("nothing to evaluate it with");
        assert_eq!(err.kind, ErrorKind::XPathCompile);
        assert!(err.message.contains(expr), "{err}");
    }
}

#[test]
fn stylesheet_errors_name_file_and_line() {
    let scratch = Scratch::new("compile-errors");
    let bad = format!(
        "<?xml version=\"1.0\"?>\n<xsl:stylesheet version=\"1.0\" {XSL_NS}>\n\
         <xsl:template match=\"/\">\n<out>\n<xsl:value-of/>\n</out>\n</xsl:template>\n\
         </xsl:stylesheet>\n"
    );
    let path = scratch.write("bad.xsl", bad.as_bytes());
    let err = Stylesheet::compile_file(&path, DocumentAccess::Off).expect_err("no select");
    assert_eq!(err.kind, ErrorKind::StylesheetCompile);
    assert_eq!(
        err.file.as_deref(),
        Some(path.to_str().expect("utf-8 path"))
    );
    assert_eq!(err.line, Some(5), "{err}");

    let broken = scratch.write("broken.xsl", b"<xsl:stylesheet version=\"1.0\"\n xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\">\n<xsl:template>\n</xsl:stylesheet>\n");
    let err = Stylesheet::compile_file(&broken, DocumentAccess::Off).expect_err("not XML");
    assert_eq!(err.kind, ErrorKind::StylesheetCompile);
    assert_eq!(err.line, Some(4), "{err}");
    assert!(
        err.file
            .as_deref()
            .is_some_and(|f| f.ends_with("broken.xsl")),
        "{err}"
    );

    let missing = Stylesheet::compile_file(&scratch.0.join("absent.xsl"), DocumentAccess::Off)
        .expect_err("no file");
    assert_eq!(missing.kind, ErrorKind::StylesheetCompile);
}

#[test]
fn xsl_message_terminate_is_a_transform_error_with_the_message() {
    let err = transform_error(
        "<xsl:template match='/'><xsl:message>still fine</xsl:message><xsl:message terminate='yes'>order <xsl:value-of select='count(/r)'/> rejected</xsl:message></xsl:template>",
        DocumentAccess::Off,
    );
    assert_eq!(err.kind, ErrorKind::Transform);
    assert!(err.message.contains("order 1 rejected"), "{err}");
}

#[test]
fn runtime_errors_are_transform_errors() {
    let err = transform_error(
        "<xsl:template match='/'><xsl:apply-templates select='1'/></xsl:template>",
        DocumentAccess::Off,
    );
    assert_eq!(err.kind, ErrorKind::Transform, "{err}");
    let style = Stylesheet::compile_bytes(
        sheet("<xsl:param name='p'/><xsl:template match='/'><xsl:value-of select='$p'/></xsl:template>").as_bytes(),
        "p.xsl",
        DocumentAccess::Off,
    )
    .expect("compiles");
    let err = style
        .transform_bytes(b"<r/>", &[("p".to_owned(), "1 +".to_owned())])
        .expect_err("bad parameter expression");
    assert_eq!(err.kind, ErrorKind::Transform, "{err}");
}

#[test]
fn network_and_outside_files_are_refused_by_document() {
    for uri in [
        "http://127.0.0.1:9/x.xml",
        "/etc/passwd",
        "file:///etc/hostname",
    ] {
        let err = transform_error(
            &format!("<xsl:template match='/'><xsl:copy-of select=\"document('{uri}')\"/></xsl:template>"),
            DocumentAccess::Off,
        );
        assert_eq!(err.kind, ErrorKind::Forbidden, "{uri}: {err}");
    }
    let scratch = Scratch::new("outside");
    let err = transform_error(
        "<xsl:template match='/'><xsl:copy-of select=\"document('/etc/passwd')\"/></xsl:template>",
        DocumentAccess::UnderDir(scratch.0.clone()),
    );
    assert_eq!(err.kind, ErrorKind::Forbidden, "{err}");
}

#[test]
fn files_under_the_allowed_dir_are_readable_and_symlinks_out_are_not() {
    let scratch = Scratch::new("under");
    scratch.write("rates.xml", b"<rates><eur>0.92</eur></rates>");
    let base = scratch.0.join("main.xsl").display().to_string();
    let body = "<xsl:output method='text'/><xsl:template match='/'><xsl:value-of select=\"document('rates.xml')/rates/eur\"/></xsl:template>";
    let style = Stylesheet::compile_bytes(
        sheet(body).as_bytes(),
        &base,
        DocumentAccess::UnderDir(scratch.0.clone()),
    )
    .expect("compiles");
    assert_eq!(
        style
            .transform_bytes(b"<r/>", &[])
            .expect("reads rates")
            .bytes,
        b"0.92"
    );

    std::os::unix::fs::symlink("/etc/passwd", scratch.0.join("link.xml")).expect("symlink");
    let body =
        "<xsl:template match='/'><xsl:copy-of select=\"document('link.xml')\"/></xsl:template>";
    let style = Stylesheet::compile_bytes(
        sheet(body).as_bytes(),
        &base,
        DocumentAccess::UnderDir(scratch.0.clone()),
    )
    .expect("compiles");
    let err = style
        .transform_bytes(b"<r/>", &[])
        .expect_err("symlink leaves the dir");
    assert_eq!(err.kind, ErrorKind::Forbidden, "{err}");

    // A file inside the directory that carries a DOCTYPE is refused too.
    scratch.write(
        "dtd.xml",
        b"<!DOCTYPE x [<!ENTITY e SYSTEM '/etc/passwd'>]><x>&e;</x>",
    );
    let body =
        "<xsl:template match='/'><xsl:copy-of select=\"document('dtd.xml')\"/></xsl:template>";
    let style = Stylesheet::compile_bytes(
        sheet(body).as_bytes(),
        &base,
        DocumentAccess::UnderDir(scratch.0.clone()),
    )
    .expect("compiles");
    let err = style
        .transform_bytes(b"<r/>", &[])
        .expect_err("DOCTYPE in loaded document");
    assert_eq!(err.kind, ErrorKind::Forbidden, "{err}");
}

#[test]
fn includes_follow_the_access_policy() {
    let scratch = Scratch::new("include");
    scratch.write(
        "part.xsl",
        sheet("<xsl:template name='hi'>included</xsl:template>").as_bytes(),
    );
    let main = scratch.write(
        "main.xsl",
        sheet("<xsl:include href='part.xsl'/><xsl:output method='text'/><xsl:template match='/'><xsl:call-template name='hi'/></xsl:template>").as_bytes(),
    );
    let err = Stylesheet::compile_file(&main, DocumentAccess::Off).expect_err("reads are off");
    assert_eq!(err.kind, ErrorKind::Forbidden, "{err}");
    let style = Stylesheet::compile_file(&main, DocumentAccess::UnderDir(scratch.0.clone()))
        .expect("include allowed");
    assert_eq!(
        style.transform_bytes(b"<r/>", &[]).expect("runs").bytes,
        b"included"
    );

    let outside = scratch.write(
        "outside.xsl",
        sheet("<xsl:import href='/etc/passwd'/><xsl:template match='/'/>").as_bytes(),
    );
    let sub = scratch.0.join("sub");
    std::fs::create_dir_all(&sub).expect("mkdir");
    let err =
        Stylesheet::compile_file(&outside, DocumentAccess::UnderDir(sub)).expect_err("outside");
    assert_eq!(err.kind, ErrorKind::Forbidden, "{err}");
}

#[test]
fn file_writes_are_forbidden() {
    let scratch = Scratch::new("write");
    let target = scratch.0.join("written.xml");
    let err = transform_error(
        &format!(
            "<xsl:template match='/'><exsl:document href='{}'><x/></exsl:document></xsl:template>",
            target.display()
        ),
        DocumentAccess::UnderDir(scratch.0.clone()),
    );
    assert_eq!(err.kind, ErrorKind::Forbidden, "{err}");
    assert!(!target.exists(), "the file must not have been written");
}

/// Runs every case above in a child process and checks that its stderr stays empty.
#[test]
fn no_error_path_writes_to_stderr() {
    if std::env::var_os("BUSBAR_LIBXML_STDERR_CHILD").is_some() {
        return; // the child runs the other tests only
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([
            "--test-threads",
            "1",
            "--skip",
            "no_error_path_writes_to_stderr",
        ])
        .env("BUSBAR_LIBXML_STDERR_CHILD", "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child tests failed:\n{stdout}");
    assert!(stdout.contains("test result: ok"), "{stdout}");
    assert!(
        out.stderr.is_empty(),
        "libxml2/libxslt wrote to stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
