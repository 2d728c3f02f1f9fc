//! Per-machine placeholders, `{{.key}}` (docs/serve.md, "Placeholders").
//!
//! A placeholder is exactly `{{.` + a key (a letter or `_`, then letters, digits and `_`) +
//! `}}`; any other text, `{{.a.b}}` or `{{ .a }}` included, is not one and stays as it is.
//! Placeholders are found and filled on the parsed config tree, never on its bytes: in JSON
//! string values only (a placeholder in an object key is an error), and inside data URLs
//! (`data:` strings: decoded, gunzipped when the object's `compression` is `gzip`, filled,
//! compressed again as Butane does and re-encoded as base64). The serializer escapes what a
//! value holds for where it lands, so quotes, backslashes, newlines or `{{` in a value land
//! literally; the text is filled in one pass, so a value is never expanded again.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

/// Largest data URL payload filled in, uncompressed (the agent's own config limit).
pub const MAX_PAYLOAD_BYTES: u64 = runtime::limits::DEFAULT_MAX_CONFIG_SIZE;

/// One placeholder found: its key and the JSON path of the string it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    pub key: String,
    pub path: String,
}

/// Why a tree cannot be filled: the JSON path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub path: String,
    pub message: String,
}

/// The placeholders of `s`: (start, end, key) of each, left to right.
pub fn find(s: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = s[from..].find("{{.") {
        let start = from + at;
        let rest = &s[start + 3..];
        let len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let key = &rest[..len];
        if rest[len..].starts_with("}}") && crate::source::selectors::valid_key(key) {
            let end = start + 3 + len + 2;
            out.push((start, end, key));
            from = end;
        } else {
            from = start + 1;
        }
    }
    out
}

/// `s` with each placeholder whose key `value` knows filled in, in one pass (a value is never
/// expanded again); others stay as they are. Err(key) for the first one `value` does not know
/// when `strict`.
pub fn fill_text<'a>(
    s: &str,
    value: &dyn Fn(&str) -> Option<&'a str>,
    strict: bool,
) -> Result<String, String> {
    let found = find(s);
    if found.is_empty() {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for (start, end, key) in found {
        match value(key) {
            Some(v) => {
                out.push_str(&s[last..start]);
                out.push_str(v);
                last = end;
            }
            None if strict => return Err(key.to_string()),
            None => {}
        }
    }
    out.push_str(&s[last..]);
    Ok(out)
}

fn push_key(path: &str, k: &str) -> String {
    let plain = !k.is_empty()
        && k.len() <= 64
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    format!("{path}.{}", if plain { k } else { "…" })
}

/// The path of key `k` under `path`; Err when the key holds a placeholder.
fn checked_key(path: &str, k: &str) -> Result<String, Error> {
    let p = push_key(path, k);
    if find(k).is_empty() {
        Ok(p)
    } else {
        Err(Error {
            path: p,
            message: "a placeholder may stand only in a string value, not in a key".into(),
        })
    }
}

/// What a string holds placeholders in: its text, or for a data URL (a string starting with
/// `data:`) its payload's text (gunzipped with `gzip`); None for a data URL that does not
/// decode or whose payload is not UTF-8 text (left as it is).
fn text_of(s: &str, gzip: bool) -> Option<Cow<'_, str>> {
    if !s.starts_with("data:") {
        return Some(Cow::Borrowed(s));
    }
    data_url_text(s, gzip).map(Cow::Owned)
}

/// A data URL's payload as text (gunzipped with `gzip`), when it is UTF-8.
fn data_url_text(s: &str, gzip: bool) -> Option<String> {
    let bytes = spec::encoding::data_url::decode(s).ok()?;
    let bytes = if gzip {
        butane::gunzip(&bytes, MAX_PAYLOAD_BYTES)?
    } else {
        bytes
    };
    String::from_utf8(bytes).ok()
}

/// The data URL `orig` with `text` as its payload: the same media type, base64, compressed
/// again as Butane does when `gzip`.
fn data_url_with(orig: &str, text: &str, gzip: bool) -> String {
    let header = orig["data:".len()..].split(',').next().unwrap_or("");
    let header = header.strip_suffix(";base64").unwrap_or(header).to_string();
    let payload = if gzip {
        butane::gzip_best(text.as_bytes())
    } else {
        text.as_bytes().to_vec()
    };
    format!(
        "data:{header};base64,{}",
        spec::encoding::data_url::base64_encode(&payload)
    )
}

fn is_gzip(parent: Option<&serde_json::Map<String, Value>>) -> bool {
    parent
        .and_then(|o| o.get("compression"))
        .and_then(Value::as_str)
        == Some("gzip")
}

/// Every placeholder of the tree `v` (strings and data URL payloads), with its path; Err for
/// a placeholder in an object key (its path).
pub fn scan(v: &Value) -> Result<Vec<Use>, Error> {
    let mut out = Vec::new();
    scan_at(v, "$", None, &mut out)?;
    Ok(out)
}

