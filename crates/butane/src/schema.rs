//! The Ignition structs Butane translates into, in the field order of Ignition's Go struct
//! definitions (embedded structs flattened), with the Go facts that decide the JSON output:
//! pointer or value, `omitempty` or not. Butane's own YAML keys (snake_case) and its sugar
//! fields (no JSON key) live in the same table. `since`/`until` are Ignition spec minors
//! (3.N.0): a field outside its range is an unknown key for that version.

#[derive(Debug, Clone, Copy)]
pub enum T {
    Str,
    Int,
    Bool,
    Obj(&'static Def),
    ListStr,
    ListObj(&'static Def),
}

/// How Go's encoder (Butane uses clarketm/json: `omitempty` also drops zero structs) writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum K {
    /// `*T` with omitempty: written when set.
    Ptr,
    /// `*T` without omitempty: `null` when unset.
    PtrNull,
    /// `T` without omitempty: always written, the zero value when unset.
    Req,
    /// `T` with omitempty: written when not the zero value.
    Zero,
    /// Butane sugar: read from YAML, never written.
    Sugar,
}

#[derive(Debug)]
pub struct F {
    pub json: &'static str,
    pub yaml: &'static str,
    pub t: T,
    pub k: K,
    pub since: u8,
    pub until: u8,
}

#[derive(Debug)]
pub struct Def {
    pub name: &'static str,
    pub fields: &'static [F],
}

impl Def {
    pub fn idx(&'static self, json: &str, minor: u8) -> Option<usize> {
        self.fields
            .iter()
            .position(|f| f.json == json && f.k != K::Sugar && f.since <= minor && minor <= f.until)
    }
    pub fn yaml_idx(&'static self, yaml: &str, minor: u8) -> Option<usize> {
        self.fields
            .iter()
            .position(|f| f.yaml == yaml && f.since <= minor && minor <= f.until)
    }
}

const fn f(json: &'static str, yaml: &'static str, t: T, k: K) -> F {
    F {
        json,
        yaml,
        t,
        k,
        since: 0,
        until: 255,
    }
}
const fn fs(json: &'static str, yaml: &'static str, t: T, k: K, since: u8) -> F {
    F {
        json,
        yaml,
        t,
        k,
        since,
        until: 255,
    }
}
const fn fu(json: &'static str, yaml: &'static str, t: T, k: K, until: u8) -> F {
    F {
        json,
        yaml,
        t,
        k,
        since: 0,
        until,
    }
}
/// Sugar: a YAML-only key.
const fn sugar(yaml: &'static str, t: T, since: u8) -> F {
    F {
        json: "",
        yaml,
        t,
        k: K::Sugar,
        since,
        until: 255,
    }
}

use K::*;
use T::*;

pub static CONFIG: Def = Def {
    name: "Config",
    fields: &[
        f("ignition", "ignition", Obj(&IGNITION), Req),
        fs(
            "kernelArguments",
            "kernel_arguments",
            Obj(&KERNEL_ARGUMENTS),
            Zero,
            3,
        ),
        f("passwd", "passwd", Obj(&PASSWD), Zero),
        f("storage", "storage", Obj(&STORAGE), Zero),
        f("systemd", "systemd", Obj(&SYSTEMD), Zero),
    ],
};

pub static IGNITION: Def = Def {
    name: "Ignition",
    fields: &[
        f("config", "config", Obj(&IGNITION_CONFIG), Zero),
        fs("proxy", "proxy", Obj(&PROXY), Zero, 1),
        f("security", "security", Obj(&SECURITY), Zero),
        f("timeouts", "timeouts", Obj(&TIMEOUTS), Zero),
        // Set by the translator, not read from YAML (the empty YAML key never matches).
        f("version", "", Str, Req),
    ],
};

pub static IGNITION_CONFIG: Def = Def {
    name: "IgnitionConfig",
    fields: &[
        fu("merge", "merge", ListObj(&CONFIG_REF_30), Zero, 0),
        fs("merge", "merge", ListObj(&RESOURCE), Zero, 1),
        fu("replace", "replace", Obj(&CONFIG_REF_30), Zero, 0),
        fs("replace", "replace", Obj(&RESOURCE), Zero, 1),
    ],
};

/// Spec 3.0's ConfigReference (merge/replace).
pub static CONFIG_REF_30: Def = Def {
    name: "ConfigReference",
    fields: &[
        f("source", "source", Str, PtrNull),
        f("verification", "verification", Obj(&VERIFICATION), Zero),
    ],
};

/// Spec 3.0's CaReference.
pub static CA_REF_30: Def = Def {
    name: "CaReference",
    fields: &[
        f("source", "source", Str, Req),
        f("verification", "verification", Obj(&VERIFICATION), Zero),
    ],
};

pub static RESOURCE: Def = Def {
    name: "Resource",
    fields: &[
        f("compression", "compression", Str, Ptr),
        fs(
            "httpHeaders",
            "http_headers",
            ListObj(&HTTP_HEADER),
            Zero,
            1,
        ),
        f("source", "source", Str, Ptr),
        sugar("inline", Str, 0),
        sugar("local", Str, 1),
        f("verification", "verification", Obj(&VERIFICATION), Zero),
    ],
};

pub static HTTP_HEADER: Def = Def {
    name: "HTTPHeader",
    fields: &[f("name", "name", Str, Req), f("value", "value", Str, Ptr)],
};

pub static VERIFICATION: Def = Def {
    name: "Verification",
    fields: &[f("hash", "hash", Str, Ptr)],
};

pub static PROXY: Def = Def {
    name: "Proxy",
    fields: &[
        f("httpProxy", "http_proxy", Str, Ptr),
        f("httpsProxy", "https_proxy", Str, Ptr),
        f("noProxy", "no_proxy", ListStr, Zero),
    ],
};

pub static SECURITY: Def = Def {
    name: "Security",
    fields: &[f("tls", "tls", Obj(&TLS), Zero)],
};

pub static TLS: Def = Def {
    name: "TLS",
    fields: &[
        fu(
            "certificateAuthorities",
            "certificate_authorities",
            ListObj(&CA_REF_30),
            Zero,
            0,
        ),
        fs(
            "certificateAuthorities",
            "certificate_authorities",
            ListObj(&RESOURCE),
            Zero,
            1,
        ),
    ],
};

pub static TIMEOUTS: Def = Def {
    name: "Timeouts",
    fields: &[
        f("httpResponseHeaders", "http_response_headers", Int, Ptr),
        f("httpTotal", "http_total", Int, Ptr),
    ],
};

pub static KERNEL_ARGUMENTS: Def = Def {
    name: "KernelArguments",
    fields: &[
        f("shouldExist", "should_exist", ListStr, Zero),
        f("shouldNotExist", "should_not_exist", ListStr, Zero),
    ],
};

pub static PASSWD: Def = Def {
    name: "Passwd",
    fields: &[
        f("groups", "groups", ListObj(&PASSWD_GROUP), Zero),
        f("users", "users", ListObj(&PASSWD_USER), Zero),
    ],
};

pub static PASSWD_GROUP: Def = Def {
    name: "PasswdGroup",
    fields: &[
        f("gid", "gid", Int, Ptr),
        f("name", "name", Str, Req),
        f("passwordHash", "password_hash", Str, Ptr),
        fs("shouldExist", "should_exist", Bool, Ptr, 2),
        f("system", "system", Bool, Ptr),
    ],
};

pub static PASSWD_USER: Def = Def {
    name: "PasswdUser",
    fields: &[
        f("gecos", "gecos", Str, Ptr),
        f("groups", "groups", ListStr, Zero),
        f("homeDir", "home_dir", Str, Ptr),
        f("name", "name", Str, Req),
        f("noCreateHome", "no_create_home", Bool, Ptr),
        f("noLogInit", "no_log_init", Bool, Ptr),
        f("noUserGroup", "no_user_group", Bool, Ptr),
        f("passwordHash", "password_hash", Str, Ptr),
        f("primaryGroup", "primary_group", Str, Ptr),
        f("sshAuthorizedKeys", "ssh_authorized_keys", ListStr, Zero),
        sugar("ssh_authorized_keys_local", ListStr, 4),
        f("shell", "shell", Str, Ptr),
        fs("shouldExist", "should_exist", Bool, Ptr, 2),
        f("system", "system", Bool, Ptr),
        f("uid", "uid", Int, Ptr),
    ],
};

pub static STORAGE: Def = Def {
    name: "Storage",
    fields: &[
        f("directories", "directories", ListObj(&DIRECTORY), Zero),
        f("disks", "disks", ListObj(&DISK), Zero),
        f("files", "files", ListObj(&FILE), Zero),
        f("filesystems", "filesystems", ListObj(&FILESYSTEM), Zero),
        f("links", "links", ListObj(&LINK), Zero),
        fs("luks", "luks", ListObj(&LUKS), Zero, 2),
        f("raid", "raid", ListObj(&RAID), Zero),
        sugar("trees", ListObj(&TREE), 1),
    ],
};

pub static TREE: Def = Def {
    name: "Tree",
    fields: &[
        sugar("local", Str, 0),
        sugar("path", Str, 0),
        // Butane's base v0_7 (spec 3.6: fcos 1.7) on.
        sugar("file_mode", Int, 6),
        sugar("dir_mode", Int, 6),
        sugar("user", Obj(&NODE_USER), 6),
        sugar("group", Obj(&NODE_USER), 6),
    ],
};

pub static NODE_USER: Def = Def {
    name: "NodeUser",
    fields: &[f("id", "id", Int, Ptr), f("name", "name", Str, Ptr)],
};

pub static DIRECTORY: Def = Def {
    name: "Directory",
    fields: &[
        f("group", "group", Obj(&NODE_USER), Zero),
        f("overwrite", "overwrite", Bool, Ptr),
        f("path", "path", Str, Req),
        f("user", "user", Obj(&NODE_USER), Zero),
        f("mode", "mode", Int, Ptr),
    ],
};

pub static FILE: Def = Def {
    name: "File",
    fields: &[
        f("group", "group", Obj(&NODE_USER), Zero),
        f("overwrite", "overwrite", Bool, Ptr),
        f("path", "path", Str, Req),
        f("user", "user", Obj(&NODE_USER), Zero),
        f("append", "append", ListObj(&RESOURCE), Zero),
        f("contents", "contents", Obj(&RESOURCE), Zero),
        f("mode", "mode", Int, Ptr),
    ],
};

pub static LINK: Def = Def {
    name: "Link",
    fields: &[
        f("group", "group", Obj(&NODE_USER), Zero),
        f("overwrite", "overwrite", Bool, Ptr),
        f("path", "path", Str, Req),
        f("user", "user", Obj(&NODE_USER), Zero),
        f("hard", "hard", Bool, Ptr),
        // A required string before spec 3.4, optional (hard links) from 3.4.
        fu("target", "target", Str, Req, 3),
        fs("target", "target", Str, Ptr, 4),
    ],
};

pub static DISK: Def = Def {
    name: "Disk",
    fields: &[
        f("device", "device", Str, Req),
        f("partitions", "partitions", ListObj(&PARTITION), Zero),
        f("wipeTable", "wipe_table", Bool, Ptr),
    ],
};

pub static PARTITION: Def = Def {
    name: "Partition",
    fields: &[
        f("guid", "guid", Str, Ptr),
        f("label", "label", Str, Ptr),
        f("number", "number", Int, Zero),
        fs("resize", "resize", Bool, Ptr, 2),
        f("shouldExist", "should_exist", Bool, Ptr),
        f("sizeMiB", "size_mib", Int, Ptr),
        f("startMiB", "start_mib", Int, Ptr),
        f("typeGuid", "type_guid", Str, Ptr),
        f("wipePartitionEntry", "wipe_partition_entry", Bool, Ptr),
    ],
};

pub static FILESYSTEM: Def = Def {
    name: "Filesystem",
    fields: &[
        f("device", "device", Str, Req),
        f("format", "format", Str, Ptr),
        f("label", "label", Str, Ptr),
        fs("mountOptions", "mount_options", ListStr, Zero, 1),
        f("options", "options", ListStr, Zero),
        f("path", "path", Str, Ptr),
        f("uuid", "uuid", Str, Ptr),
        f("wipeFilesystem", "wipe_filesystem", Bool, Ptr),
        sugar("with_mount_unit", Bool, 1),
    ],
};

pub static LUKS: Def = Def {
    name: "Luks",
    fields: &[
        fs("cex", "cex", Obj(&CEX), Zero, 5),
        // `*Clevis` before spec 3.4 (written when given, even empty), a struct from 3.4.
        fu("clevis", "clevis", Obj(&CLEVIS), Ptr, 3),
        fs("clevis", "clevis", Obj(&CLEVIS), Zero, 4),
        f("device", "device", Str, Ptr),
        fs("discard", "discard", Bool, Ptr, 4),
        f("keyFile", "key_file", Obj(&RESOURCE), Zero),
        f("label", "label", Str, Ptr),
        f("name", "name", Str, Req),
        fs("openOptions", "open_options", ListStr, Zero, 4),
        f("options", "options", ListStr, Zero),
        f("uuid", "uuid", Str, Ptr),
        f("wipeVolume", "wipe_volume", Bool, Ptr),
    ],
};

pub static CEX: Def = Def {
    name: "Cex",
    fields: &[f("enabled", "enabled", Bool, Ptr)],
};

pub static CLEVIS: Def = Def {
    name: "Clevis",
    fields: &[
        fu("custom", "custom", Obj(&CLEVIS_CUSTOM_32), Ptr, 3),
        fs("custom", "custom", Obj(&CLEVIS_CUSTOM), Zero, 4),
        f("tang", "tang", ListObj(&TANG), Zero),
        f("threshold", "threshold", Int, Ptr),
        f("tpm2", "tpm2", Bool, Ptr),
    ],
};

pub static CLEVIS_CUSTOM: Def = Def {
    name: "ClevisCustom",
    fields: &[
        f("config", "config", Str, Ptr),
        f("needsNetwork", "needs_network", Bool, Ptr),
        f("pin", "pin", Str, Ptr),
    ],
};

/// Spec 3.2-3.3's `Custom`: config and pin required.
pub static CLEVIS_CUSTOM_32: Def = Def {
    name: "ClevisCustom",
    fields: &[
        f("config", "config", Str, Req),
        f("needsNetwork", "needs_network", Bool, Ptr),
        f("pin", "pin", Str, Req),
    ],
};

pub static TANG: Def = Def {
    name: "Tang",
    fields: &[
        fs("advertisement", "advertisement", Str, Ptr, 4),
        f("thumbprint", "thumbprint", Str, Ptr),
        f("url", "url", Str, Zero),
    ],
};

/// Before spec 3.4, `devices` had no omitempty (`null` when absent) and `level` was required.
pub static RAID: Def = Def {
    name: "Raid",
    fields: &[
        fu("devices", "devices", ListStr, Req, 3),
        fs("devices", "devices", ListStr, Zero, 4),
        fu("level", "level", Str, Req, 3),
        fs("level", "level", Str, Ptr, 4),
        f("name", "name", Str, Req),
        f("options", "options", ListStr, Zero),
        f("spares", "spares", Int, Ptr),
    ],
};

pub static SYSTEMD: Def = Def {
    name: "Systemd",
    fields: &[
        sugar("quadlets", ListObj(&QUADLET), 7),
        f("units", "units", ListObj(&UNIT), Zero),
    ],
};

/// Podman quadlets (Butane v0.29 experimental specs): files under /etc/containers/systemd.
pub static QUADLET: Def = Def {
    name: "Quadlet",
    fields: &[
        sugar("contents", Str, 0),
        sugar("contents_local", Str, 0),
        sugar("name", Str, 0),
        sugar("rootful", Bool, 0),
        sugar("dropins", ListObj(&DROPIN), 0),
    ],
};

pub static UNIT: Def = Def {
    name: "Unit",
    fields: &[
        f("contents", "contents", Str, Ptr),
        sugar("contents_local", Str, 4),
        f("dropins", "dropins", ListObj(&DROPIN), Zero),
        f("enabled", "enabled", Bool, Ptr),
        f("mask", "mask", Bool, Ptr),
        f("name", "name", Str, Req),
    ],
};

pub static DROPIN: Def = Def {
    name: "Dropin",
    fields: &[
        f("contents", "contents", Str, Ptr),
        sugar("contents_local", Str, 4),
        f("name", "name", Str, Req),
    ],
};
