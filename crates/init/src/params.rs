//! The kernel command-line parameters /init reads, each defined once, here: its names, the
//! form of its value, how the value is checked and what it sets. [`crate::cmdline::Cmdline`]
//! parses through this table and nothing else, with the same checks for every parameter of a
//! form (a bad value is reported and leaves the setting as it was), and the reference is
//! rendered from it: docs/kernel-parameters.md and leanrd-init(7) (`leanrd man`). A unit test
//! fails when the committed reference differs (`LEANRD_BLESS=1` rewrites it), and another
//! parses every parameter's example.
//!
//! The texts (`doc`, `example`) are not in the /init executable (built with `standalone`):
//! it never prints them, and they would be a tenth of its size.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::verity::{VerityOptions, parse_root_hash};
use leanrd_contract::{CryptKey, CryptOptions, DeviceRef, IscsiTarget, NbdTarget, NvmfTarget};

use crate::cmdline::{FsckMode, FsckRepair, Parse, for_uuid};
use crate::netconf::{self, IpParam};

/// The form of a parameter's value, checked the same way for every parameter of that form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The word alone (`rw`); a value is refused.
    Flag,
    /// The word alone (on), or `=1`/`=0` (also yes/no, true/false, on/off).
    Bool,
    /// A whole number, in the unit named.
    Number(&'static str),
    /// A whole number that may be negative, in the unit named.
    Signed(&'static str),
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A comma list of module names (`-` and `_` alike); repeated, the lists add up.
    Modules,
    /// A block device: `/dev/...`, `UUID=`, `LABEL=`, `PARTUUID=`, `PARTLABEL=`, or a
    /// `/dev/disk/by-*` path.
    Device,
    /// Text of the form named, checked by the parameter itself.
    Text(&'static str),
}

/// A value read as its [`Form`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A flag.
    On,
    /// A boolean.
    Bool(bool),
    /// A number.
    Number(u64),
    /// A signed number.
    Signed(i64),
    /// A choice or text.
    Text(String),
    /// A device.
    Device(DeviceRef),
    /// Module names, normalised.
    Modules(Vec<String>),
}

impl Value {
    fn on(&self) -> bool {
        matches!(self, Value::On | Value::Bool(true))
    }
    fn number(&self) -> u64 {
        if let Value::Number(n) = self { *n } else { 0 }
    }
    fn text(self) -> String {
        if let Value::Text(t) = self { t } else { String::new() }
    }
    fn device(self) -> Option<DeviceRef> {
        if let Value::Device(d) = self { Some(d) } else { None }
    }
    fn modules(self) -> Vec<String> {
        if let Value::Modules(m) = self { m } else { Vec::new() }
    }
}

impl Form {
    /// `value` (None: the word had no `=`) read as this form; Err says why not.
    pub fn read(self, value: Option<&str>) -> Result<Value, String> {
        fn need(v: Option<&str>) -> Result<&str, String> {
            v.ok_or_else(|| "needs a value".to_string())
        }
        match self {
            Form::Flag => match value {
                None => Ok(Value::On),
                Some(_) => Err("takes no value".into()),
            },
            Form::Bool => match value {
                None | Some("1" | "yes" | "true" | "on") => Ok(Value::Bool(true)),
                Some("0" | "no" | "false" | "off") => Ok(Value::Bool(false)),
                Some(_) => Err("not 1 or 0 (yes or no, true or false, on or off)".into()),
            },
            Form::Number(unit) => {
                need(value)?.parse().map(Value::Number).map_err(|_| format!("not a number of {unit}"))
            }
            Form::Signed(unit) => {
                need(value)?.parse().map(Value::Signed).map_err(|_| format!("not a number of {unit}"))
            }
            Form::Choice(words) => {
                let v = need(value)?;
                if words.contains(&v) { Ok(Value::Text(v.into())) } else { Err(format!("not {}", or_list(words))) }
            }
            Form::Modules => {
                let m: Vec<String> =
                    need(value)?.split(',').filter(|m| !m.is_empty()).map(leanrd_kmod::normalize).collect();
                if m.is_empty() { Err("no module named".into()) } else { Ok(Value::Modules(m)) }
            }
            Form::Device => DeviceRef::parse(need(value)?).map(Value::Device).map_err(|e| e.to_string()),
            Form::Text(_) => Ok(Value::Text(need(value)?.into())),
        }
    }

    /// How the reference writes the value: `=SECONDS`, `[=0|1]`, ...
    pub fn syntax(self) -> String {
        match self {
            Form::Flag => String::new(),
            Form::Bool => "[=1|0]".into(),
            Form::Number(unit) | Form::Signed(unit) => format!("={}", unit.to_uppercase()),
            Form::Choice(words) => format!("={}", words.join("|")),
            Form::Modules => "=MODULE[,MODULE...]".into(),
            Form::Device => "=DEVICE".into(),
            Form::Text(t) => format!("={t}"),
        }
    }
}

/// "a, b or c".
fn or_list(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => (*one).into(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Where a parameter is listed in the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// The root and /usr.
    Root,
    /// Verified images: dm-verity, and roots found by partition type.
    Verity,
    /// Modules.
    Modules,
    /// LUKS, LVM, md.
    Storage,
    /// Resuming from hibernation.
    Resume,
    /// The network, and NFS roots.
    Network,
    /// iSCSI.
    Iscsi,
    /// NVMe over TCP.
    Nvmf,
    /// Live media.
    Live,
    /// The way down: the exitrd.
    Shutdown,
    /// The splash (plymouth).
    Display,
    /// Credentials for the root's systemd.
    Credentials,
    /// When the boot fails.
    Diagnosis,
}

impl Group {
    /// Every group, in the reference's order.
    pub const ALL: [Group; 13] = [
        Group::Root,
        Group::Verity,
        Group::Modules,
        Group::Storage,
        Group::Resume,
        Group::Network,
        Group::Iscsi,
        Group::Nvmf,
        Group::Live,
        Group::Shutdown,
        Group::Display,
        Group::Credentials,
        Group::Diagnosis,
    ];

    /// The group's heading.
    pub fn title(self) -> &'static str {
        match self {
            Group::Root => "The root and /usr",
            Group::Verity => "Verified images (dm-verity, discoverable partitions)",
            Group::Modules => "Modules",
            Group::Storage => "Encrypted, LVM and RAID storage",
            Group::Resume => "Resuming from hibernation",
            Group::Network => "The network and NFS roots",
            Group::Iscsi => "iSCSI roots",
            Group::Nvmf => "NVMe over TCP",
            Group::Live => "Live media",
            Group::Shutdown => "The way down (the exitrd)",
            Group::Display => "The splash (plymouth)",
            Group::Credentials => "Credentials (systemd-stub's and the command line's)",
            Group::Diagnosis => "Diagnosis and failure",
        }
    }
}

/// What a parameter does with its value; Err says why the value cannot be used.
type Apply = fn(&mut Parse, Value) -> Result<(), String>;

/// One kernel command-line parameter /init reads.
pub struct Param {
    /// Its names: the first is the one documented, the others are accepted as the same.
    pub names: &'static [&'static str],
    /// The form of its value.
    pub form: Form,
    /// Whether repeating it adds (else the last one wins).
    pub repeats: bool,
    /// Where the reference lists it.
    pub group: Group,
    pub(crate) apply: Apply,
    /// What it does (the reference's text).
    #[cfg(not(feature = "standalone"))]
    pub doc: &'static str,
    /// A command line using it, which the unit tests parse.
    #[cfg(not(feature = "standalone"))]
    pub example: &'static str,
}

