//! [`InitConfig`] and its text form: one `key value...` line per field, values as
//! `%`-escaped words (see `escape`), a version line first.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use alloc::{format, vec};

use crate::crypttab::{CryptEntry, CryptKey, CryptOptions};
use crate::device::DeviceRef;
use crate::escape::{unword, word};
use crate::iscsi::IscsiTarget;
use crate::nvmf::NvmfTarget;
use crate::root::Root;

/// The first line; a config written by an incompatible generator is refused, not guessed at.
const MAGIC: &str = "leanrd-init-config 1";

/// Something /init can do when the image has what it needs. A feature turns one on with
/// `init = "NAME"` in its TOML; /init looks at these, never at feature names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Capability {
    /// Unlock LUKS containers (cryptsetup).
    Luks,
    /// Activate LVM volume groups (lvm).
    Lvm,
    /// Assemble md RAID arrays (mdadm).
    Md,
    /// Start a shell on failure or with `leanrd.shell`.
    Rescue,
    /// Unlock LUKS2 containers with their enrolled tokens (TPM2, FIDO2, PKCS#11) first:
    /// cryptsetup's token plugins are in the image.
    Token,
    /// Log in to iSCSI targets (iscsistart) over the network /init brings up.
    Iscsi,
    /// Connect to NVMe over TCP subsystems (the kernel's nvme-tcp, through /dev/nvme-fabrics).
    Nvmf,
    /// Connect to NBD servers (the kernel's nbd, given the socket over its netlink family).
    Nbd,
    /// Mount a root exported over NFS (the kernel's NFS client, over the network /init brings up).
    Nfs,
    /// Mount a live root: an image on a medium through a loop device, under an overlay.
    Live,
    /// Unlock LUKS2 containers by their clevis tokens (Tang servers), /init bringing the network
    /// up for them.
    Clevis,
    /// Ask for passphrases over SSH too (dropbear, public keys only, the session the prompt and
    /// nothing else), /init bringing the network up for it.
    Ssh,
    /// Show plymouth's splash when the command line asks (`splash`): plymouthd started once the
    /// display's driver (the layer's modules) is there, passphrases asked through it.
    Plymouth,
    /// Register bcache backing and cache devices with the kernel (sysfs `register`), no program.
    Bcache,
    /// Open standalone dm-integrity devices (integritysetup, with /etc/integritytab's options).
    Integrity,
    /// Assemble dm-multipath maps (and their partitions, kpartx's way) from the paths that share
    /// a WWID, with the DM ioctls, as the host's multipath-tools configuration says.
    Multipath,
    /// Import a ZFS pool (zpool), load an encrypted dataset's key at the passphrase prompt (zfs)
    /// and mount the root dataset.
    Zfs,
}

impl Capability {
    /// Every capability, for looking names up and listing the known ones.
    pub const ALL: [Capability; 17] = [
        Capability::Luks,
        Capability::Lvm,
        Capability::Md,
        Capability::Rescue,
        Capability::Token,
        Capability::Iscsi,
        Capability::Nvmf,
        Capability::Nbd,
        Capability::Nfs,
        Capability::Live,
        Capability::Clevis,
        Capability::Ssh,
        Capability::Plymouth,
        Capability::Bcache,
        Capability::Integrity,
        Capability::Multipath,
        Capability::Zfs,
    ];

    /// The capability's name: what a feature's `init =` and the configuration's `layer` line spell.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Luks => "luks",
            Capability::Lvm => "lvm",
            Capability::Md => "md",
            Capability::Rescue => "rescue",
            Capability::Token => "token",
            Capability::Iscsi => "iscsi",
            Capability::Nvmf => "nvmf",
            Capability::Nbd => "nbd",
            Capability::Nfs => "nfs",
            Capability::Live => "live",
            Capability::Clevis => "clevis",
            Capability::Ssh => "ssh",
            Capability::Plymouth => "plymouth",
            Capability::Bcache => "bcache",
            Capability::Integrity => "integrity",
            Capability::Multipath => "multipath",
            Capability::Zfs => "zfs",
        }
    }

    /// The capability [`Capability::name`] spells `s`; None for an unknown name.
    pub fn from_name(s: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// A capability the image has, with the modules /init loads before using it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// What /init can do with this layer.
    pub capability: Capability,
    /// Module names and aliases /init loads before using the capability (may be empty).
    pub modules: Vec<String>,
}

