//! Units and their drop-ins, and the unit file syntax.

use std::collections::{HashMap, HashSet};

use super::common::{V, keyed};
use crate::config::diag::Path;
use crate::config::types::*;

/// The unit types Ignition accepts as a unit name's suffix.
pub const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".snapshot",
    ".slice",
    ".scope",
];

pub(super) fn systemd(v: &mut V, s: &Systemd, p: &Path) {
    // The first unit of each name, for instances looking up their template.
    let mut by_name: HashMap<&str, &Unit> = HashMap::new();
    for u in &s.units {
        crate::work::add(1);
        by_name.entry(u.name.as_str()).or_insert(u);
    }
    let each_unit = |v: &mut V, u: &Unit, up: &Path| {
        crate::work::add(1);
        unit(v, u, up, &by_name);
    };
    keyed(v, &p.key("units"), &s.units, "name", |u| &u.name, each_unit);
}

/// `by_name`: the first unit of each name in the config (where an instance's template is).
fn unit(v: &mut V, u: &Unit, p: &Path, by_name: &HashMap<&str, &Unit>) {
    if !UNIT_SUFFIXES.iter().any(|s| u.name.ends_with(s)) || u.name.contains('/') {
        v.err(
            p.key("name"),
            format!(
                "invalid unit name {:?}: needs a unit type suffix such as .service",
                u.name
            ),
        );
    }
    let sections = u
        .contents
        .as_deref()
        .and_then(|c| unit_contents(v, c, &p.key("contents")));
    if u.enabled == Some(true)
        && u.contents.as_deref().is_some_and(|c| !c.is_empty())
        && sections.is_some_and(|s| !s.contains("Install"))
    {
        v.warn(
            p.key("contents"),
            format!(
                "unit {:?} is enabled, but has no install section so enable does nothing",
                u.name
            ),
        );
    }
    if u.enabled == Some(true)
        && let Some(template) = template_of(&u.name)
        && let Some(t) = by_name.get(template.as_str())
        && let Some(tc) = t.contents.as_deref().filter(|c| !c.is_empty())
        && unit_sections(tc).is_ok_and(|s| !s.contains("Install"))
    {
        v.warn(
            p.key("contents"),
            format!(
                "template unit {template:?} for {:?} doesn't have Install section",
                u.name
            ),
        );
    }
    if u.mask == Some(true) && u.enabled == Some(true) {
        v.warn(p.clone(), "a masked unit cannot be enabled");
    }
    keyed(
        v,
        &p.key("dropins"),
        &u.dropins,
        "name",
        |d| &d.name,
        dropin,
    );
}

fn dropin(v: &mut V, d: &Dropin, p: &Path) {
    if !d.name.ends_with(".conf") || d.name.contains('/') {
        v.err(
            p.key("name"),
            format!("invalid drop-in name {:?}: must end in .conf", d.name),
        );
    }
    if let Some(c) = &d.contents {
        let _ = unit_contents(v, c, &p.key("contents"));
    }
}

/// The template of an instance service (`foo@bar.service` -> `foo@.service`).
fn template_of(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".service")?;
    let (prefix, instance) = stem.split_once('@')?;
    (!prefix.is_empty() && !instance.is_empty()).then(|| format!("{prefix}@.service"))
}

