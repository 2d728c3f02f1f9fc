//! YAML nodes into Go values of the schema, with go-yaml v3's rules: plain scalars resolve
//! as YAML 1.2 core plus go-yaml's compatibility forms (`0644` is octal, and a bool field
//! also takes `yes`/`no`/`on`/`off`/`y`/`n`); any scalar fits a string field; unknown keys are
//! Butane's "unused key" warnings; a duplicate key is an error.

use std::collections::HashMap;

use crate::api::{Diag, Report};
use crate::schema::{Def, K, T};
use crate::value::{G, Obj};
use crate::yaml::{Kind, Node, Pos, Style};

pub struct Decoder<'r> {
    pub minor: u8,
    pub report: &'r mut Report,
}

/// Expands `<<` merge keys and refuses duplicate keys; returns the mapping's entries. In time
/// linear in the entries (an index of the keys seen).
pub fn entries<'a>(
    node: &'a Node,
    path: &str,
    report: &mut Report,
) -> Vec<(&'a str, &'a Node, Pos)> {
    let Kind::Map(list) = &node.kind else {
        return Vec::new();
    };
    let mut out: Vec<(&'a str, &'a Node, Pos)> = Vec::new();
    // Where each key of `out` was defined.
    let mut seen: HashMap<&'a str, Pos> = HashMap::new();
    let mut merged: Vec<(&'a str, &'a Node, Pos)> = Vec::new();
    let mut merged_seen: HashMap<&'a str, ()> = HashMap::new();
    for (k, v) in list.iter() {
        spec::work::add(1);
        let Some(key) = k.scalar() else {
            report.push(Diag::error(path, k.pos, "mapping keys must be scalars"));
            continue;
        };
        if key == "<<"
            && matches!(
                &k.kind,
                Kind::Scalar {
                    style: Style::Plain,
                    ..
                }
            )
        {
            let maps: Vec<&Node> = match &v.kind {
                Kind::Map(_) => vec![v],
                Kind::Seq(items) => items.iter().collect(),
                _ => Vec::new(),
            };
            for m in maps {
                for (mk, mv, mp) in entries(m, path, report) {
                    spec::work::add(1);
                    if merged_seen.insert(mk, ()).is_none() {
                        merged.push((mk, mv, mp));
                    }
                }
            }
            continue;
        }
        if let Some(p) = seen.get(key) {
            report.push(Diag::error(
                path,
                k.pos,
                format!("mapping key \"{key}\" already defined at line {}", p.line),
            ));
            continue;
        }
        seen.insert(key, k.pos);
        out.push((key, v, k.pos));
    }
    for m in merged {
        spec::work::add(1);
        if !seen.contains_key(m.0) {
            out.push(m);
        }
    }
    out
}

/// Butane's unused-key check walks the YAML node tree, where a merge key `<<` is still a key
/// that no struct field takes: it warns "unused key <<" (so `--strict` fails on merges).
pub fn merge_key_warnings(node: &Node, path: &str, report: &mut Report) {
    let Kind::Map(list) = &node.kind else {
        return;
    };
    for (k, _) in list.iter() {
        if let Kind::Scalar {
            value,
            style: Style::Plain,
            ..
        } = &k.kind
            && value == "<<"
        {
            report.push(Diag::warning(&format!("{path}.<<"), k.pos, "unused key <<"));
        }
    }
}

/// Go's `base64.StdEncoding.DecodeString` (padded, no whitespace) as go-yaml uses for
/// `!!binary`.
fn base64_std(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (n, ch) in b.chunks(4).enumerate() {
        let last = n == b.len() / 4 - 1;
        let pad = ch.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 || pad > 0 && !last {
            return None;
        }
        let mut v = 0u32;
        for (i, c) in ch[..4 - pad].iter().enumerate() {
            v |= u32::from(val(*c)?) << (18 - 6 * i);
        }
        let bytes = v.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - pad]);
    }
    Some(out)
}

fn type_err(path: &str, n: &Node, want: &str) -> Diag {
    let got = match &n.kind {
        Kind::Scalar { value, .. } => format!("!!str `{}`", truncate(value)),
        Kind::Seq(_) => "!!seq".into(),
        Kind::Map(_) => "!!map".into(),
    };
    Diag::error(path, n.pos, format!("cannot unmarshal {got} into {want}"))
}

fn truncate(s: &str) -> String {
    if s.len() > 40 {
        let mut e = 40;
        while !s.is_char_boundary(e) {
            e -= 1;
        }
        format!("{}...", &s[..e])
    } else {
        s.to_string()
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` after go-yaml removes underscores; plus `0o` octal
/// and integral floats, as go-yaml decodes into an int.
pub fn parse_int(raw: &str) -> Option<i64> {
    let s: String = raw.chars().filter(|c| *c != '_').collect();
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, &s[..]),
    };
    if body.is_empty() {
        return None;
    }
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_string())
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_string())
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_string())
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string())
    } else {
        (10, lower.clone())
    };
    if !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix)) {
        let v = i128::from_str_radix(&digits, radix).ok()?;
        let v = if neg { -v } else { v };
        return i64::try_from(v).ok();
    }
    // A float (go-yaml's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`), truncated
    // toward zero as go-yaml does into an int (`0644.5` is 644, `-1.5` is -1).
    let is_float = {
        let b = body.as_bytes();
        let mut i = 0;
        let int_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
        i += int_digits;
        let mut frac_digits = 0;
        if b.get(i) == Some(&b'.') {
            i += 1;
            frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            i += frac_digits;
        }
        let mantissa = int_digits > 0 || frac_digits > 0 && b[0] == b'.';
        if mantissa && matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'-' | b'+')) {
                i += 1;
            }
            let e = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
            if e == 0 {
                i = usize::MAX;
            } else {
                i += e;
            }
        }
        mantissa && i == b.len()
    };
    if is_float
        && let Ok(f) = s.parse::<f64>()
        && f <= 9.223_372_036_854_776e18
    {
        return Some(f as i64);
    }
    None
}

