//! YAML text to a node tree with positions, on top of `saphyr-parser`'s event stream.
//!
//! Hostile input is bounded: the text size (checked by the caller), the nesting depth, the
//! number of nodes written in the document, and the nodes and scalar bytes that aliases add
//! (each alias counts as the whole subtree it stands for). Each limit has a name that
//! appears in its error.
//!
//! Sequences and mappings are shared (`Rc`), not copied: an anchor keeps a reference to its
//! node and an alias is another reference to it, so the tree costs memory proportional to
//! the text whatever the anchors (a chain of 60 nested anchors once held 60 copies of the
//! innermost subtree). What an alias expands to is still bounded, because the translation
//! walks it.

use std::collections::HashMap;
use std::rc::Rc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// Where a node starts: 1-based line and column, as Butane (go-yaml) reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    Quoted,
    Block,
}

#[derive(Debug, Clone)]
pub enum Kind {
    Scalar {
        value: String,
        style: Style,
        tag: Option<String>,
    },
    Seq(Rc<Vec<Node>>),
    Map(Rc<Vec<(Node, Node)>>),
}

#[derive(Debug, Clone)]
pub struct Node {
    pub kind: Kind,
    pub pos: Pos,
}

/// Bounds for hostile YAML.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `max-depth`: sequences and mappings nested deeper than this are refused.
    pub max_depth: usize,
    /// `max-nodes`: nodes written in the document (scalars, sequences, mappings; an alias
    /// is not one).
    pub max_nodes: usize,
    /// `max-alias-nodes`: nodes that aliases add, each alias counting every node of the
    /// subtree it stands for (a billion laughs).
    pub max_alias_nodes: usize,
    /// `max-alias-bytes`: scalar bytes that aliases add, counted the same way.
    pub max_alias_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 64,
            max_nodes: 2_000_000,
            max_alias_nodes: 1_000_000,
            max_alias_bytes: 64 << 20,
        }
    }
}

#[derive(Debug, Clone)]
pub struct YamlError {
    pub pos: Pos,
    pub message: String,
    /// The document exceeded one of the [`Limits`] (it may well be YAML, just too big).
    pub limit: bool,
}

impl Node {
    pub fn null(pos: Pos) -> Node {
        Node {
            kind: Kind::Scalar {
                value: String::new(),
                style: Style::Plain,
                tag: None,
            },
            pos,
        }
    }

    /// go-yaml's null: an untagged plain scalar `~`, `null`, `Null`, `NULL` or empty.
    pub fn is_null(&self) -> bool {
        match &self.kind {
            Kind::Scalar { value, style, tag } => {
                (*style == Style::Plain && tag.is_none() || tag.as_deref() == Some("!!null"))
                    && matches!(value.as_str(), "" | "~" | "null" | "Null" | "NULL")
            }
            _ => false,
        }
    }

    pub fn scalar(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The value of `key` in a mapping (the last one: duplicates are refused earlier).
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            Kind::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.scalar() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            Kind::Scalar { .. } if self.is_null() => "null",
            Kind::Scalar { .. } => "scalar",
            Kind::Seq(_) => "sequence",
            Kind::Map(_) => "mapping",
        }
    }
}

fn pos_of(span: &Span) -> Pos {
    Pos {
        line: span.start.line(),
        col: span.start.col() + 1,
    }
}

/// What a node stands for once its aliases are expanded: nodes and scalar bytes.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    nodes: usize,
    bytes: usize,
}

impl Size {
    fn add(&mut self, o: Size) {
        self.nodes = self.nodes.saturating_add(o.nodes);
        self.bytes = self.bytes.saturating_add(o.bytes);
    }
}

enum Frame {
    Seq(Vec<Node>, Pos, usize, Size),
    Map(Vec<(Node, Node)>, Option<Node>, Pos, usize, Size),
}

