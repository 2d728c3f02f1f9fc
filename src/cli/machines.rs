//! `agent machines list | show ID | reprovision ID`: the server's inventory (docs/reports.md), read from its
//! admin listener with the admin token, through the provisioning fetcher's HTTP client.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::fetch::{Fetcher, Options, http};

#[derive(Debug, Args)]
pub struct MachinesArgs {
    /// The server's admin listener.
    #[arg(long, default_value = "http://127.0.0.1:22625", global = true)]
    pub server: String,
    /// The admin token's file (`agent serve --admin-token-file`).
    #[arg(long, global = true)]
    pub admin_token_file: Option<PathBuf>,
    /// Print the server's JSON as it is.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub action: MachinesAction,
}

#[derive(Debug, Subcommand)]
pub enum MachinesAction {
    /// One line per machine: id, state, pool, config, last seen, hostname.
    List {
        /// Only this pool's machines.
        #[arg(long)]
        pool: Option<String>,
        /// Only machines in this state (fetching, provisioning, provisioned, failed,
        /// unassigned).
        #[arg(long)]
        state: Option<String>,
        /// Machines asked for per request (the server's `?limit=`, 1 to 10,000); the listing
        /// is printed page by page.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        page_size: u32,
    },
    /// One machine: identity, and per boot its stages, changes and failure.
    Show {
        /// The machine's id (SMBIOS UUID, or mac-<address>).
        id: String,
    },
    /// Install the machine again at its next network boot (after a successful install its
    /// network boots go to the local disk; docs/serve.md, "Install once").
    Reprovision {
        /// The machine's id (SMBIOS UUID, or mac-<address>).
        id: String,
    },
}

/// The largest answer read (a listing of many machines).
const MAX_ANSWER: u64 = 64 << 20;

fn get(a: &MachinesArgs, path_and_query: &str) -> Result<serde_json::Value> {
    call(a, "GET", path_and_query)
}

/// `method` (GET, or POST without a body) on the admin listener; its JSON answer.
fn call(a: &MachinesArgs, method: &str, path_and_query: &str) -> Result<serde_json::Value> {
    let mut headers = Vec::new();
    if let Some(f) = &a.admin_token_file {
        let t = std::fs::read_to_string(f)
            .with_context(|| format!("reading --admin-token-file {}", f.display()))?;
        let t = t.lines().next().unwrap_or_default().trim().to_string();
        headers.push(("Authorization".to_string(), format!("Bearer {t}")));
    }
    let url = format!("{}{path_and_query}", a.server.trim_end_matches('/'));
    let f = Fetcher::new(Options::default());
    let left = Some(Duration::from_secs(30));
    let r = if method == "POST" {
        http::post(&f, &url, &headers, b"", left)
    } else {
        http::send(&f, method, &url, &headers, false, left)
    };
    let mut r = r.map_err(|e| match e {
        crate::fetch::retry::Failure::Retry(e) | crate::fetch::retry::Failure::Fatal(e) => {
            e.context(url.clone())
        }
    })?;
    let mut body = Vec::new();
    (&mut r.body)
        .take(MAX_ANSWER + 1)
        .read_to_end(&mut body)
        .with_context(|| format!("reading {url}"))?;
    if body.len() as u64 > MAX_ANSWER {
        bail!("{url}: the answer is larger than {MAX_ANSWER} bytes");
    }
    match r.status {
        200 => serde_json::from_slice(&body).with_context(|| format!("{url}: not JSON")),
        401 => bail!(
            "{}: give the admin token with --admin-token-file",
            r.describe()
        ),
        _ => bail!(
            "{}: {}",
            r.describe(),
            String::from_utf8_lossy(&body).trim()
        ),
    }
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "-".into(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn run(a: MachinesArgs) -> Result<()> {
    match &a.action {
        MachinesAction::List {
            pool,
            state,
            page_size,
        } => {
            let mut q = vec![format!("limit={page_size}")];
            if let Some(p) = pool {
                q.push(format!("pool={}", enc(p)));
            }
            if let Some(s) = state {
                q.push(format!("state={}", enc(s)));
            }
            // The server answers a page at a time (`next`: the `after` of the next one); each
            // page is printed as it comes, so the listing holds one page in memory, whatever
            // the inventory's size.
            let mut out = std::io::stdout().lock();
            if a.json {
                write!(out, "{{\n  \"machines\": [")?;
            } else {
                writeln!(out, "ID\tSTATE\tPOOL\tCONFIG\tLAST SEEN\tHOSTNAME")?;
            }
            let mut first = true;
            let mut after: Option<String> = None;
            loop {
                let mut q = q.clone();
                if let Some(a) = &after {
                    q.push(format!("after={}", enc(a)));
                }
                let v = get(&a, &format!("/machines?{}", q.join("&")))?;
                for m in v["machines"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    if a.json {
                        // As `serde_json::to_string_pretty` of the whole document would.
                        let item = serde_json::to_string_pretty(m)?.replace('\n', "\n    ");
                        write!(out, "{}\n    {item}", if first { "" } else { "," })?;
                    } else {
                        writeln!(
                            out,
                            "{}\t{}\t{}\t{}\t{}\t{}",
                            text(&m["id"]),
                            text(&m["state"]),
                            text(&m["pool"]),
                            text(&m["config"]["name"]),
                            m["last_seen"].as_u64().map_or("-".into(), utc),
                            text(&m["identity"]["hostname"]),
                        )?;
                    }
                    first = false;
                }
                // Pages go forward by id: a `next` that does not is the end.
                match v["next"].as_str() {
                    Some(n) if after.as_deref().is_none_or(|a| n > a) => {
                        after = Some(n.to_string())
                    }
                    _ => break,
                }
            }
            if a.json {
                writeln!(out, "{}]\n}}", if first { "" } else { "\n  " })?;
            }
        }
        MachinesAction::Reprovision { id } => {
            let v = call(&a, "POST", &format!("/machines/{}/reprovision", enc(id)))?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            println!(
                "machine {} installs again at its next network boot",
                text(&v["id"])
            );
        }
        MachinesAction::Show { id } => {
            let v = get(&a, &format!("/machines/{}", enc(id)))?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            println!("id\t{}", text(&v["id"]));
            println!("state\t{}", text(&v["state"]));
            println!("pool\t{}", text(&v["pool"]));
            println!(
                "config\t{} {}",
                text(&v["config"]["name"]),
                text(&v["config"]["hash"])
            );
            println!("hostname\t{}", text(&v["identity"]["hostname"]));
            println!("platform\t{}", text(&v["identity"]["platform"]));
            println!("authenticated\t{}", text(&v["authenticated"]));
            if let Some(f) = v["machine_file"].as_str() {
                println!("machine file\tmachines/{f}.json");
            }
            if let Some(t) = v["reprovision"].as_u64() {
                println!("reprovision\tasked for at {}", utc(t));
            }
            for b in v["boots"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .rev()
            {
                println!("boot {}", text(&b["boot_id"]));
                for s in b["stages"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    println!(
                        "  {}\t{}\t{} ms",
                        text(&s["stage"]),
                        text(&s["outcome"]),
                        text(&s["duration_ms"])
                    );
                    if let Some(e) = s["error"].as_str() {
                        println!("    error: {e}");
                    }
                    for l in s["detail"]["log_tail"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or(&[])
                    {
                        println!("    | {}", text(l));
                    }
                }
            }
        }
    }
    Ok(())
}

fn utc(secs: u64) -> String {
    let u = crate::util::utc(secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        u.year, u.month, u.day, u.hour, u.minute, u.second
    )
}