/// A parameter; the texts are left out of the /init executable.
macro_rules! param {
    ($names:expr, $form:expr, $group:ident, $repeats:expr, $apply:expr, $doc:expr, $example:expr $(,)?) => {
        Param {
            names: $names,
            form: $form,
            repeats: $repeats,
            group: Group::$group,
            apply: $apply,
            #[cfg(not(feature = "standalone"))]
            doc: $doc,
            #[cfg(not(feature = "standalone"))]
            example: $example,
        }
    };
}

const SECONDS: Form = Form::Number("seconds");
const ONCE: bool = false;
const REPEATS: bool = true;

/// A value written into a kernel interface's option string (nvme-fabrics): nothing that could
/// end an option or start another.
fn option_text(v: &str) -> Result<(), String> {
    if leanrd_contract::option_value(v) {
        Ok(())
    } else {
        Err("empty, or a space, ',', '=' or control character".into())
    }
}

/// Every parameter /init reads, by group.
pub static PARAMS: &[Param] = &[
    // The root and /usr.
    param!(
        &["root"],
        Form::Text("DEVICE|nfs:...|iscsi:...|nbd:...|live:...|ZFS=..."),
        Root,
        ONCE,
        |p, v| {
            p.root = Some(v.text());
            Ok(())
        },
        "The root: a block device (`/dev/sda2`, `UUID=`, `LABEL=`, `PARTUUID=[/PARTNROFF=N]`, \
         `PARTLABEL=`, `/dev/disk/by-*/...`, `/dev/mapper/NAME`), `/dev/nfs` or `nfs:[SERVER:]PATH[:OPTIONS]` \
         (with `nfsroot=`), `iscsi:...` (the LUN itself, as `netroot=`), `nbd:...` (the NBD device itself, as \
         `netroot=`), `live:DEVICE` (a live medium), or `ZFS=POOL/DATASET`, `zfs:POOL/DATASET` or `zfs:AUTO` \
         (a ZFS dataset; AUTO: the `bootfs` of the pool found). \
         Without it, the root the image was built for.",
        "root=UUID=1b2c3d4e-0000-4000-8000-000000000001"
    ),
    param!(
        &["rootfstype"],
        Form::Text("TYPE[,TYPE...]"),
        Root,
        ONCE,
        |p, v| {
            p.c.mounts.rootfstype = Some(v.text());
            Ok(())
        },
        "The root's file system type (a comma list is tried in order). Default: what the device holds, \
         as probed.",
        "rootfstype=ext4"
    ),
    param!(
        &["rootflags"],
        Form::Text("OPTIONS"),
        Root,
        ONCE,
        |p, v| {
            p.c.mounts.rootflags = Some(v.text());
            Ok(())
        },
        "Mount options for the root (`subvol=@`, `compress=zstd`, ...).",
        "rootflags=subvol=@"
    ),
    param!(
        &["ro"],
        Form::Flag,
        Root,
        ONCE,
        |p, _| {
            p.c.rw = false;
            Ok(())
        },
        "Mount the root read-only (the default; the root's own fstab and systemd remount it).",
        "rw ro"
    ),
    param!(
        &["rw"],
        Form::Flag,
        Root,
        ONCE,
        |p, _| {
            p.c.rw = true;
            Ok(())
        },
        "Mount the root read-write; its file system is checked first when the image has the checker.",
        "rw"
    ),
    param!(
        &["init"],
        Form::Text("PATH"),
        Root,
        ONCE,
        |p, v| {
            p.c.init = Some(v.text());
            Ok(())
        },
        "The program to start in the root. Default: the first of /sbin/init, /etc/init, /bin/init, /bin/sh.",
        "init=/lib/systemd/systemd"
    ),
    param!(
        &["rootwait"],
        Form::Flag,
        Root,
        ONCE,
        |p, _| {
            p.c.rootwait = true;
            Ok(())
        },
        "Wait for the root however long it takes (no `leanrd.timeout`).",
        "rootwait"
    ),
    param!(
        &["rootdelay"],
        SECONDS,
        Root,
        ONCE,
        |p, v| {
            p.c.rootdelay = v.number();
            Ok(())
        },
        "Pause this long before looking for the root.",
        "rootdelay=2"
    ),
    param!(
        &["leanrd.timeout"],
        SECONDS,
        Root,
        ONCE,
        |p, v| {
            p.c.timeout = v.number();
            Ok(())
        },
        "How long to wait for the root (and each device it needs) before saying why it is missing, and for a \
         module the boot loads before going on without it (its initialisation hangs: it is named, and goes on \
         loading in the background). Default: 30.",
        "leanrd.timeout=90"
    ),
    param!(
        &["mount.usr"],
        Form::Device,
        Root,
        ONCE,
        |p, v| {
            p.c.mounts.usr = v.device();
            Ok(())
        },
        "A separate /usr, mounted before the switch (systemd's). Default: the root's fstab entry for /usr, \
         as the image recorded it.",
        "mount.usr=PARTLABEL=usr"
    ),
    param!(
        &["mount.usrfstype"],
        Form::Text("TYPE"),
        Root,
        ONCE,
        |p, v| {
            p.c.mounts.usrfstype = Some(v.text());
            Ok(())
        },
        "/usr's file system type.",
        "mount.usrfstype=xfs"
    ),
    param!(
        &["mount.usrflags"],
        Form::Text("OPTIONS"),
        Root,
        ONCE,
        |p, v| {
            p.c.mounts.usrflags = Some(v.text());
            Ok(())
        },
        "Mount options for /usr.",
        "mount.usrflags=ro,noatime"
    ),
    // Verified images.
    param!(
        &["roothash"],
        Form::Text("HEX"),
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.root.hash = Some(parse_root_hash(&v.text())?);
            Ok(())
        },
        "The root's dm-verity root hash (systemd's): /init sets the root up as /dev/mapper/root, verified \
         block by block, and mounts it read-only. Its data and hash devices are `systemd.verity_root_data=` and \
         `systemd.verity_root_hash=`, else the partitions whose PARTUUIDs are the hash's first and last 128 bits \
         (the Discoverable Partitions Specification's rule). `root=` may be absent, `gpt-auto` or \
         `/dev/mapper/root`.",
        "roothash=0123456789abcdef0123456789abcdeffedcba9876543210fedcba9876543210"
    ),
    param!(
        &["usrhash"],
        Form::Text("HEX"),
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.usr.hash = Some(parse_root_hash(&v.text())?);
            Ok(())
        },
        "/usr's dm-verity root hash: /usr is set up as /dev/mapper/usr (its devices as for `roothash=`, by \
         `systemd.verity_usr_data=` and `systemd.verity_usr_hash=`) and mounted read-only on the root's /usr.",
        "usrhash=0123456789abcdef0123456789abcdeffedcba9876543210fedcba9876543210"
    ),
    param!(
        &["systemd.verity", "rd.systemd.verity"],
        Form::Bool,
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.off = !v.on();
            Ok(())
        },
        "`0`: set up no dm-verity device (`roothash=` and `usrhash=` are ignored). Default: 1.",
        "systemd.verity=0"
    ),
    param!(
        &["systemd.verity_root_data"],
        Form::Device,
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.root.data = v.device();
            Ok(())
        },
        "The root's verity data device. Default: the partition whose PARTUUID is `roothash=`'s first 128 bits.",
        "systemd.verity_root_data=PARTLABEL=root"
    ),
    param!(
        &["systemd.verity_root_hash"],
        Form::Device,
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.root.hash_device = v.device();
            Ok(())
        },
        "The root's verity hash device (it may be the data device, with `hash-offset=`). Default: the partition \
         whose PARTUUID is `roothash=`'s last 128 bits.",
        "systemd.verity_root_hash=PARTLABEL=root-verity"
    ),
    param!(
        &["systemd.verity_root_options"],
        Form::Text("OPTIONS"),
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.root.options = VerityOptions::parse(&v.text())?;
            Ok(())
        },
        "veritytab options for the root: `superblock=false` (then `data-blocks=`, `data-block-size=`, \
         `hash-block-size=`, `hash=`, `salt=`, `format=` give what the superblock would), `hash-offset=BYTES`, \
         `panic-on-corruption`, `restart-on-corruption`, `ignore-corruption`, `ignore-zero-blocks`, \
         `check-at-most-once`, `fec-device=DEVICE`, `fec-offset=BYTES`, `fec-roots=N`, \
         `root-hash-signature=base64:...`.",
        "systemd.verity_root_options=restart-on-corruption,check-at-most-once"
    ),
    param!(
        &["systemd.verity_usr_data"],
        Form::Device,
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.usr.data = v.device();
            Ok(())
        },
        "/usr's verity data device. Default: the partition whose PARTUUID is `usrhash=`'s first 128 bits.",
        "systemd.verity_usr_data=PARTLABEL=usr"
    ),
    param!(
        &["systemd.verity_usr_hash"],
        Form::Device,
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.usr.hash_device = v.device();
            Ok(())
        },
        "/usr's verity hash device. Default: the partition whose PARTUUID is `usrhash=`'s last 128 bits.",
        "systemd.verity_usr_hash=PARTLABEL=usr-verity"
    ),
    param!(
        &["systemd.verity_usr_options"],
        Form::Text("OPTIONS"),
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.usr.options = VerityOptions::parse(&v.text())?;
            Ok(())
        },
        "veritytab options for /usr, as `systemd.verity_root_options=`.",
        "systemd.verity_usr_options=panic-on-corruption"
    ),
    param!(
        &["systemd.set_credential", "systemd.set-credential"],
        Form::Text("NAME:VALUE"),
        Credentials,
        REPEATS,
        |p, v| {
            p.c.credentials.set.push(crate::stub::parse_set(&v.text(), false)?);
            Ok(())
        },
        "A credential for the root's systemd, as systemd reads it. When the stub handed over credentials \
         from the ESP (`UKI.efi.extra.d/*.cred`, `loader/credentials/*.cred`), /init puts them in \
         /run/credentials/@encrypted and this one, with SMBIOS's and fw_cfg's, in /run/credentials/@system, \
         as systemd's initrd does; else the root's systemd reads it itself. The command line is readable by \
         every user: no secrets.",
        "systemd.set_credential=leanrd.example:hello"
    ),
    param!(
        &["systemd.set_credential_binary", "systemd.set-credential-binary"],
        Form::Text("NAME:BASE64"),
        Credentials,
        REPEATS,
        |p, v| {
            p.c.credentials.set.push(crate::stub::parse_set(&v.text(), true)?);
            Ok(())
        },
        "`systemd.set_credential=` with the value in base64.",
        "systemd.set_credential_binary=leanrd.example:aGVsbG8="
    ),
    param!(
        &["systemd.import_credentials", "rd.systemd.import_credentials"],
        Form::Bool,
        Credentials,
        ONCE,
        |p, v| {
            p.c.credentials.off = !v.on();
            Ok(())
        },
        "`0`: /init hands on no credentials (`systemd.import_credentials=0` keeps the root's systemd \
         from importing any too). Default: 1.",
        "systemd.import_credentials=0"
    ),
    param!(
        &["systemd.volatile"],
        Form::Text("yes|no|state|overlay"),
        Verity,
        ONCE,
        |p, v| {
            p.c.volatile = crate::volatile::Volatile::parse(Some(&v.text())).ok_or("not yes, no, state or overlay")?;
            Ok(())
        },
        "A root whose writes go to memory, as systemd-volatile-root makes it: `overlay`, an overlayfs over the \
         root with its upper layer on a tmpfs; `state`, a tmpfs on /var; `yes`, a tmpfs root with the image's \
         /usr bound into it read-only. Each is gone at the next boot.",
        "systemd.volatile=overlay"
    ),
    param!(
        &["rd.systemd.gpt_auto", "systemd.gpt_auto"],
        Form::Bool,
        Verity,
        ONCE,
        |p, v| {
            p.c.verity.gpt_auto_off = !v.on();
            Ok(())
        },
        "`0`: find no partition by its type or by the root hash's halves (the root needs `root=`, the verity \
         devices `systemd.verity_*_data=` and `systemd.verity_*_hash=`). Default: 1.",
        "rd.systemd.gpt_auto=0"
    ),
    param!(
        &["fsck.mode"],
        Form::Choice(&["auto", "skip", "force"]),
        Root,
        ONCE,
        |p, v| {
            p.c.fsck_mode = match v.text().as_str() {
                "skip" => FsckMode::Skip,
                "force" => FsckMode::Force,
                _ => FsckMode::Auto,
            };
            Ok(())
        },
        "Whether to check a file system mounted read-write here (systemd's): `auto` when it needs it, \
         `skip`, or `force`.",
        "fsck.mode=force"
    ),
    param!(
        &["fsck.repair"],
        Form::Choice(&["preen", "yes", "no"]),
        Root,
        ONCE,
        |p, v| {
            p.c.fsck_repair = match v.text().as_str() {
                "yes" => FsckRepair::Yes,
                "no" => FsckRepair::No,
                _ => FsckRepair::Preen,
            };
            Ok(())
        },
        "What the checker may repair (systemd's): `preen` what is safe without asking, `yes` everything, \
         `no` nothing.",
        "fsck.repair=no"
    ),
    // Modules.
    param!(
        &["modprobe.blacklist", "rd.driver.blacklist"],
        Form::Modules,
        Modules,
        REPEATS,
        |p, v| {
            p.c.blacklist.extend(v.modules());
            Ok(())
        },
        "Modules never to load, whatever asks for them.",
        "modprobe.blacklist=floppy,pcspkr"
    ),
    param!(
        &["rd.driver.pre"],
        Form::Modules,
        Modules,
        REPEATS,
        |p, v| {
            p.c.driver_pre.extend(v.modules());
            Ok(())
        },
        "Modules to load first, before the image's own list.",
        "rd.driver.pre=virtio_scsi"
    ),
    param!(
        &["rd.driver.post"],
        Form::Modules,
        Modules,
        REPEATS,
        |p, v| {
            p.c.driver_post.extend(v.modules());
            Ok(())
        },
        "Modules to load once the root's devices are found.",
        "rd.driver.post=loop"
    ),
    param!(
        &["rd.leanrd.coldplug", "leanrd.coldplug"],
        Form::Choice(&["storage", "all"]),
        Modules,
        ONCE,
        |p, v| {
            p.c.coldplug_all = v.text() == "all";
            Ok(())
        },
        "Which devices get their drivers at boot: `storage` (and input; the default), or `all`, every device's, \
         all loaded before the switch to the root. With `storage`, drivers not yet started when the root is found \
         are left to the root's udev.",
        "rd.leanrd.coldplug=all"
    ),
    // Storage.
    param!(
        &["rd.luks"],
        Form::Bool,
        Storage,
        ONCE,
        |p, v| {
            p.c.no_luks = !v.on();
            Ok(())
        },
        "`0`: unlock no LUKS container.",
        "rd.luks=0"
    ),
    param!(
        &["rd.leanrd.tang_timeout"],
        SECONDS,
        Storage,
        ONCE,
        |p, v| {
            p.c.tang_timeout = Some(v.number());
            Ok(())
        },
        "How long each Tang server of a container's clevis tokens has to answer, the network's start included, \
         before the next token and then the passphrase prompt. Default: the image's `clevis.tang_timeout` \
         setting, else 10.",
        "rd.leanrd.tang_timeout=30"
    ),
    param!(
        &["rd.luks.uuid"],
        Form::Text("UUID"),
        Storage,
        REPEATS,
        |p, v| {
            p.c.luks_uuids.push(v.text().trim_start_matches("luks-").into());
            Ok(())
        },
        "A LUKS container to unlock (a `luks-` prefix is allowed), besides those the image recorded.",
        "rd.luks.uuid=luks-0d1e"
    ),
    param!(
        &["rd.luks.name"],
        Form::Text("UUID=NAME"),
        Storage,
        REPEATS,
        |p, v| {
            let v = v.text();
            let (u, n) = v
                .split_once('=')
                .filter(|(u, n)| !u.is_empty() && !n.is_empty() && !n.contains('/'))
                .ok_or("not UUID=NAME")?;
            let u = u.trim_start_matches("luks-");
            p.c.luks_names.push((u.into(), n.into()));
            p.c.luks_uuids.push(u.into());
            Ok(())
        },
        "Unlock the container with this UUID as /dev/mapper/NAME.",
        "rd.luks.name=0d1e=cryptroot"
    ),
    param!(
        &["rd.luks.key"],
        Form::Text("[UUID=]PATH[:DEVICE]"),
        Storage,
        REPEATS,
        |p, v| {
            let v = v.text();
            let (uuid, spec) = for_uuid(&v);
            p.c.luks_keys.push((uuid, CryptKey::parse(spec)?));
            Ok(())
        },
        "A key file, in the image or on a device (`:DEVICE`), for one container (`UUID=`) or for all. \
         The passphrase is asked for when no key opens it.",
        "rd.luks.key=0d1e=/keys/root.key:LABEL=KEYS"
    ),
    param!(
        &["rd.luks.options"],
        Form::Text("[UUID=]OPTIONS"),
        Storage,
        REPEATS,
        |p, v| {
            let v = v.text();
            let (uuid, spec) = for_uuid(&v);
            let (o, bad) = CryptOptions::parse(spec);
            if !bad.is_empty() {
                return Err(bad.join("; "));
            }
            p.c.luks_options.push((uuid, o));
            Ok(())
        },
        "crypttab options (`discard`, `tries=`, `timeout=`, `tpm2-device=`, ...) for one container, or for \
         those crypttab says nothing about.",
        "rd.luks.options=discard,tries=1"
    ),
    param!(
        &["rd.luks.crypttab"],
        Form::Bool,
        Storage,
        ONCE,
        |p, v| {
            p.c.no_crypttab = !v.on();
            Ok(())
        },
        "`0`: ignore the crypttab entries the image recorded.",
        "rd.luks.crypttab=0"
    ),
    param!(
        &["rd.vconsole.keymap", "vconsole.keymap"],
        Form::Text("KEYMAP"),
        Storage,
        ONCE,
        |p, v| {
            p.c.keymap = Some(v.text());
            Ok(())
        },
        "The keymap for the passphrase prompt (one the image holds). Default: the machine's.",
        "rd.vconsole.keymap=de"
    ),
    param!(
        &["rd.lvm"],
        Form::Bool,
        Storage,
        ONCE,
        |p, v| {
            p.c.no_lvm = !v.on();
            Ok(())
        },
        "`0`: activate no LVM volume group.",
        "rd.lvm=0"
    ),
    param!(
        &["rd.md"],
        Form::Bool,
        Storage,
        ONCE,
        |p, v| {
            p.c.no_md = !v.on();
            Ok(())
        },
        "`0`: assemble no md RAID array.",
        "rd.md=0"
    ),
    param!(
        &["bootfs", "zfs"],
        Form::Text("POOL/DATASET"),
        Storage,
        ONCE,
        |p, v| {
            let v = v.text();
            leanrd_contract::zfs_name(&v).map_err(|e| e.to_string())?;
            p.c.zfs.dataset = Some(v);
            Ok(())
        },
        "The root is this ZFS dataset, whatever `root=` says (`bootfs=` is zfs-initramfs's, `zfs=` booster's); \
         the same as `root=ZFS=POOL/DATASET`. Its pool is imported (`zpool import -N`), an encrypted dataset's \
         passphrase asked at the LUKS prompt, and the datasets under it mounted where their `mountpoint` says.",
        "bootfs=rpool/ROOT/debian"
    ),
    param!(
        &["rpool"],
        Form::Text("POOL"),
        Storage,
        ONCE,
        |p, v| {
            let v = v.text();
            if v.contains('/') {
                return Err("a pool's name has no '/' (bootfs= names a dataset)".into());
            }
            leanrd_contract::zfs_name(&v).map_err(|e| e.to_string())?;
            p.c.zfs.pool = Some(v);
            Ok(())
        },
        "With `root=zfs:AUTO` or no `root=`: the ZFS pool whose `bootfs` property names the root dataset \
         (zfs-initramfs's). Without it, AUTO takes the first pool found with a `bootfs`.",
        "rpool=rpool"
    ),
    param!(
        &["zfsforce", "zfs_force", "zfs.force"],
        Form::Bool,
        Storage,
        ONCE,
        |p, v| {
            p.c.zfs.force = v.on();
            Ok(())
        },
        "Import the root's ZFS pool even when another system (another hostid) has it imported \
         (`zpool import -f`). Without it such a pool is not imported, and the diagnosis says which host has it.",
        "zfsforce=1"
    ),
    param!(
        &["rd.multipath"],
        Form::Bool,
        Storage,
        ONCE,
        |p, v| {
            p.c.no_multipath = !v.on();
            Ok(())
        },
        "`0`: assemble no dm-multipath map: each path is a disk of its own.",
        "rd.multipath=0"
    ),
    // Resume.
    param!(
        &["resume"],
        Form::Device,
        Resume,
        ONCE,
        |p, v| {
            p.c.resume = v.device();
            Ok(())
        },
        "The swap device holding a hibernation image: the machine resumes from it instead of booting. \
         Default: the one the image recorded.",
        "resume=UUID=5a6b"
    ),
    param!(
        &["resume_offset"],
        Form::Number("pages"),
        Resume,
        ONCE,
        |p, v| {
            p.c.resume_offset = Some(v.number());
            Ok(())
        },
        "Where a swap file starts on `resume=`'s device.",
        "resume_offset=34816"
    ),
    param!(
        &["noresume"],
        Form::Flag,
        Resume,
        ONCE,
        |p, _| {
            p.c.noresume = true;
            Ok(())
        },
        "Boot afresh; a hibernation image found is discarded, as the kernel does.",
        "noresume"
    ),
    param!(
        &["resumedelay"],
        SECONDS,
        Resume,
        ONCE,
        |p, v| {
            p.c.resumedelay = v.number();
            Ok(())
        },
        "Pause this long before looking for the resume device.",
        "resumedelay=2"
    ),
    param!(
        &["resumewait"],
        Form::Flag,
        Resume,
        ONCE,
        |p, _| {
            p.c.resumewait = true;
            Ok(())
        },
        "Wait for the resume device however long it takes.",
        "resumewait"
    ),
    // The network.
    param!(
        &["ip"],
        Form::Text("dhcp|dhcp6|off|IFACE:dhcp|CLIENT:SERVER:GW:NETMASK:HOST:IFACE:AUTOCONF[:DNS0[:DNS1]]"),
        Network,
        REPEATS,
        |p, v| {
            p.c.ip.push(IpParam::parse(&v.text())?);
            Ok(())
        },
        "How to configure the network: DHCP (v4), DHCPv6/SLAAC, or static, for all interfaces or one \
         (the kernel's and dracut's forms). Default for a network root: DHCP.",
        "ip=10.0.0.5::10.0.0.1:255.255.255.0:client:eth0:off"
    ),
    param!(
        &["BOOTIF"],
        Form::Text("01-MAC"),
        Network,
        ONCE,
        |p, v| {
            p.c.bootif = Some(netconf::bootif(&v.text()).ok_or("not 01-XX-XX-XX-XX-XX-XX or a MAC")?);
            Ok(())
        },
        "The interface to use, by MAC (as PXELINUX's IPAPPEND 2 gives it).",
        "BOOTIF=01-52-54-00-12-34-56"
    ),
    param!(
        &["ifname"],
        Form::Text("NAME:MAC"),
        Network,
        REPEATS,
        |p, v| {
            let v = v.text();
            let (n, m) = v
                .split_once(':')
                .and_then(|(n, m)| Some((n, netconf::bootif(m)?)))
                .filter(|(n, _)| !n.is_empty() && n.len() < 16 && !n.contains(['/', ' ']))
                .ok_or("not NAME:MAC")?;
            p.c.ifnames.push((n.into(), m));
            Ok(())
        },
        "Name the interface with this MAC (for `ip=` to name it).",
        "ifname=lan0:52:54:00:12:34:56"
    ),
    param!(
        &["rd.neednet"],
        Form::Bool,
        Network,
        ONCE,
        |p, v| {
            p.c.neednet = v.on();
            Ok(())
        },
        "`1`: bring the network up, and hand it to the root, though the root is local.",
        "rd.neednet=1"
    ),
    param!(
        &["nfsroot"],
        Form::Text("[SERVER:]PATH[,OPTIONS]"),
        Network,
        ONCE,
        |p, v| {
            p.nfsroot = Some(v.text());
            Ok(())
        },
        "The NFS export for `root=/dev/nfs` (the kernel's form). Without a server, the DHCP reply's.",
        "root=/dev/nfs nfsroot=10.0.0.1:/srv/root,vers=4.2"
    ),
    param!(
        &["boot"],
        Form::Choice(&["live", "local", "nfs"]),
        Network,
        ONCE,
        |p, v| {
            p.boot = Some(v.text());
            Ok(())
        },
        "initramfs-tools' and live-boot's: `live` finds a live medium (as `root=live:`), `nfs` means \
         `root=/dev/nfs`, `local` changes nothing.",
        "boot=nfs nfsroot=10.0.0.1:/srv/root"
    ),
    // iSCSI.
    param!(
        &["netroot"],
        Form::Text(
            "iscsi:[USER:PASSWORD[:IN_USER:IN_PASSWORD]@]SERVER:[PROTO]:[PORT]:[LUN]:TARGET|\
             nbd:SERVER:PORT[/EXPORT][:FSTYPE[:ROOTFLAGS[:NBDOPTS]]]"
        ),
        Iscsi,
        REPEATS,
        |p, v| {
            let v = v.text();
            if v.starts_with("nbd:") {
                // The first one (dracut's); `root=nbd:` replaces it.
                let t = NbdTarget::parse(&v).map_err(|e| e.to_string())?;
                p.c.nbd.target.get_or_insert(t);
                return Ok(());
            }
            if !v.starts_with("iscsi:") {
                return Err(format!(
                    "{}:... is not known to leanrd's /init (iscsi: and nbd: only)",
                    v.split(':').next().unwrap_or("")
                ));
            }
            p.c.iscsi.targets.push(IscsiTarget::parse(&v).map_err(|e| e.to_string())?);
            Ok(())
        },
        "An iSCSI target to log in to (dracut's form); the root is then found on its LUNs by `root=`. \
         Or an NBD export to connect (dracut's form: PORT, or a name there for an export on port 10809; \
         NBDOPTS `bs=` and `timeout=`), the root then found on it by `root=` (`root=nbd:...`: the \
         device itself is the root, FSTYPE and ROOTFLAGS its type and options).",
        "root=UUID=1b2c netroot=iscsi:10.0.0.1::::iqn.2026-11.org.example:root"
    ),
    param!(
        &["rd.iscsi.initiator"],
        Form::Text("IQN"),
        Iscsi,
        ONCE,
        |p, v| {
            p.c.iscsi.initiator = Some(v.text());
            Ok(())
        },
        "This machine's initiator name. Default: the one the image recorded (a host-only image: the \
         machine's own), else one made from the interface's MAC.",
        "rd.iscsi.initiator=iqn.2026-11.org.example:client"
    ),
    param!(
        &["rd.iscsi.target.name"],
        Form::Text("IQN"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.name = Some(v.text());
            Ok(())
        },
        "A target named in parts (with `rd.iscsi.target.ip=`): its name.",
        "rd.iscsi.target.name=iqn.2026-11.org.example:root rd.iscsi.target.ip=10.0.0.1"
    ),
    param!(
        &["rd.iscsi.target.ip"],
        Form::Text("ADDRESS"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.ip = Some(v.text());
            Ok(())
        },
        "Its address.",
        "rd.iscsi.target.name=iqn.2026-11.org.example:root rd.iscsi.target.ip=fd00::1"
    ),
    param!(
        &["rd.iscsi.target.port"],
        Form::Number("port"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.port = Some(v.number().to_string());
            Ok(())
        },
        "Its port. Default: 3260.",
        "rd.iscsi.target.name=iqn.2026-11.org.example:root rd.iscsi.target.ip=10.0.0.1 rd.iscsi.target.port=3261"
    ),
    param!(
        &["rd.iscsi.target.group"],
        Form::Number("group"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.group = Some(v.number().to_string());
            Ok(())
        },
        "Its portal group. Default: 1.",
        "rd.iscsi.target.name=iqn.2026-11.org.example:root rd.iscsi.target.ip=10.0.0.1 rd.iscsi.target.group=2"
    ),
    param!(
        &["rd.iscsi.lun", "rd.iscsi.target.lun"],
        Form::Number("lun"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.lun = Some(v.number().to_string());
            Ok(())
        },
        "Its LUN holding the root.",
        "rd.iscsi.target.name=iqn.2026-11.org.example:root rd.iscsi.target.ip=10.0.0.1 rd.iscsi.lun=1"
    ),
    param!(
        &["rd.iscsi.username"],
        Form::Text("USER"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.user = Some(v.text());
            Ok(())
        },
        "CHAP: the user name (with `rd.iscsi.password=`), for every target given without its own.",
        "netroot=iscsi:10.0.0.1::::iqn.a:root rd.iscsi.username=u rd.iscsi.password=p"
    ),
    param!(
        &["rd.iscsi.password"],
        Form::Text("PASSWORD"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.password = Some(v.text());
            Ok(())
        },
        "CHAP: the password. (The command line is readable by every user of the booted system: prefer \
         the credentials the image records, which only root reads.)",
        "netroot=iscsi:10.0.0.1::::iqn.a:root rd.iscsi.username=u rd.iscsi.password=p"
    ),
    param!(
        &["rd.iscsi.in.username"],
        Form::Text("USER"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.in_user = Some(v.text());
            Ok(())
        },
        "Mutual CHAP: the target's user name.",
        "netroot=iscsi:10.0.0.1::::iqn.a:root rd.iscsi.username=u rd.iscsi.password=p rd.iscsi.in.username=t \
         rd.iscsi.in.password=q"
    ),
    param!(
        &["rd.iscsi.in.password"],
        Form::Text("PASSWORD"),
        Iscsi,
        ONCE,
        |p, v| {
            p.iscsi.in_password = Some(v.text());
            Ok(())
        },
        "Mutual CHAP: the target's password.",
        "netroot=iscsi:10.0.0.1::::iqn.a:root rd.iscsi.username=u rd.iscsi.password=p rd.iscsi.in.username=t \
         rd.iscsi.in.password=q"
    ),
    param!(
        &["rd.iscsi.param"],
        Form::Text("NAME=VALUE"),
        Iscsi,
        REPEATS,
        |p, v| {
            let v = v.text();
            if v.split_once('=').is_none_or(|(n, _)| n.is_empty()) {
                return Err("not NAME=VALUE".into());
            }
            p.c.iscsi.params.push(v);
            Ok(())
        },
        "An iscsid node setting for the sessions (`node.session.timeo.replacement_timeout=-1`, ...).",
        "rd.iscsi.param=node.session.timeo.replacement_timeout=-1"
    ),
    // NVMe over TCP.
    param!(
        &["rd.nvmf.discover"],
        Form::Text("tcp,TRADDR[,HOST_TRADDR[,TRSVCID]]"),
        Nvmf,
        REPEATS,
        |p, v| {
            p.c.nvmf.targets.push(NvmfTarget::parse(&v.text()).map_err(|e| e.to_string())?);
            Ok(())
        },
        "A discovery controller to ask for subsystems; each is connected, and the root found on them.",
        "rd.nvmf.discover=tcp,10.0.0.2,,4420"
    ),
    param!(
        &["rd.nvmf.hostnqn"],
        Form::Text("NQN"),
        Nvmf,
        ONCE,
        |p, v| {
            let v = v.text();
            option_text(&v)?;
            p.c.nvmf.hostnqn = Some(v);
            Ok(())
        },
        "This host's NQN. Default: the one the image recorded (the machine's /etc/nvme/hostnqn), else the \
         kernel's.",
        "rd.nvmf.hostnqn=nqn.2014-08.org.nvmexpress:uuid:1b2c"
    ),
    param!(
        &["rd.nvmf.hostid"],
        Form::Text("ID"),
        Nvmf,
        ONCE,
        |p, v| {
            let v = v.text();
            option_text(&v)?;
            p.c.nvmf.hostid = Some(v);
            Ok(())
        },
        "This host's ID. Default: the one the image recorded, else the kernel's.",
        "rd.nvmf.hostid=1b2c3d4e-0000-4000-8000-000000000001"
    ),
    param!(
        &["rd.nvmf.nostatic"],
        Form::Flag,
        Nvmf,
        ONCE,
        |p, _| {
            p.c.nvmf.nostatic = true;
            Ok(())
        },
        "Connect only what `rd.nvmf.discover=` finds, not the subsystems the image recorded.",
        "rd.nvmf.nostatic"
    ),
    param!(
        &["rd.nvmf.nonbft"],
        Form::Flag,
        Nvmf,
        ONCE,
        |_, _| Ok(()),
        "Accepted and ignored: the NBFT is never read.",
        "rd.nvmf.nonbft"
    ),
    // Live media.
    param!(
        &["rd.live.image"],
        Form::Bool,
        Live,
        ONCE,
        |_, _| Ok(()),
        "Accepted and ignored: dracut's marker of a live boot (`root=live:` says it).",
        "rd.live.image"
    ),
    param!(
        &["rd.live.eject"],
        Form::Bool,
        Live,
        ONCE,
        |p, v| {
            p.c.live.eject = v.on();
            Ok(())
        },
        "On the way down, once the medium is unmounted, eject a live CD or DVD (its drive asked to open \
         the tray; the exitrd is left for it). Default: not ejected.",
        "rd.live.eject"
    ),
    param!(
        &["noeject"],
        Form::Flag,
        Live,
        ONCE,
        |p, _| {
            p.c.live.noeject = true;
            Ok(())
        },
        "live-boot's: never eject the live medium, whatever `rd.live.eject` says.",
        "noeject"
    ),
    param!(
        &["rd.live.ram", "toram"],
        Form::Bool,
        Live,
        ONCE,
        |p, v| {
            p.c.live.ram = v.on();
            Ok(())
        },
        "Copy the live image into memory first; the medium can then be removed.",
        "rd.live.ram"
    ),
    param!(
        &["rd.live.check"],
        Form::Bool,
        Live,
        ONCE,
        |p, v| {
            p.c.live.check = v.on();
            Ok(())
        },
        "Verify the medium against the MD5 implanted in it (isomd5sum's) before using it; a damaged one \
         stops the boot with both sums named.",
        "rd.live.check"
    ),
    param!(
        &["rd.live.overlay"],
        Form::Text("DEVICE[:PATH]"),
        Live,
        ONCE,
        |p, v| {
            let v = v.text();
            p.c.live.overlay = Some(DeviceRef::parse(v.split(':').next().unwrap_or("")).map_err(|e| e.to_string())?);
            Ok(())
        },
        "Keep the changes on this file system (persistence) instead of in memory.",
        "rd.live.overlay=LABEL=persist"
    ),
    param!(
        &["rd.live.overlay.size"],
        Form::Text("MIB|SIZE"),
        Live,
        ONCE,
        |p, v| {
            let v = v.text();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'%') {
                return Err("not a size (MiB, or tmpfs's size= form: 2G, 50%)".into());
            }
            p.c.live.overlay_size = Some(v);
            Ok(())
        },
        "The in-memory overlay's size. Default: tmpfs's, half the memory.",
        "rd.live.overlay.size=512"
    ),
    param!(
        &["rd.live.dir", "live-media-path"],
        Form::Text("DIR"),
        Live,
        ONCE,
        |p, v| {
            let v = v.text();
            if v.split('/').any(|c| c == "..") || v.contains('\0') {
                return Err("a '..' in it".into());
            }
            p.c.live.dir = Some(v.trim_matches('/').into());
            Ok(())
        },
        "The directory on the medium holding the image. Default: LiveOS (dracut's), else live \
         (Debian's).",
        "rd.live.dir=LiveOS"
    ),
    param!(
        &["rd.live.squashimg"],
        Form::Text("FILE"),
        Live,
        ONCE,
        |p, v| {
            let v = v.text();
            if v.is_empty() || v.contains(['/', '\0']) || v == ".." {
                return Err("not a file name".into());
            }
            p.c.live.squashimg = Some(v);
            Ok(())
        },
        "The image's file name in that directory. Default: squashfs.img, else filesystem.squashfs or any \
         *.squashfs.",
        "rd.live.squashimg=rootfs.img"
    ),
    // Diagnosis.
    param!(
        &["panic"],
        Form::Signed("seconds"),
        Diagnosis,
        ONCE,
        |p, v| {
            p.c.panic = if let Value::Signed(n) = v { Some(n) } else { None };
            Ok(())
        },
        "When the boot fails and there is no rescue shell: reboot after this many seconds (at once if \
         negative); 0, or none, waits forever with the diagnosis on the screen.",
        "panic=-1"
    ),
    param!(
        &["quiet"],
        Form::Flag,
        Diagnosis,
        ONCE,
        |p, _| {
            p.c.quiet = true;
            Ok(())
        },
        "The kernel's; /init prints only errors in any case.",
        "quiet"
    ),
    param!(
        &["splash"],
        Form::Flag,
        Display,
        ONCE,
        |p, _| {
            p.c.splash = true;
            Ok(())
        },
        "Show plymouth's splash (Debian's and Ubuntu's `quiet splash`), when the image has plymouth: \
         plymouthd starts as soon as the display's driver is there, and passphrases are asked through it \
         (the serial consoles are asked too). Default: no splash.",
        "splash"
    ),
    param!(
        &["nosplash"],
        Form::Flag,
        Display,
        ONCE,
        |p, _| {
            p.c.plymouth = Some(false);
            Ok(())
        },
        "No splash, whatever else the command line says.",
        "nosplash"
    ),
    param!(
        &["plymouth.enable", "rd.plymouth"],
        Form::Bool,
        Display,
        ONCE,
        |p, v| {
            // An earlier `nosplash` or `=0` wins: off is never turned on again.
            if p.c.plymouth != Some(false) {
                p.c.plymouth = Some(v.on());
            }
            Ok(())
        },
        "`0`: never start plymouthd (as systemd's and dracut's); `1`: start it even without `splash`.",
        "plymouth.enable=0"
    ),
    param!(
        &["rd.leanrd.exitrd"],
        Form::Bool,
        Shutdown,
        ONCE,
        |p, v| {
            p.c.exitrd = Some(v.on());
            Ok(())
        },
        "`1`: leave the exitrd in /run/initramfs at the switch to the root (/init itself as `shutdown`, and a \
         record of what the boot built), for systemd's shutdown to return to: the teardown then unmounts the old \
         root, removes LUKS and LVM mappings, stops md arrays, logs out of iSCSI sessions and disconnects \
         NVMe-oF controllers, top-down, \
         before the power goes. `0`: none. Default: the image's `exitrd` setting, else on where the root sits on \
         more than a plain partition.",
        "rd.leanrd.exitrd=0"
    ),
    param!(
        &["rd.shutdown.timeout.umount"],
        SECONDS,
        Shutdown,
        ONCE,
        |p, v| {
            p.c.umount_timeout = Some(v.number());
            Ok(())
        },
        "How long each unmount of the way down has before it is given up, the file system then remounted \
         read-only where it can be and detached (0: no bound; dracut's name). Default: the image's \
         `umount_timeout` setting, else 90.",
        "rd.shutdown.timeout.umount=20"
    ),
    param!(
        &["rd.break"],
        Form::Choice(&["shutdown"]),
        Shutdown,
        ONCE,
        |p, _| {
            p.c.break_shutdown = true;
            Ok(())
        },
        "`shutdown`: on the way down, a shell before the teardown, the old root still mounted at /oldroot: \
         the image's busybox (left in the exitrd when the image has `rescue` and the boot had this parameter), \
         else the root's own /bin/sh, chrooted in /oldroot. Exiting it goes on with the teardown.",
        "rd.break=shutdown"
    ),
    param!(
        &["leanrd.debug"],
        Form::Bool,
        Diagnosis,
        ONCE,
        |p, v| {
            p.c.debug = v.on();
            Ok(())
        },
        "Every step /init takes goes to the kernel log too, as it happens (it is always kept in \
         /run/initramfs/leanrd.log).",
        "leanrd.debug"
    ),
    param!(
        &["leanrd.shell"],
        Form::Bool,
        Diagnosis,
        ONCE,
        |p, v| {
            p.c.shell = v.on();
            Ok(())
        },
        "Open the rescue shell (when the image has one) just before switching to the root.",
        "leanrd.shell"
    ),
];