/// Unit file syntax as go-systemd's deserializer (which Ignition runs) reads it: before the
/// first section, a `[` anywhere opens a section name and `#`/`;` anywhere starts a comment;
/// a section name runs to the next `]` (across lines) and only blanks may follow it on its
/// line; in a section every other line is `name=value` (a value continues while its line ends
/// in `\\`); and the 2048-byte line limit is checked as its 4096-byte `bufio.Reader` sees the
/// text. Returns the sections that hold at least one option, or a message naming the line of
/// the first error.
fn unit_sections(c: &str) -> Result<HashSet<String>, String> {
    let mut lx = UnitLexer {
        b: GoBufReader::new(c.as_bytes()),
        sections: HashSet::new(),
        at: 0,
    };
    lx.run().map(|()| lx.sections).map_err(|e| {
        let line = c.as_bytes()[..lx.at.min(c.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        format!("line {line}: {e}")
    })
}

/// Go's `bufio.Reader` (4096 bytes) over an in-memory text, as far as go-systemd's lexer uses
/// it: what is buffered decides where the line-length check looks.
struct GoBufReader<'a> {
    src: &'a [u8],
    off: usize,
    buf: Vec<u8>,
    r: usize,
    w: usize,
    last_rune: usize,
}

impl<'a> GoBufReader<'a> {
    const SIZE: usize = 4096;

    fn new(src: &'a [u8]) -> Self {
        GoBufReader {
            src,
            off: 0,
            buf: vec![0; Self::SIZE],
            r: 0,
            w: 0,
            last_rune: 0,
        }
    }

    /// Bytes of the text handed out so far.
    fn consumed(&self) -> usize {
        self.off - (self.w - self.r)
    }

    fn eof(&self) -> bool {
        self.off == self.src.len()
    }

    fn fill(&mut self) {
        if self.r > 0 {
            self.buf.copy_within(self.r..self.w, 0);
            self.w -= self.r;
            self.r = 0;
        }
        let n = (Self::SIZE - self.w).min(self.src.len() - self.off);
        self.buf[self.w..self.w + n].copy_from_slice(&self.src[self.off..self.off + n]);
        self.off += n;
        self.w += n;
    }

    fn buffered(&self) -> usize {
        self.w - self.r
    }

    fn read_rune(&mut self) -> Option<char> {
        while self.r + 4 > self.w
            && !full_rune(&self.buf[self.r..self.w])
            && !self.eof()
            && self.w - self.r < Self::SIZE
        {
            self.fill();
        }
        if self.r == self.w {
            return None;
        }
        // The text is a &str: whole characters, and full_rune saw all of this one's bytes.
        let rest = &self.buf[self.r..self.w];
        let size = utf8_len(rest[0]).min(rest.len());
        let ch = std::str::from_utf8(&rest[..size])
            .ok()
            .and_then(|s| s.chars().next())
            .unwrap_or('\u{fffd}');
        self.r += size;
        self.last_rune = size;
        Some(ch)
    }

    fn unread_rune(&mut self) {
        self.r -= self.last_rune;
        self.last_rune = 0;
    }

    /// `ReadBytes(delim)`: through `delim`, or to the end (then `false`).
    fn read_bytes(&mut self, delim: u8) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut s = 0;
        loop {
            if let Some(i) = self.buf[self.r + s..self.w]
                .iter()
                .position(|b| *b == delim)
            {
                let end = self.r + s + i + 1;
                out.extend_from_slice(&self.buf[self.r..end]);
                self.r = end;
                return (out, true);
            }
            if self.eof() {
                out.extend_from_slice(&self.buf[self.r..self.w]);
                self.r = self.w;
                return (out, false);
            }
            if self.buffered() >= Self::SIZE {
                out.extend_from_slice(&self.buf[self.r..self.w]);
                self.r = self.w;
                s = 0;
                continue;
            }
            s = self.w - self.r;
            self.fill();
        }
    }
}

