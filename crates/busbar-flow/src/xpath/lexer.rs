//! Tokens of XPath 1.0 (§3.7), with names already told apart from operators.
//!
//! Whether `*` multiplies and whether `div`, `mod`, `and`, `or` are operators depends on the
//! token before: after nothing, `@`, `::`, `(`, `[`, `,` or an operator they are names;
//! anywhere else they are operators. A name followed by `(` is a function name or node type,
//! followed by `::` an axis name.

use super::{is_xml_space, XPathError};

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    LParen,
    RParen,
    LBracket,
    RBracket,
    Dot,
    DotDot,
    At,
    Comma,
    ColonColon,
    Slash,
    DoubleSlash,
    Pipe,
    Plus,
    Minus,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Mod,
    Div,
    Multiply,
    /// The name test `*`.
    Star,
    /// The name test `prefix:*`.
    NsStar(String),
    /// A name test (prefix, local); prefix empty when none was written.
    QName(String, String),
    /// `node`, `text`, `comment` or `processing-instruction` before `(`.
    NodeType(String),
    /// A function name (prefix, local) before `(`.
    Function(String, String),
    /// An axis name before `::`.
    Axis(String),
    Literal(String),
    Number(f64),
    /// A variable reference: the name as written, prefix included.
    Var(String),
}

impl Tok {
    /// Whether a `*` or a name after this token is a name test (not an operator).
    fn precedes_name(&self) -> bool {
        use Tok::*;
        matches!(
            self,
            At | ColonColon
                | LParen
                | LBracket
                | Comma
                | Slash
                | DoubleSlash
                | Pipe
                | Plus
                | Minus
                | Eq
                | Ne
                | Lt
                | Le
                | Gt
                | Ge
                | And
                | Or
                | Mod
                | Div
                | Multiply
        )
    }

    /// How the token reads in an error message.
    pub(super) fn describe(&self) -> String {
        use Tok::*;
        let s = match self {
            LParen => "(",
            RParen => ")",
            LBracket => "[",
            RBracket => "]",
            Dot => ".",
            DotDot => "..",
            At => "@",
            Comma => ",",
            ColonColon => "::",
            Slash => "/",
            DoubleSlash => "//",
            Pipe => "|",
            Plus => "+",
            Minus => "-",
            Eq => "=",
            Ne => "!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            And => "and",
            Or => "or",
            Mod => "mod",
            Div => "div",
            Multiply | Star => "*",
            NsStar(p) => return format!("'{p}:*'"),
            QName(p, l) | Function(p, l) if !p.is_empty() => return format!("'{p}:{l}'"),
            QName(_, l) | Function(_, l) | NodeType(l) | Axis(l) => return format!("'{l}'"),
            Literal(l) => return format!("literal \"{l}\""),
            Number(n) => return format!("number {}", super::format_number(*n)),
            Var(v) => return format!("'${v}'"),
        };
        format!("'{s}'")
    }
}

/// A token and the byte offset it starts at.
#[derive(Clone, Debug)]
pub(super) struct Token {
    pub tok: Tok,
    pub at: usize,
}

const NODE_TYPES: [&str; 4] = ["node", "text", "comment", "processing-instruction"];

fn is_name_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | '\u{b7}')
}

