//! `agent machines list | show ID | summary | reprovision ID | delete ID`: the server's
//! inventory (docs/reports.md; its JSON: docs/openapi.json), read from its
//! admin listener, proving the admin token without sending it, through the provisioning
//! fetcher's HTTP clients; what machines reported is printed with control characters escaped.

use std::borrow::Cow;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::fetch::Options;
use crate::fetch::clients::Agents;

/// Where the config server's admin listener is and how to prove the admin token: the flags
/// `agent machines` and `agent rollout` share.
#[derive(Debug, Args)]
pub struct AdminServer {
    /// The server's admin listener.
    #[arg(
        long,
        default_value = "http://127.0.0.1:22625",
        global = true,
        env = "AGENT_SERVER"
    )]
    pub server: String,
    /// The admin token's file (`agent serve --admin-token-file`).
    #[arg(long, global = true, env = "AGENT_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Print the server's JSON as it is.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MachinesArgs {
    #[command(flatten)]
    pub admin: AdminServer,
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
        /// unassigned, installed, running, unresponsive, booted).
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
    /// How many machines, by state and by pool.
    Summary,
    /// Install the machine again at its next network boot (after a successful install its
    /// network boots go to the local disk; docs/serve.md, "Install once").
    Reprovision {
        /// The machine's id (SMBIOS UUID, or mac-<address>).
        id: String,
    },
    /// Forget a decommissioned machine: its record and history leave the inventory (a
    /// report it sends later starts a new record).
    Delete {
        /// The machine's id (SMBIOS UUID, or mac-<address>).
        id: String,
    },
}

/// The largest answer read (a listing of many machines).
const MAX_ANSWER: u64 = 64 << 20;
/// The time one exchange with the admin listener may take.
const EXCHANGE_TIME: Duration = Duration::from_secs(30);

fn get(a: &MachinesArgs, path_and_query: &str) -> Result<serde_json::Value> {
    call(a, "GET", path_and_query)
}

/// `method` (GET, or POST or DELETE without a body) on the admin listener; its JSON answer
/// (null for 204, no content).
///
/// With `--admin-token-file` the token itself is never sent: the server's nonce
/// (`GET /auth/challenge`) and the request are signed with it (`Authorization: Agent-HMAC`),
/// and the answer is used only when it carries the server's proof of the same token
/// (`X-Agent-Admin-Proof`) — a program that took the admin port learns nothing it can use
/// and cannot feed this command an answer (docs/reports.md, "Reading the inventory").
fn call(a: &MachinesArgs, method: &str, path_and_query: &str) -> Result<serde_json::Value> {
    call_admin(
        &a.admin.server,
        a.admin.admin_token_file.as_deref(),
        method,
        path_and_query,
    )
}

/// [`call`] on admin listener `server` with the token in `token_file` (`agent rollout`
/// too).
pub(super) fn call_admin(
    server: &str,
    admin_token_file: Option<&std::path::Path>,
    method: &str,
    path_and_query: &str,
) -> Result<serde_json::Value> {
    use serve::admin::auth::{
        ADMIN_HEADER, AUTH_SCHEME, CHALLENGE_PATH, answer_proof, request_mac,
    };
    let token = match admin_token_file {
        Some(f) => {
            let t = std::fs::read_to_string(f)
                .with_context(|| format!("reading --admin-token-file {}", f.display()))?;
            Some(t.lines().next().unwrap_or_default().trim().to_string())
        }
        None => None,
    };
    let base = server.trim_end_matches('/');
    let url = format!("{base}{path_and_query}");
    let opts = Options::default();
    let agents = Agents::new(&opts, None).context("setting up the HTTP client")?;
    let agent = agents.for_url(&opts, None, &url);
    let mut headers: Vec<(&str, String)> = Vec::new();
    let mut signed = None;
    if let Some(t) = &token {
        let at = format!("{base}{CHALLENGE_PATH}");
        let (status, _, body) = exchange(agent, "GET", &at, &[])?;
        let nonce = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["nonce"].as_str().map(str::to_string))
            .filter(|n| n.len() <= 256 && n.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(nonce) = nonce.filter(|_| status == 200) else {
            bail!(
                "{at}: HTTP {status}: no admin challenge (is this agent serve's admin listener?): {}",
                visible(String::from_utf8_lossy(&body).trim())
            );
        };
        let mac = request_mac(t, &nonce, method, path_and_query);
        headers.push((
            "Authorization",
            format!("{AUTH_SCHEME} nonce={nonce}, mac={mac}"),
        ));
        signed = Some((t, nonce, mac));
    }
    if method != "GET" {
        headers.push((ADMIN_HEADER, "1".into()));
    }
    let (status, proof, body) = exchange(agent, method, &url, &headers)?;
    let said = || visible(String::from_utf8_lossy(&body).trim()).into_owned();
    if let Some((t, nonce, mac)) = &signed {
        let want = answer_proof(t, nonce, mac, status, &body);
        if proof.as_deref() != Some(want.as_str()) {
            if status == 401 {
                bail!(
                    "{url}: HTTP 401: the server does not take this admin token (--admin-token-file): {}",
                    said()
                );
            }
            bail!(
                "{url}: HTTP {status}: the answer does not prove the server holds the admin token, so it is not used: another program may hold the admin port, or the server has another token (or none: then leave out --admin-token-file)"
            );
        }
    }
    match status {
        200 => serde_json::from_slice(&body).with_context(|| format!("{url}: not JSON")),
        204 => Ok(serde_json::Value::Null),
        401 => bail!(
            "{url}: HTTP 401: give the admin token with --admin-token-file: {}",
            said()
        ),
        _ => bail!("{url}: HTTP {status}: {}", said()),
    }
}

