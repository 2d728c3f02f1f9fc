//! `azure` and `azurestack`: Azure's user data.
//!
//! `azure`, as Ignition does it: first the instance metadata service's `userData`
//! (`http://169.254.169.254/metadata/instance/compute/userData?api-version=2021-01-01&format=text`
//! with `Metadata: true`; base64; 404, 410, 429 and 5xx are retried, as Azure asks). When the
//! VM has no `userData` (an empty answer), the custom data of the OVF provisioning CD: a CD-ROM
//! drive with a disc in, holding a UDF filesystem with `ovf-env.xml`; the custom data is its
//! file `CustomData.bin` (Ignition's source) or else the base64 `<CustomData>` element of
//! `ovf-env.xml` (where waagent and cloud-init read it). Neither: no user data. Since the
//! service comes first the config needs the network (offline, the stage asks for it).
//!
//! As in Ignition, the service is retried (404, 410, 429, 5xx, connection errors) until it
//! answers or `timeouts.httpTotal` (no limit by default) is over: Azure answers 410 for up to
//! 70 s while IMDS starts. Each retry is logged with the time waited so far. One difference:
//! a service that has not answered any request at all within [`IMDS_WAIT`] (no network path
//! to it) is passed over for the CD, with a warning, where Ignition would retry it without
//! end. The CD is waited for without end, as in Ignition, saying every few seconds that it
//! waits.
//!
//! `azurestack` ([`super::azurestack`], Azure Stack Hub) has no metadata service step: only the
//! OVF CD, which may be UDF or ISO9660; it needs no network.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::drive::{self, Drive, Mounted, Roots};
use super::metadata::{self, Bounds, Encoding, Service};
use super::{Found, Provider};
use crate::fetch::Fetcher;

/// The instance metadata service.
pub const IMDS: &str = "http://169.254.169.254";
/// Its user data (base64).
pub const IMDS_USER_DATA: &str = "/metadata/instance/compute/userData?api-version=2021-01-01&format=text";
/// The instance metadata service as [`metadata::fetch_user_data_at`] asks it: `Metadata:
/// true`; 404, 410 and 429 mean "not ready yet" and are retried (as 5xx); the user data is
/// base64; an empty answer is no user data here (the OVF CD is read then).
pub const IMDS_SERVICE: Service = Service {
    headers: &[("Metadata", "true")],
    absent_on: &[],
    retry_on: &[404, 410, 429],
    encoding: Encoding::Base64,
    ..Service::new("azure", IMDS, IMDS_USER_DATA)
};
/// The longest the service is retried while it has not answered any request.
pub const IMDS_WAIT: Duration = Duration::from_secs(20);
/// The longest wait for the OVF provisioning CD: as Ignition, without end.
pub const OVF_WAIT: Duration = drive::FOREVER;
/// The file that makes a CD the OVF provisioning CD.
pub const OVF_ENV: &str = "ovf-env.xml";
/// The custom data on it.
pub const CUSTOM_DATA: &str = "CustomData.bin";

/// Azure's OVF provisioning CD.
pub const AZURE_CD: Drive = Drive {
    platform: "azure",
    what: "OVF provisioning CD",
    labels: &[],
    fstypes: &["udf"],
    cdrom: true,
    wait: OVF_WAIT,
};

/// Azure Stack Hub's ([`super::azurestack`]).
pub const AZURESTACK_CD: Drive = Drive {
    platform: "azurestack",
    fstypes: &["udf", "iso9660"],
    ..AZURE_CD
};

pub struct Azure;

impl Provider for Azure {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let imds = f.opts.endpoints.metadata_base("azure", IMDS);
        fetch(f, &imds, IMDS_WAIT, &AZURE_CD, &Roots::default())
    }

    fn needs_network(&self) -> bool {
        true
    }
}

/// `azure`: the service at `imds` (passed over when it has not answered within `unanswered`,
/// else retried within `timeouts.httpTotal`), then the CD `cd`.
pub fn fetch(
    f: &Fetcher,
    imds: &str,
    unanswered: Duration,
    cd: &Drive,
    roots: &Roots,
) -> Result<Option<Found>> {
    let limit = f.opts.limits.max_config_size;
    let url = format!("{}{IMDS_USER_DATA}", imds.trim_end_matches('/'));
    let bounds = Bounds {
        total: None,
        unanswered: Some(unanswered),
        stop: None,
    };
    match metadata::fetch_user_data_at(f, &IMDS_SERVICE, imds, bounds) {
        Ok(Some(bytes)) if !bytes.is_empty() => {
            log::info!("azure: config from the instance metadata service's userData");
            return Ok(Some(Found {
                bytes,
                source: format!("azure instance metadata service {url}"),
            }));
        }
        Ok(_) => log::info!(
            "azure: no userData in the instance metadata service: reading the custom data"
        ),
        // Offline, the service was not asked: the fetch stage asks for the network.
        Err(e) if f.opts.offline => return Err(e.error),
        Err(e) if !e.answered => log::warn!(
            "azure: the instance metadata service did not answer ({e}): reading the custom data of the provisioning CD"
        ),
        Err(e) => return Err(e.error.context("azure: instance metadata service")),
    }
    from_cd(cd, roots, limit)
}

