//! `aliyun`: Alibaba Cloud's user data from the metadata service at
//! `http://100.100.100.200/latest/user-data` (not link-local: Alibaba's own address). A 404
//! means no user data.

use super::metadata::Service;

pub const SERVICE: Service = Service::new("aliyun", "http://100.100.100.200", "/latest/user-data");

super::metadata_provider!(Aliyun, SERVICE);
