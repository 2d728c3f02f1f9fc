//! Spec 2.2.0 for old boot images in OpenShift mode (docs/serve.md, "OpenShift mode"): a
//! pool's document translated down, with the Machine Config Server's files.

use super::mode;
use crate::http::{Body, Request, Response};
use crate::source::render::{Pool, answer, fill_etcd_index, with_node_file};
use spec::config::v22;

/// `pool`'s document as spec 2.2.0 (with `etcd_index` filled in when given).
pub fn render_v22(pool: &Pool, etcd_index: Option<u32>) -> Result<Vec<u8>, String> {
    let mut c = pool.config.clone();
    if let Some(i) = etcd_index {
        fill_etcd_index(&mut c, i);
    }
    v22::to_json(&with_node_file(&c, &pool.name, &pool.config_name))
}

/// The answer to a request for spec 2.x (`minor`): 2.2.0 in OpenShift mode, for a 2.x at
/// or above 2.2 (as the MCS does); 400 otherwise; 406 naming the fields 2.2 cannot express.
pub fn answer_v2(req: &Request, pool: &Pool, minor: u64, out: &mut Response) {
    out.labels.set_pool(&pool.name);
    if mode().is_none() || minor < 2 {
        *out = Response::text(
            400,
            format!(
                "spec version 2.{minor} is not served: this server speaks 3.0.0 through {}{}",
                spec::config::Version::NEWEST,
                if mode().is_some() {
                    " and 2.2.0"
                } else {
                    " (2.2.0 with --openshift)"
                }
            ),
        );
        out.labels.set_pool(&pool.name);
        return;
    }
    let mut etcd = None;
    if pool.name == "master"
        && let Some(v) = req.query_param("etcd_index")
    {
        if v.is_empty() || v.len() > 6 || !v.bytes().all(|b| b.is_ascii_digit()) {
            *out = Response::text(400, "etcd_index must be a small non-negative integer");
            out.labels.set_pool(&pool.name);
            return;
        }
        etcd = v.parse().ok();
    }
    match render_v22(pool, etcd) {
        Ok(body) => {
            let digest = <sha2::Sha256 as sha2::Digest>::digest(&body);
            let etag = format!("\"{}\"", spec::encoding::hex(&digest[..16]));
            let lines = format!(
                "Content-Type: application/vnd.coreos.ignition+json;version=2.2.0\r\n\
                 ETag: {etag}\r\nVary: Accept\r\n"
            );
            answer(req, out, &etag, &lines, || {
                Body::Shared(std::sync::Arc::from(body))
            });
        }
        Err(e) => *out = Response::text(406, e),
    }
    out.labels.set_pool(&pool.name);
    out.labels.version = "2.2.0".into();
}
