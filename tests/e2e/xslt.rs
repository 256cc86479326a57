use std::process::Command;
use std::sync::Arc;

use busbar_bench::payload::{buy_stocks, Variant};
use busbar_engine::echo::EchoOptions;

use crate::support::*;

const SOAP11: (&str, &str) = ("Content-Type", "text/xml; charset=UTF-8");

/// The example's XSLTProxy against the given back end, with stylesheets from examples/xslt.
fn xslt_yaml(backend: std::net::SocketAddr) -> String {
    let x = examples_dir().join("xslt");
    format!(
        "endpoints:\n  echo: {{ url: \"http://{backend}/service/EchoService\" }}\nproxies:\n  XSLTProxy:\n    path: /service/XSLTProxy\n    in:\n      - xslt: {{ stylesheet: \"{req}\" }}\n      - call: echo\n    out:\n      - xslt: {{ stylesheet: \"{resp}\" }}\n  DirectProxy:\n    path: /service/DirectProxy\n    in:\n      - call: echo\n",
        req = x.join("reverse-request.xsl").display(),
        resp = x.join("reverse-response.xsl").display(),
    )
}

#[test]
fn xslt_proxy_passes_the_project_verifier_at_every_size_and_concurrency() {
    let echo = echo(EchoOptions::default());
    let h = engine(&xslt_yaml(echo.addr));
    let out = Command::new(env!("CARGO_BIN_EXE_busbar"))
        .args([
            "bench",
            "verify",
            &format!("http://{}/service", h.http()),
            "--scenarios",
            "xslt",
            "--concurrency",
            "1,50",
            // Correctness, not speed: a loaded debug build may queue 1 MiB transforms for long.
            "--timeout",
            "120s",
        ])
        .output()
        .expect("run verify");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(" 0 failed"), "{text}");
    echo.stop();
}

#[test]
fn the_back_end_receives_reversed_names_and_the_client_gets_them_back() {
    let (backend, seen) = recording_back_end();
    let h = engine(&xslt_yaml(backend));
    let body = buy_stocks(1024, Variant::Plain).expect("payload");
    let r = Client::connect(h.http())
        .post("/service/XSLTProxy", &[SOAP11], &body)
        .expect("resp");
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = String::from_utf8(seen.lock().expect("lock")[0].clone()).expect("utf8");
    assert!(sent.contains("<m:skcotSyub xmlns:m=\"http://services.samples/xsd\"><redro><lobmys>IBM</lobmys><DIreyub>asankha</DIreyub>"), "{sent}");
    assert!(
        !sent.contains("soapenv:Header"),
        "the SOAP header must be dropped: {sent}"
    );
    assert!(!sent.contains("<order>"), "{sent}");
    let back = r.text();
    assert!(back.contains("<m:buyStocks"), "{back}");
    assert!(
        back.contains("<order><symbol>IBM</symbol><buyerID>asankha</buyerID><price>140.34</price>"),
        "{back}"
    );
    assert_eq!(back.matches("<order>").count(), 7);
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
}

