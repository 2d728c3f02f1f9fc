//! One declaration per spec struct (`spec!`, used in `types.rs`). From the declaration come:
//! the struct itself (serialized with serde, each field under its JSON key, unset fields
//! skipped), its decoder (`decode`), its merge (`merge`), `is_empty`, its list key (`Keyed`)
//! and its place in the version table (`version`: which spec minor version introduced a
//! field). Validation and value-dependent version rules visit the model through `walk`,
//! which hands each struct to a `Visitor` with the JSON path it sits at. The macro can be
//! used for more than one model (e.g. Butane's sugar), each struct declared once.
//!
//! A struct is declared as
//!
//! ```text
//! /// Doc comment.
//! pub struct Luks [label "luks "] {
//!     /// Doc comment.
//!     cex: Cex = "cex" [nested, since 5],
//!     name: String = "name" [key, required],
//! }
//! ```
//!
//! Struct options (in `[...]` after the name, all optional):
//! - `label "…"`: prefix of the feature name in version errors (`"luks "` + `"cex"` reads
//!   "luks cex: needs spec version 3.5.0 or later");
//! - `premerge NAME`: `merge::NAME(parent, child)` runs before the fields merge (rules that
//!   span fields, such as files/directories/links sharing one path space);
//! - `keep_bad_items`: in a list, an item that is null or not an object decodes as an empty
//!   struct instead of being dropped (resources, as before).
//!
//! Field options (in `[...]` after the JSON key): first the merge rule, a function in
//! `merge` called as `merge::RULE(&mut parent.field, &child.field)`:
//! - `opt`: a value the child sets replaces the parent's;
//! - `key`: the entry's list key (generates `Keyed`); an optional one merges like `opt`, a
//!   required one is equal in merged entries;
//! - `keyed`: a list of entries matched by their key, merged field by field;
//! - `by_path`: `keyed` with an index, for the 10,000-entry lists of files/directories/links;
//! - `append`: an argument list, appended;
//! - `set`: a list of strings, new values appended once;
//! - `nested`: a struct, merged field by field;
//! - `headers`: HTTP headers, a child header without a value removes the parent's;
//! - `ignore`: not merged (`ignition.version`);
//!
//! then `since N` when spec 3.N.0 introduced the field (absent: 3.0.0), and `required` for a
//! string that must be present (absent is an error "KEY is required").

use super::decode::{Decoder, Obj};
use super::diag::{Path, Seg};

/// One step of a JSON path while decoding or walking: keys are the declared ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Key(&'static str),
    Index(usize),
}

/// The JSON path of the value being decoded or visited.
#[derive(Debug, Default)]
pub(crate) struct Cursor(Vec<Step>);

impl Cursor {
    pub fn new() -> Self {
        Cursor(Vec::with_capacity(16))
    }
    pub fn push(&mut self, s: Step) {
        self.0.push(s);
    }
    pub fn pop(&mut self) {
        self.0.pop();
    }
    pub fn path(&self) -> Path {
        Path(
            self.0
                .iter()
                .map(|s| match s {
                    Step::Key(k) => Seg::Key((*k).to_string()),
                    Step::Index(i) => Seg::Index(*i),
                })
                .collect(),
        )
    }
    /// Whether the path starts at the top-level key `k`.
    pub fn under(&self, k: &str) -> bool {
        matches!(self.0.first(), Some(Step::Key(x)) if *x == k)
    }
}

/// What a field's type knows: how it decodes, whether it is unset (not serialized, empty for
/// `is_empty`, not a use of its version), and how to walk into it.
pub(crate) trait Field: Sized {
    fn decode(d: &mut Decoder, o: &mut Obj<'_>, key: &'static str) -> Self;
    fn is_unset(&self) -> bool;
    fn walk<V: Visitor>(&self, _at: &mut Cursor, _v: &mut V) {}
}

/// A declared struct (a JSON object).
pub(crate) trait Spec: Default + 'static {
    /// See the `keep_bad_items` struct option.
    const KEEP_BAD_ITEMS: bool;
    /// Whether no field is set.
    fn is_empty(&self) -> bool;
    /// Decodes the declared members of `o`, in declaration order.
    fn decode_members(d: &mut Decoder, o: &mut Obj<'_>) -> Self;
    /// Walks the fields, then hands `self` to the visitor.
    fn walk_members<V: Visitor>(&self, at: &mut Cursor, v: &mut V);
}

