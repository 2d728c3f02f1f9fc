//! Users and groups against a minimal root made from a skeleton of the host's shadow-utils
//! databases (passwd, group, shadow, gshadow, login.defs), using shadow-utils with `--root`;
//! the options the tools get; SSH keys; homes that are mount points.

use crate::support;

use std::os::unix::fs::MetadataExt;

use support::files::*;

fn skeleton(tag: &str) -> TempDir {
    let root = TempDir::new(tag);
    std::fs::create_dir_all(root.join("/etc/skel")).unwrap();
    std::fs::create_dir_all(root.join("/home")).unwrap();
    std::fs::write(root.join("/etc/skel/.profile"), "# skel\n").unwrap();
    let base = "root:x:0:0:root:/root:/bin/sh\n\
                daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
                games:x:5:60:games:/usr/games:/usr/sbin/nologin\n\
                lp:x:7:7:lp:/var/spool/lpd:/usr/sbin/nologin\n";
    std::fs::write(root.join("/etc/passwd"), base).unwrap();
    std::fs::write(
        root.join("/etc/shadow"),
        "root:*:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n\
         games:*:19000:0:99999:7:::\nlp:*:19000:0:99999:7:::\n",
    )
    .unwrap();
    std::fs::write(
        root.join("/etc/group"),
        "root:x:0:\ndaemon:x:1:\nlp:x:7:\ngames:x:60:\nusers:x:100:\nold:x:900:\n",
    )
    .unwrap();
    std::fs::write(
        root.join("/etc/gshadow"),
        "root:*::\ndaemon:*::\nlp:*::\ngames:*::\nusers:*::\nold:*::\n",
    )
    .unwrap();
    for f in ["shadow", "gshadow"] {
        std::fs::set_permissions(
            root.join(&format!("/etc/{f}")),
            std::os::unix::fs::PermissionsExt::from_mode(0o640),
        )
        .unwrap();
    }
    std::fs::copy("/etc/login.defs", root.join("/etc/login.defs"))
        .expect("/etc/login.defs (install the passwd package)");
    root
}

fn line<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find(|l| l.split(':').next() == Some(name))
}

