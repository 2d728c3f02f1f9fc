//! Diagnostics: errors and warnings about a config, each naming the JSON path of the value it
//! is about and, when the config came from text, its line and column.

use std::collections::HashMap;
use std::fmt;

use crate::json;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A JSON path such as `$.storage.files.0.path`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Path(pub Vec<Seg>);

impl Path {
    pub fn root() -> Self {
        Path(Vec::new())
    }
    pub fn key(&self, k: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(k.to_string()));
        p
    }
    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }
    /// Builds a path from dotted text: `storage.files.0.path`.
    pub fn parse(s: &str) -> Self {
        let s = s.strip_prefix('$').unwrap_or(s).trim_start_matches('.');
        Path(
            s.split('.')
                .filter(|p| !p.is_empty())
                .map(|p| match p.parse::<usize>() {
                    Ok(i) => Seg::Index(i),
                    Err(_) => Seg::Key(p.to_string()),
                })
                .collect(),
        )
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("$")?;
        for s in &self.0 {
            match s {
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(i) => write!(f, ".{i}")?,
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub path: Path,
    /// 1-based line and column, when the config was read from text.
    pub line_col: Option<(usize, usize)>,
    /// Byte offset to report instead of the value's own (e.g. an unknown key's name).
    pub offset: Option<usize>,
    pub message: String,
}

impl Diagnostic {
    pub fn error(path: Path, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            path,
            line_col: None,
            offset: None,
            message: message.into(),
        }
    }
    pub fn warning(path: Path, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            path,
            line_col: None,
            offset: None,
            message: message.into(),
        }
    }
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{kind} at {}", self.path)?;
        if let Some((l, c)) = self.line_col {
            write!(f, ", line {l} col {c}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The outcome of checking a config: all diagnostics, errors and warnings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| !d.is_error())
    }
    pub fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }
    /// Fills in line and column for diagnostics that lack them by walking the parsed tree.
    /// In time linear in the text plus n log n in the diagnostics: each path is looked up
    /// with an index of the big objects on its way, and all positions are turned into
    /// lines and columns in one pass over the text.
    pub fn locate(&mut self, tree: &json::Value, text: &[u8]) {
        let mut finder = Finder::default();
        let todo: Vec<(usize, usize)> = self
            .diagnostics
            .iter()
            .enumerate()
            .filter(|(_, d)| d.line_col.is_none())
            .filter_map(|(i, d)| Some((i, d.offset.or_else(|| finder.find(tree, &d.path))?)))
            .collect();
        let positions: Vec<usize> = todo.iter().map(|&(_, pos)| pos).collect();
        for ((i, _), lc) in todo.iter().zip(json::line_cols(text, &positions)) {
            self.diagnostics[*i].line_col = Some(lc);
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Report {}

/// Byte offset of the value at `path`, or of its deepest existing ancestor.
pub fn find(tree: &json::Value, path: &Path) -> Option<usize> {
    Finder::default().find(tree, path)
}

/// Objects with more members than this get an index when a path is looked up in them.
const SCAN_MEMBERS: usize = 16;

/// Looks up paths in one tree, keeping an index of each big object it passed through (by
/// the object's offset, unique in a tree): a path through an object of 100,000 keys costs
/// one hash lookup there, not a scan.
#[derive(Default)]
struct Finder<'t> {
    index: HashMap<usize, HashMap<&'t str, &'t json::Value>>,
}

impl<'t> Finder<'t> {
    fn find(&mut self, tree: &'t json::Value, path: &Path) -> Option<usize> {
        let mut v = tree;
        for seg in &path.0 {
            let next = match (seg, &v.kind) {
                (Seg::Key(k), json::Kind::Object(members)) if members.len() > SCAN_MEMBERS => {
                    let index = self.index.entry(v.pos).or_insert_with(|| {
                        crate::work::add(members.len());
                        members.iter().map(|m| (m.key.as_str(), &m.value)).collect()
                    });
                    crate::work::add(1);
                    index.get(k.as_str()).copied()
                }
                (Seg::Key(k), json::Kind::Object(members)) => {
                    crate::work::add(members.len());
                    members.iter().find(|m| &m.key == k).map(|m| &m.value)
                }
                (Seg::Index(i), json::Kind::Array(items)) => items.get(*i),
                _ => None,
            };
            match next {
                Some(n) => v = n,
                None => break,
            }
        }
        Some(v.pos)
    }
}