/// `r` with `headers` and the exchange's time limit.
fn prepared<B>(
    mut r: ureq::RequestBuilder<B>,
    headers: &[(&str, String)],
) -> ureq::RequestBuilder<B> {
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    r.config().timeout_global(Some(EXCHANGE_TIME)).build()
}

/// One request, no redirect followed; its status, its proof header and its body (at most
/// [`MAX_ANSWER`] bytes).
fn exchange(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, String)],
) -> Result<(u16, Option<String>, Vec<u8>)> {
    let resp = match method {
        "DELETE" => prepared(agent.delete(url), headers).call(),
        "POST" => prepared(agent.post(url), headers).send_empty(),
        _ => prepared(agent.get(url), headers).call(),
    }
    .with_context(|| url.to_string())?;
    let status = resp.status().as_u16();
    let proof = resp
        .headers()
        .get(serve::admin::auth::PROOF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = Vec::new();
    resp.into_body()
        .into_reader()
        .take(MAX_ANSWER + 1)
        .read_to_end(&mut body)
        .with_context(|| format!("reading {url}"))?;
    if body.len() as u64 > MAX_ANSWER {
        bail!("{url}: the answer is larger than {MAX_ANSWER} bytes");
    }
    Ok((status, proof, body))
}

/// `s` safe to print on a terminal: C0 controls, DEL, C1 controls and the bidirectional
/// controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) shown as escapes (`\n`,
/// `\t`, `\x1b`, `\u{202e}`) and `\` as `\\`, so what a machine reported cannot set the
/// terminal's title, move its cursor, forge a line or a column, or reorder what is shown.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c == '\\' || hidden(c)) {
        return Cow::Borrowed(s);
    }
    let mut o = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            '\r' => o.push_str("\\r"),
            c if (c as u32) < 0x80 && hidden(c) => o.push_str(&format!("\\x{:02x}", c as u32)),
            c if hidden(c) => o.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => o.push(c),
        }
    }
    Cow::Owned(o)
}

/// A character a terminal acts on or reorders text by, rather than shows.
fn hidden(c: char) -> bool {
    matches!(c as u32, 0..=0x1f | 0x7f..=0x9f | 0x61c | 0x200e | 0x200f | 0x202a..=0x202e | 0x2066..=0x2069)
}