/// The custom data of the provisioning CD `d`: a matching CD-ROM with `ovf-env.xml` (others
/// are passed over), its `CustomData.bin` or else `ovf-env.xml`'s `<CustomData>`.
pub fn from_cd(d: &Drive, roots: &Roots, limit: u64) -> Result<Option<Found>> {
    let start = Instant::now();
    let mut checked: Vec<PathBuf> = Vec::new();
    loop {
        let Some(dev) = drive::find_excluding(d, roots, &AtomicBool::new(false), &checked, start) else {
            bail!(
                "no {} with {OVF_ENV} appeared within {}s",
                d.describe(),
                d.wait.as_secs_f64()
            );
        };
        let m = Mounted::mount(&dev)?;
        if !m.has(OVF_ENV) {
            log::info!("{}: {dev} has no {OVF_ENV}: not the provisioning CD", d.platform);
            m.close()?;
            checked.push(dev.path);
            continue;
        }
        let src = drive::source(d, &dev, CUSTOM_DATA);
        let found = match m.read(CUSTOM_DATA, limit, &format!("config from {src}"))? {
            Some(bytes) => Some(Found { bytes, source: src }),
            None => {
                let src = format!("{} (CustomData)", drive::source(d, &dev, OVF_ENV));
                let xml = m
                    .read(OVF_ENV, limit.saturating_mul(2), &src)?
                    .unwrap_or_default();
                custom_data(&xml)
                    .with_context(|| format!("reading {src}"))?
                    .map(|bytes| Found { bytes, source: src })
            }
        };
        m.close()?;
        if found.is_none() {
            log::info!("{}: the {} has no custom data: no user data", d.platform, d.what);
        }
        return Ok(found);
    }
}

/// The custom data of an `ovf-env.xml`: the base64 text of its `CustomData` element (any
/// namespace prefix), decoded; None without the element or with an empty one.
///
/// Not read with `roxmltree` (which `super::ovf` uses): this reader finds the element in
/// documents with undeclared prefixes or cut short after it, which the tests below pin and a
/// namespace-checking parser refuses, and base64 text has no entities to resolve.
pub fn custom_data(xml: &[u8]) -> Result<Option<Vec<u8>>> {
    let text = std::str::from_utf8(xml).context("ovf-env.xml is not UTF-8")?;
    let mut rest = text;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').context("ovf-env.xml: a tag is not closed")?;
        let tag = &rest[..end];
        let name = tag
            .split(|c: char| c.is_ascii_whitespace() || c == '/')
            .next()
            .unwrap_or("");
        let local = name.rsplit(':').next().unwrap_or(name);
        if local != "CustomData" || tag.starts_with('/') {
            rest = &rest[end + 1..];
            continue;
        }
        if tag.ends_with('/') {
            return Ok(None);
        }
        let body = &rest[end + 1..];
        let close = format!("</{name}");
        let stop = body
            .find(&close)
            .with_context(|| format!("ovf-env.xml: <{name}> is not closed"))?;
        let mut value = body[..stop].trim();
        if let Some(cdata) = value.strip_prefix("<![CDATA[").and_then(|v| v.strip_suffix("]]>")) {
            value = cdata.trim();
        }
        let compact: String = value.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        if compact.is_empty() {
            return Ok(None);
        }
        let bytes = spec::encoding::base64_decode(compact.as_bytes())
            .context("ovf-env.xml: CustomData is not base64")?;
        return Ok(Some(bytes));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVF: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<ns0:Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:ns0="http://schemas.dmtf.org/ovf/environment/1" xmlns:ns1="http://schemas.microsoft.com/windowsazure" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">
  <ns1:ProvisioningSection>
    <ns1:Version>1.0</ns1:Version>
    <ns1:LinuxProvisioningConfigurationSet>
      <ns1:ConfigurationSetType>LinuxProvisioningConfiguration</ns1:ConfigurationSetType>
      <ns1:HostName>vm1</ns1:HostName>
      <ns1:UserName>core</ns1:UserName>
      <ns1:CustomData>eyJpZ25pdGlvbiI6
        eyJ2ZXJzaW9uIjoiMy40LjAifX0=</ns1:CustomData>
    </ns1:LinuxProvisioningConfigurationSet>
  </ns1:ProvisioningSection>
</ns0:Environment>
"#;

    #[test]
    fn custom_data_is_the_decoded_element() {
        assert_eq!(
            custom_data(OVF.as_bytes()).unwrap().unwrap(),
            br#"{"ignition":{"version":"3.4.0"}}"#
        );
        let plain = "<Environment><CustomData>e30=</CustomData></Environment>";
        assert_eq!(custom_data(plain.as_bytes()).unwrap().unwrap(), b"{}");
        let cdata = "<a:CustomData><![CDATA[ e30= ]]></a:CustomData>";
        assert_eq!(custom_data(cdata.as_bytes()).unwrap().unwrap(), b"{}");
        // A look-alike element is not it.
        let other = "<x:CustomDataX>e30=</x:CustomDataX>";
        assert_eq!(custom_data(other.as_bytes()).unwrap(), None);
    }

    #[test]
    fn no_or_empty_custom_data_is_none_and_garbage_an_error() {
        assert_eq!(custom_data(b"<Environment><HostName>x</HostName></Environment>").unwrap(), None);
        assert_eq!(custom_data(b"<ns1:CustomData/>").unwrap(), None);
        assert_eq!(custom_data(b"<ns1:CustomData>  </ns1:CustomData>").unwrap(), None);
        let e = custom_data(b"<ns1:CustomData>%%%</ns1:CustomData>").unwrap_err();
        assert!(format!("{e:#}").contains("not base64"), "{e:#}");
        assert!(custom_data(b"<ns1:CustomData>e30=").is_err());
    }
}
