//! A small JSON parser that keeps the byte offset of every value.
//!
//! serde_json's `Value` forgets where a value came from; config errors must name the line and
//! column of the offending value, duplicate keys must be rejected (serde_json keeps the last
//! one silently) and hostile input (deep nesting, invalid UTF-8, huge numbers) must produce a
//! clear error instead of a stack overflow. Object members keep their order.

use std::collections::HashSet;
use std::fmt;

/// Deepest nesting accepted. Real configs nest about 8 levels; this bounds recursion.
pub const MAX_DEPTH: usize = 128;

#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub kind: Kind,
    /// Byte offset of the first character of the value in the input.
    pub pos: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Value>),
    Object(Vec<Member>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub key: String,
    pub key_pos: usize,
    pub value: Value,
}

/// A JSON number: integral literals that fit in i64 are kept exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i64),
    /// A literal with a fraction or exponent, or an integer too large for i64.
    Float(f64),
}

impl Kind {
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool(_) => "boolean",
            Kind::Number(_) => "number",
            Kind::String(_) => "string",
            Kind::Array(_) => "array",
            Kind::Object(_) => "object",
        }
    }
}

impl Value {
    pub fn get(&self, key: &str) -> Option<&Value> {
        match &self.kind {
            Kind::Object(members) => members.iter().find(|m| m.key == key).map(|m| &m.value),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub pos: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for ParseError {}

/// Objects with fewer members than this are checked for duplicate keys by scanning.
const SCAN_KEYS: usize = 16;

/// 1-based line and column (in characters) of each byte offset in `positions`, in one pass
/// over `text` (after sorting the offsets): n log n for many diagnostics, where calling
/// [`line_col`] for each would scan the text again every time.
pub fn line_cols(text: &[u8], positions: &[usize]) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..positions.len()).collect();
    order.sort_by_key(|&i| positions[i]);
    crate::work::add(positions.len());
    let mut out = vec![(1, 1); positions.len()];
    let (mut at, mut line, mut col) = (0usize, 1usize, 1usize);
    for i in order {
        let pos = positions[i].min(text.len());
        crate::work::add(pos - at + 1);
        for &b in &text[at..pos] {
            if b == b'\n' {
                line += 1;
                col = 1;
            } else if (b & 0xC0) != 0x80 {
                // Count characters, not bytes: continuation bytes do not start a character.
                col += 1;
            }
        }
        at = pos;
        out[i] = (line, col);
    }
    out
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &[u8], pos: usize) -> (usize, usize) {
    let pos = pos.min(text.len());
    crate::work::add(pos);
    let before = &text[..pos];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    // Count characters, not bytes: continuation bytes do not start a character.
    let col = before[line_start..]
        .iter()
        .filter(|&&b| (b & 0xC0) != 0x80)
        .count()
        + 1;
    (line, col)
}

/// Parses a complete JSON document.
pub fn parse(input: &[u8]) -> Result<Value, ParseError> {
    let text = match std::str::from_utf8(input) {
        Ok(t) => t,
        Err(e) => {
            return Err(ParseError {
                pos: e.valid_up_to(),
                message: "invalid UTF-8 in config".into(),
            });
        }
    };
    let mut p = Parser {
        s: input,
        text,
        i: 0,
    };
    // A UTF-8 byte order mark is tolerated.
    if p.s.starts_with(&[0xEF, 0xBB, 0xBF]) {
        p.i = 3;
    }
    p.ws();
    if p.i >= p.s.len() {
        return Err(p.err("empty document: expected a JSON object"));
    }
    let v = p.value(0)?;
    p.ws();
    if p.i < p.s.len() {
        return Err(p.err("unexpected data after the end of the JSON document"));
    }
    Ok(v)
}

/// Length of the longest prefix of whole 8-byte words holding no `"`, `\` or control byte.
fn plain_prefix(s: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut n = 0;
    for chunk in s.chunks_exact(8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let special = has_zero(x ^ (ONES * b'"' as u64))
            | has_zero(x ^ (ONES * b'\\' as u64))
            // Some byte < 0x20 (exact for bytes below 0x80; bytes >= 0x80 never match).
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
        if special != 0 {
            break;
        }
        n += 8;
    }
    n
}

struct Parser<'a> {
    s: &'a [u8],
    /// The same input as text (checked as UTF-8 once, up front).
    text: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn err(&self, msg: impl Into<String>) -> ParseError {
        ParseError {
            pos: self.i,
            message: msg.into(),
        }
    }

