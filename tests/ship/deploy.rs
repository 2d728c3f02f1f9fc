//! deploy/ as an operator applies it: every variant (deploy/, single, git-sync,
//! servicemonitor) renders with `kubectl kustomize` and every object validates against the
//! Kubernetes schemas (`kubernetes-validate --strict`, oldest and newest supported version);
//! the objects fit together (each Service, PodDisruptionBudget and NetworkPolicy selects a
//! workload's pods, each Service and policy port is a container port of them, the etcd
//! StatefulSet's members are the ones its --initial-cluster and the server's --etcd-endpoints
//! name, the ServiceMonitor selects the machines' Service); and the manifests' own command
//! lines run: a three-member etcd from the StatefulSet's arguments and the server from the
//! DaemonSet's against it, on 127.0.0.1, answering the inventory through the admin token.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::fetch::free_tcp_port;
use support::serve::*;
use support::{TempDir, need};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    let input = stdin.unwrap_or("").as_bytes().to_vec();
    let mut pipe = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{}{text}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// A variant rendered, validated, as JSON objects.
fn render(variant: &str, tmp: &Path) -> Vec<Value> {
    let dir = Path::new(ROOT).join("deploy").join(variant);
    let yaml = run("kubectl", &["kustomize", dir.to_str().unwrap()], None)
        .unwrap_or_else(|e| panic!("kubectl kustomize deploy/{variant}: {e}"));
    let label = if variant.is_empty() {
        "default"
    } else {
        variant
    };
    let file = tmp.join(format!("{label}.yaml"));
    std::fs::write(&file, &yaml).unwrap();
    let f = file.to_str().unwrap();
    for k in [&["-k", "1.30.0"][..], &[]] {
        let mut args = vec!["--strict"];
        args.extend_from_slice(k);
        args.push(f);
        let report = run("kubernetes-validate", &args, None)
            .unwrap_or_else(|e| panic!("deploy/{variant} does not validate ({k:?}): {e}"));
        let docs = docs(&yaml);
        for d in &docs {
            if d["kind"] == "ServiceMonitor" {
                continue; // a custom resource: checked below
            }
            let id = format!(
                "passed for resource {}/{}",
                d["kind"].as_str().unwrap().to_lowercase(),
                d["metadata"]["name"].as_str().unwrap()
            );
            assert!(
                report.contains(&id),
                "deploy/{variant}: no '{id}' in\n{report}"
            );
        }
    }
    docs(&yaml)
}

fn docs(yaml: &str) -> Vec<Value> {
    let json = run(
        "python3",
        &[
            "-c",
            "import sys, json, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d is not None]))",
        ],
        Some(yaml),
    )
    .unwrap_or_else(|e| panic!("parsing YAML: {e}"));
    serde_json::from_str(&json).unwrap()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The workloads' pod templates: (workload name, pod labels, pod spec).
fn pods(docs: &[Value]) -> Vec<(String, &Value, &Value)> {
    docs.iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("DaemonSet" | "StatefulSet" | "Deployment")
            )
        })
        .map(|d| {
            (
                d["metadata"]["name"].as_str().unwrap().to_string(),
                &d["spec"]["template"]["metadata"]["labels"],
                &d["spec"]["template"]["spec"],
            )
        })
        .collect()
}

fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| labels[k] == *v)
}

/// The container ports (name, number) of the pods a selector picks; fails if it picks none.
fn ports_of(docs: &[Value], selector: &Value, what: &str) -> Vec<(String, u64)> {
    let picked: Vec<_> = pods(docs)
        .into_iter()
        .filter(|(_, labels, _)| selects(selector, labels))
        .collect();
    assert!(!picked.is_empty(), "{what} selects no pods ({selector})");
    let mut out = Vec::new();
    for (_, _, spec) in picked {
        for c in spec["containers"].as_array().unwrap() {
            for p in c["ports"].as_array().into_iter().flatten() {
                out.push((
                    p["name"].as_str().unwrap_or("").to_string(),
                    p["containerPort"].as_u64().unwrap(),
                ));
            }
        }
    }
    out
}

