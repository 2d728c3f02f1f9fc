//! Diagnostics: errors and warnings about a config, each naming the JSON path of the value it
//! is about and, when the config came from text, its line and column.

use std::fmt;

use crate::json;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A JSON path such as `$.storage.files.0.path`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    pub fn locate(&mut self, tree: &json::Value, text: &[u8]) {
        for d in &mut self.diagnostics {
            if d.line_col.is_none()
                && let Some(pos) = d.offset.or_else(|| find(tree, &d.path))
            {
                d.line_col = Some(json::line_col(text, pos));
            }
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
    let mut v = tree;
    for seg in &path.0 {
        let next = match (seg, &v.kind) {
            (Seg::Key(k), json::Kind::Object(members)) => {
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