    fn ws(&mut self) {
        while let Some(&b) = self.s.get(self.i) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn eof_err(&self, what: &str) -> ParseError {
        self.err(format!(
            "unexpected end of input (truncated JSON?) while reading {what}"
        ))
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.err(format!("nesting deeper than {MAX_DEPTH} levels")));
        }
        crate::work::add(1);
        let pos = self.i;
        let kind = match self.s.get(self.i) {
            None => return Err(self.eof_err("a value")),
            Some(b'{') => self.object(depth)?,
            Some(b'[') => self.array(depth)?,
            Some(b'"') => Kind::String(self.string()?),
            Some(b't') => self.literal("true", Kind::Bool(true))?,
            Some(b'f') => self.literal("false", Kind::Bool(false))?,
            Some(b'n') => self.literal("null", Kind::Null)?,
            Some(b'-' | b'0'..=b'9') => Kind::Number(self.number()?),
            Some(&c) => return Err(self.err(format!("unexpected character {:?}", c as char))),
        };
        Ok(Value { kind, pos })
    }

    fn literal(&mut self, word: &str, kind: Kind) -> Result<Kind, ParseError> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(kind)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Kind, ParseError> {
        self.i += 1;
        let mut members: Vec<Member> = Vec::new();
        // Keys seen, once the object is past a few members (hostile input has 100,000 keys).
        let mut keys: Option<HashSet<String>> = None;
        self.ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Kind::Object(members));
        }
        loop {
            self.ws();
            match self.s.get(self.i) {
                Some(b'"') => {}
                None => return Err(self.eof_err("an object")),
                _ => return Err(self.err("expected a string key")),
            }
            let key_pos = self.i;
            let key = self.string()?;
            // Configs have few keys per object: a linear scan beats hashing up to a few, then
            // a set keeps the check linear in the object's size.
            let duplicate = if members.len() < SCAN_KEYS {
                crate::work::add(members.len());
                members.iter().any(|m| m.key == key)
            } else {
                crate::work::add(1);
                let set =
                    keys.get_or_insert_with(|| members.iter().map(|m| m.key.clone()).collect());
                !set.insert(key.clone())
            };
            if duplicate {
                return Err(ParseError {
                    pos: key_pos,
                    message: format!(
                        "duplicate key {key:?}: keep one (Ignition would silently use the last)"
                    ),
                });
            }
            self.ws();
            match self.s.get(self.i) {
                Some(b':') => self.i += 1,
                None => return Err(self.eof_err("an object")),
                _ => return Err(self.err("expected ':' after key")),
            }
            self.ws();
            let value = self.value(depth + 1)?;
            members.push(Member {
                key,
                key_pos,
                value,
            });
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Kind::Object(members));
                }
                None => return Err(self.eof_err("an object")),
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Kind, ParseError> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Kind::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Kind::Array(items));
                }
                None => return Err(self.eof_err("an array")),
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.eof_err("a \\u escape"))?;
        let txt = std::str::from_utf8(h).map_err(|_| self.err("invalid \\u escape"))?;
        let v = u32::from_str_radix(txt, 16).map_err(|_| self.err("invalid \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.i += 1; // opening quote
        let mut out: Vec<u8> = Vec::new();
        loop {
            let start = self.i;
            // Fast path: skip 8 plain bytes at a time (contents are often megabytes of base64),
            // then copy the whole run at once.
            self.i += plain_prefix(&self.s[self.i..]);
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            if out.is_empty() && self.s.get(self.i) == Some(&b'"') {
                // A string without escapes (the common case, and every base64 payload): one
                // copy of already-validated text, cut at ASCII quotes (char boundaries).
                let t = self.text.get(start..self.i).map(str::to_owned);
                self.i += 1;
                return t.ok_or_else(|| self.err("invalid UTF-8 in string"));
            }
            out.extend_from_slice(&self.s[start..self.i]);
            match self.s.get(self.i) {
                None => return Err(self.eof_err("a string")),
                Some(b'"') => {
                    self.i += 1;
                    // Input was checked as UTF-8 and escapes produce valid UTF-8.
                    return String::from_utf8(out).map_err(|_| self.err("invalid UTF-8 in string"));
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = *self.s.get(self.i).ok_or_else(|| self.eof_err("a string"))?;
                    self.i += 1;
                    let ch = match c {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if self.s.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return Err(self.err("unpaired surrogate in \\u escape"));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("invalid surrogate pair in \\u escape"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code)
                                .ok_or_else(|| self.err("invalid code point in \\u escape"))?
                        }
                        _ => return Err(self.err("invalid escape sequence")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }

    fn number(&mut self) -> Result<Number, ParseError> {
        let start = self.i;
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        let digits = |p: &mut Self| {
            let s = p.i;
            while matches!(p.s.get(p.i), Some(b'0'..=b'9')) {
                p.i += 1;
            }
            p.i - s
        };
        let int_start = self.i;
        let n = digits(self);
        if n == 0 {
            return Err(self.err("invalid number"));
        }
        if n > 1 && self.s[int_start] == b'0' {
            return Err(ParseError {
                pos: int_start,
                message: "invalid number: leading zero".into(),
            });
        }
        let mut float = false;
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            float = true;
            if digits(self) == 0 {
                return Err(self.err("invalid number: digits expected after '.'"));
            }
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            float = true;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return Err(self.err("invalid number: digits expected in exponent"));
            }
        }
        // The slice holds only ASCII digits and signs.
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        if !float && let Ok(v) = text.parse::<i64>() {
            return Ok(Number::Int(v));
        }
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Number::Float(v)),
            _ => Err(ParseError {
                pos: start,
                message: "number out of range".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_keeps_positions() {
        let v = parse(br#"{"a": [1, "x"], "b": {"c": null}}"#).unwrap();
        let a = v.get("a").unwrap();
        assert_eq!(a.pos, 6);
        match &a.kind {
            Kind::Array(items) => {
                assert_eq!(items[0].kind, Kind::Number(Number::Int(1)));
                assert_eq!(items[1].pos, 10);
            }
            _ => panic!("not an array"),
        }
    }

    #[test]
    fn rejects_bad_input() {
        let cases: &[(&[u8], &str)] = &[
            (b"{\"a\":1,\"a\":2}", "duplicate key"),
            (b"{\"a\":", "unexpected end"),
            (b"{\"a\": \"\xff\"}", "invalid UTF-8"),
            (b"", "empty document"),
            (b"{} x", "after the end"),
            (b"{\"a\": 01}", "leading zero"),
            (b"{\"a\": 1e999}", "out of range"),
            (b"{\"a\": \"\\ud800\"}", "surrogate"),
            (b"{\"a\": tru}", "invalid literal"),
        ];
        for (input, want) in cases {
            let e = parse(input).unwrap_err();
            assert!(e.message.contains(want), "{input:?}: {e}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000);
        let e = parse(deep.as_bytes()).unwrap_err();
        assert!(e.message.contains("nesting"), "{e}");
    }

    #[test]
    fn big_integers_become_floats() {
        let v = parse(b"[99999999999999999999]").unwrap();
        match &v.kind {
            Kind::Array(items) => assert!(matches!(items[0].kind, Kind::Number(Number::Float(_)))),
            _ => panic!(),
        }
    }

    #[test]
    fn long_strings_with_specials_anywhere() {
        for pos in 0..40 {
            for special in ["\\n", "\\\"", "\\u00e9", "\u{e9}", "\u{7f}", "\u{80}"] {
                let mut body = "a".repeat(40);
                body.insert_str(pos, special);
                let text = format!("[\"{body}\"]");
                let v = parse(text.as_bytes()).unwrap();
                let Kind::Array(items) = &v.kind else {
                    panic!()
                };
                let Kind::String(s) = &items[0].kind else {
                    panic!()
                };
                let want: String = serde_json::from_str::<Vec<String>>(&text)
                    .unwrap()
                    .remove(0);
                assert_eq!(s, &want, "{text}");
            }
            // A raw control character is an error wherever it is.
            let mut body = "a".repeat(40);
            body.insert(pos, '\u{1}');
            assert!(parse(format!("[\"{body}\"]").as_bytes()).is_err());
        }
    }

    #[test]
    fn line_and_column() {
        let text = b"{\n  \"a\": \"\xc3\xa9\", \"b\": 1\n}";
        let v = parse(text).unwrap();
        let b = v.get("b").unwrap();
        assert_eq!(line_col(text, b.pos), (2, 18));
        let many = [b.pos, 0, 7, text.len(), 3, b.pos];
        let want: Vec<_> = many.iter().map(|&p| line_col(text, p)).collect();
        assert_eq!(line_cols(text, &many), want);
    }
}
