//! `aws`: Amazon EC2's user data from the instance metadata service at
//! `http://169.254.169.254/2019-10-01/user-data` (the path Ignition asks), with an IMDSv2 session
//! token (PUT `/latest/api/token`), IMDSv1 when the service offers no token. A 404 means no
//! user data. The fetcher is prepared with the instance's region (for `s3://` URLs), as
//! Ignition's `Init` does.

use anyhow::Result;

use super::metadata::{AWS_IMDSV2, Client, Service};
use super::{Endpoints, Found, Provider};
use crate::endpoints::DEFAULT_AWS_IMDS;
use crate::fetch::Fetcher;

pub const SERVICE: Service = Service {
    handshake: Some(AWS_IMDSV2),
    ..Service::new("aws", DEFAULT_AWS_IMDS, "/2019-10-01/user-data")
};

/// Where the metadata service tells the region.
pub const REGION_PATH: &str = "/latest/meta-data/placement/region";

pub struct Aws;

impl Provider for Aws {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        super::from_metadata(f, &SERVICE)
    }

    fn needs_network(&self) -> bool {
        true
    }

    /// The S3 region hint: the instance's region, asked once per stage (best effort, bounded
    /// by [`super::metadata::TIMEOUT`] per request); without one, the default rule of
    /// [`Endpoints::s3_region`]. Offline, nothing (`s3://` fetches need the network anyway,
    /// and the online pass prepares again).
    fn prepare_fetcher(&self, endpoints: &mut Endpoints, offline: bool) -> Result<()> {
        if offline || endpoints.s3_region.is_some() {
            return Ok(());
        }
        let imds = Client::new(&endpoints.aws_imds).with_token_handshake(AWS_IMDSV2);
        match imds.get(REGION_PATH) {
            Ok(r) if valid_region(r.trim()) => {
                log::info!("aws: region {}", r.trim());
                endpoints.s3_region = Some(r.trim().to_string());
            }
            Ok(r) => log::warn!("aws: ignoring the region {r:?} from the metadata service"),
            Err(e) => log::warn!(
                "aws: no region from the metadata service ({e:#}); S3 region by the default rule"
            ),
        }
        Ok(())
    }
}

/// `us-east-1`, `cn-north-1`, `us-gov-west-1`: lower-case letters, digits and dashes.
fn valid_region(r: &str) -> bool {
    !r.is_empty()
        && r.len() < 40
        && r.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

