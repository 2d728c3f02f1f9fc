//! The fleet page (`/ui/` on the admin listener) made for triage, checked in a real browser:
//! 500 machines report to a real `agent serve` over 127.0.0.1, 8 of them fail in 3 ways, a
//! source generation is rejected; headless Chromium, driven over the DevTools protocol,
//! says what the first screen of a laptop shows (bounding boxes within the window), that
//! nothing overflows a phone's width, and what axe-core finds; a hostile report renders as
//! text. Screenshots at both widths are kept in target/artifacts/.

use crate::support;

use support::browser::Devtools;
use support::serve::*;

const MACHINES: usize = 500;

fn post(addr: std::net::SocketAddr, body: &str) -> Resp {
    request(
        addr,
        &format!(
            "POST /report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

fn get(addr: std::net::SocketAddr, path: &str) -> Resp {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
}

/// One report of machine `i`: its own MAC, serial and stage duration.
fn report(
    i: usize,
    stage: &str,
    outcome: &str,
    last: bool,
    ms: u64,
    error: Option<&str>,
) -> String {
    let id = format!("m-{i:03}");
    let mut v: serde_json::Value = serde_json::from_str(&agent_report(
        &format!("{id}-{stage}"),
        &id,
        stage,
        outcome,
        last,
        error,
    ))
    .unwrap();
    v["durationMs"] = ms.into();
    v["machine"]["macs"] =
        serde_json::json!([format!("52:54:00:00:{:02x}:{:02x}", i / 256, i % 256)]);
    v["machine"]["serial"] = format!("SN{i:05}").into();
    v.to_string()
}

/// The failure of machine `i`, if it is one of the 8: (stage, error).
fn failure(i: usize) -> Option<(&'static str, String)> {
    match i {
        7 | 77 | 177 | 377 => Some((
            "disks",
            format!(
                "partition 2 does not fit on /dev/sda: needs {} sectors, the disk has {}",
                200_000_000 + i * 1000,
                100_000_000 + i
            ),
        )),
        123 | 321 | 456 => Some((
            "files",
            "writing /etc/app.conf failed: permission denied".into(),
        )),
        250 => Some(("fetch", "GET http://10.0.0.9:8080/config: timed out".into())),
        _ => None,
    }
}

/// Every machine's reports, posted from 4 threads: fetch, then disks and files or the
/// failing stage; 3 machines take 20 times as long as the others in disks.
fn populate(http: std::net::SocketAddr) {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in (t..MACHINES).step_by(4) {
                    let ms = |base: u64| base + (i as u64 * 37) % 400;
                    let slow = matches!(i, 10 | 20 | 30);
                    let mut bodies = vec![report(i, "fetch", "ok", false, ms(300), None)];
                    match failure(i) {
                        Some(("fetch", e)) => {
                            bodies = vec![report(i, "fetch", "failed", false, ms(300), Some(&e))]
                        }
                        Some((stage, e)) => {
                            if stage == "files" {
                                bodies.push(report(i, "disks", "ok", false, ms(1500), None));
                            }
                            bodies.push(report(i, stage, "failed", false, ms(1500), Some(&e)));
                        }
                        None => {
                            let d = if slow { 40_000 } else { ms(1500) };
                            bodies.push(report(i, "disks", "ok", false, d, None));
                            bodies.push(report(i, "files", "ok", true, ms(200), None));
                        }
                    }
                    for b in bodies {
                        let r = post(http, &b);
                        assert_eq!(r.status, 200, "{}", r.text());
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// What the page shows in the window: each state count, cause and failed machine, with
/// whether its box lies wholly within the window; and what sticks out to the right.
const MEASURE: &str = r#"(() => {
  const vw = document.documentElement.clientWidth, vh = window.innerHeight;
  const seen = e => { const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && r.top >= 0 && r.left >= 0 && r.bottom <= vh && r.right <= vw; };
  const all = (sel, f) => [...document.querySelectorAll(sel)].map(e => f(e));
  return {
    vw, vh, scrollWidth: document.documentElement.scrollWidth,
    bodyScrollWidth: document.body.scrollWidth,
    states: all('#states li[data-state]', e => ({state: e.dataset.state, text: e.innerText, visible: seen(e)})),
    causes: all('#causes li[data-cause]', e => ({text: e.innerText, visible: seen(e)})),
    failed: all('#failed tr[data-failed]', e => ({id: e.dataset.failed, text: e.innerText, visible: seen(e)})),
    rejected: all('#rejected', e => ({text: e.innerText, visible: seen(e)})),
    outside: [...document.querySelectorAll('body *')].filter(e => {
        const r = e.getBoundingClientRect(); return r.width > 0 && (r.right > vw + 0.5 || r.left < -0.5); })
      .slice(0, 20).map(e => e.tagName + '#' + e.id + '.' + (e.getAttribute('class') || '') + ' ' + Math.round(e.getBoundingClientRect().right)),
  };
})()"#;

/// axe-core's serious and critical violations of the page.
fn axe(d: &mut Devtools) -> Vec<serde_json::Value> {
    d.eval(&support::browser::axe_source());
    let v = d.eval(
        "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => \
         ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))",
    );
    v.as_array()
        .unwrap()
        .iter()
        .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
        .cloned()
        .collect()
}

#[test]
fn the_first_screen_answers_which_machines_failed_and_why() {
    let t = TempDir::new("page-fleet");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("worker"));
    write(&src.join("pools/infra.ign"), &worker_config("infra"));
    let s = serve_args(&src).quiet().poll_1s().start();
    let (http, admin) = (s.addr_of("http"), s.addr_of("admin"));
    let started = std::time::Instant::now();
    populate(http);
    eprintln!("{MACHINES} machines reported in {:?}", started.elapsed());
    // A broken push: rejected, the last good generation still served.
    write(
        &src.join("pools/worker.ign"),
        "{\"ignition\": {\"version\": \"3.4.0\"}, \"storage\": 7}",
    );
    s.wait_for("the broken generation rejected", 30, |s| {
        !s.status()["sources"][0]["error"].is_null()
    });

    // GET / leads to the page; the page's weight.
    let r = get(admin, "/");
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("/ui/"));
    let r = get(admin, "/ui/");
    assert_eq!(r.status, 200);
    let weight = r.body.len();
    eprintln!("/ui/ with {MACHINES} machines: {weight} bytes");
    assert!(weight <= 150 * 1024, "{weight} bytes");
    let text = r.text();
    assert!(text.contains("worker.ign"), "the rejected file is named");

    // A laptop: the state counts, the three causes and the eight failed machines are all
    // within the first screen.
    let mut d = Devtools::open(1366, 768);
    d.navigate(&format!("http://{admin}/ui/"));
    let m = d.eval(MEASURE);
    let p = d.screenshot("ui-fleet-1366");
    eprintln!("screenshot: {}", p.display());
    let states = m["states"].as_array().unwrap();
    let count = |st: &str| {
        states
            .iter()
            .find(|s| s["state"] == st)
            .unwrap_or_else(|| panic!("no {st} count: {m}"))
    };
    assert!(
        count("failed")["text"].as_str().unwrap().contains('8'),
        "{m}"
    );
    assert!(
        count("provisioned")["text"]
            .as_str()
            .unwrap()
            .contains("492"),
        "{m}"
    );
    assert!(
        states.iter().all(|s| s["visible"] == true),
        "every count on the first screen: {m}"
    );
    let causes = m["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 3, "{m}");
    assert!(causes.iter().all(|c| c["visible"] == true), "{m}");
    let texts: Vec<&str> = causes.iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert!(
        texts[0].starts_with("4 ×") && texts[0].contains("partition 2 does not fit on /dev/sda"),
        "{texts:?}"
    );
    assert!(
        texts[1].starts_with("3 ×") && texts[1].contains("permission denied"),
        "{texts:?}"
    );
    assert!(
        texts[2].starts_with("1 ×") && texts[2].contains("timed out"),
        "{texts:?}"
    );
    let failed = m["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 8, "{m}");
    assert!(failed.iter().all(|f| f["visible"] == true), "{m}");
    let rejected = &m["rejected"][0];
    assert!(rejected["visible"] == true, "{m}");
    assert!(
        rejected["text"].as_str().unwrap().contains("worker.ign"),
        "{m}"
    );
    let serious = axe(&mut d);
    assert!(serious.is_empty(), "axe-core at 1366x768: {serious:#?}");

    // A cause's link lists its machines; the search finds a machine by its MAC; pages.
    let mut dom_of = |path: &str| {
        d.navigate(&format!("http://{admin}{path}"));
        d.eval("document.documentElement.outerHTML")
            .as_str()
            .unwrap()
            .to_string()
    };
    let dom = dom_of("/ui/");
    let key = dom
        .split("data-cause=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    let dom = dom_of(&format!("/ui/?cause={key}"));
    assert_eq!(dom.matches("<tr data-machine=").count(), 4, "{dom}");
    let dom = dom_of("/ui/?q=52-54-00-00-01-41");
    assert_eq!(dom.matches("<tr data-machine=").count(), 1);
    assert!(dom.contains("data-machine=\"m-321\""), "{dom}");
    let dom = dom_of("/ui/?state=provisioned&pool=worker");
    assert!(dom.contains("Machines 1–100 of 492"), "{dom}");
    assert!(dom.contains("rel=\"next\""), "{dom}");
    assert!(!dom.contains("rel=\"prev\""));

    // A phone: nothing wider than the window, the page as cards.
    let mut phone = Devtools::open(390, 844);
    for (name, url) in [
        ("ui-fleet-390", format!("http://{admin}/ui/")),
        (
            "ui-machine-failed-390",
            format!("http://{admin}/ui/machines/m-007"),
        ),
    ] {
        phone.navigate(&url);
        let m = phone.eval(MEASURE);
        let p = phone.screenshot(name);
        eprintln!("screenshot: {}", p.display());
        assert_eq!(m["vw"], 390, "{m}");
        assert!(
            m["scrollWidth"].as_u64() <= m["vw"].as_u64(),
            "{url}: the page scrolls sideways: {m}"
        );
        assert_eq!(m["outside"], serde_json::json!([]), "{url}: {m}");
        let serious = axe(&mut phone);
        assert!(
            serious.is_empty(),
            "axe-core at 390x844 on {url}: {serious:#?}"
        );
    }
    // The machine's page: its timeline, the failed stage, the error and the log tail.
    let one = dom_of("/ui/machines/m-007");
    assert!(one.contains("id=\"timeline\""), "{one}");
    assert!(one.contains("data-error=\"disks\""), "{one}");
    assert!(one.contains("mkfs.xfs: /dev/vdb: device busy"), "{one}");
    d.screenshot("ui-machine-failed-1366");
}

/// A report with markup, CSS, `javascript:` URLs and SVG in every field it may carry
/// renders as text: no element of it reaches the DOM.
#[test]
fn a_hostile_report_renders_as_text_in_the_browser() {
    const PAYLOAD: &str = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>\
        <svg onload=alert(2)><a href=\"javascript:alert(3)\">x</a><style>body{display:none}</style>\
        <iframe src=javascript:alert(4)>";
    let t = TempDir::new("page-hostile");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("worker"));
    let s = serve_args(&src).quiet().start();
    let (http, admin) = (s.addr_of("http"), s.addr_of("admin"));
    let id = "m-hostile";
    let mut v: serde_json::Value = serde_json::from_str(&agent_report(
        "h1",
        id,
        "disks",
        "failed",
        false,
        Some(PAYLOAD),
    ))
    .unwrap();
    v["machine"]["hostname"] = PAYLOAD.into();
    v["machine"]["serial"] = PAYLOAD.into();
    v["machine"]["platform"] = PAYLOAD.into();
    v["agent"] = PAYLOAD.into();
    v["config"]["name"] = PAYLOAD.into();
    v["logTail"] = serde_json::json!([PAYLOAD, PAYLOAD]);
    v["changes"]["paths"] = serde_json::json!([PAYLOAD]);
    let r = post(http, &v.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    // A stage name is one of the stages the reports know: markup there is refused.
    let mut bad = v.clone();
    bad["id"] = "h2".into();
    bad["stage"] = PAYLOAD.into();
    assert_eq!(post(http, &bad.to_string()).status, 400);

    const FOREIGN: &str = r#"(() => ({
      foreign: [...document.querySelectorAll('script, img, iframe, object, embed, svg:not([role=img]), a[href^="javascript"], style ~ style, body style')].length,
      handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length,
      links: [...document.querySelectorAll('a[href]')].filter(a => !a.getAttribute('href').startsWith('/ui/')).length,
      shown: getComputedStyle(document.body).display,
      title: document.title,
      text: document.body.innerText.includes("<script>document.title='pwned'</script>"),
    }))()"#;
    let mut d = Devtools::open(1366, 768);
    for url in [
        format!("http://{admin}/ui/"),
        format!("http://{admin}/ui/?q=%3Cscript%3E"),
        format!("http://{admin}/ui/machines/{id}"),
    ] {
        d.navigate(&url);
        let f = d.eval(FOREIGN);
        assert_eq!(f["foreign"], 0, "{url}: {f}");
        assert_eq!(f["handlers"], 0, "{url}: {f}");
        assert_eq!(f["links"], 0, "{url}: {f}");
        assert_eq!(f["shown"], "block", "{url}: {f}");
        assert_ne!(f["title"], "pwned", "{url}: {f}");
        if !url.contains("?q=") {
            assert_eq!(f["text"], true, "the payload shows as text on {url}: {f}");
        }
    }
}