/// The families whose other names /init does not know: a word among them is reported, where
/// any other unknown word with a '.' is a module parameter.
pub static FAMILIES: &[(&str, &str)] = &[
    ("rd.luks.", ""),
    ("rd.vconsole.", ""),
    ("vconsole.", ""),
    ("rd.live.", ""),
    ("rd.iscsi.", " (the iBFT is not read: name the target with netroot=iscsi:)"),
    ("rd.nvmf.", " (the NBFT is not read: name the discovery controller with rd.nvmf.discover=)"),
];

/// The parameter named `name`.
pub fn find(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.names.contains(&name))
}

/// What the reference says of module parameters, which are no entry of the table.
#[cfg(not(feature = "standalone"))]
pub const MODULE_PARAMETERS: &str = "Any other word `MODULE.PARAM[=VALUE]` is a parameter for that module, given when \
     it is loaded (after the image's modprobe.d options, which it overrides), as modprobe takes them from the \
     kernel command line.";

/// Examples the man page shows, with what each does.
#[cfg(not(feature = "standalone"))]
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "root=UUID=1b2c3d4e-0000-4000-8000-000000000001 rootflags=subvol=@ rw",
        "A btrfs root in subvolume @, read-write.",
    ),
    (
        "rd.luks.name=0d1e=cryptroot root=/dev/mapper/cryptroot rd.vconsole.keymap=de",
        "Unlock a LUKS root, prompting with a German keymap.",
    ),
    ("root=/dev/nfs nfsroot=10.0.0.1:/srv/root,vers=4.2 ip=dhcp", "An NFS root, the network set up by DHCP."),
    ("root=live:CDLABEL=LIVE rd.live.ram rd.live.check", "A live CD, checked, then copied into memory."),
    (
        "leanrd.timeout=120 leanrd.debug panic=30",
        "Wait two minutes for the root, log every step, reboot 30 s after a failure.",
    ),
];

