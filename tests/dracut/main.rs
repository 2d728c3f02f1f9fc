//! The dracut module installs exactly the external tools something in the initramfs runs: every
//! program the agent's sources start (util::run / run_with_stdin, the mkfs table, the
//! useradd family) is in an install line of dracut/30agent/module-setup.sh, and every tool of
//! the module's main tools line is started by the agent or named by the module's own units and
//! scripts. A tool added to the sources without its install line, or left in the module after
//! the last caller went away, fails here.

use std::collections::BTreeSet;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Non-test text of every .rs file under `dir` (each file up to its `#[cfg(test)] mod tests`).
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            out.push((p.display().to_string(), code));
        }
    }
}

/// The first string literal after each occurrence of `call` (skipping whitespace), if the
/// argument is a literal.
fn literal_args(code: &str, call: &str, out: &mut BTreeSet<String>) {
    let mut rest = code;
    while let Some(i) = rest.find(call) {
        rest = &rest[i + call.len()..];
        let arg = rest.trim_start();
        if let Some(lit) = arg.strip_prefix('"')
            && let Some(end) = lit.find('"')
        {
            out.insert(lit[..end].to_string());
        }
    }
}

/// Every program the agent starts, by name.
fn programs_run() -> BTreeSet<String> {
    let mut files = Vec::new();
    sources(&Path::new(ROOT).join("src"), &mut files);
    let mut found = BTreeSet::new();
    for (_, code) in &files {
        for call in [
            "util::run(",
            "util::run_with_stdin(",
            " run(",
            "timed(tools,",
            "run_tool(&root,",
        ] {
            literal_args(code, call, &mut found);
        }
        // The mkfs table (`"ext4" => ("mkfs.ext4", ...)`) and the useradd family's
        // (tool, verb) pairs.
        literal_args(code, "=> (", &mut found);
        for line in code.lines() {
            let l = line.trim();
            if let Some(t) = l.strip_prefix("(\"")
                && let Some(end) = t.find('"')
                && (l.ends_with("\"creating\")") || l.ends_with("\"modifying\")"))
            {
                found.insert(t[..end].to_string());
            }
        }
    }
    // Names only (a literal in another `=> (` arm could be anything).
    found.retain(|p| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    });
    // `chroot` runs the target's own useradd family only when the initramfs has none; the
    // module installs the family.
    found.remove("chroot");
    found
}

/// The words of module-setup.sh's `inst_multiple` lines, the main tools line separately.
fn installed() -> (BTreeSet<String>, BTreeSet<String>) {
    let text =
        std::fs::read_to_string(Path::new(ROOT).join("dracut/30agent/module-setup.sh")).unwrap();
    let joined = text.replace("\\\n", " ");
    let mut all = BTreeSet::new();
    let mut main = BTreeSet::new();
    for line in joined.lines() {
        let l = line.trim();
        let Some(words) = l.strip_prefix("inst_multiple -o") else {
            continue;
        };
        let words: BTreeSet<String> = words
            .split_whitespace()
            .map(|w| w.rsplit('/').next().unwrap().trim_matches('"').to_string())
            .collect();
        if main.is_empty() && words.contains("mkfs.ext4") {
            main = words.clone();
        }
        all.extend(words);
    }
    (all, main)
}

#[test]
fn every_program_the_agent_runs_is_installed() {
    let run = programs_run();
    // The scan must see the calls at all (else it proves nothing).
    for p in [
        "mkfs.ext4",
        "mkfs.fat",
        "wipefs",
        "cryptsetup",
        "clevis",
        "useradd",
        "mdadm",
    ] {
        assert!(run.contains(p), "the source scan misses {p}: {run:?}");
    }
    let (all, _) = installed();
    let missing: Vec<_> = run.difference(&all).collect();
    assert!(
        missing.is_empty(),
        "the agent runs {missing:?} but dracut/30agent/module-setup.sh installs none of them \
         (found in src/: {run:?})"
    );
}

#[test]
fn every_tool_of_the_module_has_a_caller() {
    let run = programs_run();
    let (_, main) = installed();
    assert!(!main.is_empty(), "no tools line in module-setup.sh");
    // What the units and scripts of the module run themselves (and clevis's scripts).
    let module_dir = Path::new(ROOT).join("dracut/30agent");
    let mut module_text = String::new();
    for e in std::fs::read_dir(&module_dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("agent-"))
        {
            module_text += &std::fs::read_to_string(&p).unwrap_or_default();
        }
    }
    for e in std::fs::read_dir(Path::new(ROOT).join("systemd/initrd")).unwrap() {
        module_text += &std::fs::read_to_string(e.unwrap().path()).unwrap();
    }
    let words: BTreeSet<&str> = module_text
        .split(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
        .collect();
    // clevis-luks-common-functions runs grep and cut (bind and unlock).
    let for_clevis = ["grep", "cut"];
    let unused: Vec<_> = main
        .iter()
        .filter(|t| {
            !run.contains(t.as_str())
                && !words.contains(t.as_str())
                && !for_clevis.contains(&t.as_str())
        })
        .collect();
    assert!(
        unused.is_empty(),
        "dracut/30agent/module-setup.sh installs {unused:?}, which neither the agent (src/) nor \
         the module's units and scripts run: drop them"
    );
}