struct Lexer<'a> {
    text: &'a str,
    chars: Vec<(usize, char)>,
    i: usize,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.i + ahead).map(|c| c.1)
    }

    fn offset(&self) -> usize {
        self.chars.get(self.i).map_or(self.text.len(), |c| c.0)
    }

    fn err(&self, at: usize, message: impl Into<String>) -> XPathError {
        XPathError::syntax(self.text, at, message)
    }

    fn ncname(&mut self) -> String {
        let start = self.offset();
        while self.peek(0).is_some_and(is_name_char) {
            self.i += 1;
        }
        self.text[start..self.offset()].to_string()
    }

    /// `prefix:local` or `local` right at the cursor (no whitespace inside).
    fn qname(&mut self) -> Option<(String, String)> {
        if !self.peek(0).is_some_and(is_name_start) {
            return None;
        }
        let first = self.ncname();
        if self.peek(0) == Some(':') && self.peek(1).is_some_and(is_name_start) {
            self.i += 1;
            let local = self.ncname();
            return Some((first, local));
        }
        Some((String::new(), first))
    }

    fn number(&mut self) -> Tok {
        let start = self.offset();
        while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        if self.peek(0) == Some('.') {
            self.i += 1;
            while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
        }
        // Only digits and one '.', with at least one digit: Rust parses every such text.
        Tok::Number(self.text[start..self.offset()].parse().unwrap_or(f64::NAN))
    }

    /// The next non-whitespace character from `ahead` on, and the one after it.
    fn next_significant(&self) -> (Option<char>, Option<char>) {
        let mut k = 0;
        while self.peek(k).is_some_and(is_xml_space) {
            k += 1;
        }
        (self.peek(k), self.peek(k + 1))
    }

    fn token(&mut self, name_position: bool) -> Result<Tok, XPathError> {
        let at = self.offset();
        let c = self.peek(0).unwrap_or(' ');
        let two = |l: &mut Self, t: Tok| {
            l.i += 2;
            Ok(t)
        };
        let one = |l: &mut Self, t: Tok| {
            l.i += 1;
            Ok(t)
        };
        match c {
            '(' => one(self, Tok::LParen),
            ')' => one(self, Tok::RParen),
            '[' => one(self, Tok::LBracket),
            ']' => one(self, Tok::RBracket),
            '@' => one(self, Tok::At),
            ',' => one(self, Tok::Comma),
            '|' => one(self, Tok::Pipe),
            '+' => one(self, Tok::Plus),
            '-' => one(self, Tok::Minus),
            '=' => one(self, Tok::Eq),
            '.' if self.peek(1) == Some('.') => two(self, Tok::DotDot),
            '.' if self.peek(1).is_some_and(|c| c.is_ascii_digit()) => Ok(self.number()),
            '.' => one(self, Tok::Dot),
            '/' if self.peek(1) == Some('/') => two(self, Tok::DoubleSlash),
            '/' => one(self, Tok::Slash),
            ':' if self.peek(1) == Some(':') => two(self, Tok::ColonColon),
            '!' if self.peek(1) == Some('=') => two(self, Tok::Ne),
            '<' if self.peek(1) == Some('=') => two(self, Tok::Le),
            '<' => one(self, Tok::Lt),
            '>' if self.peek(1) == Some('=') => two(self, Tok::Ge),
            '>' => one(self, Tok::Gt),
            '*' if name_position => one(self, Tok::Star),
            '*' => one(self, Tok::Multiply),
            '"' | '\'' => {
                self.i += 1;
                let start = self.offset();
                while self.peek(0).is_some_and(|q| q != c) {
                    self.i += 1;
                }
                if self.peek(0).is_none() {
                    return Err(self.err(at, "unterminated string literal"));
                }
                let lit = self.text[start..self.offset()].to_string();
                self.i += 1;
                Ok(Tok::Literal(lit))
            }
            '$' => {
                self.i += 1;
                match self.qname() {
                    Some((p, l)) if p.is_empty() => Ok(Tok::Var(l)),
                    Some((p, l)) => Ok(Tok::Var(format!("{p}:{l}"))),
                    None => Err(self.err(at, "expected a variable name after '$'")),
                }
            }
            c if c.is_ascii_digit() => Ok(self.number()),
            c if is_name_start(c) => self.name(at, name_position),
            c => Err(self.err(at, format!("unexpected character '{c}'"))),
        }
    }

    fn name(&mut self, at: usize, name_position: bool) -> Result<Tok, XPathError> {
        let first = self.ncname();
        if !name_position {
            return match first.as_str() {
                "and" => Ok(Tok::And),
                "or" => Ok(Tok::Or),
                "mod" => Ok(Tok::Mod),
                "div" => Ok(Tok::Div),
                _ => Err(self.err(at, format!("expected an operator, found '{first}'"))),
            };
        }
        let (prefix, local) = if self.peek(0) == Some(':') && self.peek(1) != Some(':') {
            self.i += 1;
            if self.peek(0) == Some('*') {
                self.i += 1;
                return Ok(Tok::NsStar(first));
            }
            if !self.peek(0).is_some_and(is_name_start) {
                return Err(self.err(self.offset(), "expected a local name or '*' after ':'"));
            }
            (first, self.ncname())
        } else {
            (String::new(), first)
        };
        Ok(match self.next_significant() {
            (Some('('), _) if prefix.is_empty() && NODE_TYPES.contains(&local.as_str()) => {
                Tok::NodeType(local)
            }
            (Some('('), _) => Tok::Function(prefix, local),
            (Some(':'), Some(':')) if prefix.is_empty() => Tok::Axis(local),
            _ => Tok::QName(prefix, local),
        })
    }
}

/// Splits `text` into tokens.
pub(super) fn lex(text: &str) -> Result<Vec<Token>, XPathError> {
    let mut lx = Lexer {
        text,
        chars: text.char_indices().collect(),
        i: 0,
    };
    let mut out: Vec<Token> = Vec::new();
    while let Some(c) = lx.peek(0) {
        if is_xml_space(c) {
            lx.i += 1;
            continue;
        }
        let name_position = out.last().is_none_or(|t| t.tok.precedes_name());
        let at = lx.offset();
        let tok = lx.token(name_position)?;
        out.push(Token { tok, at });
    }
    Ok(out)
}