/// The reference in Markdown: docs/kernel-parameters.md.
#[cfg(not(feature = "standalone"))]
pub fn markdown() -> String {
    let mut s = String::from(
        "# Kernel command-line parameters\n\n\
         <!-- Generated from crates/init/src/params.rs by its unit tests (LEANRD_BLESS=1 rewrites it): edit \
         that, not this. -->\n\n\
         What leanrd's /init reads from the kernel command line; also `man 7 leanrd-init`. A value that \
         cannot be used is reported (in /run/initramfs/leanrd.log, and on the screen if the boot fails) and \
         the setting keeps its default.\n",
    );
    for g in Group::ALL {
        s += &format!("\n## {}\n\n", g.title());
        for p in PARAMS.iter().filter(|p| p.group == g) {
            let names: Vec<String> = p.names.iter().map(|n| format!("`{n}{}`", p.form.syntax())).collect();
            let repeats = if p.repeats { " Repeatable." } else { "" };
            s += &format!("- {}: {}{repeats}\n", names.join(", "), p.doc);
        }
        if g == Group::Modules {
            s += &format!("- `MODULE.PARAM[=VALUE]`: {MODULE_PARAMETERS}\n");
        }
    }
    s += "\n## Examples\n\n";
    for (line, what) in EXAMPLES {
        s += &format!("- `{line}`: {what}\n");
    }
    s
}

