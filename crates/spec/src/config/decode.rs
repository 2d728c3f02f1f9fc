//! Decoding a parsed JSON tree into the config model: the primitives (strings, booleans,
//! integers, lists, objects) that the decoders generated from the declarations (`spec`) are
//! made of. The decoder knows the newest schema; which fields a declared version may use is
//! checked afterwards (`version::check`). Unknown keys are warnings; wrong types are errors.

use super::diag::{Diagnostic, Path, Seg};
use super::spec::{Cursor, Spec, Step};
use super::types::Config;
use crate::json::{Kind, Member, Number, Value};

pub struct Decoder {
    at: Cursor,
    pub diags: Vec<Diagnostic>,
}

/// An object being decoded: tracks which members were consumed so the rest can be warned
/// about as unknown keys.
pub(crate) struct Obj<'v> {
    members: &'v mut [Member],
    used: Vec<bool>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Decoder {
            at: Cursor::new(),
            diags: Vec::new(),
        }
    }

    fn path(&self) -> Path {
        self.at.path()
    }

    fn error(&mut self, msg: impl Into<String>) {
        let d = Diagnostic::error(self.path(), msg);
        self.diags.push(d);
    }

    fn type_error(&mut self, want: &str, v: &Value) {
        self.error(format!("expected {want}, found {}", v.kind.type_name()));
    }

    /// Opens `v` as an object; null counts as absent.
    fn obj<'v>(&mut self, v: &'v mut Value) -> Option<Obj<'v>> {
        match v.kind {
            Kind::Object(_) => {}
            Kind::Null => return None,
            _ => {
                self.type_error("an object", v);
                return None;
            }
        }
        match &mut v.kind {
            Kind::Object(members) => {
                let used = vec![false; members.len()];
                Some(Obj { members, used })
            }
            _ => None,
        }
    }

    fn finish(&mut self, o: Obj<'_>) {
        for (m, used) in o.members.iter().zip(o.used) {
            crate::work::add(1);
            if !used {
                let mut p = self.path();
                p.0.push(Seg::Key(m.key.clone()));
                let mut d = Diagnostic::warning(p, format!("unknown key {:?}", m.key));
                d.offset = Some(m.key_pos);
                self.diags.push(d);
            }
        }
    }

    /// Index of the member `key`, marked as used; `None` when absent or null.
    fn take(&mut self, o: &mut Obj<'_>, key: &'static str) -> Option<usize> {
        crate::work::add(o.members.len());
        let i = o.members.iter().position(|m| m.key == key)?;
        o.used[i] = true;
        if matches!(o.members[i].value.kind, Kind::Null) {
            None
        } else {
            Some(i)
        }
    }

    /// Runs `f` with `key` pushed on the path if the key is present. Decoding moves strings
    /// out of the tree (no copies); the tree keeps its shape and positions for diagnostics.
    fn with<T>(
        &mut self,
        o: &mut Obj<'_>,
        key: &'static str,
        f: impl FnOnce(&mut Self, &mut Value) -> Option<T>,
    ) -> Option<T> {
        let i = self.take(o, key)?;
        self.at.push(Step::Key(key));
        let r = f(self, &mut o.members[i].value);
        self.at.pop();
        r
    }

    /// Moves a string out of `v` (no copy).
    fn string(&mut self, v: &mut Value) -> Option<String> {
        match &mut v.kind {
            Kind::String(s) => Some(std::mem::take(s)),
            _ => {
                self.type_error("a string", v);
                None
            }
        }
    }

    pub(crate) fn str(&mut self, o: &mut Obj<'_>, key: &'static str) -> Option<String> {
        self.with(o, key, Self::string)
    }

    /// A string that must be present (required key fields). Absent becomes "" and an error.
    pub(crate) fn req_str(&mut self, o: &mut Obj<'_>, key: &'static str) -> String {
        match self.str(o, key) {
            Some(s) => s,
            None => {
                if !o
                    .members
                    .iter()
                    .any(|m| m.key == key && !matches!(m.value.kind, Kind::Null))
                {
                    self.at.push(Step::Key(key));
                    self.error(format!("{key} is required"));
                    self.at.pop();
                }
                String::new()
            }
        }
    }

    pub(crate) fn bool(&mut self, o: &mut Obj<'_>, key: &'static str) -> Option<bool> {
        self.with(o, key, |d, v| match &v.kind {
            Kind::Bool(b) => Some(*b),
            _ => {
                d.type_error("a boolean", v);
                None
            }
        })
    }

    pub(crate) fn int(&mut self, o: &mut Obj<'_>, key: &'static str) -> Option<i64> {
        self.with(o, key, |d, v| match &v.kind {
            Kind::Number(Number::Int(i)) => Some(*i),
            Kind::Number(Number::Float(f)) => {
                if f.fract() == 0.0 && f.abs() < 9.0e18 {
                    Some(*f as i64)
                } else if f.fract() == 0.0 {
                    d.error("number out of range");
                    None
                } else {
                    d.error("expected an integer, found a fraction");
                    None
                }
            }
            _ => {
                d.type_error("an integer", v);
                None
            }
        })
    }

    fn list<T>(
        &mut self,
        o: &mut Obj<'_>,
        key: &'static str,
        mut f: impl FnMut(&mut Self, &mut Value) -> Option<T>,
    ) -> Vec<T> {
        self.with(o, key, |d, v| match &mut v.kind {
            Kind::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter_mut().enumerate() {
                    crate::work::add(1);
                    d.at.push(Step::Index(i));
                    if let Some(t) = f(d, item) {
                        out.push(t);
                    }
                    d.at.pop();
                }
                Some(out)
            }
            _ => {
                d.type_error("an array", v);
                None
            }
        })
        .unwrap_or_default()
    }

    pub(crate) fn str_list(&mut self, o: &mut Obj<'_>, key: &'static str) -> Vec<String> {
        self.list(o, key, Self::string)
    }

    fn sub<T: Default>(
        &mut self,
        o: &mut Obj<'_>,
        key: &'static str,
        f: impl FnOnce(&mut Self, &mut Value) -> T,
    ) -> T {
        self.with(o, key, |d, v| Some(f(d, v))).unwrap_or_default()
    }

    // ---- declared structs (see `spec`) ----

    /// Decodes a whole config.
    pub fn config(&mut self, v: &mut Value) -> Config {
        self.object(v)
    }

    /// Decodes `v` as the struct `T`; null counts as absent (the empty struct).
    pub(crate) fn object<T: Spec>(&mut self, v: &mut Value) -> T {
        let Some(mut o) = self.obj(v) else {
            return T::default();
        };
        let r = T::decode_members(self, &mut o);
        self.finish(o);
        r
    }

    /// The struct member `key` of `o`.
    pub(crate) fn nested<T: Spec>(&mut self, o: &mut Obj<'_>, key: &'static str) -> T {
        self.sub(o, key, Self::object)
    }

    /// The list of structs `key` of `o`. An item that is null or not an object is dropped
    /// (after a type error for the latter) unless `T` keeps bad items as empty structs.
    pub(crate) fn objects<T: Spec>(&mut self, o: &mut Obj<'_>, key: &'static str) -> Vec<T> {
        self.list(o, key, |d, v| {
            if T::KEEP_BAD_ITEMS {
                return Some(d.object(v));
            }
            let mut o = d.obj(v)?;
            let r = T::decode_members(d, &mut o);
            d.finish(o);
            Some(r)
        })
    }
}
