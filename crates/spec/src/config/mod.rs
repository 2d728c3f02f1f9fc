//! Machine configs: the model (`types`), spec versions (`version`), decoding with positions
//! (`decode`), semantic rules (`validate`), merging (`merge`) and writing back out.
//!
//! Each spec struct and field is declared once, in `types.rs`, with the `spec!` macro
//! (`spec.rs`): Rust name and type, JSON key, merge rule, the spec version that introduced it,
//! whether it is required. Decoding, merging, `is_empty`, serialization and the version table
//! are generated from that declaration.
//!
//! ## Add a spec field
//!
//! 1. Declare it in its struct in `types.rs`:
//!    `rust_name: Type = "jsonKey" [RULE, since N]`, plus `required` for a string that must be
//!    present. `since N` (spec 3.N.0; absent = 3.0.0) makes older declared versions reject it,
//!    raises `version::minimum` and makes `to_json` refuse to write it as an older version.
//!    Types: `Option<String>`, `Option<bool>`, `Option<i64>`, `String`, `Vec<String>`, a
//!    declared struct or a `Vec` of them (another scalar type needs an `impl Field` in
//!    `spec.rs`). A new struct is one more `pub struct` entry in the same `spec!` block.
//! 2. RULE is a function in `merge.rs` (`opt`, `key`, `keyed`, `by_path`, `append`, `set`,
//!    `nested`, `headers`, `ignore`; see `spec.rs`); a merge that spans fields is a
//!    `premerge` function there, named in the struct's options.
//! 3. Only if some *values* are newer than the field (a URL scheme, a format name, mode
//!    bits): a rule in `version.rs` (`Features::node`).
//! 4. Semantic checks (ranges, paths, conflicts): the function of its type in `validate/`.
//! 5. Its effect: the stage that applies it.
//! 6. Tests: a row in `version.rs`'s `TABLE` if it has `since N`; the field in
//!    `tests/configs/generate.py` (`full()` for its version, an `invalid()` case for a
//!    version too old), then regenerate the corpus.
//!
//! A Butane sugar is a field like any other in the (Butane) model it belongs to, declared
//! once with `spec!` the same way, plus its translation.
//!
//! ## Add a spec version (3.7.0)
//!
//! 1. `version::NEWEST_MINOR = 7` (parsing, `Accept` negotiation and the server's rendering
//!    follow); the model is now 3.7 (`types.rs` module doc, README).
//! 2. Its new fields as above, with `since 7`; its new values in `version.rs`.
//! 3. `tests/configs/generate.py`: `range(8)` in `main()`, the 3.7 fields in `full()`, cases in
//!    `invalid()`; regenerate; `tests/config/corpus.rs` then expects 16 valid configs (two per
//!    version).

pub mod decode;
pub mod diag;
#[cfg(test)]
mod linear;
pub mod merge;
mod spec;
pub mod types;
pub mod v22;
pub mod validate;
pub mod version;

pub use diag::{Diagnostic, Path, Report, Severity};
pub use merge::merge;
pub use types::Config;
pub use version::Version;

use crate::json;

/// A config read from text: the model, the version it declared, and its warnings.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub config: Config,
    pub version: Version,
    pub warnings: Report,
}

/// Parses, decodes and validates a config document of any supported version.
/// On failure the report holds every error (and warning) found.
pub fn parse(bytes: &[u8]) -> Result<Parsed, Report> {
    let mut tree = match json::parse(bytes) {
        Ok(t) => t,
        Err(e) => {
            let mut d = Diagnostic::error(Path::root(), format!("invalid JSON: {}", e.message));
            d.line_col = Some(json::line_col(bytes, e.pos));
            return Err(Report {
                diagnostics: vec![d],
            });
        }
    };
    let mut report = Report::default();
    if !matches!(tree.kind, json::Kind::Object(_)) {
        report.push(Diagnostic::error(
            Path::root(),
            format!(
                "a config must be a JSON object, found {}",
                tree.kind.type_name()
            ),
        ));
        report.locate(&tree, bytes);
        return Err(report);
    }
    let vpath = Path::root().key("ignition").key("version");
    let version = match tree.get("ignition").and_then(|i| i.get("version")) {
        Some(json::Value {
            kind: json::Kind::String(s),
            ..
        }) => match version::parse(s) {
            Ok(v) => v,
            Err(e) => {
                report.push(Diagnostic::error(vpath, e));
                report.locate(&tree, bytes);
                return Err(report);
            }
        },
        _ => {
            report.push(Diagnostic::error(
                vpath,
                "ignition.version is required (a string such as \"3.4.0\")",
            ));
            report.locate(&tree, bytes);
            return Err(report);
        }
    };
    let mut dec = decode::Decoder::new();
    let mut config = dec.config(&mut tree);
    report.diagnostics.append(&mut dec.diags);
    report
        .diagnostics
        .extend(version::check(&mut config, version));
    // A value the decoder already reported (missing, wrong type) is not reported again by the
    // validator (e.g. "path is required" and then "path not specified").
    let decoded_errors: std::collections::HashSet<Path> = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.path.clone())
        .collect();
    report
        .diagnostics
        .extend(validate::validate(&config).into_iter().filter(|d| {
            crate::work::add(1);
            d.severity != Severity::Error || !decoded_errors.contains(&d.path)
        }));
    if report.has_errors() {
        report.locate(&tree, bytes);
        return Err(report);
    }
    config.ignition.version = Version::NEWEST.to_string();
    if !report.diagnostics.is_empty() {
        report.locate(&tree, bytes);
    }
    Ok(Parsed {
        config,
        version,
        warnings: report,
    })
}

/// Validates a config that did not come from text (e.g. a merge result).
pub fn check(config: &Config) -> Report {
    Report {
        diagnostics: validate::validate(config),
    }
}

/// Writes `config` as a document of spec version `v`. Fails, naming every offending field,
/// when the config uses something `v` cannot express: never a silently degraded config.
pub fn to_json(config: &Config, v: Version) -> Result<Vec<u8>, String> {
    let missing = version::unexpressible(config, v);
    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|f| format!("{} at {} (needs 3.{}.0)", f.what, f.path, f.minor))
            .collect();
        return Err(format!(
            "config cannot be expressed as spec {v}: {}",
            list.join("; ")
        ));
    }
    let mut c = config.clone();
    c.ignition.version = v.to_string();
    serde_json::to_vec(&c).map_err(|e| format!("serializing config: {e}"))
}

/// The same as `to_json`, pretty-printed with a trailing newline (for files people read).
pub fn to_json_pretty(config: &Config, v: Version) -> Result<Vec<u8>, String> {
    let compact = to_json(config, v)?;
    let value: serde_json::Value = serde_json::from_slice(&compact).map_err(|e| e.to_string())?;
    let mut out = serde_json::to_vec_pretty(&value).map_err(|e| e.to_string())?;
    out.push(b'\n');
    Ok(out)
}