/// `v` as pretty JSON safe to print on a terminal: JSON escapes control characters below
/// U+0020 already; DEL, the C1 and the bidirectional controls become `\uXXXX` too (still
/// the same JSON).
fn json_text(v: &serde_json::Value) -> Result<String> {
    // Below U+0020 only the layout's line breaks are left.
    let raw = |c: char| hidden(c) && c as u32 >= 0x7f;
    let s = serde_json::to_string_pretty(v)?;
    if !s.chars().any(raw) {
        return Ok(s);
    }
    Ok(s.chars()
        .map(|c| {
            if raw(c) {
                format!("\\u{:04x}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect())
}

pub(super) fn enc(s: &str) -> String {
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

/// A file for output that must not reach stdout before it is whole: an unnamed file in the
/// temporary directory (`O_TMPFILE`), gone when closed, whatever happens.
fn unlinked_tempfile() -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir();
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_TMPFILE)
        .open(&dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))
}

/// Rows under a header: on a terminal, columns padded to their widest cell (two spaces
/// between); otherwise tab-separated, one line per row, for `cut` and `awk`.
fn table<R: AsRef<[String]>>(header: &[String], rows: &[R], terminal: bool) -> String {
    let mut out = String::new();
    let all = || std::iter::once(header).chain(rows.iter().map(AsRef::as_ref));
    if !terminal {
        for r in all() {
            out.push_str(&r.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let width = |s: &str| s.chars().count();
    let n = header.len();
    let mut w = vec![0usize; n];
    for r in all() {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(width(c));
        }
    }
    for r in all() {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate().take(n) {
            line.push_str(c);
            if i + 1 < n {
                line.push_str(&" ".repeat(w[i] - width(c) + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `/machines/summary` as a table: a row per pool (machines of no pool as `-`) and the
/// total, a column per state (in the server's order) and the row's total.
fn summary_table(v: &serde_json::Value, terminal: bool) -> String {
    let states: Vec<String> = v["byState"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let row = |name: String, o: &serde_json::Value| {
        let n: Vec<u64> = states.iter().map(|s| o[s].as_u64().unwrap_or(0)).collect();
        let mut r = vec![name];
        r.extend(n.iter().map(u64::to_string));
        r.push(n.iter().sum::<u64>().to_string());
        r
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (p, o) in v["byPool"].as_object().into_iter().flatten() {
        let name = if p.is_empty() {
            "-".into()
        } else {
            visible(p).into_owned()
        };
        rows.push(row(name, o));
    }
    rows.push(row("total".into(), &v["byState"]));
    let mut header = vec!["POOL".to_string()];
    header.extend(states.iter().map(|s| s.to_uppercase()));
    header.push("TOTAL".into());
    table(&header, &rows, terminal)
}

/// A value of the server's JSON as one field of text output (escaped: [`visible`]).
fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "-".into(),
        serde_json::Value::String(s) => visible(s).into_owned(),
        other => visible(&other.to_string()).into_owned(),
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
            // The server answers a page at a time (`next`: the `after` of the next one). The
            // listing goes to stdout only once every page has come: a failure leaves stdout
            // empty, never half a document. JSON is held in an unlinked temporary file, so the
            // listing holds one page in memory whatever the inventory's size; the table's
            // rows (a line each) are kept to align its columns.
            let mut json = if a.admin.json {
                let mut f = unlinked_tempfile()?;
                write!(f, "{{\n  \"machines\": [")?;
                Some(std::io::BufWriter::new(f))
            } else {
                None
            };
            let mut rows: Vec<[String; 6]> = Vec::new();
            let mut first = true;
            let mut after: Option<String> = None;
            loop {
                let mut q = q.clone();
                if let Some(a) = &after {
                    q.push(format!("after={}", enc(a)));
                }
                let v = get(&a, &format!("/machines?{}", q.join("&")))?;
                for m in v["machines"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    if let Some(out) = json.as_mut() {
                        // As `serde_json::to_string_pretty` of the whole document would.
                        let item = json_text(m)?.replace('\n', "\n    ");
                        write!(out, "{}\n    {item}", if first { "" } else { "," })?;
                    } else {
                        rows.push([
                            text(&m["id"]),
                            text(&m["state"]),
                            text(&m["pool"]),
                            text(&m["config"]["name"]),
                            text(&m["lastSeen"]),
                            text(&m["identity"]["hostname"]),
                        ]);
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
            let mut out = std::io::stdout().lock();
            match json {
                Some(mut j) => {
                    writeln!(j, "{}]\n}}", if first { "" } else { "\n  " })?;
                    let mut f = j.into_inner().map_err(|e| e.into_error())?;
                    use std::io::Seek;
                    f.rewind()?;
                    std::io::copy(&mut f, &mut out)?;
                }
                None => {
                    let header = ["ID", "STATE", "POOL", "CONFIG", "LAST SEEN", "HOSTNAME"]
                        .map(str::to_string);
                    use std::io::IsTerminal;
                    let table = table(&header, &rows, std::io::stdout().is_terminal());
                    out.write_all(table.as_bytes())?;
                }
            }
        }
        MachinesAction::Reprovision { id } => {
            let v = call(&a, "POST", &format!("/machines/{}/reprovision", enc(id)))?;
            if a.admin.json {
                println!("{}", json_text(&v)?);
                return Ok(());
            }
            println!(
                "machine {} installs again at its next network boot",
                text(&v["id"])
            );
        }
        MachinesAction::Summary => {
            let v = get(&a, "/machines/summary")?;
            if a.admin.json {
                println!("{}", json_text(&v)?);
                return Ok(());
            }
            use std::io::IsTerminal;
            print!("{}", summary_table(&v, std::io::stdout().is_terminal()));
        }
        MachinesAction::Delete { id } => {
            call(&a, "DELETE", &format!("/machines/{}", enc(id)))?;
            if a.admin.json {
                let v = serde_json::json!({"id": id, "deleted": true});
                println!("{}", json_text(&v)?);
                return Ok(());
            }
            println!("machine {} removed from the inventory", visible(id));
        }
        MachinesAction::Show { id } => {
            let v = get(&a, &format!("/machines/{}", enc(id)))?;
            if a.admin.json {
                println!("{}", json_text(&v)?);
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
            if let Some(f) = v["machineFile"].as_str() {
                println!("machine file\tmachines/{}.json", visible(f));
            }
            if let Some(t) = v["reprovision"].as_str() {
                println!("reprovision\tasked for at {}", visible(t));
            }
            for b in v["boots"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .rev()
            {
                println!("boot {}", text(&b["bootId"]));
                for s in b["stages"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                    println!(
                        "  {}\t{}\t{} ms",
                        text(&s["stage"]),
                        text(&s["outcome"]),
                        text(&s["durationMs"])
                    );
                    if let Some(e) = s["error"].as_str() {
                        println!("    error: {}", visible(e));
                    }
                    for l in s["detail"]["logTail"]
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

#[cfg(test)]
mod tests {
    #[test]
    fn tables_align_on_a_terminal_and_are_tab_separated_otherwise() {
        let h = ["ID", "STATE"].map(str::to_string);
        let rows = [
            ["machine-1", "provisioned"].map(str::to_string),
            ["m2", "failed"].map(str::to_string),
        ];
        assert_eq!(
            super::table(&h, &rows, false),
            "ID\tSTATE\nmachine-1\tprovisioned\nm2\tfailed\n"
        );
        assert_eq!(
            super::table(&h, &rows, true),
            "ID         STATE\nmachine-1  provisioned\nm2         failed\n"
        );
    }

    use super::*;

    #[test]
    fn the_summary_is_a_row_per_pool_and_the_total() {
        let v = serde_json::json!({"total": 4,
            "byState": {"failed": 1, "booted": 2, "provisioned": 1},
            "byPool": {"": {"booted": 2}, "worker": {"failed": 1, "provisioned": 1}}});
        let t = summary_table(&v, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0].split('\t').next(), Some("POOL"));
        assert!(lines[0].ends_with("\tTOTAL"), "{t}");
        let col = |name: &str| lines[0].split('\t').position(|c| c == name).unwrap();
        let cell = |row: usize, name: &str| lines[row].split('\t').nth(col(name)).unwrap();
        assert_eq!(
            (cell(1, "POOL"), cell(1, "BOOTED"), cell(1, "TOTAL")),
            ("-", "2", "2")
        );
        assert_eq!(
            (cell(2, "POOL"), cell(2, "FAILED"), cell(2, "TOTAL")),
            ("worker", "1", "2")
        );
        assert_eq!((cell(3, "POOL"), cell(3, "TOTAL")), ("total", "4"));
    }

    #[test]
    fn reported_text_is_printed_visible() {
        for (given, shown) in [
            ("worker-1", "worker-1"),
            ("héllo wörld", "héllo wörld"),
            ("\u{1b}]0;pwned\u{7}", r"\x1b]0;pwned\x07"),
            ("a\nforged-row", r"a\nforged-row"),
            ("a\tb\r", r"a\tb\r"),
            ("\u{7f}\u{0}", r"\x7f\x00"),
            ("\u{9b}31m", r"\u{9b}31m"),
            ("\u{202e}exe.txt", r"\u{202e}exe.txt"),
            (
                "\u{202a}\u{202d}\u{2066}\u{2069}\u{200f}\u{61c}",
                r"\u{202a}\u{202d}\u{2066}\u{2069}\u{200f}\u{61c}",
            ),
            (r"C:\x1b", r"C:\\x1b"),
        ] {
            assert_eq!(visible(given), shown, "{given:?}");
        }
        assert!(matches!(visible("plain"), Cow::Borrowed(_)));
        let v = serde_json::json!({"h": "\u{1b}x\u{202e}\u{85}\u{7f}"});
        let j = json_text(&v).unwrap();
        assert_eq!(j, "{\n  \"h\": \"\\u001bx\\u202e\\u0085\\u007f\"\n}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&j).unwrap(), v);
    }
}