/// Something that looks at a whole config: validation, value-dependent version rules.
pub(crate) trait Visitor {
    /// A set field that spec 3.`minor`.0 introduced (`minor` > 0), named `label` + `key`.
    fn since(&mut self, _at: &Cursor, _minor: u8, _label: &'static str, _key: &'static str) {}
    /// A struct, after its fields. Visitors pick the types they check with
    /// `(node as &dyn Any).downcast_ref::<T>()`, which the compiler resolves per type.
    fn node<T: Spec>(&mut self, _at: &Cursor, _node: &T) {}
}

impl Field for Option<String> {
    fn decode(d: &mut Decoder, o: &mut Obj<'_>, key: &'static str) -> Self {
        d.str(o, key)
    }
    fn is_unset(&self) -> bool {
        self.is_none()
    }
}

impl Field for Option<bool> {
    fn decode(d: &mut Decoder, o: &mut Obj<'_>, key: &'static str) -> Self {
        d.bool(o, key)
    }
    fn is_unset(&self) -> bool {
        self.is_none()
    }
}

impl Field for Option<i64> {
    fn decode(d: &mut Decoder, o: &mut Obj<'_>, key: &'static str) -> Self {
        d.int(o, key)
    }
    fn is_unset(&self) -> bool {
        self.is_none()
    }
}

/// A plain string is always written out; declared `required` it must be present.
impl Field for String {
    fn decode(d: &mut Decoder, o: &mut Obj<'_>, key: &'static str) -> Self {
        d.str(o, key).unwrap_or_default()
    }
    fn is_unset(&self) -> bool {
        false
    }
}

impl Field for Vec<String> {
    fn decode(d: &mut Decoder, o: &mut Obj<'_>, key: &'static str) -> Self {
        d.str_list(o, key)
    }
    fn is_unset(&self) -> bool {
        self.is_empty()
    }
}

/// A struct member.
impl<T: Spec> Field for T {
    fn decode(d: &mut Decoder, o: &mut Obj<'_>, key: &'static str) -> Self {
        d.nested(o, key)
    }
    fn is_unset(&self) -> bool {
        self.is_empty()
    }
    fn walk<V: Visitor>(&self, at: &mut Cursor, v: &mut V) {
        self.walk_members(at, v)
    }
}

/// A list of structs.
impl<T: Spec> Field for Vec<T> {
    fn decode(d: &mut Decoder, o: &mut Obj<'_>, key: &'static str) -> Self {
        d.objects(o, key)
    }
    fn is_unset(&self) -> bool {
        self.is_empty()
    }
    fn walk<V: Visitor>(&self, at: &mut Cursor, v: &mut V) {
        for (i, x) in self.iter().enumerate() {
            at.push(Step::Index(i));
            x.walk_members(at, v);
            at.pop();
        }
    }
}

/// Walks a field (used by the generated `walk_members`): reports it to the visitor when it
/// is set and newer than 3.0.0, then walks into it.
#[inline]
pub(crate) fn walk_field<F: Field, V: Visitor>(
    f: &F,
    minor: u8,
    label: &'static str,
    key: &'static str,
    at: &mut Cursor,
    v: &mut V,
) {
    at.push(Step::Key(key));
    if minor > 0 && !f.is_unset() {
        v.since(at, minor, label, key);
    }
    f.walk(at, v);
    at.pop();
}

/// Walks a whole config.
pub(crate) fn walk<V: Visitor>(c: &super::types::Config, v: &mut V) {
    c.walk_members(&mut Cursor::new(), v);
}

/// The version table entry of a field: `since N`, or 0.
#[doc(hidden)]
macro_rules! __spec_since {
    () => { 0 };
    (since $n:literal $($rest:tt)*) => { $n };
    ($x:tt $($rest:tt)*) => { $crate::config::spec::__spec_since!($($rest)*) };
}

/// The decoder of a field: `required` strings, or the one its type has.
#[doc(hidden)]
macro_rules! __spec_decode {
    ($d:ident, $o:ident, $k:literal, $t:ty;) => {
        <$t as $crate::config::spec::Field>::decode($d, $o, $k)
    };
    ($d:ident, $o:ident, $k:literal, $t:ty; required $($rest:tt)*) => {
        $d.req_str($o, $k)
    };
    ($d:ident, $o:ident, $k:literal, $t:ty; $x:tt $($rest:tt)*) => {
        $crate::config::spec::__spec_decode!($d, $o, $k, $t; $($rest)*)
    };
}