/// Parses the first document of `text` as go-yaml reads it. An empty document is a null node.
///
/// Where saphyr is stricter than libyaml, the text is adjusted and parsed again (at most 64
/// times, so parsing stays linear): a directive after content ends the first document (the
/// text is cut before it), and a quoted scalar's continuation line may be indented less than
/// its block (leading white space of such a line is folded away, so the line is indented
/// further without changing the value). An escape libyaml does not know (`\/`) is refused.
pub fn parse(text: &str, limits: &Limits) -> Result<Node, YamlError> {
    let mut owned: Option<String> = None;
    // Per quoted scalar (the line it starts on), how many continuation lines were indented.
    let mut bumped: HashMap<usize, usize> = HashMap::new();
    for _ in 0..64 {
        let t = owned.as_deref().unwrap_or(text);
        let mut quoted = Vec::new();
        match parse_once(t, limits, &mut quoted) {
            Ok(n) => {
                check_escapes(t, &quoted)?;
                return Ok(n);
            }
            Err(e)
                if e.message
                    .contains("missing explicit document end marker before directive") =>
            {
                let start = line_start(t, e.pos.line);
                // libyaml ends the document there; content before the next `---` is an error.
                let next = t[start..]
                    .lines()
                    .map(str::trim_end)
                    .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('%'));
                if let Some(l) = next
                    && !l.starts_with("---")
                {
                    return Err(YamlError {
                        pos: e.pos,
                        message: "mapping values are not allowed in this context (content after a directive needs ---)".into(),
                        limit: false,
                    });
                }
                owned = Some(t[..start].to_string());
            }
            Err(e) if e.message.contains("invalid indentation in quoted scalar") => {
                // The error names the scalar's first line: indent its next continuation.
                let n = bumped.entry(e.pos.line).or_insert(0);
                *n += 1;
                let start = line_start(t, e.pos.line + *n);
                let mut s = String::with_capacity(t.len() + 256);
                s.push_str(&t[..start]);
                s.push_str(&" ".repeat(128));
                s.push_str(&t[start..]);
                owned = Some(s);
            }
            Err(e) => return Err(e),
        }
    }
    let mut quoted = Vec::new();
    parse_once(owned.as_deref().unwrap_or(text), limits, &mut quoted)
}

/// The byte offset where 1-based `line` starts.
fn line_start(t: &str, line: usize) -> usize {
    if line <= 1 {
        return 0;
    }
    t.match_indices('\n')
        .nth(line - 2)
        .map(|(i, _)| i + 1)
        .unwrap_or(t.len())
}

/// libyaml's double-quoted escapes: `\/` (YAML 1.2, which saphyr takes) is "found unknown
/// escape character". `quoted` holds the char ranges of the double-quoted scalars.
fn check_escapes(t: &str, quoted: &[(usize, usize)]) -> Result<(), YamlError> {
    if quoted.is_empty() || !t.contains("\\/") {
        return Ok(());
    }
    let mut q = quoted.iter().peekable();
    let mut run = 0usize; // backslashes just before, within a quoted scalar
    let (mut line, mut col) = (1usize, 0usize);
    for (ci, c) in t.chars().enumerate() {
        while q.peek().is_some_and(|(_, end)| *end <= ci) {
            q.next();
            run = 0;
        }
        let inside = q.peek().is_some_and(|(start, _)| *start <= ci);
        if inside {
            if c == '/' && run % 2 == 1 {
                return Err(YamlError {
                    pos: Pos { line, col },
                    message: format!("line {line}: found unknown escape character"),
                    limit: false,
                });
            }
            run = if c == '\\' { run + 1 } else { 0 };
        }
        if c == '\n' {
            line += 1;
            col = 0;
        } else {
            col += 1;
        }
    }
    Ok(())
}