#[test]
#[ignore = "needs root: make test-root"]
fn groups_then_users_created_modified_deleted_with_keys() {
    must_be_root();
    assert!(
        runtime::util::have_program("useradd")
            || std::path::Path::new("/usr/sbin/useradd").exists(),
        "useradd missing: install the passwd package"
    );
    let root = skeleton("passwd");
    let host_passwd = std::fs::read("/etc/passwd").unwrap();
    let host_group = std::fs::read("/etc/group").unwrap();
    let c = config(
        r#"{"ignition":{"version":"3.6.0"},"passwd":{
            "groups":[{"name":"devs-agent","gid":3100},{"name":"old","shouldExist":false},
                      {"name":"users","gid":150}],
            "users":[
              {"name":"alice-agent","uid":3101,"groups":["devs-agent"],"gecos":"Alice",
               "shell":"/bin/sh","passwordHash":"$6$salt$hash",
               "sshAuthorizedKeys":["ssh-ed25519 AAAA one","ssh-ed25519 BBBB two"]},
              {"name":"games","gecos":"Changed","sshAuthorizedKeys":["ssh-rsa CCCC"]},
              {"name":"lp","shouldExist":false},
              {"name":"svc-agent","system":true,"noCreateHome":true}]},
          "storage":{"files":[{"path":"/home/alice-agent/owned","user":{"name":"alice-agent"},
                               "group":{"name":"devs-agent"}}]}}"#,
    );
    run(&c, root.path()).unwrap();

    let passwd = std::fs::read_to_string(root.join("/etc/passwd")).unwrap();
    let group = std::fs::read_to_string(root.join("/etc/group")).unwrap();
    let shadow = std::fs::read_to_string(root.join("/etc/shadow")).unwrap();
    let alice = line(&passwd, "alice-agent").expect("alice created");
    assert!(
        alice.starts_with("alice-agent:x:3101:")
            && alice.contains(":Alice:/home/alice-agent:/bin/sh"),
        "{alice}"
    );
    assert!(
        line(&shadow, "alice-agent")
            .unwrap()
            .contains("$6$salt$hash")
    );
    assert!(
        line(&group, "devs-agent")
            .unwrap()
            .starts_with("devs-agent:x:3100:alice-agent")
    );
    assert!(line(&group, "old").is_none(), "group deleted");
    assert!(
        line(&group, "users").unwrap().starts_with("users:x:150:"),
        "group modified"
    );
    assert!(line(&passwd, "lp").is_none(), "user deleted");
    assert!(
        line(&passwd, "games").unwrap().contains(":Changed:"),
        "user modified"
    );
    let svc = line(&passwd, "svc-agent").unwrap();
    let svc_uid: u32 = svc.split(':').nth(2).unwrap().parse().unwrap();
    assert!(svc_uid < 1000, "system user gets a system uid: {svc}");
    assert!(
        line(&shadow, "svc-agent")
            .unwrap()
            .starts_with("svc-agent:*:"),
        "locked"
    );

    // Home and keys, owned by the user.
    let home = root.join("/home/alice-agent");
    assert_eq!(std::fs::metadata(&home).unwrap().uid(), 3101);
    assert!(
        home.join(".profile").exists(),
        "skeleton copied from the target"
    );
    // Ignition's fragment: the file 0600 and the directories on the way 0700, the user's.
    let keys = home.join(".ssh/authorized_keys.d/ignition");
    assert_eq!(
        std::fs::read_to_string(&keys).unwrap(),
        "ssh-ed25519 AAAA one\nssh-ed25519 BBBB two\n"
    );
    assert_eq!(mode(&keys), 0o600);
    let alice_gid = std::fs::metadata(&home).unwrap().gid();
    for p in [
        keys.clone(),
        home.join(".ssh"),
        home.join(".ssh/authorized_keys.d"),
    ] {
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.uid(), m.gid()), (3101, alice_gid), "{}", p.display());
    }
    assert_eq!(mode(&home.join(".ssh")), 0o700);
    assert_eq!(mode(&home.join(".ssh/authorized_keys.d")), 0o700);
    let owned = std::fs::metadata(home.join("owned")).unwrap();
    assert_eq!((owned.uid(), owned.gid()), (3101, 3100));
    // games' home (/usr/games) did not exist: it is created for the user (0700, games:games),
    // the directory above it like any implicit parent (root, 0755).
    let games_keys = root.join("/usr/games/.ssh/authorized_keys.d/ignition");
    assert_eq!(
        std::fs::read_to_string(&games_keys).unwrap(),
        "ssh-rsa CCCC\n"
    );
    let g = std::fs::metadata(root.join("/usr/games")).unwrap();
    assert_eq!(
        (g.uid(), g.gid(), mode(&root.join("/usr/games"))),
        (5, 60, 0o700)
    );
    let usr = std::fs::metadata(root.join("/usr")).unwrap();
    assert_eq!((usr.uid(), mode(&root.join("/usr"))), (0, 0o755));

    // The host's databases are untouched.
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), host_passwd);
    assert_eq!(std::fs::read("/etc/group").unwrap(), host_group);
}