/// `impl Keyed` for the field whose merge rule is `key`.
#[doc(hidden)]
macro_rules! __spec_keyed {
    ($n:ident, $f:ident, key) => {
        impl $crate::config::merge::Keyed for $n {
            fn key(&self) -> Option<$crate::config::merge::Key<'_>> {
                $crate::config::merge::KeyField::as_key(&self.$f)
            }
        }
    };
    ($n:ident, $f:ident, $other:ident) => {};
}

/// Struct option `label "…"`.
#[doc(hidden)]
macro_rules! __spec_label {
    () => { "" };
    (label $l:literal $($rest:tt)*) => { $l };
    ($x:tt $($rest:tt)*) => { $crate::config::spec::__spec_label!($($rest)*) };
}

/// Struct option `premerge NAME`.
#[doc(hidden)]
macro_rules! __spec_premerge {
    ($t:ty;) => { None::<fn(&mut $t, &$t)> };
    ($t:ty; premerge $f:ident $($rest:tt)*) => {
        Some($crate::config::merge::$f as fn(&mut $t, &$t))
    };
    ($t:ty; $x:tt $($rest:tt)*) => { $crate::config::spec::__spec_premerge!($t; $($rest)*) };
}

/// Struct option `keep_bad_items`.
#[doc(hidden)]
macro_rules! __spec_keep_bad_items {
    () => { false };
    (keep_bad_items $($rest:tt)*) => { true };
    ($x:tt $($rest:tt)*) => { $crate::config::spec::__spec_keep_bad_items!($($rest)*) };
}