fn parse_once(
    text: &str,
    limits: &Limits,
    quoted: &mut Vec<(usize, usize)>,
) -> Result<Node, YamlError> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    // Each anchor's node (shared, not copied) and the size it expands to.
    let mut anchors: HashMap<usize, (Node, Size)> = HashMap::new();
    let mut nodes = 0usize;
    let mut alias = Size::default();
    let mut root: Option<Node> = None;
    // Where a root flow mapping (`{...}`) ends (char index): go-yaml reads nothing after it
    // but the next token or two its scanner looks at.
    let mut flow_root_end: Option<usize> = None;
    let mut root_is_flow = false;
    let mut started = false;
    let total_chars = text.chars().count();
    let ends_with_break = text.ends_with('\n') || text.ends_with('\r');
    loop {
        spec::work::add(1);
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Err(_)) if flow_root_end.is_some() => {
                let end = flow_root_end.unwrap_or(0);
                let at = text.char_indices().nth(end).map_or(text.len(), |(i, _)| i);
                let line = text[..at].matches('\n').count() + 1;
                match after_flow_root(&text[at..], false) {
                    Ok(()) => break,
                    Err((msg, dl)) => {
                        return Err(YamlError {
                            pos: Pos {
                                line: line + dl,
                                col: 1,
                            },
                            message: format!("line {}: {msg}", line + dl),
                            limit: false,
                        });
                    }
                }
            }
            Some(Err(e))
                if (root_is_flow && stack.len() <= 1
                    || stack.is_empty()
                        && root.is_none()
                        && text.trim_start().starts_with('{'))
                    && !e.info().contains("recursion limit") =>
            {
                // saphyr may scan the token after the root's `}` before it ends (or even
                // starts) the mapping, as a simple key needs: if
                // the text up to that token is a whole flow mapping, go-yaml stops there.
                let cut = text
                    .char_indices()
                    .nth(e.marker().index())
                    .map_or(text.len(), |(i, _)| i);
                if cut < text.len()
                    && let Ok(n) = parse_once(&text[..cut], limits, &mut Vec::new())
                    && matches!(n.kind, Kind::Map(_))
                {
                    let line = text[..cut].matches('\n').count() + 1;
                    let line_start = cut == 0 || text.as_bytes()[cut - 1] == b'\n';
                    match after_flow_root(&text[cut..], line_start) {
                        Ok(()) => return Ok(n),
                        Err((msg, dl)) => {
                            return Err(YamlError {
                                pos: Pos {
                                    line: line + dl,
                                    col: 1,
                                },
                                message: format!("line {}: {msg}", line + dl),
                                limit: false,
                            });
                        }
                    }
                }
                return Err(YamlError {
                    pos: Pos {
                        line: e.marker().line(),
                        col: e.marker().col() + 1,
                    },
                    message: e.info().to_string(),
                    limit: false,
                });
            }
            Some(Err(e)) => {
                let (message, limit) = if e.info().contains("recursion limit") {
                    // The scanner's own bound on nesting, reached before max-depth.
                    (
                        format!(
                            "document nested deeper than {} levels (limit max-depth; the \
                             parser stopped at its own recursion limit)",
                            limits.max_depth
                        ),
                        true,
                    )
                } else {
                    (e.info().to_string(), false)
                };
                return Err(YamlError {
                    pos: Pos {
                        line: e.marker().line(),
                        col: e.marker().col() + 1,
                    },
                    message,
                    limit,
                });
            }
            Some(Ok(ev)) => ev,
        };
        let pos = pos_of(&span);
        let done: Option<(Node, usize, Size)> = match event {
            Event::StreamStart | Event::Nothing => None,
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                if started {
                    // Only the first document is read (as go-yaml's Unmarshal does).
                    break;
                }
                started = true;
                None
            }
            Event::DocumentEnd => break,
            Event::Alias(id) => {
                let Some((n, size)) = anchors.get(&id) else {
                    return Err(YamlError {
                        pos,
                        message: "unknown anchor".into(),
                        limit: false,
                    });
                };
                alias.add(*size);
                check_aliases(alias, limits, pos)?;
                // Another reference to the anchored node: a sequence or mapping is shared.
                let mut n = n.clone();
                n.pos = pos;
                Some((n, 0, *size))
            }
            Event::Scalar(value, style, anchor, tag) => {
                nodes += 1;
                check_nodes(nodes, limits, pos)?;
                let size = Size {
                    nodes: 1,
                    bytes: value.len(),
                };
                let mut value = value.into_owned();
                // A block scalar that ends the text without a final line break has none to
                // keep (go-yaml); the scanner adds one.
                if matches!(style, ScalarStyle::Literal | ScalarStyle::Folded)
                    && !ends_with_break
                    && span.end.index() >= total_chars
                    && value.ends_with('\n')
                {
                    value.pop();
                }
                if style == ScalarStyle::DoubleQuoted {
                    quoted.push((span.start.index(), span.end.index()));
                }
                let style = match style {
                    ScalarStyle::Plain => Style::Plain,
                    ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => Style::Quoted,
                    ScalarStyle::Literal | ScalarStyle::Folded => Style::Block,
                };
                let tag = tag.map(|t| {
                    if t.handle == "tag:yaml.org,2002:" || t.handle == "!!" {
                        format!("!!{}", t.suffix)
                    } else {
                        format!("{}{}", t.handle, t.suffix)
                    }
                });
                Some((
                    Node {
                        kind: Kind::Scalar { value, style, tag },
                        pos,
                    },
                    anchor,
                    size,
                ))
            }
            Event::SequenceStart(anchor, _) => {
                nodes += 1;
                check_nodes(nodes, limits, pos)?;
                if stack.len() >= limits.max_depth {
                    return Err(depth_error(limits, pos));
                }
                let one = Size { nodes: 1, bytes: 0 };
                stack.push(Frame::Seq(Vec::new(), pos, anchor, one));
                None
            }
            Event::MappingStart(anchor, _) => {
                if stack.is_empty() {
                    root_is_flow = text.chars().nth(span.start.index()) == Some('{');
                }
                nodes += 1;
                check_nodes(nodes, limits, pos)?;
                if stack.len() >= limits.max_depth {
                    return Err(depth_error(limits, pos));
                }
                let one = Size { nodes: 1, bytes: 0 };
                stack.push(Frame::Map(Vec::new(), None, pos, anchor, one));
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(items, p, anchor, size)) => Some((
                    Node {
                        kind: Kind::Seq(Rc::new(items)),
                        pos: p,
                    },
                    anchor,
                    size,
                )),
                _ => unreachable!("parser emits balanced events"),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(entries, _, p, anchor, size)) => Some((
                    Node {
                        kind: Kind::Map(Rc::new(entries)),
                        pos: p,
                    },
                    anchor,
                    size,
                )),
                _ => unreachable!("parser emits balanced events"),
            },
        };
        if let Some((node, anchor, size)) = done {
            if anchor != 0 {
                // A reference (an `Rc` for sequences and mappings), not a copy.
                anchors.insert(anchor, (node.clone(), size));
            }
            match stack.last_mut() {
                None => {
                    if root_is_flow && matches!(node.kind, Kind::Map(_)) {
                        flow_root_end = Some(span.end.index());
                    }
                    root = Some(node)
                }
                Some(Frame::Seq(items, _, _, total)) => {
                    total.add(size);
                    items.push(node)
                }
                Some(Frame::Map(entries, key, _, _, total)) => {
                    total.add(size);
                    match key.take() {
                        None => *key = Some(node),
                        Some(k) => entries.push((k, node)),
                    }
                }
            }
        }
    }
    Ok(root.unwrap_or_else(|| Node::null(Pos { line: 1, col: 1 })))
}

