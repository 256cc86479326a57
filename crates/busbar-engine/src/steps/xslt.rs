//! The `xslt` step: XSLT 1.0 through libxslt, on the request (`in`) or the response (`out`).
//! Config: `busbar_config::XsltConfig`.
//!
//! Stylesheets are compiled when the config is built and shared read-only by every worker. A
//! transform needs the whole body parsed: it takes the document an earlier full-XPath route
//! parsed for the same message when there is one (the transform consumes it: its output
//! replaces the body), and runs on the bounded CPU pool when the body is large.
//!
//! A stylesheet of the simple class `busbar_xml::xslt` describes (renames, wrappers, drops,
//! re-ordering with fixed templates) is also compiled for that fast path, which transforms the
//! body bytes without libxml2 and writes what libxslt would, byte for byte; a message it is
//! not sure of (or a document an earlier route already parsed) goes to libxslt as before.

use std::sync::Arc;

use std::sync::atomic::Ordering::Relaxed;

use busbar_config::{line_of, DocumentAccessConfig, XsltConfig, XsltParam};
use busbar_core::metrics::XsltCounters;
use busbar_core::{Body, Exchange, Flow, MediationError, MessageFormat, Phase};
use busbar_libxml::{Document, DocumentAccess, LibxmlError, Param, Stylesheet, Transformed};
use busbar_xml::xslt::FastStylesheet;
use http::header::{HeaderValue, CONTENT_TYPE};

use super::{Apply, BuildCx, Failed, StepCx, StepEngine};

/// The current message's body parsed by libxml2: the exchange keeps it (see
/// `Exchange::put_view`) so that full-XPath routes and a transform parse a body once.
#[derive(Debug)]
pub struct ParsedXml(pub Document);

/// Runs `work` on the current message's body parsed by libxml2, parsing it only when no
/// earlier step did; the document stays cached for the next step. Runs on the bounded pool
/// for large bodies. The outer error is the body's (too large, unreadable); the inner one is
/// the parser's or `work`'s.
pub(crate) async fn with_document<R: Send + 'static>(
    ex: &mut Exchange,
    cx: &StepCx<'_>,
    work: impl FnOnce(&Document) -> Result<R, LibxmlError> + Send + 'static,
) -> Result<Result<R, LibxmlError>, MediationError> {
    let cached = ex.take_view::<ParsedXml>();
    let input = match cached {
        Some(doc) => Ok(doc),
        None => Err(ex.body_mut().bytes(cx.max_body()).await?),
    };
    let size = ex.body_mut().exact_len().unwrap_or(0);
    let (doc, result) = cx
        .offload(size, move || {
            let doc = match input {
                Ok(doc) => doc,
                Err(bytes) => match Document::parse(&bytes) {
                    Ok(d) => ParsedXml(d),
                    Err(e) => return (None, Err(e)),
                },
            };
            let result = work(&doc.0);
            (Some(doc), result)
        })
        .await?;
    if let Some(doc) = doc {
        ex.put_view(doc);
    }
    Ok(result)
}

/// A built `xslt` step.
#[derive(Debug)]
pub struct XsltStep {
    /// The compiled stylesheet.
    sheet: Arc<Stylesheet>,
    /// The same stylesheet compiled for the fast path, when it is inside its class.
    fast: Option<Arc<FastStylesheet>>,
    /// The stylesheet's path as written in the config (for faults and logs).
    name: Arc<str>,
    /// Parameters as XPath expressions (strings already quoted).
    params: Arc<Vec<(String, String)>>,
    /// Transforms by engine.
    counters: Arc<XsltCounters>,
}