/// Declares the spec structs; see the module documentation.
macro_rules! spec {
    ($(
        $(#[$sm:meta])*
        pub struct $name:ident $([$($so:tt)*])? {
            $(
                $(#[$fm:meta])*
                $f:ident : $t:ty = $json:literal [$rule:ident $($fo:tt)*]
            ),* $(,)?
        }
    )*) => {
        $(
            $(#[$sm])*
            #[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
            pub struct $name {
                $(
                    $(#[$fm])*
                    #[serde(
                        rename = $json,
                        skip_serializing_if = "crate::config::spec::Field::is_unset"
                    )]
                    pub $f: $t,
                )*
            }

            impl $name {
                /// Whether no field is set (as written out: nothing to serialize).
                pub fn is_empty(&self) -> bool {
                    $( $crate::config::spec::Field::is_unset(&self.$f) )&&*
                }
            }

            impl $crate::config::spec::Spec for $name {
                const KEEP_BAD_ITEMS: bool =
                    $crate::config::spec::__spec_keep_bad_items!($($($so)*)?);
                fn is_empty(&self) -> bool {
                    $name::is_empty(self)
                }
                fn decode_members(
                    d: &mut $crate::config::decode::Decoder,
                    o: &mut $crate::config::decode::Obj<'_>,
                ) -> Self {
                    $name {
                        $(
                            $f: $crate::config::spec::__spec_decode!(d, o, $json, $t; $($fo)*),
                        )*
                    }
                }
                fn walk_members<V: $crate::config::spec::Visitor>(
                    &self,
                    at: &mut $crate::config::spec::Cursor,
                    v: &mut V,
                ) {
                    const LABEL: &str = $crate::config::spec::__spec_label!($($($so)*)?);
                    $(
                        $crate::config::spec::walk_field(
                            &self.$f,
                            $crate::config::spec::__spec_since!($($fo)*),
                            LABEL,
                            $json,
                            at,
                            v,
                        );
                    )*
                    v.node(at, self);
                }
            }

            impl $crate::config::merge::Merge for $name {
                fn merge_from(&mut self, c: &Self) {
                    if let Some(pre) = $crate::config::spec::__spec_premerge!($name; $($($so)*)?) {
                        pre(self, c);
                    }
                    $( $crate::config::merge::$rule(&mut self.$f, &c.$f); )*
                }
            }

            $( $crate::config::spec::__spec_keyed!($name, $f, $rule); )*
        )*

    };
}

pub(crate) use {
    __spec_decode, __spec_keep_bad_items, __spec_keyed, __spec_label, __spec_premerge,
    __spec_since, spec,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::merge::Merge;

    // A small model of its own, declared once, exercising every option of the macro.
    spec! {
        pub struct Outer [label "outer "] {
            entries: Vec<Entry> = "entries" [keyed, since 2],
            inner: Inner = "inner" [nested],
            mode: Option<i64> = "mode" [opt],
            args: Vec<String> = "args" [append],
            tags: Vec<String> = "tags" [set, since 1],
            res: Vec<Res> = "res" [keyed],
        }

        pub struct Entry [label "entry "] {
            name: String = "name" [key, required],
            flag: Option<bool> = "flag" [opt, since 3],
        }

        pub struct Inner {
            text: Option<String> = "textValue" [opt],
        }

        pub struct Res [keep_bad_items] {
            src: Option<String> = "src" [key],
        }
    }

    fn decode(text: &str) -> (Outer, Vec<String>) {
        let mut tree = crate::json::parse(text.as_bytes()).unwrap();
        let mut d = Decoder::new();
        let o: Outer = d.object(&mut tree);
        let diags = d.diags.iter().map(|x| x.to_string()).collect();
        (o, diags)
    }

    fn entry(name: &str, flag: Option<bool>) -> Entry {
        Entry {
            name: name.into(),
            flag,
        }
    }

    #[test]
    fn decodes_from_the_declaration() {
        let (o, diags) = decode(
            r#"{"entries": [{"name": "a", "flag": true}, {"flag": false}, null, 3],
                "inner": {"textValue": "t", "x": 1}, "mode": "no", "tags": ["a", 1],
                "res": [null, {"src": "s"}], "args": null}"#,
        );
        assert_eq!(
            diags,
            [
                "error at $.entries.1.name: name is required",
                "error at $.entries.3: expected an object, found number",
                "warning at $.inner.x: unknown key \"x\"",
                "error at $.mode: expected an integer, found string",
                "error at $.tags.1: expected a string, found number",
            ]
        );
        let want = Outer {
            // A null entry is dropped; a resource-like struct keeps it as an empty one.
            entries: vec![entry("a", Some(true)), entry("", Some(false))],
            inner: Inner {
                text: Some("t".into()),
            },
            mode: None,
            args: vec![],
            tags: vec!["a".into()],
            res: vec![
                Res::default(),
                Res {
                    src: Some("s".into()),
                },
            ],
        };
        assert_eq!(o, want);
    }

    #[test]
    fn serializes_under_json_keys_skipping_unset_fields() {
        let o = Outer {
            entries: vec![entry("", None)],
            inner: Inner {
                text: Some("t".into()),
            },
            tags: vec!["x".into()],
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"entries":[{"name":""}],"inner":{"textValue":"t"},"tags":["x"]}"#
        );
        assert!(Outer::default().is_empty());
        assert!(!o.is_empty());
        assert!(!Entry::default().is_empty(), "a plain string is always set");
    }

    #[test]
    fn merges_by_the_declared_rules() {
        let (mut p, _) = decode(
            r#"{"entries": [{"name": "a", "flag": true}], "mode": 1, "args": ["-x"],
                "tags": ["t"], "res": [{"src": "s"}, {}], "inner": {"textValue": "p"}}"#,
        );
        let (c, _) = decode(
            r#"{"entries": [{"name": "b"}, {"name": "a", "flag": false}], "args": ["-x"],
                "tags": ["t", "u"], "res": [{"src": "s"}, {}, {"src": "r"}], "inner": {}}"#,
        );
        p.merge_from(&c);
        let (want, _) = decode(
            r#"{"entries": [{"name": "a", "flag": false}, {"name": "b"}], "mode": 1,
                "args": ["-x", "-x"], "tags": ["t", "u"],
                "res": [{"src": "s"}, {}, {}, {"src": "r"}], "inner": {"textValue": "p"}}"#,
        );
        assert_eq!(p, want);
    }

    #[derive(Default)]
    struct Seen(Vec<String>);

    impl Visitor for Seen {
        fn since(&mut self, at: &Cursor, minor: u8, label: &'static str, key: &'static str) {
            self.0.push(format!("{} 3.{minor} {label}{key}", at.path()));
        }
        fn node<T: Spec>(&mut self, at: &Cursor, _: &T) {
            self.0
                .push(format!("{} {}", at.path(), std::any::type_name::<T>()));
        }
    }

    #[test]
    fn walks_fields_in_order_with_their_versions() {
        let (o, _) = decode(r#"{"tags": ["t"], "entries": [{"name": "a", "flag": true}]}"#);
        let mut seen = Seen::default();
        o.walk_members(&mut Cursor::new(), &mut seen);
        let short: Vec<String> = seen
            .0
            .iter()
            .map(|s| s.replace(concat!(module_path!(), "::"), ""))
            .collect();
        assert_eq!(
            short,
            [
                "$.entries 3.2 outer entries",
                "$.entries.0.flag 3.3 entry flag",
                "$.entries.0 Entry",
                "$.inner Inner",
                "$.tags 3.1 outer tags",
                "$ Outer",
            ]
        );
    }
}