/// What libyaml's scanner makes of the text after a root flow mapping: it scans the next
/// token, and go-yaml reads no further. An error names the line (counted from the start of
/// `rest`) of a token the scanner refuses. `line_start`: `rest` starts a line (a tab there
/// cannot start a token).
fn after_flow_root(rest: &str, mut line_start: bool) -> Result<(), (String, usize)> {
    let b = rest.as_bytes();
    let mut dl = 0;
    let mut i = 0;
    loop {
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t' && !line_start) {
            i += 1;
        }
        match b.get(i) {
            None => return Ok(()),
            Some(b'#') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            Some(b'\n' | b'\r') => {
                if b[i] == b'\n' {
                    dl += 1;
                }
                i += 1;
                line_start = true;
            }
            Some(_) => break,
        }
    }
    let line = &rest[i..rest[i..].find('\n').map_or(rest.len(), |n| i + n)];
    let col0 = i == 0 && line_start || i > 0 && b[i - 1] == b'\n';
    match b[i] {
        b'\t' | b'@' | b'`' => Err(("found character that cannot start any token".into(), dl)),
        b'%' if col0 => {
            let name: String = line[1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            if name == "YAML" || name == "TAG" {
                Ok(())
            } else {
                Err(("found unknown directive name".into(), dl))
            }
        }
        b'*' | b'&' => {
            let n = line[1..]
                .bytes()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
                .count();
            let next = line.as_bytes().get(1 + n);
            if n == 0 || next.is_some_and(|c| !b" \t\r?:,]}%@`".contains(c)) {
                return Err((
                    "did not find expected alphabetic or numeric character".into(),
                    dl,
                ));
            }
            Ok(())
        }
        q @ (b'"' | b'\'') => {
            let mut j = i + 1;
            loop {
                match b.get(j) {
                    None => return Err(("found unexpected end of stream".into(), dl)),
                    Some(b'\\') if q == b'"' => j += 2,
                    Some(b'\'') if q == b'\'' && b.get(j + 1) == Some(&b'\'') => j += 2,
                    Some(c) if *c == q => return Ok(()),
                    Some(_) => j += 1,
                }
            }
        }
        _ => Ok(()),
    }
}