impl XsltStep {
    /// Compiles the stylesheet (and what it includes or imports).
    pub fn build(cfg: &XsltConfig, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        let file = cx.loaded.resolve(&cfg.stylesheet.value);
        let access = match cfg.document_access {
            DocumentAccessConfig::ConfigDir => DocumentAccess::UnderDir(cx.loaded.base_dir.clone()),
            DocumentAccessConfig::None => DocumentAccess::Off,
        };
        let fail = |cx: &mut BuildCx<'_>, message: &str| {
            cx.fail(
                line_of(&cfg.stylesheet),
                format!("{here}.stylesheet"),
                format!("{}: {}", file.display(), message.trim()),
            )
        };
        // Read with the bound of every file a config names; libxslt resolves what the
        // stylesheet includes or imports against its absolute path.
        let bytes = match busbar_core::file::read(&file) {
            Ok(bytes) => bytes,
            Err(e) => return Err(fail(cx, &format!("cannot read stylesheet: {e}"))),
        };
        let absolute = std::path::absolute(&file).unwrap_or_else(|_| file.clone());
        let uri = absolute.display().to_string();
        let sheet = Stylesheet::compile_bytes(&bytes, &uri, access).map_err(|e| {
            let line = e.line.map(|l| format!(" (line {l})")).unwrap_or_default();
            // An error in a stylesheet it includes or imports names that file.
            let inside = match e.file.as_deref() {
                Some(other) if other != uri && e.line.is_some() => format!("in {other}: "),
                _ => String::new(),
            };
            fail(cx, &format!("{inside}{}{line}", e.message.trim()))
        })?;
        // Classified only once libxslt has compiled it: errors stay libxslt's.
        let fast = if !cfg.params.is_empty() {
            Err("the step passes parameters".to_owned())
        } else {
            FastStylesheet::analyse(&bytes).map_err(|e| e.0)
        };
        cx.engines.push(StepEngine {
            step: here.to_owned(),
            subject: cfg.stylesheet.value.clone(),
            fast: fast.as_ref().map(|_| ()).map_err(Clone::clone),
            general: "libxslt",
        });
        let mut params = Vec::with_capacity(cfg.params.len());
        let mut bad_param = None;
        for (k, v) in &cfg.params {
            let expr = match &v.value {
                XsltParam::String(s) => Param::string(s),
                XsltParam::XPath { xpath } => {
                    // Only the syntax: libxslt evaluates it with the stylesheet's functions.
                    if let Err(e) = busbar_libxml::XPathExpr::check_syntax(xpath) {
                        bad_param = Some(cx.fail(
                            line_of(v),
                            format!("{here}.params.{k}.xpath"),
                            e.message.trim().to_owned(),
                        ));
                    }
                    xpath.clone()
                }
            };
            params.push((k.clone(), expr));
        }
        if let Some(failed) = bad_param {
            return Err(failed);
        }
        Ok(Self {
            sheet: Arc::new(sheet),
            fast: fast.ok().map(Arc::new),
            name: cfg.stylesheet.value.as_str().into(),
            params: Arc::new(params),
            counters: cx.metrics.xslt(&cfg.stylesheet.value),
        })
    }

    /// `xsl:output media-type` wins; otherwise an XML message keeps its own Content-Type (a
    /// SOAP 1.2 message stays `application/soap+xml`), and anything else gets the output
    /// method's type.
    fn content_type(&self, ex: &Exchange, out: &busbar_libxml::Transformed) -> Option<HeaderValue> {
        let explicit = self.sheet.output().media_type.is_some();
        let current = ex.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let current_is_xml = current.is_some_and(|c| {
            let media = c
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            media.ends_with("/xml") || media.ends_with("+xml")
        });
        let charset = out.encoding.as_deref().unwrap_or("UTF-8");
        if !explicit && out.method == "xml" && current_is_xml {
            // The message keeps its type and parameters (SOAP 1.2's `action`), but its charset
            // is now the one the result was written in.
            let current = current.unwrap_or_default();
            let mut params = current.split(';');
            let media = params.next().unwrap_or("").trim();
            let mut kept: Vec<&str> = Vec::new();
            let mut same = false;
            for p in params.map(str::trim).filter(|p| !p.is_empty()) {
                match p.split_once('=') {
                    Some((k, v)) if k.trim().eq_ignore_ascii_case("charset") => {
                        same = v.trim().trim_matches('"').eq_ignore_ascii_case(charset);
                    }
                    _ => kept.push(p),
                }
            }
            if same {
                return None;
            }
            kept.push("");
            let mut value = media.to_string();
            for p in &kept[..kept.len() - 1] {
                value.push_str("; ");
                value.push_str(p);
            }
            value.push_str("; charset=");
            value.push_str(charset);
            return HeaderValue::from_str(&value).ok();
        }
        HeaderValue::from_str(&format!("{}; charset={charset}", out.media_type)).ok()
    }
}

