//! Secrets out of what the agent prints and keeps (docs/reports.md, "Never in a report"):
//! data URLs (`data:…`), URL query strings (`?…`), URL userinfo (`https://…@host/`),
//! password hashes, bearer tokens and `token=` values, header values of credentials, and the
//! exact secrets the caller knows (the fetch token). A report holds no file contents by
//! construction (paths only); the error and log lines pass through [`text`] before they are
//! sent or queued. The logger passes every line through [`text`] too
//! (`runtime::logging::set_redactor`, installed by the CLI), so the console, `agent.log`
//! and its copy in the new root get the same treatment; the places that store URLs
//! (`fetch.json`) keep them as [`url`] shows them.
//!
//! Hand-written word scanning rather than the `regex` crate: the rules are per word (a URL, a
//! `key=value`, a hash prefix, the word after `Bearer`), which a scan says plainly, and the
//! agent crate has no `regex` dependency to put in the initramfs binary for it.

/// The hash prefixes of crypt(3) (`$1$` MD5, `$5$`/`$6$` SHA-2, `$y$`/`$gy$` yescrypt,
/// `$2a$`/`$2b$`/`$2y$` bcrypt, `$7$` scrypt, `$sha1$`, `$md5`).
const HASH_PREFIXES: &[&str] = &[
    "$1$", "$5$", "$6$", "$y$", "$gy$", "$2a$", "$2b$", "$2y$", "$2x$", "$7$", "$sha1$", "$md5",
];

/// Words after which the rest of the word is a secret (`Bearer x`, `token=x`, `key: x`):
/// matched without case.
const SECRET_KEYS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "password",
    "passwd",
    "secret",
    "token",
    "access_token",
    "api_key",
    "apikey",
];

/// `s` with every secret replaced (see the module); `known` are exact secrets to remove
/// wherever they appear (the fetch token).
pub fn text_with(s: &str, known: &[&str]) -> String {
    let mut s = s.to_string();
    for k in known.iter().filter(|k| k.len() >= 4) {
        s = s.replace(k, "…");
    }
    text(&s)
}

/// `s` with every secret replaced (see the module).
pub fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    // Set when the previous word names a secret that follows as the next word(s):
    // `Bearer x`, `Authorization: Basic x`, `token: x`.
    let mut hide_next = 0u8;
    for piece in s.split_inclusive(char::is_whitespace) {
        let (word, ws) = split_trailing_ws(piece);
        if word.is_empty() {
            out.push_str(ws);
            continue;
        }
        if hide_next > 0 {
            hide_next -= 1;
            let lower = word.to_ascii_lowercase();
            // "Authorization: Bearer x": the scheme stays, the credential after it goes.
            if matches!(
                lower.trim_matches(|c: char| !c.is_alphanumeric()),
                "bearer" | "basic" | "token" | "digest"
            ) {
                out.push_str(word);
                hide_next = 1;
            } else {
                out.push_str(&keep_quotes(word, "…"));
            }
            out.push_str(ws);
            continue;
        }
        let (w, hide) = word_redacted(word);
        out.push_str(&w);
        hide_next = hide;
        out.push_str(ws);
    }
    out
}

fn split_trailing_ws(p: &str) -> (&str, &str) {
    let t = p.trim_end_matches(char::is_whitespace);
    (t, &p[t.len()..])
}

/// Quotes and brackets around a hidden word stay (`"…"`).
fn keep_quotes(word: &str, with: &str) -> String {
    let lead: String = word
        .chars()
        .take_while(|c| "\"'([{<".contains(*c))
        .collect();
    let tail: String = {
        let t: Vec<char> = word
            .chars()
            .rev()
            .take_while(|c| "\"')]}>,;.".contains(*c))
            .collect();
        t.into_iter().rev().collect()
    };
    if lead.len() + tail.len() >= word.len() {
        return word.to_string();
    }
    format!("{lead}{with}{tail}")
}

/// One word, redacted; and how many following words are secrets.
fn word_redacted(word: &str) -> (String, u8) {
    // Every rule below needs one of these characters but `Bearer x`/`Basic x`: most words
    // of a log line are left as they are without further work.
    if !word.contains([':', '=', '$', '?', '@']) {
        let bare = word.trim_matches(|c: char| "\"'([{<>}]),;".contains(c));
        let hide = bare.eq_ignore_ascii_case("bearer") || bare.eq_ignore_ascii_case("basic");
        return (word.to_string(), hide as u8);
    }
    let lower = word.to_ascii_lowercase();
    let bare = lower.trim_matches(|c: char| "\"'([{<>}]),;".contains(c));
    // `Bearer x`, `Basic x`.
    if bare == "bearer" || bare == "basic" {
        return (word.to_string(), 1);
    }
    // `Authorization:`, `token:`, `"password":`.
    if let Some(k) = bare.strip_suffix(':').map(|k| k.trim_matches('"'))
        && SECRET_KEYS.iter().any(|s| {
            k.strip_suffix(s)
                .is_some_and(|head| head.is_empty() || head.ends_with(['-', '_']))
        })
    {
        return (word.to_string(), 1);
    }
    let mut w = word.to_string();
    // data URLs: everything after `data:` in the word, where a data URL starts (the word's
    // start, after a quote, a bracket or `=`) and has its `,` (`user-data:` and a `data:`
    // label are not data URLs).
    if let Some(i) = data_url_at(&lower) {
        let end = word[i..]
            .find(|c: char| "\"'<>)]}".contains(c))
            .map_or(word.len(), |e| i + e);
        w = format!("{}data:…{}", &word[..i], &word[end..]);
        return (w, 0);
    }
    // URL userinfo (`user:password@`).
    w = hide_userinfo(&w);
    // URL query strings.
    if lower.contains("://")
        && let Some(q) = w.find('?')
    {
        let mut end = w[q..]
            .find(|c: char| "\"'<>)]}#".contains(c))
            .map_or(w.len(), |e| q + e);
        // Punctuation that ends the sentence, not the query.
        while end > q + 1 && w[..end].ends_with([':', ',', ';', '.']) {
            end -= 1;
        }
        w = format!("{}?…{}", &w[..q], &w[end..]);
    }
    // key=value secrets (also inside a longer word: `x?token=…` was removed above).
    let lw = w.to_ascii_lowercase();
    for k in SECRET_KEYS.iter().filter(|_| lw.contains('=')) {
        let pat = format!("{k}=");
        if let Some(i) = lw.find(&pat) {
            let start = i + pat.len();
            let end = w[start..]
                .find(|c: char| "\"'&,;)]}>".contains(c))
                .map_or(w.len(), |e| start + e);
            if end > start {
                w = format!("{}…{}", &w[..start], &w[end..]);
            }
            break;
        }
    }
    // Password hashes: from the prefix to the end of the word.
    for p in HASH_PREFIXES.iter().filter(|_| w.contains('$')) {
        if let Some(i) = w.find(p) {
            let end = w[i..]
                .find(|c: char| "\"',;)]}>".contains(c))
                .map_or(w.len(), |e| i + e);
            w = format!("{}<password hash>{}", &w[..i], &w[end..]);
            break;
        }
    }
    (w, 0)
}

