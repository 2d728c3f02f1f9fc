//! Who the machine is, for its reports (docs/reports.md, `machine`): the SMBIOS product UUID
//! and serial (`/sys/class/dmi/id`), the MAC addresses of its network interfaces
//! (`/sys/class/net`: loopback left out; virtual interfaces without a `device` link are kept,
//! as a bridge or bond made in the initramfs also names the machine), the platform, its
//! instance id where the firmware tables already say it (AWS Nitro's `board_asset_tag`,
//! `i-…`; otherwise null: asking a metadata service would cost a request per report), and
//! the hostname when one is set. The directories come from [`Endpoints`] (tests point them
//! at their own trees).

use std::path::Path;

use crate::endpoints::Endpoints;

/// `machine` of a report (the shared wire type).
pub use report_format::Identity as Machine;

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// A UUID that names a machine: not all zeros or all `f` (unset firmware fields).
fn usable_uuid(u: &str) -> bool {
    let hex: String = u.chars().filter(|c| *c != '-').collect();
    !hex.is_empty() && !hex.chars().all(|c| c == '0') && !hex.chars().all(|c| c == 'f')
}

/// The machine's identity as read now.
pub fn machine(e: &Endpoints, platform: Option<&str>) -> Machine {
    let dmi = &e.dmi_dir;
    let uuid = read_trimmed(&dmi.join("product_uuid")).map(|u| u.to_ascii_lowercase());
    let serial = read_trimmed(&dmi.join("product_serial"));
    let macs = macs(&e.net_dir);
    let instance_id = match platform {
        Some("aws") => read_trimmed(&dmi.join("board_asset_tag")).filter(|t| t.starts_with("i-")),
        _ => None,
    };
    let hostname = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty() && h != "(none)" && h != "localhost");
    let id = match &uuid {
        Some(u) if usable_uuid(u) => u.clone(),
        _ => match macs.first() {
            Some(m) => format!("mac-{m}"),
            None => "unknown".into(),
        },
    };
    Machine {
        id,
        uuid,
        serial,
        macs,
        platform: platform.map(str::to_string),
        instance_id,
        hostname,
    }
}

/// MAC addresses of the interfaces in `net` (sorted by interface name; loopback, empty and
/// all-zero addresses left out; duplicates once).
fn macs(net: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(net) else {
        return Vec::new();
    };
    let mut names: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    names.sort();
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if n == "lo" {
            continue;
        }
        let Some(m) = read_trimmed(&net.join(&n).join("address")) else {
            continue;
        };
        let m = m.to_ascii_lowercase();
        if m.chars().all(|c| c == '0' || c == ':') || out.contains(&m) {
            continue;
        }
        out.push(m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_from_the_tables() {
        let d = std::env::temp_dir().join(format!("agent-identity-{}", std::process::id()));
        let dmi = d.join("dmi");
        let net = d.join("net");
        for (dir, f, v) in [
            (
                &dmi,
                "product_uuid",
                "4C4C4544-0042-3510-8052-B4C04F4E4D32\n",
            ),
            (&dmi, "product_serial", "ABC123\n"),
            (&net.join("lo"), "address", "00:00:00:00:00:00\n"),
            (&net.join("eth1"), "address", "52:54:00:AA:BB:CC\n"),
            (&net.join("eth0"), "address", "52:54:00:12:34:56\n"),
        ] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(f), v).unwrap();
        }
        let e = Endpoints {
            dmi_dir: dmi.clone(),
            net_dir: net.clone(),
            ..Endpoints::builtin()
        };
        let m = machine(&e, Some("qemu"));
        assert_eq!(m.id, "4c4c4544-0042-3510-8052-b4c04f4e4d32");
        assert_eq!(m.serial.as_deref(), Some("ABC123"));
        assert_eq!(m.macs, ["52:54:00:12:34:56", "52:54:00:aa:bb:cc"]);
        assert_eq!(m.instance_id, None);
        // An unset UUID: the first MAC names the machine.
        std::fs::write(
            dmi.join("product_uuid"),
            "00000000-0000-0000-0000-000000000000",
        )
        .unwrap();
        assert_eq!(machine(&e, None).id, "mac-52:54:00:12:34:56");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