fn scan_at(
    v: &Value,
    path: &str,
    parent: Option<&serde_json::Map<String, Value>>,
    out: &mut Vec<Use>,
) -> Result<(), Error> {
    match v {
        Value::String(s) => {
            let text = text_of(s, is_gzip(parent)).unwrap_or_default();
            for (_, _, key) in find(&text) {
                out.push(Use {
                    key: key.to_string(),
                    path: path.to_string(),
                });
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                scan_at(x, &format!("{path}.{i}"), None, out)?;
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                let p = checked_key(path, k)?;
                scan_at(x, &p, Some(o), out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Fills every placeholder of the tree `v` from `values` (in strings, and in data URLs as the
/// module docs say). Err for a placeholder `values` lacks or one in a key, with its path.
pub fn fill(v: &mut Value, values: &BTreeMap<String, String>) -> Result<(), Error> {
    fill_at(v, "$", false, values)
}

fn fill_at(
    v: &mut Value,
    path: &str,
    gzip: bool,
    values: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let lookup = |k: &str| values.get(k).map(String::as_str);
    let missing = |key: String| Error {
        path: path.to_string(),
        message: format!("placeholder {{{{.{key}}}}} has no value"),
    };
    match v {
        Value::String(s) => {
            if !s.starts_with("data:") {
                if !find(s).is_empty() {
                    *s = fill_text(s, &lookup, true).map_err(missing)?;
                }
            } else if let Some(text) = data_url_text(s, gzip)
                && !find(&text).is_empty()
            {
                let filled = fill_text(&text, &lookup, true).map_err(missing)?;
                *s = data_url_with(s, &filled, gzip);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter_mut().enumerate() {
                fill_at(x, &format!("{path}.{i}"), false, values)?;
            }
        }
        Value::Object(o) => {
            let gz = is_gzip(Some(o));
            for (k, x) in o.iter_mut() {
                let p = checked_key(path, k)?;
                fill_at(x, &p, gz, values)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vals(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn syntax_is_closed() {
        let f: Vec<&str> = find("a{{.x}}{{.y_1}}{{ .z }}{{.a.b}}{{.}}{{.9}}{{{.w}}")
            .into_iter()
            .map(|(_, _, k)| k)
            .collect();
        assert_eq!(f, ["x", "y_1", "w"]);
        let v = vals(&[("x", "{{.y}}"), ("y", "no")]);
        let s = fill_text("{{.x}}-{{.y}}", &|k| v.get(k).map(String::as_str), true).unwrap();
        assert_eq!(s, "{{.y}}-no", "a value is not expanded again");
        assert_eq!(
            fill_text("{{.q}}", &|_| None, true).unwrap_err(),
            "q".to_string()
        );
        assert_eq!(fill_text("{{.q}}", &|_| None, false).unwrap(), "{{.q}}");
    }

    #[test]
    fn strings_data_urls_and_gzip() {
        let nasty = "a\"b\\c\nd{{.x}}e";
        let plain = "data:,host%3D%7B%7B.h%7D%7D";
        let b64 = format!(
            "data:text/plain;base64,{}",
            spec::encoding::data_url::base64_encode(b"name={{.h}}\n")
        );
        let gz = format!(
            "data:;base64,{}",
            spec::encoding::data_url::base64_encode(&butane::gzip_best(b"gz {{.h}}"))
        );
        let mut v = json!({"storage": {"files": [
            {"path": "/etc/{{.h}}", "contents": {"source": plain}},
            {"path": "/b", "contents": {"source": b64}},
            {"path": "/c", "contents": {"compression": "gzip", "source": gz}},
        ]}});
        let uses = scan(&v).unwrap();
        assert_eq!(uses.len(), 4);
        assert_eq!(uses[3].path, "$.storage.files.2.contents.source");
        fill(&mut v, &vals(&[("h", nasty), ("x", "NO")])).unwrap();
        let files = &v["storage"]["files"];
        assert_eq!(files[0]["path"], format!("/etc/{nasty}"));
        let dec = |i: usize| {
            spec::encoding::data_url::decode(files[i]["contents"]["source"].as_str().unwrap())
                .unwrap()
        };
        assert_eq!(dec(0), format!("host={nasty}").as_bytes());
        assert!(
            files[1]["contents"]["source"]
                .as_str()
                .unwrap()
                .starts_with("data:text/plain;base64,")
        );
        assert_eq!(dec(1), format!("name={nasty}\n").as_bytes());
        assert_eq!(
            butane::gunzip(&dec(2), 1 << 20).unwrap(),
            format!("gz {nasty}").as_bytes()
        );
        // Serialized and parsed back, the value is the same text: escaped by the serializer.
        let back: Value = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(back["storage"]["files"][0]["path"], format!("/etc/{nasty}"));
    }

    #[test]
    fn keys_and_missing_values() {
        let v = json!({"a": {"{{.k}}": "x"}});
        assert_eq!(scan(&v).unwrap_err().path, "$.a.…");
        let mut v = json!({"systemd": {"units": [{"contents": "{{.nope}}"}]}});
        let e = fill(&mut v, &vals(&[])).unwrap_err();
        assert_eq!(e.path, "$.systemd.units.0.contents");
        assert!(e.message.contains("{{.nope}}"), "{}", e.message);
    }
}
