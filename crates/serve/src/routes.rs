//! Route tables: each listener declares its routes as data — the path, the methods it
//! answers, who may call it (the listener's own auth kinds) and the handler — and answers a
//! request from the first route whose path matches. A method the route does not answer gets
//! 405 with `Allow` listing those it does.

use crate::http::{Request, Response};

/// Which paths a route matches.
#[derive(Debug, Clone, Copy)]
pub enum Pattern {
    /// This path only.
    Exact(&'static str),
    /// Paths starting with this (the rest is the route's argument).
    Prefix(&'static str),
    /// Paths starting with the first and ending with the second (what is between them is
    /// the argument).
    Within(&'static str, &'static str),
    /// Every path (a listener's last route).
    Any,
}

impl Pattern {
    /// The argument `path` gives this pattern ("" for an exact match), or None when it does
    /// not match.
    pub fn matches<'a>(&self, path: &'a str) -> Option<&'a str> {
        match *self {
            Pattern::Exact(p) => (path == p).then_some(""),
            Pattern::Prefix(p) => path.strip_prefix(p),
            Pattern::Within(p, s) => path.strip_prefix(p)?.strip_suffix(s),
            Pattern::Any => Some(path),
        }
    }
}

/// GET and HEAD.
pub const READ: &[&str] = &["GET", "HEAD"];
/// GET only.
pub const GET: &[&str] = &["GET"];
/// POST only.
pub const POST: &[&str] = &["POST"];
/// Any method (the handler checks).
pub const ANY: &[&str] = &[];

/// One route of a listener whose auth kinds are `A` and handlers `H`.
pub struct Route<A, H> {
    pub methods: &'static [&'static str],
    pub path: Pattern,
    pub auth: A,
    pub handler: H,
}

impl<A, H> Route<A, H> {
    /// None when the route answers `req`'s method; else the 405 naming those it does.
    pub fn refuse_method(&self, req: &Request) -> Option<Response> {
        if self.methods.is_empty() || self.methods.contains(&req.method()) {
            return None;
        }
        Some(Response::new(405).header("Allow", &self.methods.join(", ")))
    }
}

/// The first route of `table` matching `path`, and the argument its pattern gives.
pub fn find<'t, 'p, A, H>(
    table: &'t [Route<A, H>],
    path: &'p str,
) -> Option<(&'t Route<A, H>, &'p str)> {
    table
        .iter()
        .find_map(|r| r.path.matches(path).map(|arg| (r, arg)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert_eq!(Pattern::Exact("/a").matches("/a"), Some(""));
        assert_eq!(Pattern::Exact("/a").matches("/a/"), None);
        assert_eq!(Pattern::Prefix("/c/").matches("/c/x"), Some("x"));
        assert_eq!(Pattern::Prefix("/c/").matches("/c"), None);
        let w = Pattern::Within("/m/", "/r");
        assert_eq!(w.matches("/m/x/r"), Some("x"));
        assert_eq!(w.matches("/m//r"), Some(""));
        assert_eq!(w.matches("/m/r"), None);
        assert_eq!(Pattern::Any.matches("/z"), Some("/z"));
    }
}