/// What to mount: the root, and a separate /usr (systemd's `mount.usr=`, `mount.usrfstype=`,
/// `mount.usrflags=`). The kernel command line gives these, and the configuration gives the
/// ones the image was built for (used when the command line says nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// The root, of any kind (a block device, an NFS export).
    pub root: Option<Root>,
    /// The root's file system type, or a comma list of types to try (`rootfstype=`); None: the
    /// type /init's probe finds.
    pub rootfstype: Option<String>,
    /// The root's mount options (`rootflags=`), as given; None: the defaults.
    pub rootflags: Option<String>,
    /// A separate /usr's device (`mount.usr=`); None: /usr is on the root.
    pub usr: Option<DeviceRef>,
    /// /usr's file system type (`mount.usrfstype=`); None: the type /init's probe finds.
    pub usrfstype: Option<String>,
    /// /usr's mount options (`mount.usrflags=`), as given; None: the defaults.
    pub usrflags: Option<String>,
}

/// Everything the generator tells /init.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitConfig {
    /// The kernel the image's modules are for (/init falls back to the running one).
    pub kver: Option<String>,
    /// The root (and /usr) the image was built for.
    pub mounts: Mounts,
    /// Module names, aliases and modaliases to load before looking for the root.
    pub load: Vec<String>,
    /// Parameters for modules, as modprobe.d's `options MODULE PARAMS` gives them.
    pub options: Vec<(String, String)>,
    /// Modules never to load (modprobe.d's `blacklist`).
    pub blacklist: Vec<String>,
    /// What /init can assemble or start, in this order.
    pub layers: Vec<Layer>,
    /// The swap to resume a hibernated system from (host-only: the one the system hibernates
    /// to), when the command line names none.
    pub resume: Option<DeviceRef>,
    /// Where in that device the hibernation image starts, in pages (a swap file's).
    pub resume_offset: Option<u64>,
    /// How long each Tang server has (s), the network's start included (the `clevis.tang_timeout`
    /// setting); None: /init's default. `rd.leanrd.tang_timeout=` wins over it.
    pub tang_timeout: Option<u64>,
    /// The port the SSH server listens on for passphrases (with the `ssh` capability).
    pub ssh_port: Option<u16>,
    /// File system checkers in the image, by file system type (`ext4` → `e2fsck`): run on a
    /// root or /usr the initramfs mounts read-write.
    pub fsck: Vec<(String, String)>,
    /// Encrypted devices from the system's crypttab, with whether the boot needs each
    /// (host-only: the root's, /usr's and the resume device's; unlocked without being asked).
    /// The others give names, keys and options to containers the command line or the root's
    /// name asks for.
    pub crypt: Vec<Crypt>,
    /// The keymap (a name under [`KEYMAP_DIR`]) applied before a passphrase is asked for;
    /// `rd.vconsole.keymap=` picks another one the image holds.
    pub keymap: Option<String>,
    /// The console font (a name under [`crate::FONT_DIR`]) loaded on every virtual console
    /// before the first prompt.
    pub font: Option<String>,
    /// The iSCSI targets the root's devices come from (host-only: the sessions under the
    /// root), logged in to when the command line names none. Never with credentials.
    pub iscsi: Vec<IscsiTarget>,
    /// This machine's iSCSI initiator name (host-only: /etc/iscsi/initiatorname.iscsi).
    pub iscsi_initiator: Option<String>,
    /// The NVMe over TCP subsystems (or discovery controllers) the root's devices come from,
    /// connected to when the command line names none.
    pub nvmf: Vec<NvmfTarget>,
    /// This host's NVMe NQN (host-only: the one its controllers connected with).
    pub nvmf_hostnqn: Option<String>,
    /// This host's NVMe host ID (host-only: the one its controllers connected with).
    pub nvmf_hostid: Option<String>,
    /// Whether /init leaves the exitrd in /run/initramfs at the switch (the `exitrd`
    /// setting); None: when the root sits on more than a plain partition.
    pub exitrd: Option<bool>,
    /// Seconds each unmount of the way down has (the `umount_timeout` setting, 0: no bound);
    /// None: /init's default. `rd.shutdown.timeout.umount=` wins over it.
    pub umount_timeout: Option<u64>,
}

