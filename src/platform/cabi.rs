//! Test support of the platform modules: the values of C expressions (struct sizes, field
//! offsets, ioctl numbers, constants) as the system's kernel headers define them, compiled
//! and run with gcc, so that the structs the hypervisor channels hand to the kernel can be
//! checked against the C ones; and a temporary directory removed even when a test fails.

use std::path::PathBuf;
use std::process::Command;

/// A fresh temporary directory, removed when dropped.
pub struct TmpDir(pub PathBuf);

impl TmpDir {
    pub fn new(tag: &str) -> TmpDir {
        let dir = std::env::temp_dir().join(format!("agent-{tag}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        TmpDir(dir)
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The values of `exprs` (C expressions of an integer type) with `headers` included.
pub fn c_values(headers: &[&str], exprs: &[&str]) -> Vec<i128> {
    let tmp = TmpDir::new("cabi");
    let dir = &tmp.0;
    let mut src = String::from("#include <stdio.h>\n#include <stddef.h>\n");
    for h in headers {
        src.push_str(&format!("#include <{h}>\n"));
    }
    src.push_str("int main(void) {\n");
    for e in exprs {
        src.push_str(&format!("  printf(\"%lld\\n\", (long long)({e}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    let c = dir.join("t.c");
    let bin = dir.join("t");
    std::fs::write(&c, src).unwrap();
    let out = Command::new("gcc")
        .arg("-o")
        .arg(&bin)
        .arg(&c)
        .output()
        .expect("gcc (the kernel headers' layouts are checked with it)");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&bin).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}