/// Where a data URL starts in `lower` (a lower-case word), if one does.
fn data_url_at(lower: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(j) = lower[from..].find("data:") {
        let i = from + j;
        let starts = lower[..i]
            .chars()
            .next_back()
            .is_none_or(|c| "\"'([{<=,;".contains(c));
        let rest = &lower[i..];
        let end = rest
            .find(|c: char| "\"'<>)]}".contains(c))
            .unwrap_or(rest.len());
        if starts && rest[..end].contains(',') {
            return Some(i);
        }
        from = i + "data:".len();
    }
    None
}

/// `w` with the userinfo of the URL in it (`scheme://user:password@host`) written `…`:
/// `scheme://…@host`.
fn hide_userinfo(w: &str) -> String {
    let Some(i) = w.find("://") else {
        return w.to_string();
    };
    let start = i + 3;
    let end = w[start..]
        .find(|c: char| "/?#\"'<>".contains(c) || c.is_whitespace())
        .map_or(w.len(), |e| start + e);
    match w[start..end].rfind('@') {
        Some(at) => format!("{}…{}", &w[..start], &w[start + at..]),
        None => w.to_string(),
    }
}

/// A URL as reports and logs may show it: its userinfo (`…@`) and query (`?…`) removed, a
/// data URL as `data:…`.
pub fn url(u: &str) -> String {
    if u.starts_with("data:") {
        return "data:…".into();
    }
    let u = hide_userinfo(u);
    match u.find('?') {
        Some(q) => format!("{}?…", &u[..q]),
        None => u,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_removed() {
        let cases = [
            (
                "fetching data:,hello%20world failed",
                "fetching data:… failed",
            ),
            (
                "source \"data:text/plain;base64,c2VjcmV0\" bad",
                "source \"data:…\" bad",
            ),
            (
                "GET https://h/x.ign?sig=abc&token=def: 403",
                "GET https://h/x.ign?…: 403",
            ),
            (
                "user core hash $6$salt$abcdefghij ok",
                "user core hash <password hash> ok",
            ),
            (
                "\"passwordHash\": \"$y$j9T$abc$def\"",
                "\"passwordHash\": \"<password hash>\"",
            ),
            (
                "bcrypt $2b$12$abcdefghijklmnopqrstuv",
                "bcrypt <password hash>",
            ),
            (
                "Authorization: Bearer tok_abcdef123",
                "Authorization: Bearer …",
            ),
            ("header Bearer tok_abcdef123 sent", "header Bearer … sent"),
            (
                "url http://h/c?x=1 and token=sekrit1",
                "url http://h/c?… and token=…",
            ),
            (
                "Authorization: Basic dXNlcjpwYXNz",
                "Authorization: Basic …",
            ),
            ("X-Auth-Token: abcd1234", "X-Auth-Token: …"),
            (
                "fetching http://core:s3cretpw@h:8080/c.ign failed",
                "fetching http://…@h:8080/c.ign failed",
            ),
            (
                "GET \"https://u:p@[::1]:443/x?sig=1\": 403",
                "GET \"https://…@[::1]:443/x?…\": 403",
            ),
            (
                "mail root@example.com at http://h/a@b",
                "mail root@example.com at http://h/a@b",
            ),
            ("plain line /dev/vda4 (xfs)", "plain line /dev/vda4 (xfs)"),
            (
                "GET http://169.254.169.254/v1/user-data: HTTP 503",
                "GET http://169.254.169.254/v1/user-data: HTTP 503",
            ),
            ("user data: http://h/m", "user data: http://h/m"),
            ("contents=data:;base64,AAAA ok", "contents=data:… ok"),
        ];
        for (i, o) in cases {
            assert_eq!(text(i), o, "{i}");
        }
    }

    #[test]
    fn known_secrets_and_urls() {
        assert_eq!(
            text_with("sent with sekrit-value here", &["sekrit-value"]),
            "sent with … here"
        );
        assert_eq!(url("https://h/r?token=1"), "https://h/r?…");
        assert_eq!(url("data:,x"), "data:…");
        assert_eq!(url("http://h/r"), "http://h/r");
        assert_eq!(url("https://a:b@h/r?x=1"), "https://…@h/r?…");
    }
}