fn check_nodes(nodes: usize, limits: &Limits, pos: Pos) -> Result<(), YamlError> {
    if nodes > limits.max_nodes {
        return Err(YamlError {
            pos,
            message: format!(
                "document too large: more than {} nodes (scalars, sequences and mappings; limit max-nodes)",
                limits.max_nodes
            ),
            limit: true,
        });
    }
    Ok(())
}

fn check_aliases(alias: Size, limits: &Limits, pos: Pos) -> Result<(), YamlError> {
    if alias.nodes > limits.max_alias_nodes {
        return Err(YamlError {
            pos,
            message: format!(
                "aliases expand to more than {} nodes (limit max-alias-nodes)",
                limits.max_alias_nodes
            ),
            limit: true,
        });
    }
    if alias.bytes > limits.max_alias_bytes {
        return Err(YamlError {
            pos,
            message: format!(
                "aliases expand to more than {} bytes of scalars (limit max-alias-bytes)",
                limits.max_alias_bytes
            ),
            limit: true,
        });
    }
    Ok(())
}

fn depth_error(limits: &Limits, pos: Pos) -> YamlError {
    YamlError {
        pos,
        message: format!(
            "document nested deeper than {} levels (limit max-depth)",
            limits.max_depth
        ),
        limit: true,
    }
}