fn utf8_len(b: u8) -> usize {
    match b {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

/// Go's `utf8.FullRune`.
fn full_rune(b: &[u8]) -> bool {
    !b.is_empty() && b.len() >= utf8_len(b[0])
}

/// go-systemd's unit lexer (`unit.DeserializeOptions`).
struct UnitLexer<'a> {
    b: GoBufReader<'a>,
    sections: HashSet<String>,
    /// Where the step being run started (its line is the error's).
    at: usize,
}

enum Step {
    NextSection,
    SectionName,
    SectionSuffix(String),
    IgnoreLine(Box<Step>),
    SectionOrOption(String),
    OptionName(String),
    OptionValue(String, Vec<u8>),
}

impl UnitLexer<'_> {
    fn run(&mut self) -> Result<(), String> {
        const LINE_MAX: usize = 2048;
        let mut next = Some(Step::NextSection);
        while let Some(step) = next {
            self.at = self.b.consumed();
            if self.b.buffered() >= LINE_MAX {
                let peek = &self.b.buf[self.b.r..self.b.r + LINE_MAX];
                if !peek.iter().any(|c| *c == b'\r' || *c == b'\n') {
                    return Err(format!("line too long (max {LINE_MAX} bytes)"));
                }
            }
            next = self.step(step)?;
        }
        Ok(())
    }

    /// `toEOL`: the rest of the line without its `\r\n`, and whether the text ended there.
    fn read_eol(&mut self) -> (Vec<u8>, bool) {
        let (mut line, found) = self.b.read_bytes(b'\n');
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        (line, !found)
    }

    fn step(&mut self, step: Step) -> Result<Option<Step>, String> {
        let trim = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
        Ok(Some(match step {
            Step::NextSection => match self.b.read_rune() {
                None => return Ok(None),
                Some('[') => Step::SectionName,
                Some('#' | ';') => Step::IgnoreLine(Box::new(Step::NextSection)),
                Some(_) => Step::NextSection,
            },
            Step::SectionName => {
                let (sec, found) = self.b.read_bytes(b']');
                if !found {
                    return Err("unable to find end of section".into());
                }
                Step::SectionSuffix(String::from_utf8_lossy(&sec[..sec.len() - 1]).into_owned())
            }
            Step::SectionSuffix(name) => {
                let (garbage, _) = self.read_eol();
                let garbage = trim(&garbage);
                if !garbage.is_empty() {
                    // go-systemd names its (never set) current section here: always "".
                    return Err(format!("found garbage after section name : {garbage:?}"));
                }
                Step::SectionOrOption(name)
            }
            Step::IgnoreLine(next) => {
                loop {
                    let (line, _) = self.read_eol();
                    let line = line.strip_suffix(b" ").unwrap_or(&line);
                    if !line.ends_with(b"\\") {
                        break;
                    }
                }
                *next
            }
            Step::SectionOrOption(sec) => match self.b.read_rune() {
                None => return Ok(None),
                Some('[') => Step::SectionName,
                Some('#' | ';') => Step::IgnoreLine(Box::new(Step::SectionOrOption(sec))),
                Some(c) if c.is_whitespace() => Step::SectionOrOption(sec),
                Some(_) => {
                    self.b.unread_rune();
                    Step::OptionName(sec)
                }
            },
            Step::OptionName(sec) => loop {
                match self.b.read_rune() {
                    None => return Err("EOF".into()),
                    Some('\n' | '\r') => {
                        return Err(
                            "unexpected newline encountered while parsing option name".into()
                        );
                    }
                    Some('=') => break Step::OptionValue(sec, Vec::new()),
                    Some(_) => {}
                }
            },
            Step::OptionValue(sec, mut partial) => {
                let (line, eof) = self.read_eol();
                if !trim(&line).is_empty() {
                    partial.extend_from_slice(&line);
                    if line.ends_with(b"\\") {
                        if !eof {
                            partial.push(b'\n');
                        }
                        return Ok(Some(Step::OptionValue(sec, partial)));
                    }
                }
                self.sections.insert(sec.clone());
                Step::SectionOrOption(sec)
            }
        }))
    }
}

/// Checks unit contents (an error at `p` if they do not parse); their sections with options.
fn unit_contents(v: &mut V, c: &str, p: &Path) -> Option<HashSet<String>> {
    match unit_sections(c) {
        Ok(s) => Some(s),
        Err(e) => {
            v.err(p.clone(), format!("invalid unit contents: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unit_sections;

    /// go-systemd's verdicts (as Ignition, via Butane v0.29.0, reported them).
    #[test]
    fn unit_text_as_go_systemd_reads_it() {
        let err = |c: &str| unit_sections(c).unwrap_err();
        // Before the first section, any `[` opens one and `#` anywhere starts a comment.
        assert!(err("a=b[c]d\n[Unit]\n").contains("found garbage after section name : \"d\""));
        assert!(err("a=[b\n").contains("unable to find end of section"));
        assert!(
            unit_sections("x # [y\n[Unit]\nA=b\n")
                .unwrap()
                .contains("Unit")
        );
        // A section name runs to `]` across lines; an option name needs its `=`.
        assert!(
            unit_sections("[Unit\nA=b]\nC=d\n")
                .unwrap()
                .contains("Unit\nA=b")
        );
        assert!(err("[Unit]\nFoo\n").contains("unexpected newline"));
        assert!(err("[Unit]\nFoo").contains("EOF"));
        assert!(err("[Unit]\nA=b\n[Service\n").starts_with("line 3: "));
        // Only options count for a section; continuations join lines.
        let s = unit_sections("[Unit]\n[Install]\nWantedBy=a \\\n  b\n").unwrap();
        assert!(s.contains("Install") && !s.contains("Unit"));
        // The line limit, where the 4096-byte buffer sees 2048 bytes without a newline.
        let long = format!("[Unit]\nA={}\n", "x".repeat(3000));
        assert!(err(&long).contains("line too long"));
        // A long last line past the buffered part is not seen by the check.
        let tail = format!("[Unit]\n{}A={}\n", "B=c\n".repeat(1000), "x".repeat(2100));
        assert!(unit_sections(&tail).is_ok(), "{:?}", unit_sections(&tail));
    }
}