/// Where the image keeps its compiled keymaps (`NAME.bmap`, the binary form `loadkeys -b`
/// writes).
pub const KEYMAP_DIR: &str = "/etc/leanrd/keymaps";

/// A crypttab entry in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crypt {
    /// The crypttab line: name, device, key and options.
    pub entry: CryptEntry,
    /// Unlock it at boot whether or not anything names it.
    pub needed: bool,
}

/// Why a configuration could not be read; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct DecodeError {
    /// The line of the text form, counting from 1.
    pub line: usize,
    /// What is wrong with that line.
    pub why: String,
}

impl InitConfig {
    /// The layer for a capability, if the image has it.
    pub fn layer(&self, c: Capability) -> Option<&Layer> {
        self.layers.iter().find(|l| l.capability == c)
    }

    /// The text form: each of [`FIELDS`], in order.
    pub fn encode(&self) -> String {
        let mut s = format!("{MAGIC}\n");
        for f in FIELDS {
            for values in (f.put)(self) {
                s += f.key;
                for v in &values {
                    s.push(' ');
                    s += &word(v);
                }
                s.push('\n');
            }
        }
        s
    }

    /// Read the text [`InitConfig::encode`] wrote.
    pub fn decode(text: &str) -> Result<InitConfig, DecodeError> {
        let mut c = InitConfig::default();
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, l)) if l == MAGIC => {}
            Some((_, l)) => return Err(DecodeError { line: 1, why: format!("\"{l}\" is not \"{MAGIC}\"") }),
            None => return Err(DecodeError { line: 1, why: "empty".into() }),
        }
        for (i, l) in lines {
            let err = |why: String| DecodeError { line: i + 1, why };
            if l.is_empty() {
                continue;
            }
            let mut words = l.split(' ');
            let key = words.next().unwrap_or("");
            let f = FIELDS.iter().find(|f| f.key == key).ok_or_else(|| err(format!("unknown key \"{key}\"")))?;
            let values: Vec<String> = words
                .map(|w| unword(w).ok_or_else(|| err(format!("bad escape in \"{w}\""))))
                .collect::<Result<_, _>>()?;
            (f.get)(&mut c, values).map_err(err)?;
        }
        Ok(c)
    }
}

/// One key of the text form: how its lines are written and read. [`InitConfig::encode`]
/// and [`InitConfig::decode`] both go through [`FIELDS`], so no key can be written without
/// being read, or read in a form it is not written in.
pub struct Field {
    /// The word that starts each of its lines (`kver`, `root`, `crypt`...).
    pub key: &'static str,
    /// What it tells /init.
    pub doc: &'static str,
    /// Its lines (each a list of values) for a configuration; none when unset.
    put: fn(&InitConfig) -> Vec<Vec<String>>,
    /// Read one line's values into the configuration.
    get: fn(&mut InitConfig, Vec<String>) -> Result<(), String>,
}

/// A key holding one optional text: `text!("key", "doc", field.path)`.
macro_rules! text {
    ($key:literal, $doc:literal, $($field:ident).+) => {
        Field {
            key: $key,
            doc: $doc,
            put: |c| opt(&c.$($field).+),
            get: |c, v| set(&mut c.$($field).+, one($key, v)?),
        }
    };
}

/// A field holding one number (of the field's type), written in decimal.
macro_rules! number {
    ($key:literal, $doc:literal, $field:ident) => {
        Field {
            key: $key,
            doc: $doc,
            put: |c| c.$field.iter().map(|o| vec![format!("{o}")]).collect(),
            get: |c, v| {
                let v = one($key, v)?;
                let o = v.parse().map_err(|_| format!("{} \"{v}\" is not a number", $key))?;
                set(&mut c.$field, o)
            },
        }
    };
}