#[test]
fn a_failing_stylesheet_gives_a_soap_fault_naming_it() {
    let dir = temp_dir("xslt-fail");
    let sheet = dir.join("stop.xsl");
    std::fs::write(&sheet, "<xsl:stylesheet version=\"1.0\" xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\"><xsl:template match=\"/\"><xsl:message terminate=\"yes\">no orders today</xsl:message></xsl:template></xsl:stylesheet>").expect("write");
    let h = engine(&format!(
        "proxies:\n  P:\n    path: /p\n    in:\n      - xslt: {{ stylesheet: \"{}\" }}\n      - respond: {{}}\n",
        sheet.display()
    ));
    let r = Client::connect(h.http())
        .post("/p", &[SOAP11], b"<a/>")
        .expect("resp");
    assert_eq!(r.status, 500);
    let t = r.text();
    assert!(t.contains("stop.xsl"), "{t}");
    assert!(t.contains("no orders today"), "{t}");
    let r = Client::connect(h.http())
        .post("/p", &[SOAP11], b"<a>not xml")
        .expect("resp");
    assert_eq!(r.status, 500);
    assert!(
        r.text().contains("<faultcode>soapenv:Client</faultcode>"),
        "{}",
        r.text()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stylesheet_syntax_error_fails_validation_with_file_and_line() {
    let dir = temp_dir("xslt-bad");
    std::fs::write(dir.join("bad.xsl"), "<xsl:stylesheet version=\"1.0\" xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\">\n<xsl:template match=\"/\">\n<xsl:value-of select=\"((\"/>\n</xsl:template>\n</xsl:stylesheet>\n").expect("write");
    let (code, err) = validate_in(&dir, "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - xslt: { stylesheet: bad.xsl }\n      - respond: {}\n");
    assert_eq!(code, Some(1));
    assert!(
        err.contains(":7: proxies.P.in[0].xslt.stylesheet:"),
        "{err}"
    );
    assert!(err.contains("bad.xsl"), "{err}");
    assert!(err.contains("line 3"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn large_transforms_do_not_block_a_parallel_direct_proxy_call() {
    let echo = echo(EchoOptions::default());
    let h = engine(&xslt_yaml(echo.addr));
    let addr = h.http();
    let big = Arc::new(buy_stocks(256 << 10, Variant::Plain).expect("payload"));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let transforms: Vec<_> = (0..100)
        .map(|_| {
            let (big, done) = (big.clone(), done.clone());
            std::thread::spawn(move || {
                let r = Client::connect(addr)
                    .post("/service/XSLTProxy", &[SOAP11], &big)
                    .expect("xslt");
                assert_eq!(r.status, 200, "{}", r.text());
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    // Wait until transforms are under way, then a small DirectProxy call must get through
    // while most of them are still running.
    assert!(eventually(std::time::Duration::from_secs(30), || {
        metric(h.admin(), "busbar_proxy_in_flight{proxy=\"XSLTProxy\"}").unwrap_or(0.0) >= 10.0
    }));
    let r = Client::connect(addr)
        .post("/service/DirectProxy", &[SOAP11], b"<ping/>")
        .expect("direct");
    assert_eq!(r.body, b"<ping/>");
    let finished = done.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        finished < 90,
        "the DirectProxy call waited for {finished} of 100 transforms"
    );
    for t in transforms {
        t.join().expect("transform thread");
    }
    echo.stop();
}

#[test]
fn params_and_xsl_output_reach_the_client() {
    let dir = temp_dir("xslt-params");
    std::fs::write(
        dir.join("p.xsl"),
        "<xsl:stylesheet version=\"1.0\" xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\"><xsl:output method=\"text\"/><xsl:param name=\"region\"/><xsl:param name=\"first\"/><xsl:template match=\"/\"><xsl:value-of select=\"concat($region, '|', $first)\"/></xsl:template></xsl:stylesheet>",
    )
    .expect("write");
    let file = dir.join("c.yaml");
    std::fs::write(
        &file,
        "workers: 1\nadmin: { enabled: false }\nlisteners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  P:\n    path: /p\n    in:\n      - xslt: { stylesheet: p.xsl, params: { region: \"it's eu\", first: { xpath: \"//order[1]/symbol\" } } }\n      - respond: {}\n",
    )
    .expect("write");
    let engine = busbar_engine::Engine::start(&file).expect("start");
    let addr = engine.listeners["http"];
    let body = buy_stocks(1024, Variant::Plain).expect("payload");
    let r = Client::connect(addr)
        .post("/p", &[SOAP11], &body)
        .expect("resp");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "it's eu|IBM");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=UTF-8"));
    assert_eq!(r.header("content-length"), Some("11"));
    engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A SOAP request whose payload element carries `n` attributes (0.7 MB for 50,000).
pub fn wide_element_request(n: usize) -> Vec<u8> {
    let mut body = b"<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"><soapenv:Body><m:buyStocks xmlns:m=\"http://services.samples/xsd\"".to_vec();
    for i in 0..n {
        body.extend_from_slice(format!(" attr{i}=\"x\"").as_bytes());
    }
    body.extend_from_slice(
        b"><order><symbol>IBM</symbol></order></m:buyStocks></soapenv:Body></soapenv:Envelope>",
    );
    body
}

#[test]
fn an_element_with_fifty_thousand_attributes_gets_a_client_fault_naming_the_limit() {
    let (backend, seen) = recording_back_end();
    let h = engine(&xslt_yaml(backend));
    let body = wide_element_request(50_000);
    assert!(body.len() > 650_000, "{}", body.len());
    let r = Client::connect(h.http())
        .post("/service/XSLTProxy", &[SOAP11], &body)
        .expect("resp");
    assert_eq!(r.status, 500, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains("<faultcode>soapenv:Client</faultcode>"),
        "{text}"
    );
    assert!(text.contains("limit of 256 attributes"), "{text}");
    assert!(seen.lock().expect("lock").is_empty(), "forwarded");
    // Just under the limit, the same shape transforms.
    let r = Client::connect(h.http())
        .post("/service/XSLTProxy", &[SOAP11], &wide_element_request(250))
        .expect("resp");
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn validate_names_each_xslt_steps_engine_and_the_metric_counts_transforms_by_engine() {
    let dir = temp_dir("xslt-engines");
    let x = examples_dir().join("xslt");
    std::fs::copy(x.join("reverse-request.xsl"), dir.join("fast.xsl")).expect("copy");
    std::fs::write(dir.join("slow.xsl"), "<xsl:stylesheet version=\"1.0\" xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\"><xsl:output method=\"xml\"/><xsl:template match=\"/\"><a><xsl:if test=\"*\">x</xsl:if></a></xsl:template></xsl:stylesheet>").expect("write");
    let yaml = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  F:\n    path: /f\n    in:\n      - xslt: { stylesheet: fast.xsl }\n      - respond: {}\n  S:\n    path: /s\n    in:\n      - xslt: { stylesheet: slow.xsl }\n      - respond: {}\n";
    let (ok, text) = validate_stdout(&dir, yaml);
    assert!(ok, "{text}");
    assert!(
        text.contains("proxies.F.in[0].xslt: fast.xsl runs on the fast path"),
        "{text}"
    );
    assert!(
        text.contains("proxies.S.in[0].xslt: slow.xsl runs on libxslt (outside the fast path's class: xsl:if in a template)"),
        "{text}"
    );

    let h = engine(
        &yaml
            .replacen("listeners:\n  http: { bind: \"127.0.0.1:0\" }\n", "", 1)
            .replace("fast.xsl", &dir.join("fast.xsl").display().to_string())
            .replace("slow.xsl", &dir.join("slow.xsl").display().to_string()),
    );
    let body = buy_stocks(1024, Variant::Plain).expect("payload");
    let mut c = Client::connect(h.http());
    for path in ["/f", "/f", "/s"] {
        let r = c.post(path, &[SOAP11], &body).expect("resp");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // A message the fast path hands over: libxslt answers it, with its own error.
    let r = c.post("/f", &[SOAP11], b"<!DOCTYPE a><a/>").expect("resp");
    assert_eq!(r.status, 500);
    assert!(r.text().contains("DOCTYPE"), "{}", r.text());
    let metrics = Client::connect(h.admin())
        .get("/metrics")
        .expect("metrics")
        .text();
    let value = |sheet: &str, engine: &str| -> Option<String> {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("busbar_xslt_transforms_total{")
                    && l.contains(sheet)
                    && l.contains(&format!("engine=\"{engine}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(value("fast.xsl", "fast").as_deref(), Some("2"), "{metrics}");
    assert_eq!(
        value("fast.xsl", "libxslt").as_deref(),
        Some("1"),
        "{metrics}"
    );
    assert_eq!(value("slow.xsl", "fast").as_deref(), Some("0"), "{metrics}");
    assert_eq!(
        value("slow.xsl", "libxslt").as_deref(),
        Some("1"),
        "{metrics}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const XSL: &str = "xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\"";

#[test]
fn validate_refuses_a_broken_parameter_xpath_and_an_unknown_instruction() {
    let dir = temp_dir("xslt-validate");
    std::fs::write(
        dir.join("ok.xsl"),
        format!("<xsl:stylesheet version=\"1.0\" {XSL}><xsl:param name=\"p\"/><xsl:template match=\"/\"><r/></xsl:template></xsl:stylesheet>"),
    )
    .expect("write");
    std::fs::write(
        dir.join("badel.xsl"),
        format!("<xsl:stylesheet version=\"1.0\" {XSL}>\n  <xsl:template match=\"/\"><xsl:frobnicate/></xsl:template>\n</xsl:stylesheet>\n"),
    )
    .expect("write");
    // In forwards-compatible mode an unknown instruction is allowed (XSLT 1.0 §2.5).
    std::fs::write(
        dir.join("later.xsl"),
        format!("<xsl:stylesheet version=\"2.0\" {XSL}><xsl:template match=\"/\"><r><xsl:frobnicate><xsl:fallback>f</xsl:fallback></xsl:frobnicate></r></xsl:template></xsl:stylesheet>"),
    )
    .expect("write");
    let yaml = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  A:\n    path: /a\n    in:\n      - xslt:\n          stylesheet: ok.xsl\n          params:\n            p: { xpath: \"concat(\" }\n            q: { xpath: \"count(//order)\" }\n  B: { path: /b, in: [ { xslt: { stylesheet: badel.xsl } } ] }\n  C: { path: /c, in: [ { xslt: { stylesheet: later.xsl } } ] }\n";
    let (code, err) = validate_in(&dir, yaml);
    assert_eq!(code, Some(1), "{err}");
    assert_each_line(
        &err,
        &[
            (":10: proxies.A.in[0].xslt.params.p.xpath:", "concat("),
            (
                ":12: proxies.B.in[0].xslt.stylesheet:",
                "unknown xsl:frobnicate",
            ),
        ],
    );
    assert!(err.contains("badel.xsl"), "{err}");
    assert!(err.contains("(line 2)"), "{err}");
    assert!(err.contains("2 problem(s)"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_answer_that_is_not_xml_fails_an_out_stylesheet_as_the_back_ends_fault() {
    let dir = temp_dir("xslt-out-blame");
    let sheet = dir.join("identity.xsl");
    std::fs::write(&sheet, format!("<xsl:stylesheet version=\"1.0\" {XSL}><xsl:template match=\"@*|node()\"><xsl:copy><xsl:apply-templates select=\"@*|node()\"/></xsl:copy></xsl:template></xsl:stylesheet>")).expect("write");
    let echo = echo(EchoOptions::default());
    let h = engine(&format!(
        "endpoints:\n  echo: {{ url: \"http://{}/e\" }}\nproxies:\n  P:\n    path: /p\n    in: [ {{ call: echo }} ]\n    out: [ {{ xslt: {{ stylesheet: \"{}\" }} }} ]\n",
        echo.addr,
        sheet.display()
    ));
    let r = Client::connect(h.http())
        .post(
            "/p",
            &[("Content-Type", "application/json")],
            b"{\"not\":\"xml\"}",
        )
        .expect("resp");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("the back end's answer"), "{}", r.text());
    let r = Client::connect(h.http())
        .post("/p", &[SOAP11], b"not xml")
        .expect("resp");
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains("<faultcode>soapenv:Server</faultcode>"),
        "{}",
        r.text()
    );
    // An answer that is XML goes through.
    let r = Client::connect(h.http())
        .post("/p", &[SOAP11], b"<a>x</a>")
        .expect("resp");
    assert_eq!(r.status, 200, "{}", r.text());
    echo.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stylesheet_failing_on_its_own_is_a_server_fault_that_keeps_libxslts_text_to_the_log() {
    let dir = temp_dir("xslt-own-fault");
    let write = |name: &str, body: &str| {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!("<xsl:stylesheet version=\"1.0\" {XSL}>{body}</xsl:stylesheet>"),
        )
        .expect("write");
        path.display().to_string()
    };
    let recurse = write("recurse.xsl", "<xsl:template name=\"r\"><xsl:param name=\"n\" select=\"0\"/><xsl:call-template name=\"r\"><xsl:with-param name=\"n\" select=\"$n+1\"/></xsl:call-template></xsl:template><xsl:template match=\"/\"><r><xsl:call-template name=\"r\"/></r></xsl:template>");
    let passwd = write(
        "passwd.xsl",
        "<xsl:template match=\"/\"><r><xsl:copy-of select=\"document('/etc/passwd')\"/></r></xsl:template>",
    );
    let stop = write(
        "stop.xsl",
        "<xsl:template match=\"/\"><xsl:message terminate=\"yes\">no orders\ntoday</xsl:message></xsl:template>",
    );
    let h = engine(&format!(
        "proxies:\n  R: {{ path: /r, in: [ {{ xslt: {{ stylesheet: \"{recurse}\" }} }}, {{ respond: {{}} }} ] }}\n  D: {{ path: /d, in: [ {{ xslt: {{ stylesheet: \"{passwd}\" }} }}, {{ respond: {{}} }} ] }}\n  S: {{ path: /s, in: [ {{ xslt: {{ stylesheet: \"{stop}\" }} }}, {{ respond: {{}} }} ] }}\n"
    ));
    for (path, name) in [
        ("/r", "recurse.xsl"),
        ("/d", "passwd.xsl"),
        ("/s", "stop.xsl"),
    ] {
        let r = Client::connect(h.http())
            .post(path, &[SOAP11], b"<a/>")
            .expect("resp");
        let text = r.text();
        assert_eq!(r.status, 500, "{path}: {text}");
        assert!(
            text.contains("<faultcode>soapenv:Server</faultcode>"),
            "{path}: {text}"
        );
        let reason = text
            .split("<faultstring>")
            .nth(1)
            .and_then(|t| t.split("</faultstring>").next())
            .unwrap_or_default()
            .to_owned();
        assert!(reason.contains(name), "{path}: {text}");
        // The stylesheet is named as the config writes it; libxslt's text stays in the log.
        for leak in ["\n", "maxdepth", "/etc/passwd", "not allowed", "template"] {
            assert!(!reason.contains(leak), "{path} shows {leak:?}: {reason}");
        }
        let r = Client::connect(h.http())
            .post(path, &[("Content-Type", "application/json")], b"<a/>")
            .expect("resp");
        assert_eq!(r.status, 500, "{path}: {}", r.text());
    }
    let r = Client::connect(h.http())
        .post("/s", &[SOAP11], b"<a/>")
        .expect("resp");
    assert!(r.text().contains("no orders today"), "{}", r.text());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_fast_path_and_libxslt_write_an_empty_cdata_section_alike() {
    let dir = temp_dir("xslt-cdata");
    let sheet = dir.join("apply.xsl");
    std::fs::write(&sheet, format!("<xsl:stylesheet version=\"1.0\" {XSL}><xsl:output method=\"xml\" omit-xml-declaration=\"yes\"/><xsl:template match=\"a\"><A><xsl:apply-templates/></A></xsl:template></xsl:stylesheet>")).expect("write");
    let s = sheet.display();
    // A parameter keeps the same stylesheet on libxslt.
    let h = engine(&format!(
        "proxies:\n  F: {{ path: /f, in: [ {{ xslt: {{ stylesheet: \"{s}\" }} }}, {{ respond: {{}} }} ] }}\n  S: {{ path: /s, in: [ {{ xslt: {{ stylesheet: \"{s}\", params: {{ unused: x }} }} }}, {{ respond: {{}} }} ] }}\n"
    ));
    for body in ["<a><![CDATA[]]></a>", "<a>x<![CDATA[]]></a>", "<a/>"] {
        let fast = Client::connect(h.http())
            .post("/f", &[SOAP11], body.as_bytes())
            .expect("resp");
        let slow = Client::connect(h.http())
            .post("/s", &[SOAP11], body.as_bytes())
            .expect("resp");
        assert_eq!(fast.status, 200, "{}", fast.text());
        assert_eq!(fast.text(), slow.text(), "{body}");
    }
    let r = Client::connect(h.http())
        .post("/f", &[SOAP11], b"<a><![CDATA[]]></a>")
        .expect("resp");
    assert_eq!(r.text().trim_end(), "<A></A>");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_error_in_an_included_stylesheet_is_reported_in_that_file() {
    let dir = temp_dir("xslt-include-line");
    std::fs::write(
        dir.join("main.xsl"),
        format!("<xsl:stylesheet version=\"1.0\" {XSL}>\n  <xsl:include href=\"child.xsl\"/>\n  <xsl:template match=\"/\"><r/></xsl:template>\n</xsl:stylesheet>\n"),
    )
    .expect("write");
    std::fs::write(
        dir.join("child.xsl"),
        format!("<xsl:stylesheet version=\"1.0\" {XSL}>\n\n\n\n  <xsl:template match=\"a\"><r></xsl:template>\n</xsl:stylesheet>\n"),
    )
    .expect("write");
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nproxies:\n  A: { path: /a, in: [ { xslt: { stylesheet: main.xsl } } ] }\n",
    );
    assert_eq!(code, Some(1), "{err}");
    let child = std::fs::canonicalize(dir.join("child.xsl")).expect("path");
    let line = err
        .lines()
        .find(|l| l.contains(":4: proxies.A.in[0].xslt.stylesheet:"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains(&format!(
            "in {}: Opening and ending tag mismatch",
            child.display()
        )),
        "{line}"
    );
    assert!(line.contains("(line 5)"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
