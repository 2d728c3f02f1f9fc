//! Checks real answers against an OpenAPI 3.0 document (docs/openapi.json): the operation of
//! a path and method, the response of a status, its media type, and its body against the
//! response's schema, with the small part of JSON Schema the document uses (`$ref` into
//! `components/schemas`, `type`, `nullable`, `properties`, `required`,
//! `additionalProperties`, `items`, `enum`, `oneOf`, `minimum`, `format: date-time`). What
//! was checked is kept, so a test can require every documented response to have been seen.

use std::collections::BTreeSet;

use serde_json::Value;

pub struct Document {
    doc: Value,
    /// (path template, method, status) of every response checked.
    seen: BTreeSet<(String, String, String)>,
}

impl Document {
    pub fn load(path: &std::path::Path) -> Document {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let doc: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        assert!(
            doc["openapi"]
                .as_str()
                .is_some_and(|v| v.starts_with("3.0.")),
            "{}: not OpenAPI 3.0",
            path.display()
        );
        Document::from_value(doc)
    }

    pub fn from_value(doc: Value) -> Document {
        Document {
            doc,
            seen: BTreeSet::new(),
        }
    }

    /// The schema `components/schemas/<name>`.
    pub fn schema(&self, name: &str) -> Value {
        let s = &self.doc["components"]["schemas"][name];
        assert!(s.is_object(), "no schema {name}");
        s.clone()
    }

    /// The document's path template that `path` (no query) is an instance of.
    fn template(&self, path: &str) -> Option<String> {
        let paths = self.doc["paths"].as_object()?;
        if paths.contains_key(path) {
            return Some(path.to_string());
        }
        let segs: Vec<&str> = path.split('/').collect();
        paths
            .keys()
            .find(|t| {
                let ts: Vec<&str> = t.split('/').collect();
                ts.len() == segs.len()
                    && ts.iter().zip(&segs).all(|(t, s)| {
                        (t.starts_with('{') && t.ends_with('}') && !s.is_empty()) || t == s
                    })
            })
            .cloned()
    }

    /// Checks one answer: `status`, its `Content-Type` and `body`, to `method path`. Panics
    /// naming what does not match the document.
    pub fn check(
        &mut self,
        method: &str,
        path: &str,
        status: u16,
        content_type: Option<&str>,
        body: &[u8],
    ) {
        let what = format!("{method} {path} → {status}");
        let path = path.split('?').next().unwrap_or_default();
        let t = self
            .template(path)
            .unwrap_or_else(|| panic!("{what}: the path is not in the document"));
        let op = &self.doc["paths"][&t][method.to_lowercase()];
        assert!(
            op.is_object(),
            "{what}: {method} {t} is not in the document"
        );
        let resp = self.deref(&op["responses"][status.to_string()]).clone();
        assert!(
            resp.is_object(),
            "{what}: status {status} is not documented for {method} {t}"
        );
        self.seen
            .insert((t.clone(), method.to_lowercase(), status.to_string()));
        let Some(content) = resp["content"].as_object() else {
            assert!(body.is_empty(), "{what}: a body where none is documented");
            return;
        };
        let media = content_type
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let Some(m) = content.get(&media) else {
            panic!(
                "{what}: Content-Type {media:?} is not documented ({:?})",
                content.keys().collect::<Vec<_>>()
            );
        };
        let schema = &m["schema"];
        if media == "application/json" || media.ends_with("+json") {
            let v: Value = serde_json::from_slice(body)
                .unwrap_or_else(|e| panic!("{what}: the body is not JSON: {e}"));
            if let Err(e) = self.validate(schema, &v, "$") {
                panic!("{what}: {e}\nbody: {v:#}");
            }
        } else if !schema.is_null() {
            let s = Value::String(String::from_utf8_lossy(body).into_owned());
            if let Err(e) = self.validate(schema, &s, "$") {
                panic!("{what}: {e}");
            }
        }
    }