/// Every key, in the order encode writes them.
pub const FIELDS: &[Field] = &[
    text!("kver", "The kernel release the image's modules are for.", kver),
    Field {
        key: "root",
        doc: "The root the image was built for (any root kind), used when the command line names none.",
        put: |c| c.mounts.root.iter().map(|r| vec![r.to_string()]).collect(),
        get: |c, v| set(&mut c.mounts.root, Root::parse(&one("root", v)?, None).map_err(|e| e.to_string())?),
    },
    Field {
        key: "usr",
        doc: "A separate /usr's device.",
        put: |c| c.mounts.usr.iter().map(|d| vec![d.to_string()]).collect(),
        get: |c, v| set(&mut c.mounts.usr, device(one("usr", v)?)?),
    },
    Field {
        key: "resume",
        doc: "The swap to resume a hibernated system from.",
        put: |c| c.resume.iter().map(|d| vec![d.to_string()]).collect(),
        get: |c, v| set(&mut c.resume, device(one("resume", v)?)?),
    },
    text!("rootfstype", "The root's file system type.", mounts.rootfstype),
    text!("rootflags", "The root's mount options.", mounts.rootflags),
    text!("usrfstype", "/usr's file system type.", mounts.usrfstype),
    text!("usrflags", "/usr's mount options.", mounts.usrflags),
    Field {
        key: "load",
        doc: "Modules, aliases and modaliases loaded before the root is looked for (always written, maybe empty).",
        put: |c| vec![c.load.clone()],
        get: |c, v| {
            c.load.extend(v);
            Ok(())
        },
    },
    Field {
        key: "options",
        doc: "A module and its parameters (modprobe.d's options).",
        put: |c| c.options.iter().map(|(m, o)| vec![m.clone(), o.clone()]).collect(),
        get: |c, v| {
            let [m, o] = n_values::<2>("options takes a module and its options", v)?;
            c.options.push((m, o));
            Ok(())
        },
    },
    Field {
        key: "blacklist",
        doc: "Modules never loaded (modprobe.d's blacklist).",
        put: |c| if c.blacklist.is_empty() { Vec::new() } else { vec![c.blacklist.clone()] },
        get: |c, v| {
            c.blacklist.extend(v);
            Ok(())
        },
    },
    number!(
        "resume_offset",
        "Where the hibernation image starts in the resume device, in pages (a swap file's).",
        resume_offset
    ),
    number!("tang_timeout", "How long each Tang server has to answer, in seconds.", tang_timeout),
    number!("ssh_port", "The port the SSH server listens on for passphrases.", ssh_port),
    Field {
        key: "exitrd",
        doc: "Whether the exitrd is left in /run/initramfs at the switch (on or off); unset: when the root sits on more than a plain partition.",
        put: |c| c.exitrd.iter().map(|&on| vec![if on { "on" } else { "off" }.to_string()]).collect(),
        get: |c, v| {
            let on = match one("exitrd", v)?.as_str() {
                "on" => true,
                "off" => false,
                x => return Err(format!("exitrd \"{x}\" is not on or off")),
            };
            set(&mut c.exitrd, on)
        },
    },
    number!("umount_timeout", "How long each unmount of the way down has, in seconds (0: no bound).", umount_timeout),
    Field {
        key: "fsck",
        doc: "A file system type and the checker in the image for it.",
        put: |c| c.fsck.iter().map(|(t, p)| vec![t.clone(), p.clone()]).collect(),
        get: |c, v| {
            let [t, p] = n_values::<2>("fsck takes a file system type and a program", v)?;
            c.fsck.push((t, p));
            Ok(())
        },
    },
    Field {
        key: "crypt",
        doc: "A crypttab entry (name, device, key, options) and whether the boot needs it (needed) or only names it.",
        put: |c| {
            let line = |c: &Crypt| {
                let e = &c.entry;
                let need = if c.needed { "needed" } else { "named" };
                vec![e.name.clone(), e.device.to_string(), e.key.to_string(), e.options.to_string(), need.into()]
            };
            c.crypt.iter().map(line).collect()
        },
        get: |c, v| {
            let [name, dev, key, opts, need] = n_values::<5>("crypt takes 5 values", v)?;
            let device = DeviceRef::parse(&dev).map_err(|e| e.to_string())?;
            let key = CryptKey::parse(&key)?;
            let (options, bad) = CryptOptions::parse(&opts);
            // Only what encode wrote; other types are refused by /init with a note.
            if let Some(b) = bad.iter().find(|b| !b.contains("opens LUKS containers only")) {
                return Err(b.clone());
            }
            let needed = match need.as_str() {
                "needed" => true,
                "named" => false,
                x => return Err(format!("crypt: \"{x}\" is not needed or named")),
            };
            c.crypt.push(Crypt { entry: CryptEntry { name, device, key, options }, needed });
            Ok(())
        },
    },
    text!("keymap", "The keymap applied before a passphrase is asked for.", keymap),
    text!("font", "The console font loaded on every virtual console before the first prompt.", font),
    Field {
        key: "iscsi",
        doc: "An iSCSI target the root's devices come from, and its portal group (never with credentials).",
        put: |c| {
            let line = |t: &IscsiTarget| {
                let t = IscsiTarget { chap: None, ..t.clone() };
                vec![t.to_string(), t.group.map(|g| format!("{g}")).unwrap_or_default()]
            };
            c.iscsi.iter().map(line).collect()
        },
        get: |c, v| {
            let [spec, group] = n_values::<2>("iscsi takes a target and its group", v)?;
            let mut t = IscsiTarget::parse(&spec).map_err(|e| e.to_string())?;
            if !group.is_empty() {
                t.group = Some(group.parse().map_err(|_| format!("iscsi group \"{group}\" is not a number"))?);
            }
            t.chap = None;
            c.iscsi.push(t);
            Ok(())
        },
    },
    text!("iscsi_initiator", "This machine's iSCSI initiator name.", iscsi_initiator),
    Field {
        key: "nvmf",
        doc: "An NVMe over TCP subsystem or discovery controller the root's devices come from.",
        put: |c| c.nvmf.iter().map(|t| vec![t.to_string()]).collect(),
        get: |c, v| {
            c.nvmf.push(NvmfTarget::parse(&one("nvmf", v)?).map_err(|e| e.to_string())?);
            Ok(())
        },
    },
    text!("nvmf_hostnqn", "This host's NVMe NQN.", nvmf_hostnqn),
    text!("nvmf_hostid", "This host's NVMe host ID.", nvmf_hostid),
    Field {
        key: "layer",
        doc: "A capability the image has (luks, lvm, md, rescue, token, iscsi, nvmf, nfs, live) and the modules it loads first.",
        put: |c| {
            let line = |l: &Layer| {
                let mut v = vec![l.capability.name().to_string()];
                v.extend(l.modules.iter().cloned());
                v
            };
            c.layers.iter().map(line).collect()
        },
        get: |c, v| {
            let mut v = v.into_iter();
            let name = v.next().unwrap_or_default();
            let capability = Capability::from_name(&name).ok_or_else(|| format!("unknown capability \"{name}\""))?;
            c.layers.push(Layer { capability, modules: v.collect() });
            Ok(())
        },
    },
];