fn container<'a>(w: &'a Value, name: &str) -> &'a Value {
    w["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// A container's `--flag=value` arguments (a flag without a value maps to "").
fn flags(c: &Value) -> BTreeMap<String, String> {
    c["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--"))
        .map(|a| {
            let (k, v) = a.split_once('=').unwrap_or((a, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// What holds for the objects of every variant.
fn check_wiring(variant: &str, docs: &[Value]) {
    for s in of_kind(docs, "Service") {
        let name = &s["metadata"]["name"];
        let ports = ports_of(docs, &s["spec"]["selector"], &format!("Service {name}"));
        for p in s["spec"]["ports"].as_array().unwrap() {
            let ok = match &p["targetPort"] {
                Value::String(n) => ports.iter().any(|(pn, _)| pn == n),
                Value::Number(n) => ports.iter().any(|(_, pp)| Some(*pp) == n.as_u64()),
                _ => ports.iter().any(|(_, pp)| Some(*pp) == p["port"].as_u64()),
            };
            assert!(
                ok,
                "{variant}: Service {name} port {p} is no container port: {ports:?}"
            );
        }
    }
    for b in of_kind(docs, "PodDisruptionBudget") {
        let sel = &b["spec"]["selector"]["matchLabels"];
        ports_of(
            docs,
            sel,
            &format!("PodDisruptionBudget {}", b["metadata"]["name"]),
        );
    }
    for n in of_kind(docs, "NetworkPolicy") {
        let name = &n["metadata"]["name"];
        let ports = ports_of(
            docs,
            &n["spec"]["podSelector"]["matchLabels"],
            &format!("NetworkPolicy {name}"),
        );
        for rule in n["spec"]["ingress"].as_array().unwrap() {
            for p in rule["ports"].as_array().unwrap() {
                assert!(
                    ports.iter().any(|(_, pp)| Some(*pp) == p["port"].as_u64()),
                    "{variant}: NetworkPolicy {name} opens {p}, no container port"
                );
            }
            for from in rule["from"].as_array().into_iter().flatten() {
                if let Some(sel) = from["podSelector"]["matchLabels"].as_object()
                    && !sel.is_empty()
                {
                    ports_of(
                        docs,
                        &from["podSelector"]["matchLabels"],
                        "a policy's source",
                    );
                }
            }
        }
    }
    // Every image is named in the kustomization (a registry name, not the bare placeholder).
    for (w, _, spec) in pods(docs) {
        for c in spec["containers"].as_array().unwrap() {
            let image = c["image"].as_str().unwrap();
            assert!(
                image.contains('/') && image.contains(':'),
                "{variant}: {w}: image {image}"
            );
        }
    }
    // The admin listener off loopback takes a token from a Secret, and its Service points at it.
    let server = pods(docs)
        .into_iter()
        .find(|(n, _, _)| n == "agent-serve")
        .map(|(n, _, _)| n)
        .expect("the server's workload");
    let w = docs
        .iter()
        .find(|d| d["metadata"]["name"] == server.as_str() && d["spec"]["template"].is_object())
        .unwrap();
    let f = flags(container(w, "agent-serve"));
    let admin = &f["admin-listen"];
    assert!(
        !admin.starts_with("127."),
        "{variant}: the admin listener is on loopback only"
    );
    let token = &f["admin-token-file"];
    let mounts = container(w, "agent-serve")["volumeMounts"]
        .as_array()
        .unwrap();
    let m = mounts
        .iter()
        .find(|m| token.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("the admin token file is on a volume");
    let vol = w["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == m["name"])
        .unwrap();
    assert!(vol["secret"]["secretName"].is_string(), "{vol}");
    let admin_port: u64 = admin.rsplit(':').next().unwrap().parse().unwrap();
    let svc = named(docs, "Service", "agent-serve-admin");
    let target = &svc["spec"]["ports"][0]["targetPort"];
    let ports = ports_of(docs, &svc["spec"]["selector"], "agent-serve-admin");
    assert!(
        ports
            .iter()
            .any(|(n, p)| *p == admin_port && (target == n.as_str() || target == *p)),
        "{variant}: agent-serve-admin does not reach --admin-listen {admin}"
    );
}

/// The etcd members' names and the server's endpoints agree with the StatefulSet.
fn check_etcd(docs: &[Value]) -> (&Value, &Value) {
    let sts = named(docs, "StatefulSet", "agent-serve-etcd");
    let n = sts["spec"]["replicas"].as_u64().unwrap();
    assert_eq!(n, 3, "three members");
    let svc_name = sts["spec"]["serviceName"].as_str().unwrap();
    let svc = named(docs, "Service", svc_name);
    assert_eq!(svc["spec"]["clusterIP"], "None", "a headless Service");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    let etcd = container(sts, "etcd");
    let f = flags(etcd);
    let want: Vec<String> = (0..n)
        .map(|i| format!("agent-serve-etcd-{i}=http://agent-serve-etcd-{i}.{svc_name}:2380"))
        .collect();
    assert_eq!(f["initial-cluster"], want.join(","));
    let ds = named(docs, "DaemonSet", "agent-serve");
    let sf = flags(container(ds, "agent-serve"));
    assert_eq!(sf["inventory-store"], "etcd");
    let want: Vec<String> = (0..n)
        .map(|i| format!("http://agent-serve-etcd-{i}.{svc_name}:2379"))
        .collect();
    assert_eq!(sf["etcd-endpoints"], want.join(","));
    let pdb = named(docs, "PodDisruptionBudget", "agent-serve-etcd");
    assert!(
        pdb["spec"]["minAvailable"].as_u64().unwrap() > n / 2,
        "the budget keeps a quorum"
    );
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], etcd["volumeMounts"][0]["name"],
        "each member's data on its own claim"
    );
    (sts, ds)
}

struct Members(Vec<Child>);
impl Drop for Members {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The StatefulSet's etcd arguments, run as three members on 127.0.0.1: every member's DNS
/// name and port mapped to a port of its own. Returns the members and the client URL map.
fn start_etcd(sts: &Value, dir: &Path) -> (Members, Vec<(String, String)>) {
    let members = sts["spec"]["replicas"].as_u64().unwrap() as usize;
    let svc = sts["spec"]["serviceName"].as_str().unwrap();
    // (member, port in the manifest) → port here.
    let mut map = BTreeMap::new();
    for i in 0..members {
        for p in [2379, 2380, 2381] {
            map.insert((i, p), free_tcp_port());
        }
    }
    let mut urls = Vec::new();
    for i in 0..members {
        urls.push((
            format!("http://agent-serve-etcd-{i}.{svc}:2379"),
            format!("http://127.0.0.1:{}", map[&(i, 2379)]),
        ));
    }
    let mut children = Vec::new();
    let etcd = container(sts, "etcd");
    for i in 0..members {
        let name = format!("agent-serve-etcd-{i}");
        let mut args = Vec::new();
        for a in etcd["args"].as_array().unwrap() {
            let mut a = a.as_str().unwrap().replace("$(POD_NAME)", &name);
            for j in 0..members {
                for p in [2379, 2380] {
                    a = a.replace(
                        &format!("agent-serve-etcd-{j}.{svc}:{p}"),
                        &format!("127.0.0.1:{}", map[&(j, p)]),
                    );
                }
            }
            for p in [2379, 2380, 2381] {
                a = a.replace(
                    &format!("0.0.0.0:{p}"),
                    &format!("127.0.0.1:{}", map[&(i, p)]),
                );
            }
            if let Some(d) = a.strip_prefix("--data-dir=") {
                a = format!("--data-dir={}{d}", dir.join(&name).display());
            }
            args.push(a);
        }
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        children.push(
            Command::new("etcd")
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("starting etcd"),
        );
    }
    let m = Members(children);
    // Healthy (a leader elected) on each member's metrics port, as the readiness probe asks.
    let start = Instant::now();
    for i in 0..members {
        let url = format!("http://127.0.0.1:{}/health", map[&(i, 2381)]);
        loop {
            if run("curl", &["-sf", "--max-time", "2", &url], None)
                .is_ok_and(|b| b.contains("\"health\":\"true\""))
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "etcd member {i} not healthy from the StatefulSet's arguments; log:\n{}",
                std::fs::read_to_string(dir.join(format!("agent-serve-etcd-{i}.log")))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    (m, urls)
}

/// The server container's arguments with its paths moved into `dir` and its listeners on
/// 127.0.0.1 (the source, key, certificate and tokens made there).
fn server_args(c: &Value, dir: &Path, endpoints: &[(String, String)]) -> Vec<String> {
    make_ca(dir);
    make_leaf(dir, "server");
    write(&dir.join("source/pools/worker.ign"), &worker_config("ship"));
    write(
        &dir.join("token.key"),
        "a-key-of-at-least-32-bytes-for-the-test\n",
    );
    write(&dir.join("admin.token"), "an-admin-token-for-the-test\n");
    let mut out = Vec::new();
    for (k, v) in flags(c) {
        let v = match k.as_str() {
            "source" => dir.join("source").display().to_string(),
            "listen" | "admin-listen" => "127.0.0.1:0".into(),
            "tls-cert" => dir.join("server.pem").display().to_string(),
            "tls-key" => dir.join("server.key").display().to_string(),
            "token-key" => dir.join("token.key").display().to_string(),
            "admin-token-file" => dir.join("admin.token").display().to_string(),
            "state-dir" => dir.join("state").display().to_string(),
            "etcd-endpoints" => {
                let mut v = v;
                for (from, to) in endpoints {
                    v = v.replace(from, to);
                }
                v
            }
            _ => v,
        };
        out.push(if v.is_empty() {
            format!("--{k}")
        } else {
            format!("--{k}={v}")
        });
    }
    out
}

/// The server from `args` answers the inventory on its admin listener, with the token only.
fn inventory_answers(args: &[String]) {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(&refs, &[]);
    let admin = s.addr_of("admin");
    let r = request(
        admin,
        &format!("GET /machines HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 401, "the admin listener without its token");
    let r = request(
        admin,
        &format!(
            "GET /machines HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer an-admin-token-for-the-test\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = request(
        admin,
        &format!(
            "GET /ui/ HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer an-admin-token-for-the-test\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(r.status, 200, "/ui/: {}", String::from_utf8_lossy(&r.body));
}

#[test]
fn every_variant_renders_validates_and_fits_together() {
    need("kubectl", "ship.apt");
    need("kubernetes-validate", "serve.pip");
    let t = TempDir::new("ship-deploy");

    // The validator can fail: a misspelt field of the etcd StatefulSet is refused.
    let etcd = std::fs::read_to_string(Path::new(ROOT).join("deploy/base/etcd.yaml")).unwrap();
    let bad = t.path().join("bad.yaml");
    std::fs::write(
        &bad,
        etcd.replace("podManagementPolicy:", "podManagementPolicyy:"),
    )
    .unwrap();
    assert!(
        run(
            "kubernetes-validate",
            &["--strict", bad.to_str().unwrap()],
            None
        )
        .is_err(),
        "a misspelt field passed validation"
    );

    // The default: the DaemonSet, its etcd, Services, budgets and policies.
    let default = render("", t.path());
    for (kind, name) in [
        ("DaemonSet", "agent-serve"),
        ("StatefulSet", "agent-serve-etcd"),
        ("Service", "agent-serve"),
        ("Service", "agent-serve-admin"),
        ("Service", "agent-serve-etcd"),
        ("PodDisruptionBudget", "agent-serve"),
        ("PodDisruptionBudget", "agent-serve-etcd"),
        ("NetworkPolicy", "agent-serve"),
        ("NetworkPolicy", "agent-serve-etcd"),
    ] {
        named(&default, kind, name);
    }
    check_wiring("deploy/", &default);
    check_etcd(&default);
    // The etcd client port takes only the servers and the members.
    let np = named(&default, "NetworkPolicy", "agent-serve-etcd");
    let client = np["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ports"][0]["port"] == 2379)
        .unwrap();
    let from: Vec<&Value> = client["from"]
        .as_array()
        .expect("2379 limited to some pods")
        .iter()
        .map(|f| &f["podSelector"]["matchLabels"]["app.kubernetes.io/name"])
        .collect();
    assert_eq!(from, ["agent-serve", "agent-serve-etcd"]);

    // One replica: no etcd, the embedded store on a claimed volume.
    let single = render("single", t.path());
    assert!(of_kind(&single, "DaemonSet").is_empty());
    assert!(
        single
            .iter()
            .all(|d| !d["metadata"]["name"].as_str().unwrap().contains("etcd")),
        "no etcd object in deploy/single"
    );
    check_wiring("deploy/single", &single);
    let sts = named(&single, "StatefulSet", "agent-serve");
    assert_eq!(sts["spec"]["replicas"], 1);
    let f = flags(container(sts, "agent-serve"));
    assert_eq!(f["inventory-store"], "embedded");
    assert!(!f.contains_key("etcd-endpoints"));
    let claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
        .as_str()
        .unwrap();
    let mount = container(sts, "agent-serve")["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == claim)
        .expect("the claim is mounted");
    assert!(f["state-dir"].starts_with(mount["mountPath"].as_str().unwrap()));

    // git-sync: the default's wiring with the source from the sidecar.
    let git = render("git-sync", t.path());
    check_wiring("deploy/git-sync", &git);
    check_etcd(&git);

    // The ServiceMonitor selects exactly the machines' Service, at a port it has, in its
    // namespace.
    let sm_docs = render("servicemonitor", t.path());
    check_wiring("deploy/servicemonitor", &sm_docs);
    let sm = named(&sm_docs, "ServiceMonitor", "agent-serve");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    let picked: Vec<&Value> = of_kind(&sm_docs, "Service")
        .into_iter()
        .filter(|s| {
            selects(
                &sm["spec"]["selector"]["matchLabels"],
                &s["metadata"]["labels"],
            )
        })
        .collect();
    assert_eq!(picked.len(), 1, "the ServiceMonitor selects {picked:?}");
    assert_eq!(picked[0]["metadata"]["name"], "agent-serve");
    let ep = &sm["spec"]["endpoints"][0];
    assert!(
        picked[0]["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == ep["port"]),
        "the endpoint's port {} is not the Service's",
        ep["port"]
    );
    assert_eq!(ep["path"], "/metrics");
    assert_eq!(ep["scheme"], "https");
    let ns = picked[0]["metadata"]["namespace"].as_str().unwrap();
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"][0], ns);
}

#[test]
fn the_manifests_command_lines_run() {
    need("kubectl", "ship.apt");
    need("etcd", "serve.apt");
    need("curl", "serve.apt");
    let t = TempDir::new("ship-deploy-run");
    let default = render("", t.path());
    let (sts, ds) = check_etcd(&default);
    let (_members, endpoints) = start_etcd(sts, t.path());
    let dir = t.path().join("replicated");
    std::fs::create_dir_all(&dir).unwrap();
    inventory_answers(&server_args(container(ds, "agent-serve"), &dir, &endpoints));

    let single = render("single", t.path());
    let sts = named(&single, "StatefulSet", "agent-serve");
    let dir: PathBuf = t.path().join("single");
    std::fs::create_dir_all(&dir).unwrap();
    inventory_answers(&server_args(container(sts, "agent-serve"), &dir, &[]));
}
