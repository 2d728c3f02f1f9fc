//! The Kubernetes manifests in deploy/, checked offline: rendered with `kubectl kustomize`
//! (both variants: ConfigMap source and git-sync), validated against the Kubernetes schemas
//! bundled in `kubernetes-validate` (PyPI, .ci/packages/serve.pip), checked for what the
//! service needs (control-plane DaemonSet on the pod network with the node's port 22623, probes, limits,
//! read-only root, non-root, the key from a Secret, checkpoints on the host), and the server's
//! arguments run for real against a source on 127.0.0.1.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use support::serve::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn deploy() -> PathBuf {
    Path::new(ROOT).join("deploy")
}

/// Runs a program; Ok(stdout) or Err(stderr).
fn run_tool(program: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    let input = stdin.unwrap_or(b"").to_vec();
    let mut pipe = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(so)
    } else {
        Err(format!("{se}{so}"))
    }
}

/// YAML documents → JSON values (PyYAML comes with kubernetes-validate).
fn yaml_docs(yaml: &str) -> Vec<Value> {
    let json = run_tool(
        "python3",
        &[
            "-c",
            "import sys, json, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d is not None]))",
        ],
        Some(yaml.as_bytes()),
    )
    .unwrap_or_else(|e| panic!("parsing YAML: {e}"));
    serde_json::from_str(&json).unwrap()
}

fn validate(file: &Path) -> Result<String, String> {
    let f = file.to_str().unwrap();
    // The oldest Kubernetes the manifests target, and the newest the package knows.
    let a = run_tool(
        "kubernetes-validate",
        &["--strict", "-k", "1.30.0", f],
        None,
    )?;
    let b = run_tool("kubernetes-validate", &["--strict", f], None)?;
    Ok(a + &b)
}

/// Whether `kubectl kustomize` is there to render the kustomizations.
fn have_kustomize() -> bool {
    Command::new("kubectl")
        .args(["kustomize", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn container<'a>(ds: &'a Value, name: &str) -> &'a Value {
    ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn volume<'a>(ds: &'a Value, name: &str) -> Option<&'a Value> {
    ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
}