impl Apply for XsltStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let cached = ex.take_view::<ParsedXml>();
        let input = match cached {
            Some(doc) => Ok(doc.0),
            None => Err(ex.body_mut().bytes(cx.max_body()).await?),
        };
        let size = ex.body_mut().exact_len().unwrap_or(0);
        let sheet = self.sheet.clone();
        let fast = self.fast.clone();
        let params = self.params.clone();
        // The input is parsed apart from the transform, so that a message that is not XML is
        // told from a stylesheet that fails on it.
        let (on_fast_path, result) = cx
            .offload(size, move || match input {
                Ok(doc) => (
                    false,
                    sheet.transform_owned(doc, &params).map_err(Failure::Sheet),
                ),
                Err(bytes) => match fast.as_deref().and_then(|f| f.transform(&bytes)) {
                    Some(out) => (true, Ok(fast_result(sheet.output(), out))),
                    None => (
                        false,
                        Document::parse(&bytes)
                            .map_err(Failure::Input)
                            .and_then(|doc| {
                                sheet.transform_owned(doc, &params).map_err(Failure::Sheet)
                            }),
                    ),
                },
            })
            .await?;
        let engine = if on_fast_path {
            &self.counters.fast
        } else {
            &self.counters.libxslt
        };
        engine.fetch_add(1, Relaxed);
        let out = result.map_err(|f| self.failed(f, ex.phase()))?;
        for m in &out.messages {
            tracing::info!(stylesheet = &*self.name, "xsl:message: {}", m.trim());
        }
        let content_type = self.content_type(ex, &out);
        // The output's SOAP version decides the fault format from here on.
        if let busbar_xml::Sniff::Soap(v) = busbar_xml::sniff_envelope(&out.bytes) {
            ex.format = MessageFormat::Soap(v);
        }
        ex.set_body(Body::full(out.bytes));
        if let Some(ct) = content_type {
            ex.headers_mut().insert(CONTENT_TYPE, ct);
        }
        Ok(Flow::Continue)
    }
}

/// Why a transform gave no result.
enum Failure {
    /// The message is not XML libxml2 accepts (malformed, a DOCTYPE, past a limit).
    Input(LibxmlError),
    /// The stylesheet failed on a message that parsed.
    Sheet(LibxmlError),
}

impl XsltStep {
    /// A message that is not XML is its sender's fault: the client's for a request, the back
    /// end's (502) for an answer. A stylesheet that fails on a parsed message is the server's:
    /// the client is told which stylesheet failed and, for `xsl:message terminate="yes"`, the
    /// message it wrote (on one line); libxslt's own text, which names files and templates,
    /// goes to the log with the error.
    fn failed(&self, failure: Failure, phase: Phase) -> MediationError {
        match failure {
            Failure::Input(e) => {
                let (kind, blame) = super::senders_fault(phase);
                let whose = match phase {
                    Phase::Request => "",
                    Phase::Response => "the back end's answer: ",
                };
                let reason = format!(
                    "XSLT transformation with {} failed: {whose}{}",
                    self.name,
                    e.message.trim()
                );
                MediationError::new(kind, blame, reason).with_source(e)
            }
            Failure::Sheet(e) => {
                let reason = match e.message.strip_prefix(TERMINATED) {
                    Some(text) => format!(
                        "XSLT transformation with {} failed: {TERMINATED}{}",
                        self.name,
                        one_line(text)
                    ),
                    None => format!("XSLT transformation with {} failed", self.name),
                };
                MediationError::internal(reason).with_source(e)
            }
        }
    }
}

/// How busbar-libxml words a transform that `xsl:message terminate="yes"` stopped.
const TERMINATED: &str = "xsl:message terminated the transform: ";