/// Text for roff: `\\` and `-` escaped, backquotes dropped, and no line starting with a request
/// character (leanrd's other generated man pages use it too).
#[cfg(not(feature = "standalone"))]
pub fn roff(t: &str) -> String {
    let t = t.replace('\\', "\\e").replace('-', "\\-").replace('`', "");
    if t.starts_with(['.', '\'']) { format!("\\&{t}") } else { t }
}

/// The reference as a man page: leanrd-init(7).
#[cfg(not(feature = "standalone"))]
pub fn man_page(version: &str) -> String {
    // roff: a line starting with '.' or '\'' is a request, and '\' escapes: the texts have
    // neither at a line's start, and '\' and '-' are escaped.
    let mut s = format!(
        ".TH LEANRD\\-INIT 7 \"\" \"leanrd {version}\" \"leanrd\"\n.SH NAME\nleanrd\\-init \\- the kernel command line \
         leanrd's /init reads\n.ad l\n.SH DESCRIPTION\n{}\n",
        roff(
            "leanrd's /init finds and mounts the root, unlocks and assembles what it stands on, and switches to it. \
             The image records what the machine needs; these parameters change it at boot. A value that cannot be \
             used is reported (in /run/initramfs/leanrd.log, and on the screen if the boot fails) and the setting \
             keeps its default."
        )
    );
    for g in Group::ALL {
        s += &format!(".SS {}\n", roff(g.title()));
        for p in PARAMS.iter().filter(|p| p.group == g) {
            // A long form may break after a '|', ':' or ',' (roff's \: marks where).
            let syntax = roff(&p.form.syntax()).replace(':', ":\\:").replace('|', "|\\:").replace(',', ",\\:");
            let names: Vec<String> = p.names.iter().map(|n| format!("\\fB{}\\fR{syntax}", roff(n))).collect();
            let repeats = if p.repeats { " Repeatable." } else { "" };
            s += &format!(".TP\n{}\n{}{repeats}\n", names.join(", "), roff(p.doc));
        }
        if g == Group::Modules {
            s += &format!(".TP\n\\fIMODULE\\fB.\\fIPARAM\\fR[=\\fIVALUE\\fR]\n{}\n", roff(MODULE_PARAMETERS));
        }
    }
    s += ".SH EXAMPLES\n";
    for (line, what) in EXAMPLES {
        s += &format!(".TP\n{}\n.EX\n{}\n.EE\n", roff(what), roff(line));
    }
    s += ".SH FILES\n.TP\n/run/initramfs/leanrd.log\nEvery step /init took, kept for the booted system (mode 600).\n\
          .SH SEE ALSO\n\\fBleanrd\\fR(1), \\fBbootparam\\fR(7), \\fBkernel\\-command\\-line\\fR(7), \\fBdracut.cmdline\\fR(7)\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmdline::Cmdline;

    /// Parameters whose whole effect is to be accepted (or to set what is the default).
    const NO_EFFECT: &[&str] = &["ro", "rd.nvmf.nonbft", "rd.live.image"];

    #[test]
    fn every_parameter_documented_is_parsed() {
        let mut seen = vec![];
        for p in PARAMS {
            for n in p.names {
                assert!(!seen.contains(n), "{n} is defined twice");
                seen.push(n);
                assert!(find(n).is_some());
            }
            assert!(p.doc.ends_with('.') || p.doc.ends_with(".)"), "{}: {:?}", p.names[0], p.doc);
            let c = Cmdline::parse(p.example);
            assert!(c.problems.is_empty(), "{}: {:?}", p.example, c.problems);
            assert!(c.module_options.is_empty(), "{}: read as a module parameter", p.example);
            assert!(p.example.split(' ').any(|w| p.names.contains(&w.split('=').next().unwrap())), "{}", p.example);
            if !NO_EFFECT.contains(&p.names[0]) {
                assert_ne!(c, Cmdline::parse(""), "{}: changed nothing", p.example);
            }
            // Every name of it parses as the first does.
            for n in &p.names[1..] {
                let other = p.example.replace(&format!("{}=", p.names[0]), &format!("{n}="));
                let other = if other == p.example { p.example.replace(p.names[0], n) } else { other };
                assert_eq!(Cmdline::parse(&other), c, "{other}");
            }
        }
        for (line, _) in EXAMPLES {
            let c = Cmdline::parse(line);
            assert!(c.problems.is_empty() && c.module_options.is_empty(), "{line}: {:?}", c.problems);
        }
    }

    /// Each form refuses what is not of it, the same for every parameter of that form.
    #[test]
    fn every_form_refuses_what_is_not_of_it() {
        for p in PARAMS {
            let bad: &[&str] = match p.form {
                Form::Flag => &["=1"],
                Form::Bool => &["=maybe", "=2"],
                Form::Number(_) | Form::Signed(_) => &["=x", "=", "=1.5"],
                Form::Choice(_) => &["=bogus", ""],
                Form::Modules => &["=", "=,"],
                Form::Device => &["=UUID=", ""],
                Form::Text(_) => &[""],
            };
            for b in bad {
                let w = format!("{}{b}", p.names[0]);
                let c = Cmdline::parse(&w);
                assert_eq!(c.problems.len(), 1, "{w}: {:?}", c.problems);
                assert!(c.problems[0].starts_with(&format!("{w} ignored: ")), "{w}: {:?}", c.problems);
                assert_eq!(c, Cmdline { problems: c.problems.clone(), ..Cmdline::parse("") }, "{w}: set something");
            }
        }
    }

    #[test]
    fn the_committed_reference_is_current() {
        let ws = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let md = std::format!("{ws}/docs/kernel-parameters.md");
        if std::env::var_os("LEANRD_BLESS").is_some() {
            std::fs::write(&md, markdown()).unwrap();
        }
        let have = std::fs::read_to_string(&md).unwrap_or_default();
        assert!(have == markdown(), "{md} is not what params.rs says: run `LEANRD_BLESS=1 cargo test -p leanrd-init`");
    }
}