impl Decoder<'_> {
    /// go-yaml leaves a struct field given `~` untouched, and Butane's context tree then has a
    /// node its content tree lacks: it warns at that path (so `--strict` fails).
    pub fn null_struct(&mut self, v: &Node, path: &str) {
        self.report.push(Diag::warning(
            path,
            v.pos,
            format!(
                "context tree does not match content tree at {path}. Line and column reporting may be inconsistent. Unused keys may not be reported"
            ),
        ));
    }

    pub fn obj(&mut self, def: &'static Def, node: &Node, path: &str) -> Option<Obj> {
        if node.is_null() {
            return None;
        }
        if !matches!(node.kind, Kind::Map(_)) {
            self.report.push(type_err(path, node, def.name));
            return None;
        }
        let mut o = Obj::new(def, node.pos);
        merge_key_warnings(node, path, self.report);
        for (key, v, kpos) in entries(node, path, self.report) {
            let child = format!("{path}.{key}");
            let Some(i) = (!key.is_empty())
                .then(|| def.yaml_idx(key, self.minor))
                .flatten()
            else {
                self.report
                    .push(Diag::warning(&child, kpos, format!("unused key {key}")));
                continue;
            };
            let f = &def.fields[i];
            // Errors about a value point at the value (as Butane does); unused keys at the key.
            o.pos[i] = v.pos;
            o.vals[i] = self.value(f.t, f.k, v, &child);
        }
        Some(o)
    }

    pub fn value(&mut self, t: T, k: K, v: &Node, path: &str) -> Option<G> {
        if v.is_null() {
            if matches!(t, T::Obj(_)) {
                self.null_struct(v, path);
            }
            return None;
        }
        match t {
            T::Str => self.string(v, path).map(G::Str),
            T::Int => self.int(v, path).map(G::Int),
            T::Bool => self.boolean(v, path).map(G::Bool),
            T::Obj(d) => self.obj(d, v, path).map(G::Obj),
            T::ListStr | T::ListObj(_) => {
                let Kind::Seq(items) = &v.kind else {
                    self.report.push(type_err(path, v, "a sequence"));
                    return None;
                };
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    spec::work::add(1);
                    let p = format!("{path}.{i}");
                    let g = match t {
                        T::ListStr => {
                            if item.is_null() {
                                Some(G::Str(String::new()))
                            } else {
                                self.string(item, &p).map(G::Str)
                            }
                        }
                        T::ListObj(d) => Some(G::Obj(
                            self.obj(d, item, &p)
                                .unwrap_or_else(|| Obj::new(d, item.pos)),
                        )),
                        _ => unreachable!(),
                    };
                    if let Some(g) = g {
                        out.push((g, item.pos));
                    }
                }
                let _ = k;
                Some(G::List(out))
            }
        }
    }

    pub fn string(&mut self, v: &Node, path: &str) -> Option<String> {
        match &v.kind {
            Kind::Scalar { value, tag, .. } if tag.as_deref() == Some("!!binary") => {
                match base64_std(value) {
                    Some(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                    None => {
                        self.report.push(Diag::error(
                            path,
                            v.pos,
                            "!!binary value contains invalid base64 data",
                        ));
                        None
                    }
                }
            }
            Kind::Scalar { value, .. } => Some(value.clone()),
            _ => {
                self.report.push(type_err(path, v, "string"));
                None
            }
        }
    }

    fn int(&mut self, v: &Node, path: &str) -> Option<i64> {
        // An explicit tag other than !!int or !!float (`!!str 0644`) is a string to go-yaml.
        if let Kind::Scalar { value, style, tag } = &v.kind
            && (tag.is_none() && *style == Style::Plain
                || matches!(tag.as_deref(), Some("!!int" | "!!float")))
            && let Some(i) = parse_int(value)
        {
            return Some(i);
        }
        self.report.push(type_err(path, v, "int"));
        None
    }

    fn boolean(&mut self, v: &Node, path: &str) -> Option<bool> {
        if let Kind::Scalar { value, style, .. } = &v.kind {
            let core = *style == Style::Plain;
            match value.as_str() {
                "true" | "True" | "TRUE" if core => return Some(true),
                "false" | "False" | "FALSE" if core => return Some(false),
                "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => return Some(true),
                "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => return Some(false),
                _ => {}
            }
        }
        self.report.push(type_err(path, v, "bool"));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::parse_int;

    #[test]
    fn go_yaml_ints() {
        assert_eq!(parse_int("0644"), Some(0o644));
        assert_eq!(parse_int("0o644"), Some(0o644));
        assert_eq!(parse_int("420"), Some(420));
        assert_eq!(parse_int("0x1A4"), Some(420));
        assert_eq!(parse_int("-1"), Some(-1));
        assert_eq!(parse_int("1_000"), Some(1000));
        assert_eq!(parse_int("0"), Some(0));
        assert_eq!(parse_int("08"), Some(8));
        assert_eq!(parse_int("abc"), None);
        assert_eq!(parse_int(""), None);
    }
}