/// An optional text's line.
fn opt(v: &Option<String>) -> Vec<Vec<String>> {
    v.iter().map(|v| vec![v.clone()]).collect()
}

/// A key's single value.
fn one(key: &str, values: Vec<String>) -> Result<String, String> {
    match <[String; 1]>::try_from(values) {
        Ok([v]) => Ok(v),
        Err(v) => Err(format!("{key} takes one value, not {}", v.len())),
    }
}

/// Exactly N values, or `what` and how many there were.
fn n_values<const N: usize>(what: &str, values: Vec<String>) -> Result<[String; N], String> {
    <[String; N]>::try_from(values).map_err(|v| format!("{what}, not {} values", v.len()))
}

fn set<T>(slot: &mut Option<T>, v: T) -> Result<(), String> {
    *slot = Some(v);
    Ok(())
}

fn device(text: String) -> Result<DeviceRef, String> {
    DeviceRef::parse(&text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_written_by_the_sample_and_read_back_by_the_same_entry() {
        let text = sample().encode();
        let mut keys: Vec<&str> = FIELDS.iter().map(|f| f.key).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), FIELDS.len(), "a key defined twice");
        for f in FIELDS {
            assert!(text.lines().any(|l| l.split(' ').next() == Some(f.key)), "the sample lacks {}: {text}", f.key);
            assert!(!f.doc.is_empty(), "{} has no doc", f.key);
        }
        // In FIELDS' order.
        let order: Vec<&str> = text.lines().skip(1).filter_map(|l| l.split(' ').next()).collect();
        let pos = |k: &str| FIELDS.iter().position(|f| f.key == k).unwrap();
        assert!(order.windows(2).all(|w| pos(w[0]) <= pos(w[1])), "{order:?}");
    }

    fn sample() -> InitConfig {
        InitConfig {
            kver: Some("6.1.0-28-amd64".into()),
            mounts: Mounts {
                root: Some(Root::Block(DeviceRef::Label("my root %1".into()))),
                rootfstype: Some("ext4".into()),
                rootflags: Some("subvol=@,compress=zstd".into()),
                usr: Some(DeviceRef::PartUuid { uuid: "aa-2".into(), offset: 0 }),
                usrfstype: Some("xfs".into()),
                usrflags: Some("ro,noatime".into()),
            },
            load: vec!["virtio_pci".into(), "pci:v00001AF4d*sv*sd*bc*sc*i*".into(), "fs-ext4".into()],
            options: vec![("i915".into(), "enable_guc=2 modeset=1".into())],
            blacklist: vec!["pcspkr".into(), "nouveau".into()],
            fsck: vec![("ext4".into(), "e2fsck".into()), ("vfat".into(), "fsck.fat".into())],
            resume: Some(DeviceRef::DevNo { major: 254, minor: 2 }),
            resume_offset: Some(34816),
            tang_timeout: Some(25),
            ssh_port: Some(2222),
            crypt: vec![
                Crypt {
                    entry: CryptEntry {
                        name: "sda3_crypt".into(),
                        device: DeviceRef::Uuid("0a1b".into()),
                        key: CryptKey::Passphrase,
                        options: CryptOptions { discard: true, tries: 0, ..Default::default() },
                    },
                    needed: true,
                },
                Crypt {
                    entry: CryptEntry {
                        name: "my data".into(),
                        device: DeviceRef::PartLabel("d a".into()),
                        key: CryptKey::OnDevice { path: "/k ey".into(), device: DeviceRef::Label("USB".into()) },
                        options: CryptOptions { keyfile_timeout: Some(5), ..Default::default() },
                    },
                    needed: false,
                },
            ],
            keymap: Some("de".into()),
            font: Some("Uni2-Terminus32x16".into()),
            layers: vec![
                Layer { capability: Capability::Luks, modules: vec!["dm_crypt".into(), "crypto-xts(aes)".into()] },
                Layer { capability: Capability::Rescue, modules: vec![] },
                Layer { capability: Capability::Iscsi, modules: vec!["iscsi_tcp".into()] },
                Layer { capability: Capability::Nvmf, modules: vec!["nvme_tcp".into()] },
            ],
            iscsi: vec![
                IscsiTarget::parse("iscsi:10.0.0.1::3261::eth0:1:iqn.2026-11.test:root").unwrap(),
                IscsiTarget { group: Some(2), ..IscsiTarget::parse("iscsi:[fd00::1]::::eui.0123").unwrap() },
            ],
            iscsi_initiator: Some("iqn.2026-11.test:client".into()),
            nvmf: vec![
                NvmfTarget::parse("tcp,10.0.0.2,,4420").unwrap(),
                NvmfTarget::parse("tcp,[fd00::2],,,nqn.2026-11.test:root").unwrap(),
            ],
            nvmf_hostnqn: Some("nqn.2014-08.org.nvmexpress:uuid:0123".into()),
            nvmf_hostid: Some("0123".into()),
            exitrd: Some(false),
            umount_timeout: Some(15),
        }
    }

    #[test]
    fn credentials_are_never_written() {
        let mut c = InitConfig::default();
        c.iscsi.push(IscsiTarget::parse("iscsi:user:secret@h::::iqn.x").unwrap());
        let text = c.encode();
        assert!(!text.contains("secret"), "{text}");
        assert_eq!(InitConfig::decode(&text).unwrap().iscsi[0].chap, None);
    }

    #[test]
    fn round_trips() {
        for c in [InitConfig::default(), sample()] {
            let text = c.encode();
            assert_eq!(InitConfig::decode(&text).unwrap(), c, "{text}");
        }
        let c = sample();
        assert!(c.layer(Capability::Luks).is_some() && c.layer(Capability::Md).is_none());
    }

    /// Random configurations (xorshift, fixed seed) with every awkward character survive.
    #[test]
    fn random_configs_round_trip() {
        struct Rng(u64);
        impl Rng {
            fn next(&mut self) -> u64 {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                self.0
            }
            fn text(&mut self) -> String {
                let alphabet: Vec<char> = "aZ09 -_%=/:\t\n\r\u{0}\u{7f}é€🦀\\\"#".chars().collect();
                (0..self.next() % 12).map(|_| alphabet[self.next() as usize % alphabet.len()]).collect()
            }
        }
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..500 {
            let n = r.next();
            let mut c = InitConfig::default();
            if n & 1 != 0 {
                c.kver = Some(r.text());
            }
            if n & 2 != 0 {
                c.mounts.rootflags = Some(r.text());
            }
            c.load = (0..n % 5).map(|_| r.text()).collect();
            c.options = (0..(n >> 3) % 3).map(|_| (r.text(), r.text())).collect();
            c.fsck = (0..(n >> 5) % 3).map(|_| (r.text(), r.text())).collect();
            if n & 4 != 0 {
                c.mounts.root = Some(Root::Block(DeviceRef::Uuid(format!("u{}", r.text()))));
            }
            if n & 32 != 0 {
                c.mounts.root = Some(Root::Nfs(crate::root::NfsRoot {
                    server: Some(format!("s{}", n % 1000)),
                    path: Some(format!("/{}", r.text().replace([':', '\0'], ""))),
                    options: Some(format!("o{}", r.text().replace('\0', ""))),
                    version: crate::root::NfsVersion::V4,
                }));
            }
            if n & 8 != 0 {
                c.mounts.usr = Some(DeviceRef::Label(format!("l{}", r.text())));
                c.mounts.usrflags = Some(r.text());
            }
            if n & 16 != 0 {
                c.resume = Some(DeviceRef::PartLabel(format!("p{}", r.text())));
                c.resume_offset = Some(n);
            }
            c.layers = (0..(n >> 5) % 3)
                .map(|i| Layer {
                    capability: Capability::ALL[i as usize % Capability::ALL.len()],
                    modules: vec![r.text()],
                })
                .collect();
            assert_eq!(InitConfig::decode(&c.encode()).unwrap(), c);
        }
    }

    #[test]
    fn errors_name_the_line() {
        let e = |t: &str| InitConfig::decode(t).unwrap_err().to_string();
        assert_eq!(e(""), "line 1: empty");
        assert!(e("# leanrd /init configuration\nkver 1\n").starts_with("line 1: "));
        assert_eq!(e("leanrd-init-config 1\nload a\nkver\n"), "line 3: kver takes one value, not 0");
        assert_eq!(e("leanrd-init-config 1\nbogus 1\n"), "line 2: unknown key \"bogus\"");
        assert_eq!(e("leanrd-init-config 1\nlayer cifs\n"), "line 2: unknown capability \"cifs\"");
        assert!(e("leanrd-init-config 1\nroot UUID=\n").starts_with("line 2: \"UUID=\" is not a device"));
        assert!(
            e("leanrd-init-config 1\nroot nfs:srv:rel\n").starts_with("line 2: \"nfs:srv:rel\" is not an NFS root")
        );
        assert!(e("leanrd-init-config 1\nload a%2\n").starts_with("line 2: bad escape"));
        assert_eq!(e("leanrd-init-config 1\nresume_offset x\n"), "line 2: resume_offset \"x\" is not a number");
    }
}