/// The input as go-yaml (libyaml's reader) reads it: UTF-16 (LE or BE) when it starts with
/// that byte order mark, else UTF-8 (a UTF-8 BOM is skipped by the parser); characters YAML
/// does not allow (C0 controls but tab, LF and CR; DEL; C1 controls but NEL; U+FFFE/U+FFFF)
/// are refused; NEL is a line break, `\n` for the parser (libyaml reads it as one). LS and PS
/// are left as they are: in a quoted scalar libyaml keeps them too.
pub fn decode_text(input: &[u8]) -> Result<std::borrow::Cow<'_, str>, String> {
    use std::borrow::Cow;
    let text: Cow<'_, str> = if let Some(rest) = input
        .strip_prefix(b"\xff\xfe")
        .map(|r| (r, true))
        .or_else(|| input.strip_prefix(b"\xfe\xff").map(|r| (r, false)))
    {
        let (rest, le) = rest;
        if rest.len() % 2 != 0 {
            return Err("config is not valid UTF-16: incomplete UTF-16 character".into());
        }
        let units = rest.chunks(2).map(|c| {
            if le {
                u16::from_le_bytes([c[0], c[1]])
            } else {
                u16::from_be_bytes([c[0], c[1]])
            }
        });
        let s: Result<String, _> = char::decode_utf16(units).collect();
        Cow::Owned(s.map_err(|_| "config is not valid UTF-16".to_string())?)
    } else {
        Cow::Borrowed(
            std::str::from_utf8(input).map_err(|_| "config is not valid UTF-8".to_string())?,
        )
    };
    let allowed = |c: char| {
        matches!(c, '\t' | '\n' | '\r' | '\u{85}')
            || ('\u{20}'..='\u{7e}').contains(&c)
            || ('\u{a0}'..='\u{d7ff}').contains(&c)
            || ('\u{e000}'..='\u{fffd}').contains(&c)
            || ('\u{10000}'..='\u{10ffff}').contains(&c)
    };
    if let Some((i, _)) = text.char_indices().find(|(_, c)| !allowed(*c)) {
        let line = text[..i].matches('\n').count() + 1;
        return Err(format!(
            "error unmarshaling yaml: line {line}: control characters are not allowed"
        ));
    }
    let text = if text.contains('\u{85}') {
        Cow::Owned(text.replace('\u{85}', "\n"))
    } else {
        text
    };
    if text.contains(['\u{2028}', '\u{2029}']) {
        return Ok(Cow::Owned(ls_ps_breaks(&text)));
    }
    Ok(text)
}