/// `text` with each run of control characters (line breaks included) as one space.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text
        .trim()
        .split(char::is_control)
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// The fast path's bytes described as libxslt describes its results (the fast path's class
/// fixes the method to `xml` and the encoding to UTF-8).
fn fast_result(output: &busbar_libxml::OutputSettings, bytes: Vec<u8>) -> Transformed {
    Transformed {
        bytes,
        media_type: output
            .media_type
            .clone()
            .unwrap_or_else(|| "text/xml".to_owned()),
        encoding: output.encoding.clone(),
        method: "xml".to_owned(),
        messages: Vec::new(),
        warnings: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::ParsedXml;

    const SHEET: &str = r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:param name="p" select="'none'"/>
  <xsl:template match="/a"><b n="{$p}"><xsl:value-of select="."/></b></xsl:template>
</xsl:stylesheet>"#;

    fn dir_with_sheet() -> std::path::PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "busbar-xslt-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("t.xsl"), SHEET).unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    #[test]
    fn the_body_is_transformed_with_its_parameters_and_length_headers_dropped() {
        let dir = dir_with_sheet();
        let l = loaded(
            "sequences:
  s:
    - xslt: { stylesheet: t.xsl, params: { p: x } }
",
            &dir,
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(
            &[("content-type", "text/xml"), ("content-length", "8")],
            b"<a>hi</a>",
        );
        assert!(run_steps(&steps, &mut ex).is_ok());
        assert!(ex.headers().get("content-length").is_none());
        let out = String::from_utf8_lossy(&body_of(&mut ex)).into_owned();
        assert!(out.ends_with("<b n=\"x\">hi</b>\n"), "{out}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_content_type_names_the_charset_the_result_is_written_in() {
        let dir = dir_with_sheet();
        let l = loaded(
            "sequences:
  s:
    - xslt: { stylesheet: t.xsl }
",
            &dir,
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        for (sent, want) in [
            ("text/xml; charset=ISO-8859-1", "text/xml; charset=UTF-8"),
            ("text/xml; charset=utf-8", "text/xml; charset=utf-8"),
            ("text/xml", "text/xml; charset=UTF-8"),
            (
                "application/soap+xml; charset=iso-8859-1; action=\"urn:a\"",
                "application/soap+xml; action=\"urn:a\"; charset=UTF-8",
            ),
        ] {
            let mut ex = exchange(&[("content-type", sent)], "<a>h\u{e9}</a>".as_bytes());
            assert!(run_steps(&steps, &mut ex).is_ok());
            let got = ex
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok());
            assert_eq!(got, Some(want), "sent {sent}");
            let out = String::from_utf8(body_of(&mut ex)).unwrap_or_else(|e| panic!("{e}"));
            assert!(out.contains("h\u{e9}"), "{out}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_cached_document_is_consumed_and_not_left_behind() {
        let dir = dir_with_sheet();
        let l = loaded(
            "sequences:
  s:
    - route:
        - when: { xpath: 'count(/a) = 1' }
          then: [ { xslt: { stylesheet: t.xsl } } ]
",
            &dir,
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[], b"<a>hi</a>");
        assert!(run_steps(&steps, &mut ex).is_ok());
        assert!(ex.take_view::<ParsedXml>().is_none(), "stale document kept");
        let out = String::from_utf8_lossy(&body_of(&mut ex)).into_owned();
        assert!(out.ends_with("<b n=\"none\">hi</b>\n"), "{out}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_fast_path_gives_the_body_and_headers_libxslt_gives() {
        let dir = dir_with_sheet();
        std::fs::write(
            dir.join("f.xsl"),
            r#"<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="xml" encoding="UTF-8"/>
  <xsl:template match="a"><b><xsl:value-of select="."/></b></xsl:template>
</xsl:stylesheet>"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // A parameter keeps the same stylesheet on libxslt.
        let l = loaded(
            "sequences:
  s:
    - xslt: { stylesheet: f.xsl }
  t:
    - xslt: { stylesheet: f.xsl, params: { unused: x } }
",
            &dir,
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut l2 = l;
        let t = l2.config.sequences.remove("t");
        l2.config
            .sequences
            .insert("s".to_owned(), t.unwrap_or_default());
        let slow = build(&l2).unwrap_or_else(|e| panic!("{e:?}"));
        for sent in [
            "text/xml; charset=ISO-8859-1",
            "application/soap+xml; action=\"urn:a\"",
            "application/json",
        ] {
            let body = "<a>h\u{e9} &amp; &lt;</a>".as_bytes();
            let mut fast_ex = exchange(&[("content-type", sent)], body);
            let mut slow_ex = exchange(&[("content-type", sent)], body);
            assert!(run_steps(&steps, &mut fast_ex).is_ok());
            assert!(run_steps(&slow, &mut slow_ex).is_ok());
            assert_eq!(
                fast_ex.headers().get("content-type"),
                slow_ex.headers().get("content-type"),
                "{sent}"
            );
            assert_eq!(body_of(&mut fast_ex), body_of(&mut slow_ex), "{sent}");
        }
        let counters = |steps: &[super::super::BuiltStep]| match &steps[0].step {
            super::super::Step::Xslt(x) => (
                x.counters.fast.load(super::Relaxed),
                x.counters.libxslt.load(super::Relaxed),
            ),
            _ => panic!("not an xslt step"),
        };
        assert_eq!(counters(&steps), (3, 0));
        assert_eq!(counters(&slow), (0, 3));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_missing_stylesheet_is_a_build_error_at_its_key() {
        let l = loaded(
            "sequences:
  s:
    - xslt: { stylesheet: nope.xsl }
",
            &std::env::temp_dir(),
        );
        let errors = build(&l).err().unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("t.yaml:5: sequences.s[0].xslt.stylesheet: "),
            "{errors:?}"
        );
    }

    #[test]
    fn malformed_input_is_the_clients_error() {
        let dir = dir_with_sheet();
        let l = loaded(
            "sequences:
  s:
    - xslt: { stylesheet: t.xsl }
",
            &dir,
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let e = run_steps(&steps, &mut exchange(&[], b"<a>")).err();
        assert!(e.is_some_and(|e| e.blame == busbar_core::Blame::Client));
        let _ = std::fs::remove_dir_all(dir);
    }
}