#[test]
#[ignore = "needs root: make test-root"]
fn keys_can_go_to_authorized_keys() {
    must_be_root();
    let root = skeleton("passwd-ak");
    let c = config(
        r#"{"ignition":{"version":"3.6.0"},"passwd":{"users":[
            {"name":"bob-agent","uid":3201,"sshAuthorizedKeys":["ssh-ed25519 KEY"]}]}}"#,
    );
    let opts = agent::stages::files::Options {
        ssh_keys_file: agent::files::passwd::SshKeysFile::AuthorizedKeys,
        ..Default::default()
    };
    // An existing ~/.ssh is left as it is (Ignition creates only what is missing).
    std::fs::create_dir_all(root.join("/home/bob-agent/.ssh")).unwrap();
    std::fs::set_permissions(
        root.join("/home/bob-agent/.ssh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .unwrap();
    run_opts(&c, root.path(), &opts).unwrap();
    let k = root.join("/home/bob-agent/.ssh/authorized_keys");
    assert_eq!(std::fs::read_to_string(&k).unwrap(), "ssh-ed25519 KEY\n");
    assert_eq!(std::fs::metadata(&k).unwrap().uid(), 3201);
    assert_eq!(mode(&k), 0o600);
    assert!(!root.join("/home/bob-agent/.ssh/authorized_keys.d").exists());
    assert_eq!(mode(&root.join("/home/bob-agent/.ssh")), 0o750);
}

/// useradd, usermod and userdel as the target sees them: a wrapper script in a PATH entry
/// ahead of the real tools records every call (argv one per line) and then runs the tool.
fn recording_tools(dir: &std::path::Path) -> std::path::PathBuf {
    let log = dir.join("calls");
    for tool in [
        "useradd", "usermod", "userdel", "groupadd", "groupmod", "groupdel",
    ] {
        let real = ["/usr/sbin", "/sbin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} missing: install the passwd package"));
        let script = dir.join(tool);
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n{{ echo {tool}; for a in \"$@\"; do echo \"$a\"; done; echo; }} >> {}\nexec {} \"$@\"\n",
                log.display(),
                real.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    log
}

#[test]
#[ignore = "needs root: make test-root"]
fn the_tools_get_ignitions_long_options() {
    must_be_root();
    let root = skeleton("passwd-argv");
    let tools = TempDir::new("passwd-tools");
    let log = recording_tools(tools.path());
    let state = TempDir::new("passwd-argv-state");
    std::fs::write(
        state.join("config.json"),
        r#"{"ignition":{"version":"3.6.0"},"passwd":{
            "groups":[{"name":"ops-agent","gid":3400,"system":true}],
            "users":[
              {"name":"carol-agent","uid":3401,"homeDir":"/srv/carol","gecos":"Carol",
               "primaryGroup":"ops-agent","groups":["users"],"shell":"/bin/sh","noUserGroup":true},
              {"name":"games","homeDir":"/var/games"},
              {"name":"daemon","shouldExist":false}]}}"#,
    )
    .unwrap();
    // The agent finds the tools through PATH: the recording ones come first, for the child
    // process only.
    let path = format!(
        "{}:{}",
        tools.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["run", "--stage", "files", "--root"])
        .arg(root.path())
        .arg("--state-dir")
        .arg(state.path())
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    let r = std::fs::canonicalize(root.path())
        .unwrap()
        .display()
        .to_string();
    let want = [
        format!("groupadd\n--root\n{r}\n--gid\n3400\n--password\n*\n--system\nops-agent\n"),
        format!(
            "useradd\n--root\n{r}\n--home-dir\n/srv/carol\n--create-home\n--no-user-group\n\
             --password\n*\n--uid\n3401\n--comment\nCarol\n--gid\nops-agent\n--groups\nusers\n\
             --shell\n/bin/sh\ncarol-agent\n"
        ),
        format!("usermod\n--root\n{r}\n--home\n/var/games\n--move-home\ngames\n"),
        format!("userdel\n--root\n{r}\n--remove\ndaemon\n"),
    ];
    for w in &want {
        assert!(
            calls.contains(w.as_str()),
            "missing call:\n{w}\nin:\n{calls}"
        );
    }
    let passwd = std::fs::read_to_string(root.join("/etc/passwd")).unwrap();
    assert!(
        line(&passwd, "carol-agent")
            .unwrap()
            .starts_with("carol-agent:x:3401:3400:Carol:/srv/carol:/bin/sh"),
        "{passwd}"
    );
    assert!(line(&passwd, "games").unwrap().contains(":/var/games:"));
    assert!(line(&passwd, "daemon").is_none());
}

#[test]
#[ignore = "needs root: make test-root"]
fn ids_that_chown_would_read_as_minus_one_are_refused() {
    must_be_root();
    let root = skeleton("passwd-minus-one");
    let before = std::fs::read(root.join("/etc/passwd")).unwrap();
    // Validation rejects these ids; the files stage refuses them again on its own.
    let mut c = config(
        r#"{"ignition":{"version":"3.6.0"},"passwd":{"users":[{"name":"m1-agent","uid":1}]}}"#,
    );
    c.passwd.users[0].uid = Some(4_294_967_295);
    let e = format!("{:#}", run(&c, root.path()).unwrap_err());
    assert!(e.contains("m1-agent") && e.contains("4294967295"), "{e}");
    let mut g = config(
        r#"{"ignition":{"version":"3.6.0"},"passwd":{"groups":[{"name":"g1-agent","gid":1}]}}"#,
    );
    g.passwd.groups[0].gid = Some(1 << 40);
    let e = format!("{:#}", run(&g, root.path()).unwrap_err());
    assert!(e.contains("g1-agent"), "{e}");
    assert_eq!(std::fs::read(root.join("/etc/passwd")).unwrap(), before);
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_home_that_is_a_mount_point_belongs_to_the_user() {
    must_be_root();
    let root = skeleton("passwd-mnt");
    let tester_fs = Loop::ext4(16, None);
    let ana_fs = Loop::ext4(16, None);
    let data_fs = Loop::ext4(16, None);
    let c = config(&format!(
        r#"{{"ignition":{{"version":"3.6.0"}},
            "storage":{{
              "filesystems":[
                {{"device":"{}","format":"ext4","path":"/home/tester"}},
                {{"device":"{}","format":"ext4","path":"/home/ana"}},
                {{"device":"{}","format":"ext4","path":"/srv/data/inner"}}],
              "directories":[{{"path":"/home/ana","mode":488,"user":{{"name":"ana"}}}}]}},
            "passwd":{{"users":[
              {{"name":"tester","uid":3501,"sshAuthorizedKeys":["ssh-ed25519 TESTER"]}},
              {{"name":"ana","uid":3502}}]}}}}"#,
        tester_fs.dev, ana_fs.dev, data_fs.dev
    ));
    run(&c, root.path()).unwrap();
    assert!(!mounted_under(root.path()));
    let passwd = std::fs::read_to_string(root.join("/etc/passwd")).unwrap();
    let gid_of = |name: &str| -> u32 {
        line(&passwd, name)
            .unwrap()
            .split(':')
            .nth(3)
            .unwrap()
            .parse()
            .unwrap()
    };
    // The home (the mounted filesystem's root): the user's, 0700, with the keys inside.
    let check = TempDir::new("passwd-mnt-check");
    {
        let _m = TestMount::new(&tester_fs.dev, check.path());
        let m = std::fs::metadata(check.path()).unwrap();
        assert_eq!((m.uid(), m.gid()), (3501, gid_of("tester")));
        assert_eq!(mode(check.path()), 0o700);
        let k = check.join("/.ssh/authorized_keys.d/ignition");
        assert_eq!(std::fs::read_to_string(&k).unwrap(), "ssh-ed25519 TESTER\n");
        assert_eq!(std::fs::metadata(&k).unwrap().uid(), 3501);
    }
    // The config's own entry for the home comes after and wins (as in Ignition).
    {
        let _m = TestMount::new(&ana_fs.dev, check.path());
        let m = std::fs::metadata(check.path()).unwrap();
        assert_eq!((m.uid(), m.gid()), (3502, gid_of("ana")));
        assert_eq!(mode(check.path()), 0o750);
    }
    // Mount points outside any home stay root's, 0755.
    {
        let _m = TestMount::new(&data_fs.dev, check.path());
        let m = std::fs::metadata(check.path()).unwrap();
        assert_eq!((m.uid(), mode(check.path())), (0, 0o755));
    }
    for d in ["/srv", "/srv/data", "/home"] {
        let m = std::fs::metadata(root.join(d)).unwrap();
        assert_eq!((m.uid(), mode(&root.join(d))), (0, 0o755), "{d}");
    }
}
