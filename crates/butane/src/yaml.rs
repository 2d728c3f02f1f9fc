//! YAML text to a node tree with positions, on top of `saphyr-parser`'s event stream.
//!
//! Hostile input is bounded: the text size (checked by the caller), the nesting depth, the
//! number of nodes after alias expansion and the bytes of scalars after alias expansion. Each
//! limit has a name that appears in its error.

use std::collections::HashMap;

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
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
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
    /// `max-nodes`: nodes in the tree, counting every alias expansion.
    pub max_nodes: usize,
    /// `max-expanded-bytes`: scalar bytes in the tree, counting every alias expansion.
    pub max_expanded_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 64,
            max_nodes: 200_000,
            max_expanded_bytes: 64 << 20,
        }
    }
}

#[derive(Debug, Clone)]
pub struct YamlError {
    pub pos: Pos,
    pub message: String,
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

    fn size(&self) -> (usize, usize) {
        match &self.kind {
            Kind::Scalar { value, .. } => (1, value.len()),
            Kind::Seq(items) => items.iter().fold((1, 0), |(n, b), i| {
                let (n2, b2) = i.size();
                (n + n2, b + b2)
            }),
            Kind::Map(entries) => entries.iter().fold((1, 0), |(n, b), (k, v)| {
                let (n1, b1) = k.size();
                let (n2, b2) = v.size();
                (n + n1 + n2, b + b1 + b2)
            }),
        }
    }
}

fn pos_of(span: &Span) -> Pos {
    Pos {
        line: span.start.line(),
        col: span.start.col() + 1,
    }
}

enum Frame {
    Seq(Vec<Node>, Pos, usize),
    Map(Vec<(Node, Node)>, Option<Node>, Pos, usize),
}

/// Parses the first document of `text`. An empty document is a null node.
pub fn parse(text: &str, limits: &Limits) -> Result<Node, YamlError> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut nodes = 0usize;
    let mut bytes = 0usize;
    let mut root: Option<Node> = None;
    let mut started = false;
    let total_chars = text.chars().count();
    let ends_with_break = text.ends_with('\n') || text.ends_with('\r');
    loop {
        let (event, span) = match parser.next_event() {
            None => break,
            Some(Err(e)) => {
                return Err(YamlError {
                    pos: Pos {
                        line: e.marker().line(),
                        col: e.marker().col() + 1,
                    },
                    message: if e.info().contains("recursion limit") {
                        // The scanner's own bound on nesting, reached before max-depth.
                        format!("document nested too deeply ({})", e.info())
                    } else {
                        e.info().to_string()
                    },
                });
            }
            Some(Ok(ev)) => ev,
        };
        let pos = pos_of(&span);
        let done: Option<(Node, usize)> = match event {
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
                let Some(n) = anchors.get(&id) else {
                    return Err(YamlError {
                        pos,
                        message: "unknown anchor".into(),
                    });
                };
                let (n2, b2) = n.size();
                nodes += n2;
                bytes += b2;
                check_totals(nodes, bytes, limits, pos)?;
                let mut n = n.clone();
                n.pos = pos;
                Some((n, 0))
            }
            Event::Scalar(value, style, anchor, tag) => {
                nodes += 1;
                bytes += value.len();
                check_totals(nodes, bytes, limits, pos)?;
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
                ))
            }
            Event::SequenceStart(anchor, _) => {
                nodes += 1;
                check_totals(nodes, bytes, limits, pos)?;
                if stack.len() >= limits.max_depth {
                    return Err(depth_error(limits, pos));
                }
                stack.push(Frame::Seq(Vec::new(), pos, anchor));
                None
            }
            Event::MappingStart(anchor, _) => {
                nodes += 1;
                check_totals(nodes, bytes, limits, pos)?;
                if stack.len() >= limits.max_depth {
                    return Err(depth_error(limits, pos));
                }
                stack.push(Frame::Map(Vec::new(), None, pos, anchor));
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(items, p, anchor)) => Some((
                    Node {
                        kind: Kind::Seq(items),
                        pos: p,
                    },
                    anchor,
                )),
                _ => unreachable!("parser emits balanced events"),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(entries, _, p, anchor)) => Some((
                    Node {
                        kind: Kind::Map(entries),
                        pos: p,
                    },
                    anchor,
                )),
                _ => unreachable!("parser emits balanced events"),
            },
        };
        if let Some((node, anchor)) = done {
            if anchor != 0 {
                anchors.insert(anchor, node.clone());
            }
            match stack.last_mut() {
                None => root = Some(node),
                Some(Frame::Seq(items, _, _)) => items.push(node),
                Some(Frame::Map(entries, key, _, _)) => match key.take() {
                    None => *key = Some(node),
                    Some(k) => entries.push((k, node)),
                },
            }
        }
    }
    Ok(root.unwrap_or_else(|| Node::null(Pos { line: 1, col: 1 })))
}

fn check_totals(nodes: usize, bytes: usize, limits: &Limits, pos: Pos) -> Result<(), YamlError> {
    if nodes > limits.max_nodes {
        return Err(YamlError {
            pos,
            message: format!(
                "document too large: more than {} nodes after alias expansion (limit max-nodes)",
                limits.max_nodes
            ),
        });
    }
    if bytes > limits.max_expanded_bytes {
        return Err(YamlError {
            pos,
            message: format!(
                "document too large: more than {} bytes of scalars after alias expansion (limit max-expanded-bytes)",
                limits.max_expanded_bytes
            ),
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
    }
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
        assert!(e.message.contains("max-nodes"), "{}", e.message);
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
    fn big_scalar_aliases_are_refused() {
        let big = "x".repeat(1 << 20);
        let mut s = format!("a: &a \"{big}\"\nb: [");
        for _ in 0..100 {
            s.push_str("*a,");
        }
        s.push_str("*a]\n");
        let e = parse(&s, &Limits::default()).unwrap_err();
        assert!(e.message.contains("max-expanded-bytes"), "{}", e.message);
    }
}
