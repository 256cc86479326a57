//! The text log's writer: one event, one line. Text a log line carries from outside (an
//! `xsl:message`, a back end's error, a path) may hold line breaks and control characters;
//! written as they are, they would split the event or forge a line of its own. The formatter
//! hands each event over in one write, so every control character in it but its final line
//! break is written escaped (`\n`, `\r`, `\u{1b}`), except the colour codes of a terminal.

use std::io::{self, Write};

/// Makes [`LineWriter`]s over standard error.
pub struct OneLine {
    /// Colour codes are written: ESC starts one, so it is kept.
    pub ansi: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for OneLine {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter { ansi: self.ansi }
    }
}

/// Writes each event to standard error as one line.
pub struct LineWriter {
    ansi: bool,
}

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len() + 16);
        escape(buf, self.ansi, &mut out);
        io::stderr().lock().write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// `line` with every control character escaped but tabs, a final line break, and (with `ansi`)
/// the escape character that starts a colour code.
fn escape(line: &[u8], ansi: bool, out: &mut Vec<u8>) {
    let (body, end) = match line.strip_suffix(b"\n") {
        Some(body) => (body, &b"\n"[..]),
        None => (line, &b""[..]),
    };
    for &b in body {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.push(b),
            0x1b if ansi => out.push(b),
            0..=0x1f | 0x7f => {
                let _ = write!(out, "\\u{{{b:x}}}");
            }
            _ => out.push(b),
        }
    }
    out.extend_from_slice(end);
}

#[cfg(test)]
mod tests {
    use super::escape;

    fn escaped(line: &str, ansi: bool) -> String {
        let mut out = Vec::new();
        escape(line.as_bytes(), ansi, &mut out);
        String::from_utf8(out).expect("UTF-8 in, UTF-8 out")
    }

    #[test]
    fn a_line_break_inside_an_event_cannot_start_a_line() {
        assert_eq!(
            escaped("INFO xsl:message: hi\n2026 ERROR forged\r\n", false),
            "INFO xsl:message: hi\\n2026 ERROR forged\\r\n"
        );
        assert_eq!(
            escaped("a\u{7}b\u{1b}[2Jc\td é\n", false),
            "a\\u{7}b\\u{1b}[2Jc\td é\n"
        );
        assert_eq!(
            escaped("\u{1b}[32mINFO\u{1b}[0m x\ny\n", true),
            "\u{1b}[32mINFO\u{1b}[0m x\\ny\n"
        );
        assert_eq!(escaped("no end", false), "no end");
    }
}
