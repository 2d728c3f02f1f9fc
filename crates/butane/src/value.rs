//! Go values of Ignition's structs, and their JSON as Go writes it (Butane: clarketm/json,
//! a fork of encoding/json in which `omitempty` also drops zero structs).

use crate::schema::{Def, K, T};
use crate::yaml::Pos;

#[derive(Debug, Clone, PartialEq)]
pub enum G {
    Str(String),
    Int(i64),
    Bool(bool),
    Obj(Obj),
    List(Vec<(G, Pos)>),
}

#[derive(Debug, Clone)]
pub struct Obj {
    pub def: &'static Def,
    pub vals: Vec<Option<G>>,
    /// Where each field's key was in the YAML (sugar-made fields: where the sugar was).
    pub pos: Vec<Pos>,
    pub at: Pos,
}

impl PartialEq for Obj {
    fn eq(&self, o: &Obj) -> bool {
        std::ptr::eq(self.def, o.def) && self.vals == o.vals
    }
}

impl Obj {
    pub fn new(def: &'static Def, at: Pos) -> Obj {
        Obj {
            def,
            vals: vec![None; def.fields.len()],
            pos: vec![at; def.fields.len()],
            at,
        }
    }

    fn find(&self, json: &str) -> Option<usize> {
        self.def
            .fields
            .iter()
            .position(|f| f.json == json && f.k != K::Sugar)
    }

    fn find_yaml(&self, yaml: &str) -> Option<usize> {
        self.def.fields.iter().position(|f| f.yaml == yaml)
    }