    /// Every (path, method, status) the document has that no [`Document::check`] saw.
    pub fn unchecked(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (p, ops) in self.doc["paths"].as_object().into_iter().flatten() {
            for (m, op) in ops.as_object().into_iter().flatten() {
                for s in op["responses"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|x| x.0)
                {
                    if !self.seen.contains(&(p.clone(), m.clone(), s.clone())) {
                        out.push(format!("{} {p} → {s}", m.to_uppercase()));
                    }
                }
            }
        }
        out
    }

    /// `v` itself, or what its `$ref` names.
    fn deref<'a>(&'a self, v: &'a Value) -> &'a Value {
        match v["$ref"].as_str() {
            Some(r) => {
                let ptr = r
                    .strip_prefix('#')
                    .unwrap_or_else(|| panic!("{r}: not local"));
                let t = self
                    .doc
                    .pointer(ptr)
                    .unwrap_or_else(|| panic!("{r}: not in the document"));
                self.deref(t)
            }
            None => v,
        }
    }

    /// Whether `v` (at `at`) is valid against `schema`; Err names the first place it is not.
    pub fn validate(&self, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
        let s = self.deref(schema);
        if v.is_null() && s["nullable"] == true {
            return Ok(());
        }
        if let Some(alts) = s["oneOf"].as_array() {
            let ok = alts
                .iter()
                .filter(|a| self.validate(a, v, at).is_ok())
                .count();
            if ok != 1 {
                let why: Vec<String> = alts
                    .iter()
                    .filter_map(|a| self.validate(a, v, at).err())
                    .collect();
                return Err(format!(
                    "{at}: matches {ok} of the oneOf alternatives, not 1 ({})",
                    why.join("; ")
                ));
            }
            return Ok(());
        }
        if let Some(e) = s["enum"].as_array()
            && !e.contains(v)
        {
            return Err(format!("{at}: {v} is not one of {e:?}"));
        }
        let ty = s["type"].as_str();
        let ok = match ty {
            None => true,
            Some("object") => v.is_object(),
            Some("array") => v.is_array(),
            Some("string") => v.is_string(),
            Some("integer") => v.is_u64() || v.is_i64(),
            Some("number") => v.is_number(),
            Some("boolean") => v.is_boolean(),
            Some(t) => return Err(format!("{at}: the document's type {t:?} is not known here")),
        };
        if !ok {
            return Err(format!("{at}: {v} is not of type {}", ty.unwrap_or("?")));
        }
        if let Some(min) = s["minimum"].as_f64()
            && v.as_f64().is_some_and(|n| n < min)
        {
            return Err(format!("{at}: {v} is below the minimum {min}"));
        }
        if s["format"] == "date-time" {
            let t = v.as_str().unwrap_or_default();
            if !rfc3339_utc(t) {
                return Err(format!("{at}: {t:?} is not an RFC 3339 time in UTC"));
            }
        }
        if let Some(items) = s.get("items") {
            for (i, x) in v.as_array().into_iter().flatten().enumerate() {
                self.validate(items, x, &format!("{at}[{i}]"))?;
            }
        }
        if let Some(o) = v.as_object() {
            let props = s["properties"].as_object();
            for r in s["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap_or_default();
                if !o.contains_key(r) {
                    return Err(format!("{at}: the required key {r:?} is missing"));
                }
            }
            for (k, x) in o {
                let here = format!("{at}.{k}");
                match props.and_then(|p| p.get(k)) {
                    Some(p) => self.validate(p, x, &here)?,
                    None => match s.get("additionalProperties") {
                        Some(Value::Bool(false)) => {
                            return Err(format!("{here}: a key the document does not have"));
                        }
                        Some(extra @ Value::Object(_)) => self.validate(extra, x, &here)?,
                        _ => {}
                    },
                }
            }
        }
        Ok(())
    }
}

/// `2026-12-03T07:00:00Z` or `2026-12-03T07:00:00.042Z`: RFC 3339, UTC.
pub fn rfc3339_utc(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let base = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    base && match &t[19..] {
        "Z" => true,
        f => f.len() > 2 && f.starts_with('.') && f.ends_with('Z') && digits(20..f.len() + 18),
    }
}