/// LS and PS (U+2028, U+2029) are line breaks for libyaml's scanner outside quoted scalars
/// (a plain scalar ends there, `passwd:<PS>  users:` is a nested mapping), and kept inside
/// quoted ones: they become `\n` outside quotes. A quote starts a quoted scalar where a token
/// can start (at the line's start, after whitespace or `[{,` following an indicator, a tag or
/// an anchor); a `#` after whitespace starts a comment.
fn ls_ps_breaks(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    // The previous character, and the last non-blank one on this line (None at its start).
    let mut prev: Option<char> = None;
    let mut token: Option<char> = None;
    let mut token_word = String::new();
    let is_break = |c: char| matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}');
    while let Some(c) = chars.next() {
        if is_break(c) {
            out.push(if matches!(c, '\u{2028}' | '\u{2029}') {
                '\n'
            } else {
                c
            });
            prev = Some('\n');
            token = None;
            token_word.clear();
            continue;
        }
        let after_space = matches!(prev, None | Some(' ' | '\t' | '\n' | '[' | '{' | ','));
        if c == '#' && matches!(prev, None | Some(' ' | '\t' | '\n')) {
            out.push(c);
            while let Some(&n) = chars.peek() {
                if is_break(n) {
                    break;
                }
                out.push(n);
                chars.next();
            }
            prev = Some('#');
            continue;
        }
        let can_start = token.is_none()
            || token_word.ends_with([':', '[', '{', ','])
            || token_word == "-"
            || token_word == "?"
            || token_word.starts_with(['!', '&']);
        if (c == '"' || c == '\'') && after_space && can_start {
            out.push(c);
            let mut closed = false;
            while let Some(n) = chars.next() {
                if matches!(n, '\u{2028}' | '\u{2029}') {
                    // A line break to libyaml: the blanks around it go, the break stays.
                    while out.ends_with([' ', '\t']) {
                        out.pop();
                    }
                    out.push(n);
                    while chars.next_if(|b| matches!(b, ' ' | '\t')).is_some() {}
                    continue;
                }
                out.push(n);
                if c == '"' && n == '\\' {
                    if chars
                        .next_if(|e| matches!(e, '\u{2028}' | '\u{2029}'))
                        .is_some()
                    {
                        // An escaped line break joins the lines.
                        out.pop();
                        while chars.next_if(|b| matches!(b, ' ' | '\t')).is_some() {}
                    } else if let Some(e) = chars.next() {
                        out.push(e);
                    }
                } else if n == c {
                    if c == '\'' && chars.peek() == Some(&'\'') {
                        out.push('\'');
                        chars.next();
                    } else {
                        closed = true;
                        break;
                    }
                }
            }
            if !closed {
                break;
            }
            prev = Some(c);
            token = Some(c);
            token_word = c.to_string();
            continue;
        }
        out.push(c);
        if c != ' ' && c != '\t' {
            if matches!(prev, Some(' ' | '\t' | '\n') | None) {
                token_word.clear();
            }
            token_word.push(c);
            token = Some(c);
            if matches!(c, '[' | '{' | ',') {
                token_word.clear();
                token_word.push(c);
            }
        }
        prev = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() {
        let n = parse("a:\n  b: 1\n", &Limits::default()).unwrap();
        let b = n.get("a").unwrap().get("b").unwrap();
        assert_eq!(b.pos, Pos { line: 2, col: 6 });
    }

    #[test]
    fn billion_laughs_is_refused() {
        let mut s = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        let mut prev = 'a';
        for c in 'b'..='j' {
            s.push_str(&format!(
                "{c}: &{c} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
            ));
            prev = c;
        }
        let e = parse(&s, &Limits::default()).unwrap_err();
        assert!(e.message.contains("max-alias-nodes"), "{}", e.message);
    }

    #[test]
    fn deep_nesting_is_refused() {
        let s = "[".repeat(10_000) + &"]".repeat(10_000);
        let e = parse(&s, &Limits::default()).unwrap_err();
        assert!(e.message.contains("nested"), "{}", e.message);
        let s = "a:\n".to_string()
            + &(1..200)
                .map(|i| format!("{}b:\n", " ".repeat(i)))
                .collect::<String>();
        let e = parse(&s, &Limits::default()).unwrap_err();
        assert!(e.message.contains("nested"), "{}", e.message);
    }

    #[test]
    fn aliases_share_the_anchored_node() {
        let n = parse("a: &x [1, [2]]\nb: *x\n", &Limits::default()).unwrap();
        let (Kind::Seq(a), Kind::Seq(b)) = (&n.get("a").unwrap().kind, &n.get("b").unwrap().kind)
        else {
            panic!("sequences expected")
        };
        assert!(Rc::ptr_eq(a, b));
        assert_eq!(n.get("b").unwrap().pos, Pos { line: 2, col: 4 });
    }

    #[test]
    fn limits_count_what_they_say() {
        let limits = Limits {
            max_nodes: 1000,
            max_alias_nodes: 10,
            ..Limits::default()
        };
        // 999 nodes, no alias: only max-nodes applies.
        let list = format!("[{}]", vec!["x"; 998].join(","));
        assert!(parse(&list, &limits).is_ok());
        let e = parse(&format!("[{}]", vec!["x"; 1000].join(",")), &limits).unwrap_err();
        assert!(e.limit && e.message.contains("max-nodes"), "{}", e.message);
        // Anchors without aliases add nothing; each alias adds its whole subtree (5 nodes).
        let anchored = "a: &a [1, &b [2, 3]]\n";
        assert!(parse(anchored, &limits).is_ok());
        assert!(parse(&format!("{anchored}b: [*a, *a]\n"), &limits).is_ok());
        let e = parse(&format!("{anchored}b: [*a, *a, *a]\n"), &limits).unwrap_err();
        assert!(
            e.limit && e.message.contains("max-alias-nodes"),
            "{}",
            e.message
        );
    }

    #[test]
    fn big_scalar_aliases_are_refused() {
        let big = "x".repeat(1 << 20);
        let mut s = format!("a: &a \"{big}\"\nb: [");
        for _ in 0..100 {
            s.push_str("*a,");
        }
        s.push_str("*a]\n");
        let e = parse(&s, &Limits::default()).unwrap_err();
        assert!(e.message.contains("max-alias-bytes"), "{}", e.message);
    }
}
