// Static builds (SELINUX_STATIC=1, see the Makefile) link libselinux.a, which needs pcre2 but
// does not declare it: link libpcre2-8.a after it.
fn main() {
    println!("cargo:rerun-if-env-changed=SELINUX_STATIC");
    if std::env::var("SELINUX_STATIC").as_deref() == Ok("1") {
        println!("cargo:rustc-link-lib=static=pcre2-8");
    }
}
