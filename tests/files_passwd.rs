//! Users and groups against a minimal root made from a skeleton of the host's shadow-utils
//! databases (passwd, group, shadow, gshadow, login.defs), using shadow-utils with `--root`.

mod files_common;

use std::os::unix::fs::MetadataExt;

use files_common::*;

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
fn groups_then_users_created_modified_deleted_with_keys() {
    must_be_root();
    assert!(
        agent::util::have_program("useradd") || std::path::Path::new("/usr/sbin/useradd").exists(),
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
    let keys = home.join(".ssh/authorized_keys.d/agent");
    assert_eq!(
        std::fs::read_to_string(&keys).unwrap(),
        "ssh-ed25519 AAAA one\nssh-ed25519 BBBB two\n"
    );
    assert_eq!(mode(&keys), 0o600);
    assert_eq!(mode(&home.join(".ssh")), 0o700);
    assert_eq!(std::fs::metadata(&keys).unwrap().uid(), 3101);
    let owned = std::fs::metadata(home.join("owned")).unwrap();
    assert_eq!((owned.uid(), owned.gid()), (3101, 3100));
    // games' home (/usr/games) did not exist: keys create it under the root.
    assert!(
        root.join("/usr/games/.ssh/authorized_keys.d/agent")
            .exists()
    );

    // The host's databases are untouched.
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), host_passwd);
    assert_eq!(std::fs::read("/etc/group").unwrap(), host_group);
}

#[test]
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
    run_opts(&c, root.path(), &opts).unwrap();
    let k = root.join("/home/bob-agent/.ssh/authorized_keys");
    assert_eq!(std::fs::read_to_string(&k).unwrap(), "ssh-ed25519 KEY\n");
    assert_eq!(std::fs::metadata(&k).unwrap().uid(), 3201);
}