/// The agent container's flags (its args after the subcommand `serve`) as flag → value pairs.
fn args(ds: &Value) -> Vec<(String, String)> {
    let all = container(ds, "agent-serve")["args"].as_array().unwrap();
    assert_eq!(
        all[0], "serve",
        "the image's entrypoint is the agent: args start with serve"
    );
    all[1..]
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            let (k, v) = a.split_once('=').unwrap_or((a, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn arg(ds: &Value, flag: &str) -> String {
    args(ds)
        .into_iter()
        .find(|(k, _)| k == flag)
        .unwrap_or_else(|| panic!("no {flag}"))
        .1
}

/// A Kubernetes memory quantity in MiB (`512Mi`, `1Gi`).
fn mebibytes(q: &str) -> u64 {
    if let Some(n) = q.strip_suffix("Mi") {
        n.parse().unwrap()
    } else if let Some(n) = q.strip_suffix("Gi") {
        n.parse::<u64>().unwrap() * 1024
    } else {
        panic!("memory quantity {q}: use Mi or Gi")
    }
}

/// What every variant's DaemonSet must have.
fn check_daemonset(ds: &Value) {
    let pod = &ds["spec"]["template"]["spec"];
    // On the pod network (the NetworkPolicies apply), at the node's port 22623 (hostPort).
    assert_ne!(pod["hostNetwork"], true);
    assert!(
        pod["nodeSelector"]
            .as_object()
            .unwrap()
            .contains_key("node-role.kubernetes.io/control-plane"),
        "{pod}"
    );
    let tol = pod["tolerations"].to_string();
    assert!(
        tol.contains("node-role.kubernetes.io/control-plane"),
        "{tol}"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["automountServiceAccountToken"], false);
    let c = container(ds, "agent-serve");
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_ne!(sc["runAsUser"], 0);
    assert_eq!(c["ports"][0]["containerPort"], 22623);
    assert_eq!(c["ports"][0]["hostPort"], 22623);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    for p in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[p]["httpGet"]["port"], 22623, "{p}");
    }
    for r in ["cpu", "memory"] {
        assert!(c["resources"]["limits"][r].is_string(), "limit {r}");
        assert!(c["resources"]["requests"][r].is_string(), "request {r}");
    }
    // Every container: limits, no privilege escalation, read-only root.
    for k in pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(pod["initContainers"].as_array().into_iter().flatten())
    {
        assert!(
            k["resources"]["limits"]["memory"].is_string(),
            "{}",
            k["name"]
        );
        assert_eq!(k["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(k["securityContext"]["readOnlyRootFilesystem"], true);
    }
    // Memory is sized from the documented bound (docs/serve.md): a 64 MiB base plus 80 KiB
    // per connection the server may hold must fit in half the limit (the other half is for
    // the memfds, the per-loop caches and the kernel's socket buffers the cgroup charges).
    let limit = mebibytes(c["resources"]["limits"]["memory"].as_str().unwrap());
    let conns: u64 = arg(ds, "--max-connections").parse().unwrap();
    let bound = 64 + conns * 80 / 1024;
    assert!(
        bound * 2 <= limit,
        "--max-connections={conns}: the resident bound ({bound} MiB) is more than half the \
         memory limit ({limit} MiB)"
    );
    // Tokens are required (so /status names no pool either).
    assert!(
        args(ds)
            .iter()
            .any(|(k, v)| k == "--require-token" && v.is_empty()),
        "--require-token"
    );
    // The key from a Secret, the listener on 22623, checkpoints on the host.
    let key = arg(ds, "--token-key");
    let mounts = c["volumeMounts"].as_array().unwrap();
    let mount_of = |path: &str| {
        mounts
            .iter()
            .filter(|m| path.starts_with(m["mountPath"].as_str().unwrap()))
            .max_by_key(|m| m["mountPath"].as_str().unwrap().len())
            .unwrap_or_else(|| panic!("{path} is not mounted"))
    };
    let km = mount_of(&key);
    assert_eq!(km["readOnly"], true);
    let kv = volume(ds, km["name"].as_str().unwrap()).unwrap();
    assert!(kv["secret"]["secretName"].is_string(), "{kv}");
    assert!(arg(ds, "--listen").ends_with(":22623"));
    let sm = mount_of(&arg(ds, "--state-dir"));
    assert_ne!(sm["readOnly"], true);
    let sv = volume(ds, sm["name"].as_str().unwrap()).unwrap();
    assert_eq!(sv["hostPath"]["path"], "/var/lib/agent-serve");
    for f in ["--tls-cert", "--tls-key"] {
        let m = mount_of(&arg(ds, f));
        let v = volume(ds, m["name"].as_str().unwrap()).unwrap();
        assert!(v["secret"]["secretName"].is_string(), "{f}: {v}");
    }
}

/// The manifests, rendered (or, without kubectl, as the files the kustomizations name).
fn render(dir: &Path, out: &Path) -> Vec<Value> {
    let yaml = if have_kustomize() {
        run_tool("kubectl", &["kustomize", dir.to_str().unwrap()], None)
            .unwrap_or_else(|e| panic!("kubectl kustomize {}: {e}", dir.display()))
    } else {
        // Checked structurally: the base's resources as written (every file the
        // kustomization names must exist and be a valid object on its own).
        eprintln!("kubectl not found: validating deploy/base's resources without rendering");
        let base = deploy().join("base");
        let k = yaml_docs(&std::fs::read_to_string(base.join("kustomization.yaml")).unwrap());
        let mut all = String::new();
        for r in k[0]["resources"].as_array().unwrap() {
            let p = base.join(r.as_str().unwrap());
            all.push_str(&std::fs::read_to_string(&p).unwrap());
            all.push_str("\n---\n");
        }
        all
    };
    std::fs::write(out, &yaml).unwrap();
    let report =
        validate(out).unwrap_or_else(|e| panic!("{} does not validate: {e}", dir.display()));
    assert!(
        report.contains("passed for resource daemonset/agent-serve"),
        "{report}"
    );
    yaml_docs(&yaml)
}

#[test]
fn deploy_manifests_render_and_validate() {
    support::need("kubernetes-validate", "serve.pip");
    let t = TempDir::new("deploy");

    // The validator can fail: a misspelt field is refused.
    let ds_yaml = std::fs::read_to_string(deploy().join("base/daemonset.yaml")).unwrap();
    let bad = t.path().join("bad.yaml");
    std::fs::write(
        &bad,
        ds_yaml.replace("serviceAccountName:", "serviceAccountNam:"),
    )
    .unwrap();
    assert!(
        validate(&bad).is_err(),
        "a misspelt field passed validation"
    );

    // Default variant: the source from a ConfigMap mounted as the source root.
    let docs = render(&deploy(), &t.path().join("default.yaml"));
    let ds = kind(&docs, "DaemonSet");
    assert_eq!(ds.len(), 1);
    let ds = ds[0];
    check_daemonset(ds);
    let src = arg(ds, "--source");
    let c = container(ds, "agent-serve");
    let sm = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == src.as_str())
        .expect("the source is a volume mounted at --source");
    assert_eq!(sm["readOnly"], true);
    let sv = volume(ds, sm["name"].as_str().unwrap()).unwrap();
    let cm_name = sv["configMap"]["name"]
        .as_str()
        .expect("a ConfigMap source");
    let cm = kind(&docs, "ConfigMap");
    if have_kustomize() {
        assert!(cm.iter().any(|c| c["metadata"]["name"] == cm_name));
        assert!(
            docs.iter()
                .filter(|d| d["kind"] != "Namespace")
                .all(|d| d["metadata"]["namespace"] == "agent-serve"),
            "every object in the agent-serve namespace"
        );
    }
    // Every ConfigMap key is mounted as pools/<key>, and every item names a key.
    let keys: Vec<&String> = cm[0]["data"].as_object().unwrap().keys().collect();
    let items = sv["configMap"]["items"].as_array().unwrap();
    for k in &keys {
        assert!(
            items
                .iter()
                .any(|i| i["key"] == k.as_str() && i["path"] == format!("pools/{k}")),
            "ConfigMap key {k} is not mounted as pools/{k}"
        );
    }
    assert_eq!(items.len(), keys.len());
    // Every pool in the ConfigMap is a valid config.
    for (k, v) in cm[0]["data"].as_object().unwrap() {
        spec::config::parse(v.as_str().unwrap().as_bytes())
            .unwrap_or_else(|e| panic!("ConfigMap {k}: {e:?}"));
    }

    // The git-sync variant: the source is the link git-sync maintains on a shared emptyDir.
    if have_kustomize() {
        let docs = render(&deploy().join("git-sync"), &t.path().join("git-sync.yaml"));
        assert!(kind(&docs, "ConfigMap").is_empty(), "no ConfigMap source");
        let ds = kind(&docs, "DaemonSet")[0];
        check_daemonset(ds);
        let gs = container(ds, "git-sync");
        let root = gs["args"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|a| a.as_str()?.strip_prefix("--root="))
            .unwrap();
        let link = gs["args"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|a| a.as_str()?.strip_prefix("--link="))
            .unwrap();
        assert_eq!(arg(ds, "--source"), format!("{root}/{link}"));
        let agent_mounts = container(ds, "agent-serve")["volumeMounts"].to_string();
        assert!(agent_mounts.contains(&format!("\"mountPath\":\"{root}\"")));
        assert!(volume(ds, "source").is_none());
        assert!(volume(ds, "git").unwrap()["emptyDir"].is_object());
    } else {
        eprintln!("kubectl not found: the git-sync overlay is not rendered");
    }

    // Every flag the DaemonSet gives the server exists, and the server runs with them: the
    // same arguments with the paths moved into a temporary directory and the listener on
    // 127.0.0.1 (a ConfigMap-like source, a key, a certificate, a state dir).
    let dir = t.path();
    make_ca(dir);
    make_leaf(dir, "server");
    let src = dir.join("source");
    write(&src.join("pools/worker.ign"), &worker_config("deploy"));
    write(
        &dir.join("token.key"),
        "a-key-of-at-least-32-bytes-for-the-test\n",
    );
    write(&dir.join("admin.token"), "an-admin-token-for-the-test\n");
    let mut real: Vec<String> = Vec::new();
    for (k, v) in args(ds) {
        let v = match k.as_str() {
            "--source" => src.display().to_string(),
            "--listen" => "127.0.0.1:0".into(),
            "--tls-cert" => dir.join("server.pem").display().to_string(),
            "--tls-key" => dir.join("server.key").display().to_string(),
            "--token-key" => dir.join("token.key").display().to_string(),
            "--state-dir" => dir.join("state").display().to_string(),
            "--admin-listen" => "127.0.0.1:0".into(),
            "--admin-token-file" => dir.join("admin.token").display().to_string(),
            _ => v,
        };
        // A switch (`--require-token`) has no value.
        real.push(if v.is_empty() { k } else { format!("{k}={v}") });
    }
    let refs: Vec<&str> = real.iter().map(String::as_str).collect();
    let s = Server::start(&refs, &[]);
    assert_eq!(s.scheme, "https");
    let tls = tls_client(&dir.join("ca.pem"));
    for (path, want) in [("/healthz", 200), ("/readyz", 200)] {
        match tls_request(
            s.addr,
            &tls,
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ) {
            TlsOutcome::Response(r) => assert_eq!(r.status, want, "{path}"),
            other => panic!("{path}: {other:?}"),
        }
    }
}