    /// A field by JSON key (the first declaration whose value is set, else the first).
    pub fn get(&self, json: &str) -> Option<&G> {
        self.def
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.json == json && f.k != K::Sugar)
            .find_map(|(i, _)| self.vals[i].as_ref())
    }

    pub fn get_mut(&mut self, json: &str) -> Option<&mut G> {
        let i = self
            .def
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.json == json && f.k != K::Sugar)
            .find(|(i, _)| self.vals[*i].is_some())
            .map(|(i, _)| i)?;
        self.vals[i].as_mut()
    }

    pub fn sugar(&self, yaml: &str) -> Option<&G> {
        let i = self
            .def
            .fields
            .iter()
            .position(|f| f.yaml == yaml && f.k == K::Sugar)?;
        self.vals[i].as_ref()
    }

    pub fn sugar_pos(&self, yaml: &str) -> Pos {
        self.find_yaml(yaml).map(|i| self.pos[i]).unwrap_or(self.at)
    }

    pub fn pos_of(&self, json: &str) -> Pos {
        self.def
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| f.json == json)
            .find(|(i, _)| self.vals[*i].is_some())
            .map(|(i, _)| self.pos[i])
            .unwrap_or(self.at)
    }

    /// Sets a field for spec minor `minor` (the declaration valid there).
    pub fn set(&mut self, json: &str, minor: u8, v: G) {
        let i = self
            .def
            .idx(json, minor)
            .or_else(|| self.find(json))
            .unwrap_or_else(|| panic!("{} has no field {json}", self.def.name));
        self.vals[i] = Some(v);
    }

    pub fn set_at(&mut self, json: &str, minor: u8, v: G, pos: Pos) {
        let i = self
            .def
            .idx(json, minor)
            .or_else(|| self.find(json))
            .unwrap_or_else(|| panic!("{} has no field {json}", self.def.name));
        self.vals[i] = Some(v);
        self.pos[i] = pos;
    }

    pub fn str(&self, json: &str) -> Option<&str> {
        match self.get(json) {
            Some(G::Str(s)) => Some(s),
            _ => None,
        }
    }

    pub fn int(&self, json: &str) -> Option<i64> {
        match self.get(json) {
            Some(G::Int(i)) => Some(*i),
            _ => None,
        }
    }

    pub fn boolean(&self, json: &str) -> Option<bool> {
        match self.get(json) {
            Some(G::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    pub fn obj(&self, json: &str) -> Option<&Obj> {
        match self.get(json) {
            Some(G::Obj(o)) => Some(o),
            _ => None,
        }
    }

    /// The nested struct, created (empty) when unset.
    pub fn obj_mut(&mut self, json: &str, minor: u8) -> &mut Obj {
        let i = self
            .def
            .idx(json, minor)
            .unwrap_or_else(|| panic!("{} has no field {json} in 3.{minor}", self.def.name));
        if self.vals[i].is_none() {
            let T::Obj(d) = self.def.fields[i].t else {
                panic!("{json} is not a struct")
            };
            self.vals[i] = Some(G::Obj(Obj::new(d, self.pos[i])));
        }
        match self.vals[i].as_mut() {
            Some(G::Obj(o)) => o,
            _ => unreachable!(),
        }
    }

    pub fn list(&self, json: &str) -> &[(G, Pos)] {
        match self.get(json) {
            Some(G::List(l)) => l,
            _ => &[],
        }
    }

    pub fn list_mut(&mut self, json: &str, minor: u8) -> &mut Vec<(G, Pos)> {
        let i = self
            .def
            .idx(json, minor)
            .unwrap_or_else(|| panic!("{} has no field {json} in 3.{minor}", self.def.name));
        if self.vals[i].is_none() {
            self.vals[i] = Some(G::List(Vec::new()));
        }
        match self.vals[i].as_mut() {
            Some(G::List(l)) => l,
            _ => unreachable!(),
        }
    }

    /// Go's zero value test for a struct: every field unset or zero (a set pointer is not).
    pub fn is_zero(&self) -> bool {
        self.def
            .fields
            .iter()
            .zip(&self.vals)
            .all(|(f, v)| match (f.k, v) {
                (_, None) => true,
                (K::Sugar, _) => true,
                (K::Ptr | K::PtrNull, Some(_)) => false,
                (_, Some(v)) => v.is_zero(),
            })
    }
}

impl G {
    pub fn is_zero(&self) -> bool {
        match self {
            G::Str(s) => s.is_empty(),
            G::Int(i) => *i == 0,
            G::Bool(b) => !*b,
            G::List(l) => l.is_empty(),
            G::Obj(o) => o.is_zero(),
        }
    }
    pub fn as_obj(&self) -> Option<&Obj> {
        match self {
            G::Obj(o) => Some(o),
            _ => None,
        }
    }
    pub fn as_obj_mut(&mut self) -> Option<&mut Obj> {
        match self {
            G::Obj(o) => Some(o),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            G::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Writes `s` as a Go `encoding/json` string: `<`, `>`, `&`, U+2028 and U+2029 escaped.
pub fn go_string(out: &mut String, s: &str) {
    spec::work::add(s.len());
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go's JSON of `o` for spec minor `minor`; `indent` as `json.MarshalIndent(v, "", "  ")`.
pub fn to_json(o: &Obj, minor: u8, pretty: bool) -> String {
    let mut out = String::new();
    write_obj(&mut out, o, minor, pretty, 0);
    out
}

fn newline(out: &mut String, pretty: bool, depth: usize) {
    if pretty {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    }
}

fn write_obj(out: &mut String, o: &Obj, minor: u8, pretty: bool, depth: usize) {
    out.push('{');
    let mut first = true;
    for (f, v) in o.def.fields.iter().zip(&o.vals) {
        if f.k == K::Sugar || f.since > minor || minor > f.until {
            continue;
        }
        let zero_obj;
        let v: Option<&G> = match (f.k, v) {
            (K::Ptr, Some(v)) => Some(v),
            (K::Ptr, None) => continue,
            (K::PtrNull, v) => v.as_ref(),
            (K::Req, Some(v)) => Some(v),
            (K::Req, None) => {
                zero_obj = match f.t {
                    T::Str => G::Str(String::new()),
                    T::Int => G::Int(0),
                    T::Bool => G::Bool(false),
                    T::Obj(d) => G::Obj(Obj::new(d, Pos::default())),
                    // A nil slice without omitempty: `null`.
                    T::ListStr | T::ListObj(_) => {
                        if !first {
                            out.push(',');
                        }
                        first = false;
                        newline(out, pretty, depth + 1);
                        go_string(out, f.json);
                        out.push_str(if pretty { ": null" } else { ":null" });
                        continue;
                    }
                };
                Some(&zero_obj)
            }
            (K::Zero, Some(v)) if !v.is_zero() => Some(v),
            (K::Zero, _) => continue,
            (K::Sugar, _) => continue,
        };
        if !first {
            out.push(',');
        }
        first = false;
        newline(out, pretty, depth + 1);
        go_string(out, f.json);
        out.push(':');
        if pretty {
            out.push(' ');
        }
        match v {
            None => out.push_str("null"),
            Some(v) => write_val(out, v, minor, pretty, depth + 1),
        }
    }
    if !first {
        newline(out, pretty, depth);
    }
    out.push('}');
}

fn write_val(out: &mut String, v: &G, minor: u8, pretty: bool, depth: usize) {
    match v {
        G::Str(s) => go_string(out, s),
        G::Int(i) => out.push_str(&i.to_string()),
        G::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        G::Obj(o) => write_obj(out, o, minor, pretty, depth),
        G::List(l) => {
            out.push('[');
            for (i, (v, _)) in l.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, pretty, depth + 1);
                write_val(out, v, minor, pretty, depth + 1);
            }
            if !l.is_empty() {
                newline(out, pretty, depth);
            }
            out.push(']');
        }
    }
}
