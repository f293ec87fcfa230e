//! Boot scenarios as data. A scenario is a table of about ten lines in a TOML file: the root,
//! the disks and their stack, the image, the command line and what the boot must show. Each
//! one is its own test (libtest-mimic), runnable alone:
//!
//! ```text
//! cargo test -p leanrd --test boot -- debian13_btrfs_raid1
//! ```
//!
//! The file is read and every scenario checked before any VM starts: a field that does not
//! exist, a disk kind or root not known, a layout that cannot be made, are errors naming the
//! file, the line and the cause. What scenarios share (a root's tree, its images, its disks)
//! is made once per process; disks are cached by content across runs (the hash of all they
//! are made from) in $LEANRD_TEST_CACHE/disks.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::boot::*;
use crate::*;

/// The roots a scenario boots.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Root {
    /// Debian 12 (bookworm), booted with the host's Debian 12 kernel and its modules.
    Debian12,
    /// Debian 13 (trixie), booted with its own 6.12 kernel from its /boot (.ko.xz modules).
    Debian13,
    /// Debian 13 for arm64, made by mmdebstrap through qemu-user-static, booted with its own
    /// arm64 kernel on QEMU's `virt` board (qemu-system-aarch64, TCG): the image from this
    /// x86_64 leanrd with the aarch64 /init (tools/arm64), a self-built one by leanrd built for
    /// aarch64.
    Debian13Arm64,
    /// Debian 13 as a desktop boots: the same root with plymouth, its themes and console-setup
    /// (tools/debian-root trixie plymouth), its own kernel; the universal image is built with
    /// `--include plymouth`.
    Debian13Plymouth,
    /// Debian 13 as a storage server's root: the same with thin-provisioning-tools,
    /// bcache-tools, multipath-tools and kpartx (tools/debian-root trixie storage), its own
    /// kernel, and the multipath configuration of a server installed on a multipath LUN
    /// ([`multipath_files`]: the WWID of a `virtio-scsi-two-paths` disk bound to mpatha), which
    /// its universal image carries as the machine's.
    Debian13Storage,
    /// Debian 13 on ZFS: the same with zfsutils-linux, and zfs-dkms (tools/debian-root trixie
    /// zfs: zfs.ko built for its kernel as the root was made), its own kernel, and a report
    /// hook that prints the pool, the datasets mounted and the root's key status
    /// ([`zfs_files`]).
    Debian13Zfs,
}

impl Root {
    /// The suite as tools/debian-root takes it.
    fn suite(self) -> &'static str {
        match self {
            Root::Debian12 => "bookworm",
            Root::Debian13 => "trixie",
            Root::Debian13Arm64 => "trixie arm64",
            Root::Debian13Plymouth | Root::Debian13Storage | Root::Debian13Zfs => "trixie",
        }
    }
    /// The flavour as tools/debian-root takes it (none: the test root).
    fn flavour(self) -> &'static str {
        match self {
            Root::Debian13Plymouth => "plymouth",
            Root::Debian13Storage => "storage",
            Root::Debian13Zfs => "zfs",
            _ => "",
        }
    }
    /// Its name in the scratch directory's paths.
    fn tag(self) -> String {
        format!("{} {}", self.suite(), self.flavour()).trim().replace(' ', "-")
    }
    fn arm64(self) -> bool {
        self == Root::Debian13Arm64
    }
}

/// The image the scenario boots.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Image {
    /// `leanrd build --universal` from the root.
    #[default]
    Universal,
    /// The same with `--module-compression keep` (compressed modules stay compressed where
    /// the kernel decompresses them).
    UniversalKeep,
    /// `--universal --module-compression keep` from the root re-laid as Arch lays a kernel
    /// out: `.ko.zst` modules, the configuration and vmlinuz in the module directory.
    ArchZst,
    /// Self-hosted: the universal image boots the root with `leanrd.test=selfbuild`, the root
    /// runs `leanrd build` with no options, and what it wrote to /boot boots with nothing on
    /// the command line.
    SelfBuilt,
}

/// The layer between the disks and the file systems.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stack {
    /// File systems straight on the disks (a GPT partition or the whole disk).
    #[default]
    Plain,
    /// Logical volumes of vg0 on one virtio disk, named after what they hold
    /// (/dev/mapper/vg0-root, vg0-usr): made in a prep VM.
    Lvm,
    /// Debian's installer layout: GPT, an ESP, /boot, LUKS2 holding the ext4 root
    /// (sda3_crypt in crypttab) on one virtio-blk or NVMe disk; the passphrase is typed on the
    /// console (with `tang`, nothing is typed). Made in a prep VM.
    Luks,
    /// LUKS2 (md_crypt in crypttab) on LVM (vg0/root) on md RAID1 over two whole virtio
    /// disks (a volume of `members = 2`); the passphrase is typed. Made in a prep VM. The boot
    /// writes to copies of the disks; afterwards the console must show the way down closing
    /// LUKS, LVM and md in that order, and `mdadm --examine` must call each member clean.
    MdLvmLuks,
    /// A server's root (debian13-storage): the ext4 root on a thin LV (vg0/root in the thin
    /// pool vg0/pool) on bcache (/dev/bcache0: the backing device on the second disk, its cache
    /// on the third, writethrough), /boot on the first disk (ext4, the whole disk): a
    /// self-built root writes its own image there. Made in a prep VM.
    BcacheLvmThin,
    /// A root on ZFS (debian13-zfs): the pool rpool on the second disk (a virtio-blk disk's
    /// GPT partition), its encryption root rpool/ROOT (aes-256-gcm, the
    /// passphrase typed), the root rpool/ROOT/debian (canmount=noauto, mountpoint=/, the pool's
    /// bootfs) with rpool/ROOT/debian/var under it, and rpool/home outside it (the root's
    /// zfs-mount mounts it); /boot on the first disk (ext4, the whole disk). The pool exported.
    /// Made in a prep VM on the root's own kernel, its zfs.ko and zpool.
    Zfs,
    /// A server's root (debian13-storage) on three of LVM's and dm's other layers at once:
    /// the ext4 root in a LUKS2 container with authenticated encryption (`--integrity
    /// hmac-sha256`, 4 KiB sectors: dm-integrity under dm-crypt; root_crypt in crypttab, the
    /// passphrase typed) on vg0/root, a raid1 LV (`-m1` over the PVs of the second and third
    /// disks) cached (dm-cache, writethrough) by a cache pool on the fourth disk; /boot on the
    /// first disk (ext4, the whole disk): a self-built root writes its own image there. A
    /// report hook prints each layer as the booted root sees it ([`raid_cache_hook`]). Made in
    /// a prep VM on the host's kernel.
    LuksIntegrityRaidCache,
}

/// A file system kind, or a blank disk.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsKind {
    /// `ext4`.
    Ext4,
    /// `xfs`.
    Xfs,
    /// `btrfs`: the only kind that takes `subvol` and `members = 2`.
    Btrfs,
    /// A 16 MiB disk with nothing on it.
    Blank,
    /// ZFS: the `zfs` stack's pool.
    Zfs,
}

impl FsKind {
    fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
            FsKind::Btrfs => "btrfs",
            FsKind::Blank => "blank",
            FsKind::Zfs => "zfs",
        }
    }
}

/// What a volume holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Holds {
    /// The root: the whole tree, or all but /usr when another volume holds /usr.
    #[default]
    Root,
    /// /usr (merged-/usr: the root's /bin, /lib are links into it).
    Usr,
}

/// One volume: a file system on a disk (or two, for a btrfs raid1).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    /// The file system on it.
    pub fs: FsKind,
    /// How QEMU attaches its disks (default `virtio-blk`).
    #[serde(default)]
    pub bus: Bus,
    /// On a GPT partition from 1 MiB rather than the whole disk.
    #[serde(default)]
    pub gpt: bool,
    /// What it holds (default the root).
    #[serde(default)]
    pub holds: Holds,
    /// btrfs: the tree in subvolume @ (and `rootflags=subvol=@`).
    #[serde(default)]
    pub subvol: bool,
    /// btrfs: 2 for raid1 (data and metadata) across two disks.
    #[serde(default = "one")]
    pub members: usize,
}

fn one() -> usize {
    1
}

/// A boot scenario. In `cmdline`, `{root}` stands for what names the root volume (with
/// `rootflags=subvol=@` for a subvolume) and `{usr}` for `mount.usr=` naming the /usr volume;
/// without `{usr}`, the root's fstab names /usr.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The root booted.
    pub root: Root,
    /// The image booted (default `universal`).
    #[serde(default)]
    pub image: Image,
    /// The layer between the disks and the file systems (default `plain`).
    #[serde(default)]
    pub stack: Stack,
    /// The volumes, attached in this order: exactly one holds the root, at most one /usr.
    pub disks: Vec<Volume>,
    /// The kernel command line, `{root}` and `{usr}` in it standing for what [`Scenario`] says
    /// (default empty).
    #[serde(default)]
    pub cmdline: String,
    /// Console text every boot of the scenario must show (beside the state `running`).
    #[serde(default)]
    pub expect: Vec<String>,
    /// Console text no boot may show (beside "Exec format error" and a start job waiting).
    #[serde(default)]
    pub reject: Vec<String>,
    /// self-built: the storage drivers (with what modprobe adds) its own image holds, exactly.
    #[serde(default)]
    pub drivers: Vec<String>,
    /// self-built: paths its own image must hold (as `leanrd ls` lists them).
    #[serde(default)]
    pub own_image_has: Vec<String>,
    /// self-built: paths its own image must not hold.
    #[serde(default)]
    pub own_image_lacks: Vec<String>,
    /// `leanrd analyze` reads the boot's record and journal and draws it.
    #[serde(default)]
    pub analyze: bool,
    /// With the LUKS stack: once the machine is down (QEMU kept by `-no-shutdown`), the monitor's
    /// `dump-guest-memory` of its RAM must hold (`present`) or not hold (`absent`) each 32-byte
    /// half of the container's volume key (an XTS key's halves are what the AES key schedules
    /// keep), read from the header with the passphrase.
    #[serde(default)]
    pub ram_key: Option<RamKey>,
    /// With the LUKS stack: the container is bound to a Tang server as `clevis luks bind`
    /// binds it ([`crate::clevis::bind`]: key slot 5 for a random key, with PBKDF2, and a
    /// `clevis` token holding `clevis encrypt tang`'s JWE of that key), on a copy of the disk
    /// per run, with tangd's keys made once per process. Every boot runs in a network lab
    /// ([`crate::netlab`]: DHCP and tangd) with one virtio NIC of the same MAC, and must unlock
    /// the root by that token with nothing typed: the universal image is built with
    /// `--include clevis`, a passphrase prompt ends the boot as failed. A self-built root's
    /// first boot has `rd.neednet=1` in `cmdline` (its interface handed to the root, up, as a
    /// server's configured network would be: the test root configures none), so that its
    /// own host-only image finds the clevis token and the NIC's driver; that image's boot,
    /// with nothing on the command line, must also show the interface taken down again
    /// before the switch.
    #[serde(default)]
    pub tang: bool,
    /// (debian13-plymouth, `splash` and `leanrd.test=journal` in cmdline) The splash carries on
    /// into the root: the plymouthd /init started (its pid in /init's log) is the one the
    /// root's systemd hears from, no other plymouthd does (plymouth-start.service started no
    /// second daemon), and plymouth-quit-wait.service finishes.
    #[serde(default)]
    pub splash: bool,
}

/// What the RAM of a machine that went down holds of its LUKS volume key.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RamKey {
    /// Neither half: the way down removed the mapping, the kernel wiping its key.
    Absent,
    /// Both halves (no exitrd: the control, showing the check can fail).
    Present,
}

/// The MAC of a `tang` scenario's NIC: the same machine at every boot.
const TANG_MAC: &str = "52:54:00:12:34:81";

/// The scenarios of a file, by test name, each checked.
pub fn load(path: &Path) -> Result<BTreeMap<String, Scenario>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// [`load`] from text.
pub fn parse(text: &str) -> Result<BTreeMap<String, Scenario>, String> {
    let all: BTreeMap<String, Scenario> = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut errors = Vec::new();
    for (name, s) in &all {
        if let Err(e) = check(name, s) {
            let line = text.lines().position(|l| l.trim() == format!("[{name}]")).map_or(0, |n| n + 1);
            errors.push(format!("line {line}: scenario {name}: {e}"));
        }
    }
    if errors.is_empty() { Ok(all) } else { Err(errors.join("\n")) }
}

/// Whether a scenario can be made, before any VM starts.
pub fn check(name: &str, s: &Scenario) -> Result<(), String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err("a name is lower-case letters, digits and _ (it is the test's name)".into());
    }
    let held: Vec<&Volume> = s.disks.iter().filter(|v| v.fs != FsKind::Blank).collect();
    let roots = held.iter().filter(|v| v.holds == Holds::Root).count();
    let usrs = held.iter().filter(|v| v.holds == Holds::Usr).count();
    if roots != 1 || usrs > 1 {
        return Err(format!("one volume holds the root and at most one /usr (here {roots} and {usrs})"));
    }
    for v in &s.disks {
        let kind = v.fs.name();
        if v.subvol && v.fs != FsKind::Btrfs {
            return Err(format!("subvol on {kind}: only btrfs has subvolumes"));
        }
        if v.subvol && v.holds == Holds::Usr {
            return Err(
                "a /usr in a subvolume: the harness names /usr's subvolume nowhere (fstab, mount.usrflags=)".into()
            );
        }
        if v.members == 2 && s.image == Image::SelfBuilt {
            return Err(
                "a self-built root on raid1: the host reads its image from one member, which it cannot mount".into()
            );
        }
        if !(1..=2).contains(&v.members) || (v.members == 2 && v.fs != FsKind::Btrfs && s.stack != Stack::MdLvmLuks) {
            return Err(format!("members = {} on {kind}: a volume is one disk, or two for btrfs raid1", v.members));
        }
        if v.members == 2 && v.gpt {
            return Err("a raid1 member is a whole disk (no gpt)".into());
        }
        if (v.fs == FsKind::Zfs) != (s.stack == Stack::Zfs) {
            return Err("a zfs volume is the zfs stack's, which holds nothing else".into());
        }
        match s.stack {
            Stack::Plain => {}
            Stack::Zfs
                if v.bus == Bus::VirtioBlk
                    && v.holds == Holds::Root
                    && !v.gpt
                    && s.disks.len() == 1
                    && s.root == Root::Debian13Zfs => {}
            Stack::Zfs => {
                return Err("zfs holds the root alone on a virtio-blk disk, of debian13-zfs (its zfs.ko)".into());
            }
            Stack::Lvm if v.fs == FsKind::Ext4 && v.bus == Bus::VirtioBlk && !v.gpt && v.members == 1 => {}
            Stack::Luks
                if v.fs == FsKind::Ext4
                    && matches!(v.bus, Bus::VirtioBlk | Bus::Nvme)
                    && v.holds == Holds::Root
                    && s.disks.len() == 1 => {}
            Stack::MdLvmLuks
                if v.fs == FsKind::Ext4
                    && v.bus == Bus::VirtioBlk
                    && v.holds == Holds::Root
                    && v.members == 2
                    && s.disks.len() == 1 => {}
            Stack::MdLvmLuks => {
                return Err("md-lvm-luks holds the ext4 root alone, on two virtio-blk members (members = 2)".into());
            }
            Stack::BcacheLvmThin
                if v.fs == FsKind::Ext4
                    && v.bus == Bus::VirtioBlk
                    && v.holds == Holds::Root
                    && !v.gpt
                    && v.members == 1
                    && s.disks.len() == 1
                    && s.root == Root::Debian13Storage => {}
            Stack::LuksIntegrityRaidCache
                if v.fs == FsKind::Ext4
                    && v.bus == Bus::VirtioBlk
                    && v.holds == Holds::Root
                    && !v.gpt
                    && v.members == 1
                    && s.disks.len() == 1
                    && s.root == Root::Debian13Storage => {}
            Stack::LuksIntegrityRaidCache => {
                return Err("luks-integrity-raid-cache holds the ext4 root alone on virtio-blk disks, of \
                            debian13-storage (its cache_check and cryptsetup)"
                    .into());
            }
            Stack::BcacheLvmThin => {
                return Err("bcache-lvm-thin holds the ext4 root alone on virtio-blk disks, of debian13-storage \
                            (its thin_check and make-bcache)"
                    .into());
            }
            Stack::Lvm | Stack::Luks => {
                return Err(format!(
                    "{:?} holds ext4 volumes on one {} disk{} (not {kind} on {:?})",
                    s.stack,
                    if s.stack == Stack::Luks { "virtio-blk or NVMe" } else { "virtio-blk" },
                    if s.stack == Stack::Luks { ", the root alone" } else { "" },
                    v.bus
                ));
            }
        }
    }
    let mut rest = s.cmdline.as_str();
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').ok_or("an unclosed { in cmdline")? + open;
        match &rest[open + 1..close] {
            "root" => {}
            "usr" if usrs == 1 => {}
            other => return Err(format!("{{{other}}} in cmdline: only {{root}} and, with a /usr volume, {{usr}}")),
        }
        rest = &rest[close + 1..];
    }
    if s.disks.iter().any(|v| v.bus == Bus::VirtioScsiTwoPaths)
        && (s.root != Root::Debian13Storage
            || s.stack != Stack::Plain
            || s.disks.iter().filter(|v| v.bus == Bus::VirtioScsiTwoPaths).count() > 1)
    {
        return Err(
            "virtio-scsi-two-paths: one disk, plain, on debian13-storage (its multipath-tools report the paths)".into(),
        );
    }
    if s.disks.iter().any(|v| v.bus == Bus::VirtioMmio) && !s.root.arm64() {
        return Err("virtio-mmio: only arm64's virt board has those transports (debian13-arm64)".into());
    }
    if s.image == Image::ArchZst && s.root != Root::Debian13 {
        return Err("arch-zst re-lays a kernel whose modules are .ko.xz: debian13's".into());
    }
    if s.ram_key.is_some() && (s.stack != Stack::Luks || s.image == Image::SelfBuilt) {
        return Err("ram_key reads the key of the luks stack's container, after a universal image's boot".into());
    }
    if s.tang && (s.stack != Stack::Luks || s.root.arm64()) {
        return Err("tang binds the luks stack's container, on an x86_64 root".into());
    }
    if s.tang && !matches!(s.image, Image::Universal | Image::SelfBuilt) {
        return Err("tang boots the universal image with --include clevis, or a self-built one".into());
    }
    if s.tang && s.image == Image::SelfBuilt && !s.cmdline.split_whitespace().any(|w| w == "rd.neednet=1") {
        return Err("a self-built tang root needs rd.neednet=1 in cmdline: its build finds the NICs that are up".into());
    }
    let words: Vec<&str> = s.cmdline.split_whitespace().collect();
    if s.splash
        && (s.root != Root::Debian13Plymouth || !words.contains(&"splash") || !words.contains(&"leanrd.test=journal"))
    {
        return Err("splash boots debian13-plymouth with `splash` and leanrd.test=journal in cmdline".into());
    }
    if s.analyze && !s.cmdline.contains("leanrd.test=journal") {
        return Err("analyze reads the journal the root prints with leanrd.test=journal in cmdline".into());
    }
    let self_built = s.image == Image::SelfBuilt;
    let describes_own = !s.drivers.is_empty() || !s.own_image_has.is_empty() || !s.own_image_lacks.is_empty();
    if !self_built && describes_own {
        return Err("drivers and own_image_* describe the image a self-built root makes".into());
    }
    if self_built && s.stack == Stack::Lvm {
        return Err(
            "a self-built root on LVM: its image would be inside the volume group, out of the test's reach".into()
        );
    }
    if self_built && s.drivers.is_empty() && s.stack == Stack::Plain {
        return Err("a self-built scenario names the storage drivers its own image must hold".into());
    }
    Ok(())
}

/// The test harness's main: every scenario of `file` a test, plus `extra` tests.
pub fn main(file: &Path) -> std::process::ExitCode {
    let scenarios = match load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(101);
        }
    };
    let trials = scenarios
        .into_iter()
        .map(|(name, s)| {
            let n = name.clone();
            test(name, move || run_one(&n, &s))
        })
        .collect();
    // VMs are held to one per core by the slots; more test threads let a scenario make its
    // disks and images while others boot.
    run_tests(trials, 2 * cores())
}

/// The process's scratch directory: trees and images the scenarios share (removed by
/// [`main`] when the tests are done).
fn scratch() -> &'static Path {
    static SCRATCH: OnceLock<TempDir> = OnceLock::new();
    SCRATCH.get_or_init(|| TempDir::new("scenarios")).path()
}

/// `f()` once per process for `key`; every caller gets a clone. When `f` panics, every
/// caller fails with its message (once made, a failure is not made again by each scenario
/// that needs the same thing).
fn memo<T: Clone + Send + Sync + 'static>(key: &str, f: impl FnOnce() -> T) -> T {
    type Cell = Arc<OnceLock<Box<dyn Any + Send + Sync>>>;
    static CELLS: Mutex<BTreeMap<String, Cell>> = Mutex::new(BTreeMap::new());
    let cell = CELLS.lock().unwrap().entry(key.to_string()).or_default().clone();
    let made = cell.get_or_init(|| Box::new(caught(f)));
    match made.downcast_ref::<Result<T, String>>().expect("one type per key") {
        Ok(v) => v.clone(),
        Err(e) => panic!("{key}: {e}"),
    }
}

/// A hash of what something is made from, for cache keys.
pub fn key_of(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// [`key_of`] a file's content.
pub fn file_key(path: &Path) -> String {
    key_of(&[&fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))])
}

/// The version of how the harness makes disks, in every disk's key: bump it when [`make_in`],
/// the prep VMs or the layouts change.
const DISKS: &str = "disks-1";

/// The test cache: $LEANRD_TEST_CACHE, else /var/cache/leanrd-tests.
pub fn test_cache() -> PathBuf {
    std::env::var_os("LEANRD_TEST_CACHE").map_or_else(|| PathBuf::from("/var/cache/leanrd-tests"), PathBuf::from)
}

/// The test cache's entry `kind/key`, made by `make` (into a partial path, synced, then
/// renamed) under a lock when missing. Its mtime is when it was last used: entries and
/// leftover partial ones unused for a week are removed, once per process and kind.
pub fn cached(kind: &str, key: &str, make: impl FnOnce(&Path)) -> PathBuf {
    let dir = test_cache().join(kind);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    // Each kind's directory once (a process that made disks first also sweeps arch-modules/).
    static SWEPT: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    if SWEPT.lock().unwrap().insert(dir.clone()) {
        sweep(&dir, std::time::Duration::from_secs(7 * 86400));
    }
    let path = dir.join(key);
    // Lock files stay: a process waiting on one must exclude whoever opens it next.
    let lock = fs::File::create(dir.join(format!("{key}.lock"))).unwrap();
    lock.lock().unwrap();
    if !path.exists() {
        let partial = dir.join(format!("{key}.partial"));
        let _ = fs::remove_dir_all(&partial);
        fs::create_dir_all(&partial).unwrap();
        make(&partial);
        sh(&format!("sync -f {}", partial.display()));
        fs::rename(&partial, &path).unwrap();
    }
    let _ = fs::File::open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
    path
}

/// The test cache's entry `kind/key` if it was made ([`cached`]), marked as used.
pub fn cached_if_made(kind: &str, key: &str) -> Option<PathBuf> {
    let dir = test_cache().join(kind);
    let lock = fs::File::create(dir.join(format!("{key}.lock"))).ok()?;
    lock.lock().ok()?;
    let path = dir.join(key);
    fs::File::open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now())).ok()?;
    Some(path)
}

/// Remove the entries of `dir` (and partial ones a killed run left) not used for `age`,
/// each under its lock, its age read again once locked.
fn sweep(dir: &Path, age: std::time::Duration) {
    let old = |p: &Path| {
        fs::metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|m| std::time::SystemTime::now().duration_since(m).unwrap_or_default() > age)
    };
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x != "partial") || !old(&p) {
            continue;
        }
        let lock = p.with_extension("lock");
        if let Ok(l) = fs::File::open(&lock)
            && l.try_lock().is_ok()
            && old(&p)
        {
            let _ = fs::remove_dir_all(&p);
        }
    }
}

/// A root made a test system: its tree, the kernel that boots it, and the key of its content.
#[derive(Clone)]
struct Suite {
    root: Root,
    kernel: PathBuf,
    kver: String,
    init: PathBuf,
    /// The root with the report unit, without leanrd.
    base: Tree,
}

#[derive(Clone)]
struct Tree {
    path: PathBuf,
    key: String,
}

fn suite(root: Root) -> Result<Option<Suite>, String> {
    memo(&format!("suite {root:?}"), || {
        let qemu = if root.arm64() { "qemu-system-aarch64" } else { "qemu-system-x86_64" };
        if !is_root() || !have(qemu) {
            return Ok(skip(&format!("boot scenarios need root and {qemu}")));
        }
        for tool in ["mkfs.ext4", "mkfs.xfs", "mkfs.btrfs", "sfdisk", "losetup", "modprobe", "xz", "zstd", "depmod"] {
            if !have(tool) {
                return Ok(skip(&format!("boot scenarios need {tool}")));
            }
        }
        let init = if root.arm64() { arm64_build("init") } else { init_binary() };
        let Some(init) = init else { return Ok(None) };
        let Some(cached) = debian_suite_root(root.suite(), root.flavour()) else { return Ok(None) };
        let path = scratch().join(format!("{}-base", root.tag()));
        sh(&format!("cp -a {} {}", cached.display(), path.display()));
        let (kernel, modules_key) = match root {
            Root::Debian12 => {
                let Some(k) = kernel() else { return Ok(None) };
                let kver = kver_of(&k);
                fs::create_dir_all(path.join("usr/lib/modules")).unwrap();
                sh(&format!("cp -a /lib/modules/{kver} {}/usr/lib/modules/", path.display()));
                let _ = fs::copy(format!("/boot/config-{kver}"), path.join(format!("boot/config-{kver}")));
                // The release and what depmod and the configuration say of it: a kernel update
                // (a new release, or the same one rebuilt) makes new disks.
                let dep = file_key(Path::new(&format!("/lib/modules/{kver}/modules.dep")));
                let config = fs::read(format!("/boot/config-{kver}")).unwrap_or_default();
                (k, key_of(&[kver.as_bytes(), dep.as_bytes(), &config]))
            }
            Root::Debian13
            | Root::Debian13Arm64
            | Root::Debian13Plymouth
            | Root::Debian13Storage
            | Root::Debian13Zfs => (root_kernel(&cached), String::new()),
        };
        let mut finish = finish_base_on(&path, if root.arm64() { crate::AARCH64_CONSOLE } else { "ttyS0" });
        let files = match root {
            Root::Debian13Storage => multipath_files(),
            Root::Debian13Zfs => zfs_files(),
            _ => Vec::new(),
        };
        {
            for (f, content, mode) in files {
                let p = path.join(f);
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                fs::write(&p, &content).unwrap();
                fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
                finish.extend(format!("{f} {mode:o} {content}").bytes());
            }
        }
        // The root by its packages' versions (a root made again may hold newer ones) and by
        // how it was made (tools/debian-root names it so).
        let status = file_key(&cached.join("var/lib/dpkg/status"));
        let made = cached.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let key = key_of(&[DISKS.as_bytes(), status.as_bytes(), made.as_bytes(), modules_key.as_bytes(), &finish]);
        Ok(Some(Suite { root, kver: kver_of(&kernel), kernel, init, base: Tree { path, key } }))
    })
}

/// The disk that brings leanrd and its /init to a self-building root: a tar whose first
/// member is named `leanrd-tools` (the report script looks for that name at the start of each
/// disk and unpacks the rest into /). The build under test comes this way rather than in the
/// root's tree, so the roots' disks (made from the base tree) stay cached from one build of
/// leanrd to the next: the LUKS root's is made in a prep VM, minutes under TCG.
fn tools_disk(su: &Suite) -> PathBuf {
    // One for every suite of an architecture (the same leanrd and /init): made once.
    let arch = if su.root.arm64() { "aarch64" } else { "x86_64" };
    memo(&format!("tools disk {arch}"), || {
        let dir = scratch().join(format!("tools-disk-{arch}"));
        fs::create_dir_all(dir.join("usr/bin")).unwrap();
        // arm64: leanrd itself built for aarch64 (this leanrd's sources), which the root runs.
        let leanrd = if su.root.arm64() {
            arm64_build("leanrd").expect("leanrd for aarch64 (tools/arm64 leanrd)")
        } else {
            leanrd_path().to_path_buf()
        };
        add_tools_from(&dir, &leanrd, &su.init);
        fs::write(dir.join("leanrd-tools"), "leanrd and its /init, for a self-building root\n").unwrap();
        let tar = scratch().join(format!("tools-{arch}.tar"));
        sh(&format!("tar -cf {} -C {} leanrd-tools usr", tar.display(), dir.display()));
        tar
    })
}

/// A tree split for a separate /usr: the root (with an empty /usr) and /usr's tree.
fn split(tree: &Tree) -> (Tree, Tree) {
    memo(&format!("split {}", tree.path.display()), || {
        let (r, u) = (tree.path.with_extension("root"), tree.path.with_extension("usr"));
        sh(&format!(
            "cp -al {t} {r} && mv {r}/usr {u} && mkdir {r}/usr",
            t = tree.path.display(),
            r = r.display(),
            u = u.display()
        ));
        let key = |what: &str| key_of(&[tree.key.as_bytes(), what.as_bytes()]);
        (Tree { path: r, key: key("split root") }, Tree { path: u, key: key("split usr") })
    })
}

/// The tree re-laid as Arch lays a kernel out: modules `.ko.zst` (recompressed from
/// `.ko.xz`, depmod run), the configuration at /usr/lib/modules/KVER/config and none in
/// /boot, vmlinuz at /usr/lib/modules/KVER/vmlinuz. `key` names the tree's modules: their
/// `.ko.zst` form is made once and kept in the test cache (`arch-modules/`; 30 s of two
/// cores for Debian 13's 4,230 modules, which three tests of two binaries lay out).
pub fn arch_layout(tree: &Path, kver: &str, key: &str) {
    let m = tree.join(format!("usr/lib/modules/{kver}"));
    let made = cached("arch-modules", &key_of(&[b"arch-modules-1", key.as_bytes(), kver.as_bytes()]), |dir| {
        let dm = dir.join(format!("lib/modules/{kver}"));
        fs::create_dir_all(dm.parent().unwrap()).unwrap();
        sh(&format!("cp -a {} {}", m.display(), dm.display()));
        let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
        sh(&format!(
            // From a file, as the kernel's build compresses them: the frame records the
            // decompressed size, which libkmod needs (depmod, modinfo).
            "cd {m} && find kernel -name '*.ko.xz' -print0 | xargs -0 -P{jobs} -n64 sh -c \
             'for f; do xz -d \"$f\" && zstd -q -3 --rm \"${{f%.xz}}\"; done' sh",
            m = dm.display()
        ));
        sh(&format!("depmod -b {} {kver}", dir.display()));
    });
    sh(&format!("rm -rf {m} && cp -a {}/lib/modules/{kver} {m}", made.display(), m = m.display()));
    fs::rename(tree.join(format!("boot/config-{kver}")), m.join("config")).unwrap();
    fs::rename(tree.join(format!("boot/vmlinuz-{kver}")), m.join("vmlinuz")).unwrap();
    let dep = fs::read_to_string(m.join("modules.dep")).unwrap();
    assert!(dep.contains("ext4.ko.zst:") && !dep.contains(".ko.xz"), "depmod did not index the .ko.zst modules");
}

/// The Arch layout of a suite's base tree (made once per process): its path and kernel release.
pub fn arch_tree(su_root: Root) -> Option<(PathBuf, String)> {
    let su = suite(su_root).ok()??;
    Some(memo(&format!("arch {su_root:?}"), || {
        let path = scratch().join(format!("{}-arch", su_root.tag()));
        sh(&format!("cp -a {} {}", su.base.path.display(), path.display()));
        arch_layout(&path, &su.kver, &su.base.key);
        (path, su.kver.clone())
    }))
}

/// The image a scenario boots first (self-built: the universal image it builds from).
/// `clevis`: with `--include clevis` (a `tang` scenario's).
fn image(root: Root, su: &Suite, kind: Image, stack: Stack, clevis: bool) -> PathBuf {
    // A self-built scenario first boots the universal image.
    let kind = if kind == Image::SelfBuilt { Image::Universal } else { kind };
    let md = stack == Stack::MdLvmLuks;
    memo(&format!("image {root:?} {kind:?} md={md} clevis={clevis}"), || {
        let (tree, extra): (PathBuf, &[&str]) = match kind {
            // The test roots have no mdadm (adding it would remake every cached root and disk):
            // the md stack's image is built from a copy of the root with the host's.
            Image::Universal | Image::SelfBuilt if md => (with_host_mdadm(root, su), &[]),
            Image::Universal | Image::SelfBuilt => (su.base.path.clone(), &[]),
            Image::UniversalKeep => (su.base.path.clone(), &["--module-compression", "keep"]),
            Image::ArchZst => (arch_tree(root).expect("the suite is there").0, &["--module-compression", "keep"]),
        };
        let out = scratch().join(format!(
            "{}-{kind:?}{}{}.img",
            root.tag(),
            if md { "-md" } else { "" },
            if clevis { "-clevis" } else { "" }
        ));
        let mut include: Vec<&str> = Vec::new();
        if clevis {
            include.extend(["--include", "clevis"]);
        }
        if root == Root::Debian13Plymouth {
            include.extend(["--include", "plymouth"]);
        }
        let o = leanrd()
            .args(["build", "-k", &su.kver, "--universal", "--sysroot"])
            .arg(&tree)
            .arg("--init")
            .arg(&su.init)
            .arg("-o")
            .arg(&out)
            .args(extra)
            .args(&include)
            .output()
            .unwrap();
        assert!(o.status.success(), "leanrd build {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        out
    })
}

/// A copy of the suite's root (hard links) with the host's mdadm in /usr/sbin, for an image
/// that assembles md arrays; the root itself stays without it.
fn with_host_mdadm(root: Root, su: &Suite) -> PathBuf {
    let tree = scratch().join(format!("{}-md-tree", root.tag()));
    let _ = fs::remove_dir_all(&tree);
    sh(&format!("cp -al {} {}", su.base.path.display(), tree.display()));
    let mdadm = tree.join("usr/sbin/mdadm");
    let _ = fs::remove_file(&mdadm);
    fs::copy("/usr/sbin/mdadm", &mdadm).expect("the host's mdadm (package mdadm)");
    tree
}

/// A UUID for a scenario's volume: the same from run to run (disks are cached by content),
/// different from every other scenario's (two btrfs file systems with one UUID confuse the
/// host's kernel).
fn uuid_for(name: &str, i: usize) -> String {
    let k = key_of(&[name.as_bytes(), &i.to_le_bytes()]);
    format!("{}-{}-4{}-8{}-{}", &k[..8], &k[8..12], &k[12..15], &k[1..4], &k[4..16])
}

/// A volume made: its disks (the first one names it), its file system and UUID.
#[derive(Clone)]
struct Made {
    disks: Vec<Disk>,
    fs: FsKind,
    uuid: String,
    subvol: bool,
    holds: Option<Holds>,
}

/// The disks of a scenario (cached by content), the `{root}` and `{usr}` texts.
fn disks(name: &str, s: &Scenario, su: &Suite) -> (Vec<Made>, String, String) {
    let tree = su.base.clone();
    let has_usr = s.disks.iter().any(|v| v.holds == Holds::Usr && v.fs != FsKind::Blank);
    let (root_tree, usr_tree) = if has_usr {
        let (r, u) = split(&tree);
        (r, Some(u))
    } else {
        (tree.clone(), None)
    };
    let usr_on_cmdline = s.cmdline.contains("{usr}");
    match s.stack {
        Stack::Plain => {
            let vols: Vec<(&Volume, String)> =
                s.disks.iter().enumerate().map(|(i, v)| (v, uuid_for(name, i))).collect();
            let usr = vols.iter().find(|(v, _)| v.holds == Holds::Usr && v.fs != FsKind::Blank);
            let mut made = Vec::new();
            for (v, uuid) in &vols {
                if v.fs == FsKind::Blank {
                    let dir = cached("disks", &key_of(&[b"blank 16M"]), |d| {
                        sh(&format!("truncate -s 16M {}/blank-0.disk", d.display()))
                    });
                    made.push(Made {
                        disks: vec![Disk { path: dir.join("blank-0.disk"), gpt: false, bus: v.bus }],
                        fs: v.fs,
                        uuid: uuid.clone(),
                        subvol: false,
                        holds: None,
                    });
                    continue;
                }
                let kind = v.fs.name();
                let pass = if v.fs == FsKind::Btrfs { 0 } else { 1 };
                let opts = if v.subvol { "defaults,subvol=@" } else { "defaults" };
                let (content, fstab) = match v.holds {
                    Holds::Root => {
                        let mut f = format!("UUID={uuid} / {kind} {opts} 0 {pass}\n");
                        if let (Some((u, uu)), false) = (usr, usr_on_cmdline) {
                            f += &format!("UUID={uu} /usr {} defaults 0 0\n", u.fs.name());
                        }
                        (&root_tree, Some(f))
                    }
                    Holds::Usr => (usr_tree.as_ref().unwrap(), None),
                };
                let fsx = Fs { kind, uuid: uuid.clone(), subvol: v.subvol };
                let key = key_of(&[
                    content.key.as_bytes(),
                    kind.as_bytes(),
                    uuid.as_bytes(),
                    &[v.subvol as u8, v.gpt as u8, v.members as u8],
                    fstab.as_deref().unwrap_or("").as_bytes(),
                ]);
                let dir = cached("disks", &key, |d| {
                    make_in(d, "v", v.gpt, v.members, v.bus, &fsx, &content.path, fstab.as_deref());
                });
                let disks = (0..v.members)
                    .map(|m| Disk { path: dir.join(format!("v-{m}.disk")), gpt: v.gpt && v.members == 1, bus: v.bus })
                    .collect();
                made.push(Made { disks, fs: v.fs, uuid: uuid.clone(), subvol: v.subvol, holds: Some(v.holds) });
            }
            let root = made.iter().find(|m| m.holds == Some(Holds::Root)).unwrap();
            let root_arg = if root.subvol {
                format!("root=UUID={} rootflags=subvol=@", root.uuid)
            } else {
                format!("root=UUID={}", root.uuid)
            };
            let usr_arg = made
                .iter()
                .find(|m| m.holds == Some(Holds::Usr))
                .map(|u| format!("mount.usr=UUID={} mount.usrfstype={}", u.uuid, u.fs.name()))
                .unwrap_or_default();
            (made, root_arg, usr_arg)
        }
        Stack::Lvm => {
            let host_kver = kver_of(&crate::kernel().expect("the prep VM runs the host's kernel"));
            let mut fstab = "/dev/mapper/vg0-root / ext4 defaults 0 1\n".to_string();
            if has_usr && !usr_on_cmdline {
                fstab += "/dev/mapper/vg0-usr /usr ext4 defaults 0 2\n";
            }
            // The prep VM's kernel does not shape the disk: not in the key.
            let key = key_of(&[
                b"lvm",
                root_tree.key.as_bytes(),
                usr_tree.as_ref().map_or(&b""[..], |u| u.key.as_bytes()),
                fstab.as_bytes(),
            ]);
            let dir = cached("disks", &key, |d| {
                let usr = usr_tree.as_ref().map(|u| u.path.as_path());
                lvm_disk(d, &host_kver, &root_tree.path, usr, &fstab, &key)
            });
            let disk = Disk { path: dir.join("lvm.disk"), gpt: false, bus: Bus::VirtioBlk };
            let made = vec![Made {
                disks: vec![disk],
                fs: FsKind::Ext4,
                uuid: String::new(),
                subvol: false,
                holds: Some(Holds::Root),
            }];
            (made, "root=/dev/mapper/vg0-root".into(), "mount.usr=/dev/mapper/vg0-usr mount.usrfstype=ext4".into())
        }
        Stack::MdLvmLuks => {
            let host_kver = kver_of(&crate::kernel().expect("the prep VM runs the host's kernel"));
            let key = key_of(&[b"md-lvm-luks 1", root_tree.key.as_bytes(), PASS.as_bytes()]);
            let dir = cached("disks", &key, |d| {
                let tmp = TempDir::new("stack-prep");
                let members = [d.join("member-0.disk"), d.join("member-1.disk")];
                let (prep, disks, luks_uuid) =
                    md_lvm_luks_prep(&tmp, &host_kver, &root_tree.path, [&members[0], &members[1]])
                        .expect("the md/LVM/LUKS prep image");
                prep_boot(&prep, &disks, &format!("md/LVM/LUKS {key}"));
                fs::write(d.join("luks-uuid"), luks_uuid).unwrap();
            });
            let disks = (0..2)
                .map(|m| Disk { path: dir.join(format!("member-{m}.disk")), gpt: false, bus: Bus::VirtioBlk })
                .collect();
            let made = vec![Made {
                disks,
                fs: FsKind::Ext4,
                uuid: fs::read_to_string(dir.join("luks-uuid")).expect("the LUKS UUID"),
                subvol: false,
                holds: Some(Holds::Root),
            }];
            (made, "root=/dev/mapper/md_crypt".into(), String::new())
        }
        Stack::Zfs => {
            let key = key_of(&[b"zfs 1", root_tree.key.as_bytes(), PASS.as_bytes()]);
            let dir = cached("disks", &key, |d| zfs_disks(d, su, &root_tree.path, &key));
            let disks = virtio_disks(&dir, &["boot", "pool"]);
            let made =
                vec![Made { disks, fs: FsKind::Zfs, uuid: String::new(), subvol: false, holds: Some(Holds::Root) }];
            (made, "root=ZFS=rpool/ROOT/debian".into(), String::new())
        }
        Stack::LuksIntegrityRaidCache => {
            let host_kver = kver_of(&crate::kernel().expect("the prep VM runs the host's kernel"));
            let hook = raid_cache_hook();
            let key =
                key_of(&[b"luks-integrity-raid-cache 3", root_tree.key.as_bytes(), PASS.as_bytes(), hook.as_bytes()]);
            let dir = cached("disks", &key, |d| raid_cache_disks(d, &host_kver, &root_tree.path, &hook, &key));
            let disks = virtio_disks(&dir, &["boot", "raid-0", "raid-1", "cache"]);
            let made = vec![Made {
                disks,
                fs: FsKind::Ext4,
                uuid: fs::read_to_string(dir.join("luks-uuid")).expect("the LUKS UUID"),
                subvol: false,
                holds: Some(Holds::Root),
            }];
            (made, "root=/dev/mapper/root_crypt".into(), String::new())
        }
        Stack::BcacheLvmThin => {
            let host_kver = kver_of(&crate::kernel().expect("the prep VM runs the host's kernel"));
            let key = key_of(&[b"bcache-lvm-thin 1", root_tree.key.as_bytes()]);
            let dir = cached("disks", &key, |d| bcache_lvm_thin_disks(d, &host_kver, &root_tree.path, &key));
            let disks = virtio_disks(&dir, &["boot", "backing", "cache"]);
            let made =
                vec![Made { disks, fs: FsKind::Ext4, uuid: String::new(), subvol: false, holds: Some(Holds::Root) }];
            (made, "root=/dev/mapper/vg0-root".into(), String::new())
        }
        Stack::Luks => {
            let host_kver = kver_of(&crate::kernel().expect("the prep VM runs the host's kernel"));
            let key = key_of(&[b"luks", root_tree.key.as_bytes(), PASS.as_bytes()]);
            let dir = cached("disks", &key, |d| {
                let tmp = TempDir::new("luks-prep");
                let (prep, disks, _, luks_uuid) =
                    luks_prep(&tmp, &host_kver, &root_tree.path, &d.join("luks.disk")).expect("the LUKS prep image");
                prep_boot(&prep, &disks, &format!("LUKS {key}"));
                fs::write(d.join("luks-uuid"), luks_uuid).unwrap();
            });
            // On the volume's bus: the layout is the same on any disk.
            let disk = Disk { path: dir.join("luks.disk"), gpt: false, bus: s.disks[0].bus };
            let made = vec![Made {
                disks: vec![disk],
                fs: FsKind::Ext4,
                // The LUKS header's (crypttab names the container by it).
                uuid: fs::read_to_string(dir.join("luks-uuid")).expect("the LUKS disk's UUID"),
                subvol: false,
                holds: Some(Holds::Root),
            }];
            (made, "root=/dev/mapper/sda3_crypt".into(), String::new())
        }
    }
}

/// Boot a prep image on the host's kernel; it must print PREP-DONE (bench/shutdown.py's LUKS
/// disks too, through `leanrd-harness luks-disk`).
pub fn prep_boot(prep: &Path, disks: &[Disk], what: &str) {
    prep_boot_on(&crate::kernel().expect("the host's kernel"), prep, disks, what, None);
}

/// [`prep_boot`] on `kernel`, with `secs` before the VM is killed (None: a boot's default).
fn prep_boot_on(kernel: &Path, prep: &Path, disks: &[Disk], what: &str, secs: Option<u64>) {
    let mut b = Boot::new(&format!("prep: {what}"), prep, "", qemu_args(&disks.iter().collect::<Vec<_>>(), false));
    b.expect = vec!["PREP-DONE".into()];
    b.reject.clear();
    if let Some(secs) = secs {
        b.secs = secs;
    }
    let failed = run(kernel, &[b]);
    assert!(failed.is_empty(), "the {what} prep VM failed");
}

/// The disks `names` (NAME.disk in `dir`), whole virtio-blk disks, in that order.
fn virtio_disks(dir: &Path, names: &[&str]) -> Vec<Disk> {
    names.iter().map(|n| Disk { path: dir.join(format!("{n}.disk")), gpt: false, bus: Bus::VirtioBlk }).collect()
}

/// The LVM disk: vg0 on one disk with `root` (the root's tree, `fstab` its /etc/fstab) and,
/// when given, `usr`, made in a prep VM by copying ext4 images made here.
fn lvm_disk(dir: &Path, host_kver: &str, root: &Path, usr: Option<&Path>, fstab: &str, seed: &str) {
    let t = TempDir::new("lvm-prep");
    let root_mb = if usr.is_some() { 256 } else { 2048 };
    let root_img = ext4_image(&t, "lvm-root", root_mb, &uuid_for(seed, 100), root, Some(fstab));
    let mut images = vec![root_img];
    let mut body = format!(
        "$lvm pvcreate -y --config \"$C\" /dev/vda && $lvm vgcreate --config \"$C\" vg0 /dev/vda && \
        $lvm lvcreate -y --config \"$C\" -L {root_mb}M -n root vg0 && $e2image -ra /dev/vdb /dev/mapper/vg0-root && "
    );
    if let Some(u) = usr {
        images.push(ext4_image(&t, "lvm-usr", 2048, &uuid_for(seed, 101), u, None));
        body += "$lvm lvcreate -y --config \"$C\" -L 2048M -n usr vg0 && $e2image -ra /dev/vdc /dev/mapper/vg0-usr && ";
    }
    body += "$lvm vgchange -an --config \"$C\" vg0 && sync && echo PREP-DONE";
    let lvm = dir.join("lvm.disk");
    sh(&format!("truncate -s {}M {}", root_mb + 2048 + 64, lvm.display()));
    let last = if usr.is_some() { "vdc" } else { "vdb" };
    let img = crate::prep::image(
        t.path(),
        host_kver,
        &["lvm", "e2image"],
        &["virtio_pci", "virtio_blk", "dm_mod"],
        last,
        &body,
        None,
    )
    .expect("the LVM prep image");
    let disks: Vec<Disk> =
        std::iter::once(lvm).chain(images).map(|path| Disk { path, gpt: false, bus: Bus::VirtioBlk }).collect();
    prep_boot(&img, &disks, &format!("LVM {seed}"));
}

/// The files a server installed on a multipath LUN has, as multipath-tools wrote them at
/// installation (debian13-storage's tree holds them): /etc/multipath.conf with
/// `user_friendly_names yes` and `find_multipaths strict`, the LUN's WWID (of
/// [`MULTIPATH_WWN`]) in /etc/multipath/wwids and bound to mpatha in /etc/multipath/bindings;
/// and a report hook that prints `multipath -ll` and counts the paths active and ready
/// (`LEANRD-MPATH-ACTIVE N`). (path, content, mode)
fn multipath_files() -> Vec<(&'static str, String, u32)> {
    let wwid = format!("3{MULTIPATH_WWN}");
    vec![
        (
            "etc/multipath.conf",
            "defaults {\n\tuser_friendly_names yes\n\tfind_multipaths strict\n}\n".to_string(),
            0o644,
        ),
        ("etc/multipath/wwids", format!("# Multipath wwids, Version : 1.0\n/{wwid}/\n"), 0o644),
        ("etc/multipath/bindings", format!("# Multipath bindings, Version : 1.0\nmpatha {wwid}\n"), 0o644),
        (
            "usr/local/sbin/leanrd-test-hook",
            "#!/bin/sh\nmultipath -ll 2>&1 | sed 's/^/LEANRD-MPATH /'\n\
             echo \"LEANRD-MPATH-ACTIVE $(multipath -ll 2>/dev/null | grep -c 'active ready running')\"\n"
                .to_string(),
            0o755,
        ),
    ]
}

/// What a root on ZFS has for the test: a report hook that prints the pool's health
/// (`LEANRD-ZFS-POOL rpool ONLINE`), what is mounted from ZFS (`LEANRD-ZFS DATASET MOUNTPOINT`)
/// and the root's key status (`LEANRD-ZFS-KEY available`). (path, content, mode)
fn zfs_files() -> Vec<(&'static str, String, u32)> {
    vec![(
        "usr/local/sbin/leanrd-test-hook",
        "#!/bin/sh
zpool list -H -o name,health | sed 's/\t/ /g; s/^/LEANRD-ZFS-POOL /'
         findmnt -rn -t zfs -o SOURCE,TARGET | sed 's/^/LEANRD-ZFS /'
         echo \"LEANRD-ZFS-KEY $(zfs get -H -o value keystatus rpool/ROOT)\"\n"
            .to_string(),
        0o755,
    )]
}

/// The disks of [`Stack::Zfs`] in `dir`: boot.disk (ext4 of the tree's /boot, the whole disk)
/// and pool.disk, made by a prep VM on the root's own kernel with its zfs.ko, zpool and zfs,
/// which copies the tree in from an ext4 image of it.
fn zfs_disks(dir: &Path, su: &Suite, tree: &Path, seed: &str) {
    let t = TempDir::new("zfs-prep");
    let boot_uuid = uuid_for(seed, 120);
    let fstab = format!("UUID={boot_uuid} /boot ext4 defaults 0 2\n");
    let src = ext4_image(&t, "zfs-src", 3072, &uuid_for(seed, 121), tree, Some(&fstab));
    let boot = ext4_image(&t, "boot", 256, &boot_uuid, &tree.join("boot"), None);
    sh(&format!("mv {} {}", boot.display(), dir.join("boot.disk").display()));
    let pool = dir.join("pool.disk");
    // A GPT partition for the pool, as an installer makes one: zpool, given a whole disk,
    // partitions it and then waits for udev, which a prep VM does not run.
    sh(&format!(
        "truncate -s 4G {p} && printf 'label: gpt\nstart=2048, type=6A898CC3-1DD2-11B2-99A6-080020736631, name=zfs' | \
         sfdisk -q {p}",
        p = pool.display()
    ));
    let body = format!(
        "mkdir -p /src /mnt && mount -o ro /dev/vdb /src && \
         $zpool create -f -o ashift=12 -o cachefile=none -O mountpoint=none -O compression=lz4 -O acltype=posixacl \
           -O xattr=sa -R /mnt rpool /dev/vda1 && \
         echo {PASS} | $zfs create -o encryption=aes-256-gcm -o keyformat=passphrase -o keylocation=prompt \
           -o mountpoint=none rpool/ROOT && \
         $zfs create -o canmount=noauto -o mountpoint=/ rpool/ROOT/debian && $zfs mount rpool/ROOT/debian && \
         $zfs create rpool/ROOT/debian/var && $zfs create -o mountpoint=/home rpool/home && \
         $zpool set bootfs=rpool/ROOT/debian rpool && \
         cp -a /src/. /mnt/ && umount /src && sync && $zpool export rpool && echo PREP-DONE"
    );
    let img = crate::prep::image_in(
        &su.base.path,
        t.path(),
        &su.kver,
        &["zpool", "zfs"],
        &["virtio_pci", "virtio_blk", "ext4", "zfs"],
        "vdb",
        &body,
        None,
    )
    .expect("the ZFS prep image");
    let disks: Vec<Disk> = [pool, src].into_iter().map(|path| Disk { path, gpt: false, bus: Bus::VirtioBlk }).collect();
    prep_boot_on(&su.kernel, &img, &disks, &format!("ZFS {seed}"), Some(900));
}

/// The disks of [`Stack::BcacheLvmThin`] in `dir`: boot.disk (ext4 of the tree's /boot),
/// backing.disk and cache.disk (bcache, writethrough, 64 KiB buckets), with vg0 on
/// /dev/bcache0 holding the thin pool vg0/pool and in it the thin LV vg0/root, an ext4 of
/// the tree (its fstab naming both), copied in by a prep VM on the host's kernel. Everything
/// stopped at the end, as a machine that was shut down leaves it.
fn bcache_lvm_thin_disks(dir: &Path, host_kver: &str, tree: &Path, seed: &str) {
    let t = TempDir::new("bcache-thin-prep");
    let boot_uuid = uuid_for(seed, 110);
    let fstab = format!("/dev/mapper/vg0-root / ext4 defaults 0 1\nUUID={boot_uuid} /boot ext4 defaults 0 2\n");
    let root = ext4_image(&t, "thin-root", 2048, &uuid_for(seed, 111), tree, Some(&fstab));
    let boot = ext4_image(&t, "boot", 256, &boot_uuid, &tree.join("boot"), None);
    sh(&format!("mv {} {}", boot.display(), dir.join("boot.disk").display()));
    let (backing, cache) = (dir.join("backing.disk"), dir.join("cache.disk"));
    sh(&format!("truncate -s 2400M {} && truncate -s 256M {}", backing.display(), cache.display()));
    let lvc = "$lvm lvcreate -y --config \"$C\"";
    let body = format!(
        "$make_bcache --bucket 64k -B /dev/vda -C /dev/vdb && \
         echo /dev/vda > /sys/fs/bcache/register && echo /dev/vdb > /sys/fs/bcache/register && \
         for i in $(seq 1 20); do [ -b /dev/bcache0 ] && break; sleep 1; done && \
         $lvm pvcreate -y --config \"$C\" /dev/bcache0 && $lvm vgcreate --config \"$C\" vg0 /dev/bcache0 && \
         {lvc} --type thin-pool -L 2200M -n pool vg0 && {lvc} -V 2048M --thinpool vg0/pool -n root && \
         $e2image -ra /dev/vdc /dev/mapper/vg0-root && $lvm vgchange -an --config \"$C\" vg0 && sync && \
         echo 1 > /sys/block/bcache0/bcache/stop && for s in /sys/fs/bcache/*-*; do echo 1 > $s/stop; done && \
         sleep 1 && echo PREP-DONE"
    );
    let mut modules = crate::prep::STACK_MODULES.to_vec();
    modules.extend(["dm_thin_pool", "bcache"]);
    let img = crate::prep::image(
        t.path(),
        host_kver,
        &["lvm", "e2image", "make-bcache", "thin_check"],
        &modules,
        "vdc",
        &body,
        None,
    )
    .expect("the bcache/LVM thin prep image");
    let disks: Vec<Disk> =
        [backing, cache, root].into_iter().map(|path| Disk { path, gpt: false, bus: Bus::VirtioBlk }).collect();
    prep_boot(&img, &disks, &format!("bcache/LVM thin {seed}"));
}

/// The report hook of [`Stack::LuksIntegrityRaidCache`]'s root (in place of the storage root's
/// multipath one): each layer as the booted root sees it, spaces squeezed. `LEANRD-LVS` (lvs -a:
/// name, segment type, cache mode), `LEANRD-CRYPT` (cryptsetup status root_crypt) and
/// `LEANRD-DM` (each dm device's name and its table's target types).
fn raid_cache_hook() -> String {
    "#!/bin/sh
sq() { sed 's/^ *//; s/  */ /g; s/ *$//' | sed \"s/^/$1 /\"; }
lvs -a --noheadings -o lv_name,segtype,cache_mode vg0 2>&1 | sq LEANRD-LVS
cryptsetup status root_crypt 2>&1 | sq LEANRD-CRYPT
dmsetup table 2>&1 | awk '{ print $1, $4 }' | sq LEANRD-DM
"
    .to_string()
}

/// The disks of [`Stack::LuksIntegrityRaidCache`] in `dir`: boot.disk (ext4 of the tree's
/// /boot), raid-0.disk and raid-1.disk (vg0's PVs under the raid1 LV vg0/root), cache.disk
/// (vg0's third PV, under the cache pool vg0/cpool that caches vg0/root, writethrough), the
/// LUKS2 container with `--integrity hmac-sha256` on vg0/root holding an ext4 of the tree (its
/// fstab, crypttab and the report hook `hook`), copied in by a prep VM on the host's kernel;
/// luks-uuid, the container's UUID. No initial raid1 sync (`--nosync`: the legs are blank
/// alike) and no integrity wipe (`--integrity-no-wipe`): instead every block of the container
/// is written once, the file system's image whole and zeros after it. A sector never written
/// fails dm-integrity's check when read, and the booted root reads beyond the file system's
/// used blocks (blkid probes the device's end, e2fsck the backup superblocks): a sparse copy
/// (e2image -ra) gave I/O errors and a failed systemd-fsck-root. Everything closed and
/// deactivated at the end.
fn raid_cache_disks(dir: &Path, host_kver: &str, tree: &Path, hook: &str, seed: &str) {
    let t = TempDir::new("raid-cache-prep");
    let (boot_uuid, luks_uuid) = (uuid_for(seed, 130), uuid_for(seed, 131));
    let fstab =
        format!("/dev/mapper/root_crypt / ext4 errors=remount-ro 0 1\nUUID={boot_uuid} /boot ext4 defaults 0 2\n");
    let crypttab = format!("root_crypt UUID={luks_uuid} none luks\n");
    // The tree with its own report hook (hard links but for the hook).
    let case = t.join("raid-cache.tree");
    sh(&format!("cp -al {} {}", tree.display(), case.display()));
    let h = case.join("usr/local/sbin/leanrd-test-hook");
    let _ = fs::remove_file(&h);
    fs::create_dir_all(h.parent().unwrap()).unwrap();
    fs::write(&h, hook).unwrap();
    fs::set_permissions(&h, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let root = ext4_image_with(
        &t,
        "raid-cache-root",
        2048,
        &uuid_for(seed, 132),
        &case,
        &[("fstab", &fstab), ("crypttab", &crypttab)],
    );
    sh(&format!("rm -rf {}", case.display()));
    let boot = ext4_image(&t, "boot", 256, &boot_uuid, &tree.join("boot"), None);
    sh(&format!("mv {} {}", boot.display(), dir.join("boot.disk").display()));
    let (r0, r1, cache) = (dir.join("raid-0.disk"), dir.join("raid-1.disk"), dir.join("cache.disk"));
    sh(&format!("truncate -s 2400M {} {} && truncate -s 128M {}", r0.display(), r1.display(), cache.display()));
    let lvc = "$lvm lvcreate -y --config \"$C\"";
    let body = format!(
        "printf %s '{PASS}' > /tmp/pass && \
         $lvm pvcreate -y --config \"$C\" /dev/vda /dev/vdb /dev/vdc && \
         $lvm vgcreate --config \"$C\" vg0 /dev/vda /dev/vdb /dev/vdc && \
         {lvc} --type raid1 -m 1 --nosync -L 2112M -n root vg0 /dev/vda /dev/vdb && \
         {lvc} --type cache-pool -L 64M -n cpool vg0 /dev/vdc && \
         $lvm lvconvert -y --config \"$C\" --type cache --cachepool vg0/cpool --cachemode writethrough vg0/root && \
         $cryptsetup luksFormat --batch-mode --type luks2 --integrity hmac-sha256 --integrity-no-wipe \
           --sector-size 4096 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --uuid {luks_uuid} \
           --key-file /tmp/pass /dev/mapper/vg0-root && \
         $cryptsetup open --key-file /tmp/pass /dev/mapper/vg0-root prep && \
         dd if=/dev/vdd of=/dev/mapper/prep bs=1M && \
         {{ dd if=/dev/zero of=/dev/mapper/prep bs=1M seek=2048 2>/dev/null; true; }} && \
         $cryptsetup close prep && $lvm lvs -a --config \"$C\" vg0 && $lvm vgchange -an --config \"$C\" vg0 && \
         sync && echo PREP-DONE"
    );
    let mut modules = crate::prep::STACK_MODULES.to_vec();
    modules.extend(["dm_raid", "dm_cache", "dm_cache_smq", "dm_integrity", "authenc", "hmac"]);
    let img =
        crate::prep::image(t.path(), host_kver, &["lvm", "cryptsetup", "cache_check"], &modules, "vdd", &body, None)
            .expect("the LUKS2 integrity/raid1/cache prep image");
    let disks: Vec<Disk> =
        [r0, r1, cache, root].into_iter().map(|path| Disk { path, gpt: false, bus: Bus::VirtioBlk }).collect();
    // The copy through dm-integrity's HMAC and dm-crypt under TCG: longer than prep_boot allows.
    let host = crate::kernel().expect("the host's kernel");
    prep_boot_on(&host, &img, &disks, &format!("LUKS2 integrity/raid1/cache {seed}"), Some(900));
    fs::write(dir.join("luks-uuid"), luks_uuid).unwrap();
}

/// Copies of disks a boot writes to (the cached ones stay as they were made).
fn writable(made: &[Made], t: &TempDir) -> Vec<Made> {
    made.iter()
        .enumerate()
        .map(|(i, m)| {
            let disks = m
                .disks
                .iter()
                .enumerate()
                .map(|(j, d)| {
                    let path = t.join(format!("w{i}-{j}.disk"));
                    sh(&format!("cp --reflink=auto --sparse=always {} {}", d.path.display(), path.display()));
                    Disk { path, ..d.clone() }
                })
                .collect();
            Made { disks, ..m.clone() }
        })
        .collect()
}

/// Run one scenario: Err says what failed.
pub fn run_one(name: &str, s: &Scenario) -> Result<(), String> {
    check(name, s)?;
    let Some(su) = suite(s.root)? else { return Ok(()) };
    let t = TempDir::new(&format!("scenario-{name}"));
    let first_image = image(s.root, &su, s.image, s.stack, s.tang);
    let (made, root_arg, usr_arg) = disks(name, s, &su);
    let self_built = s.image == Image::SelfBuilt;
    // The stacked root's members are read back afterwards: the boot writes to copies. A
    // Tang-bound container is bound on its copy (a new server's keys each run).
    // Two paths to one disk write to it through both: never on snapshots, a copy always.
    let two_paths = s.disks.iter().any(|v| v.bus == Bus::VirtioScsiTwoPaths);
    let keeps = self_built || s.stack == Stack::MdLvmLuks || s.tang || two_paths;
    let made = if keeps { writable(&made, &t) } else { made };
    let lab = match s.tang {
        true => match tang_lab(name, &t, &made[0].disks[0])? {
            Some(lab) => Some(lab),
            None => return Ok(()),
        },
        false => None,
    };
    let all: Vec<&Disk> = made.iter().flat_map(|m| &m.disks).collect();
    let mut cmdline = s.cmdline.replace("{root}", &root_arg).replace("{usr}", &usr_arg);
    // A self-building root gets leanrd on a disk of its own ([`tools_disk`]), last, on its
    // root disk's bus (no driver the machine would not have otherwise), for its first boot.
    let tools = self_built.then(|| {
        let path = t.join("tools.disk");
        fs::copy(tools_disk(&su), &path).unwrap();
        // A disk of its own: not a second LUN with the root's WWN.
        let bus = match made.iter().find(|m| m.holds == Some(Holds::Root)).unwrap().disks[0].bus {
            Bus::VirtioScsiTwoPaths => Bus::VirtioScsi,
            b => b,
        };
        Disk { path, gpt: false, bus }
    });
    if self_built {
        cmdline += " leanrd.test=selfbuild";
    }
    let boot = |title: &str, img: &Path, cmdline: &str, disks: &[&Disk], snapshot: bool| {
        let mut b = Boot::new(title, img, cmdline.trim(), qemu_args(disks, snapshot)).reject("Exec format error");
        if s.root.arm64() {
            // qemu-system-aarch64's virt board; TCG runs it at about half the x86 speed.
            b.start = Start::KernelAarch64;
            b.secs = 900;
        }
        for e in &s.expect {
            b = b.expect(e);
        }
        for r in &s.reject {
            b = b.reject(r);
        }
        if let Some(lab) = &lab {
            b.netns = Some(lab.ns.clone());
            b.qemu.extend(lab.nics(&[TANG_MAC], "virtio-net-pci", true).expect("a NIC in the lab"));
        }
        match s.stack {
            // Nothing typed: a prompt is a failure, which need not be waited out.
            Stack::Luks if s.tang => b
                .expect(&format!(
                    "unlocked as /dev/mapper/sda3_crypt with its clevis token 0 (tang {})",
                    crate::clevis::tang_url()
                ))
                .reject("Enter passphrase")
                .stop("Enter passphrase"),
            Stack::Luks => b.typing(PASS),
            Stack::MdLvmLuks => {
                b.answer = Some(PASS);
                b.expect("Enter passphrase for md_crypt")
            }
            Stack::Zfs => {
                b.answer = Some(PASS);
                b.expect("Enter passphrase for rpool/ROOT (ZFS)")
            }
            Stack::LuksIntegrityRaidCache => {
                b.answer = Some(PASS);
                b.expect("Enter passphrase for root_crypt")
            }
            _ => b,
        }
    };
    let with_tools: Vec<&Disk> = all.iter().copied().chain(&tools).collect();
    let mut first = boot(name, &first_image, &cmdline, &with_tools, !keeps);
    if self_built {
        first = first.expect("LEANRD-SELFBUILD ok");
    }
    let dump = t.join("ram.elf");
    if s.ram_key.is_some() {
        // Powered off, the machine stays (its RAM as it was) for the monitor's dump; then it ends.
        first.qemu.push("-no-shutdown".into());
        first.monitor = vec![("reboot: Power down".into(), format!("dump-guest-memory {}", dump.display()))];
        first = first.stop("reboot: Power down");
    }
    let (failed, outcomes) = run_keep(&su.kernel, std::slice::from_ref(&first));
    if !failed.is_empty() {
        return Err(format!("{name}: the boot failed (its console is above and under target/boot-logs)"));
    }
    if s.analyze {
        analyze_boot(&t, &outcomes[0].log);
    }
    if s.splash {
        println!("{name}: {}", splash_carried_on(&outcomes[0].log).map_err(|e| format!("{name}: {e}"))?);
    }
    if let Some(want) = s.ram_key {
        let key = luks_volume_key(&made[0].disks[0].path, (BOOT_START_MB + BOOT_MB) << 20)?;
        let ram = fs::read(&dump).map_err(|e| format!("{name}: the RAM dump {}: {e}", dump.display()))?;
        // At least the VM's memory (-m 512): a dump cut short would find nothing.
        if ram.len() < 500 << 20 {
            return Err(format!("{name}: the RAM dump has {} bytes: cut short", ram.len()));
        }
        let found = key_halves_in(&ram, &key);
        println!(
            "{name}: {}-byte volume key; copies of each 32-byte half in RAM after the way down: {found:?}",
            key.len()
        );
        let ok = match want {
            RamKey::Absent => found.iter().all(|&n| n == 0),
            RamKey::Present => found.iter().all(|&n| n > 0),
        };
        if !ok {
            return Err(format!("{name}: the volume key's halves in RAM: {found:?}, wanted {want:?}"));
        }
    }
    if s.stack == Stack::MdLvmLuks {
        // Once systemd entered the exitrd, top-down: the LUKS mapping, then the LVM volume under
        // it, then the array, in the kernel's words too (mdadm stops arrays at boot as well).
        let log = &outcomes[0].log;
        let entered = log.find("Entering exitrd").ok_or_else(|| format!("{name}: systemd did not enter the exitrd"))?;
        let after = &log[entered..];
        let at = |what: &str| after.find(what).ok_or_else(|| format!("{name}: no \"{what}\" after the exitrd's start"));
        let order = [
            at("md_crypt: LUKS mapping closed")?,
            at("vg0-root: LVM volume deactivated")?,
            at("md: md0 stopped.")?,
            at("md0: stopped, was clean")?,
        ];
        if !order.is_sorted() {
            return Err(format!("{name}: the layers were not closed top-down (LUKS, LVM, md): {order:?}"));
        }
        for d in &made[0].disks {
            let state = md_member_state(&d.path).map_err(|e| format!("{name}: {e}"))?;
            println!("{name}: mdadm --examine of {}: State : {state}", d.path.display());
            if state != "clean" {
                return Err(format!("{name}: md member {} is {state}, not clean", d.path.display()));
            }
        }
        // The next boot of the same disks: md assembles the array with no resync, and ext4
        // mounts the root with no journal to replay (it would say "recovery complete": the
        // file system inside LUKS, which the host cannot open, had `needs_recovery` set). It
        // ends once the root's systemd starts: both come before.
        let mut again =
            Boot::new(&format!("{name}, booted again"), &first_image, cmdline.trim(), qemu_args(&all, false));
        // Not the report's marks: it ends before.
        again.expect.clear();
        let mut again = again
            .expect("Enter passphrase for md_crypt")
            .expect("running in system mode")
            .reject("not clean -- starting background reconstruction")
            .reject("resync")
            .reject("recovery complete")
            .stop("running in system mode");
        again.answer = Some(PASS);
        if !run(&su.kernel, &[again]).is_empty() {
            return Err(format!(
                "{name}: the next boot resynced the array, replayed a journal or failed (its console is above)"
            ));
        }
        println!("{name}: booted again: no resync of md0, no journal replayed on the root");
    }
    if !self_built {
        return Ok(());
    }
    // The image the root built for itself: its storage drivers, its file systems, then a boot
    // with nothing on the command line.
    let own = t.join("own.img");
    let root = made.iter().find(|m| m.holds == Some(Holds::Root)).unwrap();
    let initrd = format!("boot/initrd.img-{}", su.kver);
    match s.stack {
        Stack::Luks => take_boot_file(&t, &root.disks[0], &format!("initrd.img-{}", su.kver), &own),
        // /boot is the first disk's whole file system.
        Stack::BcacheLvmThin | Stack::Zfs | Stack::LuksIntegrityRaidCache => {
            take_file(&t, &root.disks[0], false, &format!("initrd.img-{}", su.kver), &own)
        }
        Stack::MdLvmLuks | Stack::Lvm | Stack::Plain => take_file(&t, &root.disks[0], root.subvol, &initrd, &own),
    }
    let listing = String::from_utf8(ok(leanrd().arg("ls").arg(&own))).unwrap();
    let mods: Vec<String> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|p| p.contains(".ko"))
        .map(str::to_string)
        .collect();
    if !s.drivers.is_empty() {
        let drivers: Vec<&str> = s.drivers.iter().map(String::as_str).collect();
        let (got, want) = (storage(mods.iter().cloned()), storage_closure(&su.base.path, &su.kver, &drivers));
        if got != want {
            return Err(format!("{name}: its own image's storage drivers are {got:?}, not {want:?}"));
        }
    }
    for m in made.iter().filter(|m| m.holds.is_some()) {
        let want = format!("/{}.ko", m.fs.name());
        if !mods.iter().any(|p| p.contains(&want)) {
            return Err(format!("{name}: its own image has no {want} for its {:?} volume", m.holds.unwrap()));
        }
    }
    for p in &s.own_image_has {
        if !listing.contains(p.as_str()) {
            return Err(format!("{name}: its own image has no {p}"));
        }
    }
    for p in &s.own_image_lacks {
        if let Some(l) = listing.lines().find(|l| l.contains(p.as_str())) {
            return Err(format!("{name}: its own image has {p}: {l}"));
        }
    }
    if s.stack == Stack::Luks {
        let x = t.join("own.x");
        ok(leanrd().arg("extract").arg(&own).arg("-C").arg(&x));
        let conf = fs::read_to_string(x.join("etc/leanrd/init.conf")).unwrap();
        if !conf.contains(&format!("crypt sda3_crypt UUID={} none luks,discard needed", root.uuid)) {
            return Err(format!("{name}: crypttab's entry is not in its own image's init.conf:\n{conf}"));
        }
    }
    // A host-only image holds no module that cannot start on its machine (a driver for
    // hardware it lacks, or crc32c_intel on a CPU without SSE4.2): /init would say ENODEV.
    let mut second =
        boot(&format!("{name}, its own image"), &own, "", &all, !two_paths).reject("No such device (errno 19)");
    if s.tang {
        // No rd.neednet=1 on this command line: the network was up for Tang only.
        second = second.expect("down again (it was up for Tang only)");
    }
    let failed = run(&su.kernel, &[second]);
    if failed.is_empty() { Ok(()) } else { Err(format!("{name}: the boot of its own image failed")) }
}

/// A `tang` scenario's network lab (DHCP, and tangd with the process's keys), the root's
/// container on `disk` (a copy of the cached one) bound to its server as `clevis luks bind`
/// binds it. None (skipped, with a message) when a tool is missing.
fn tang_lab(name: &str, t: &TempDir, disk: &Disk) -> Result<Option<crate::netlab::NetLab>, String> {
    use crate::clevis;
    // The lab's DHCP server and tangd under socat: no NFS or iSCSI server.
    let lab_tools = ["ip", "dnsmasq"].into_iter().chain(crate::netlab::TANG_TOOLS);
    if !clevis::have_tools() || !lab_tools.clone().all(have) {
        return Ok(skip(&format!(
            "{name}: Tang needs {:?}, {:?} and tangd-keygen (apt install clevis tang socat dnsmasq-base)",
            clevis::TOOLS,
            lab_tools.collect::<Vec<_>>()
        )));
    }
    // tangd's keys and their advertisement: once per process.
    let (db, adv) = memo("tang keys", || {
        let db = scratch().join("tang-db");
        clevis::tang_keys(&db);
        let adv = scratch().join("tang-adv.jws");
        fs::write(&adv, clevis::advertisement(&db).unwrap_or_else(|e| panic!("{e}"))).unwrap();
        (db, adv)
    });
    // A random key, as `clevis luks bind` makes one (text: it is a passphrase to cryptsetup).
    let key = t.join("tang-key");
    let mut random = [0u8; 32];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    fs::write(&key, random.iter().map(|b| format!("{b:02x}")).collect::<String>()).unwrap();
    let jwe = clevis::encrypt("tang", &clevis::tang_config(&adv), &key, None)?;
    clevis::bind(t.path(), &disk.path, PASS, &key, &jwe).map_err(|e| format!("{name}: binding to Tang: {e}"))?;
    let spec = crate::netlab::LabSpec {
        exports: &[],
        dhcp: true,
        root_path: None,
        luns: &[],
        nvmf: None,
        tang: Some(crate::netlab::TangServer::Keys(&db)),
    };
    crate::netlab::NetLab::start("tang", &spec).map(Some).map_err(|e| format!("{name}: the network lab: {e}"))
}

/// A file out of the installer layout's /boot (its second partition).
fn take_boot_file(t: &TempDir, disk: &Disk, path: &str, out: &Path) {
    let mnt = t.join("take-boot.mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = mnt.display();
    sh_private(&format!(
        "set -e; l=$(losetup -f --show -r -o {o} --sizelimit {s} {d}); trap 'umount {m} 2>/dev/null || true; \
         losetup -d $l' EXIT; mount -o ro $l {m}; cp {m}/{path} {out}; umount {m}",
        o = BOOT_START_MB << 20,
        s = BOOT_MB << 20,
        d = disk.path.display(),
        out = out.display()
    ));
}

/// The storage drivers (drivers/{ata,block,md,nvme,scsi}) among `modules` paths.
fn storage(paths: impl Iterator<Item = String>) -> BTreeSet<String> {
    let dirs = ["/drivers/ata/", "/drivers/block/", "/drivers/md/", "/drivers/nvme/", "/drivers/scsi/"];
    paths.filter(|p| dirs.iter().any(|d| p.contains(d))).map(|p| leanrd_kmod::name_of_path(&p)).collect()
}

/// The storage drivers modprobe would load for `what` (with their dependencies), from the
/// tree's modules.
fn storage_closure(tree: &Path, kver: &str, what: &[&str]) -> BTreeSet<String> {
    let mut paths = Vec::new();
    for w in what {
        let o = ok(Command::new("modprobe").arg("-d").arg(tree).args(["-S", kver, "--show-depends", w]));
        for l in String::from_utf8_lossy(&o).lines() {
            if let Some(p) = l.strip_prefix("insmod ") {
                paths.push(p.split_whitespace().next().unwrap().to_string());
            }
        }
    }
    storage(paths.into_iter())
}

/// `leanrd analyze` reads a real boot: /init's record and the journal give every phase, the
/// module loads in lanes, and an SVG that a real renderer (rsvg-convert) draws.
pub fn analyze_boot(t: &TempDir, log: &str) {
    let lines = |prefix: &str| -> String {
        log.lines().filter_map(|l| l.trim_end_matches('\r').strip_prefix(prefix)).map(|l| format!("{l}\n")).collect()
    };
    let (rec, jour) = (t.join("boot.leanrd.log"), t.join("boot.journal"));
    fs::write(&rec, lines("LEANRD-INITRD ")).unwrap();
    fs::write(&jour, lines("LEANRD-JOURNAL ")).unwrap();
    let svg = t.join("boot.svg");
    let out = String::from_utf8(ok(leanrd().arg("analyze").arg(&rec).arg(&jour).arg("--svg").arg(&svg))).unwrap();
    eprintln!("leanrd analyze:\n{out}");
    let phase = |label: &str| -> f64 {
        let l = out.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label}:\n{out}"));
        l[label.len()..].trim().trim_end_matches(" s").parse().unwrap_or_else(|_| panic!("{label}: {l}"))
    };
    let (kernel, initramfs, root) =
        (phase("kernel until /init"), phase("initramfs (/init)"), phase("root system to multi-user"));
    assert!(kernel > 0.0 && initramfs > 0.0 && root > 0.0, "{out}");
    assert!(out.contains("module loads") && out.contains("switching to the new root"), "{out}");
    if !have("rsvg-convert") {
        skip::<()>("analyze's SVG is drawn by rsvg-convert (librsvg2-bin)");
        return;
    }
    let png = t.join("boot.png");
    let o = Command::new("rsvg-convert").arg("-o").arg(&png).arg(&svg).output().unwrap();
    assert!(o.status.success(), "rsvg-convert: {}", String::from_utf8_lossy(&o.stderr));
    assert!(fs::metadata(&png).unwrap().len() > 10_000);
}

#[cfg(test)]
mod tests {
    use super::parse;

    fn err(text: &str) -> String {
        parse(text).expect_err("a scenario written wrong was accepted")
    }

    #[test]
    fn a_scenario_written_wrong_is_an_error_before_any_vm() {
        // An unknown disk kind, named with its line.
        let e = err("[a]\nroot = \"debian13\"\ndisks = [{ fs = \"reiserfs\" }]\n");
        assert!(e.contains("line 3") && e.contains("unknown variant `reiserfs`") && e.contains("ext4"), "{e}");
        // A root that is not one of the roots.
        let e = err("[a]\nroot = \"debian14\"\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("line 2") && e.contains("unknown variant `debian14`"), "{e}");
        // A missing root, a field that does not exist.
        let e = err("[a]\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("missing field `root`"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\ndisks = [{ fs = \"ext4\", raid = 1 }]\n");
        assert!(e.contains("unknown field `raid`"), "{e}");
        // Layouts that cannot be made.
        let e = err("[a]\nroot = \"debian12\"\ndisks = [{ fs = \"xfs\", holds = \"usr\" }]\n");
        assert!(e.contains("line 1: scenario a: one volume holds the root"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\ndisks = [{ fs = \"ext4\", subvol = true }]\n");
        assert!(e.contains("only btrfs has subvolumes"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\ndisks = [{ fs = \"ext4\", members = 2 }]\n");
        assert!(e.contains("two for btrfs raid1"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\nstack = \"luks\"\ndisks = [{ fs = \"btrfs\" }]\n");
        assert!(e.contains("Luks holds ext4 volumes"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\ncmdline = \"{usr}\"\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("{usr} in cmdline"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\nimage = \"self-built\"\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("names the storage drivers"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\nimage = \"arch-zst\"\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("debian13's"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\nanalyze = true\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("leanrd.test=journal"), "{e}");
        let e = err("[a]\nroot = \"debian12\"\nimage = \"self-built\"\ndrivers = [\"virtio_blk\"]\n\
                     disks = [{ fs = \"btrfs\", members = 2 }]\n");
        assert!(e.contains("self-built root on raid1"), "{e}");
        let e = err("[a]\nroot = \"debian13\"\ntang = true\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("tang binds the luks stack's container"), "{e}");
        let e = err("[a]\nroot = \"debian13\"\nimage = \"self-built\"\nstack = \"luks\"\ntang = true\n\
                     cmdline = \"{root}\"\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("rd.neednet=1"), "{e}");
        let e = err("[a]\nroot = \"debian13\"\nstack = \"luks\"\ndisks = [{ fs = \"ext4\", bus = \"ahci\" }]\n");
        assert!(e.contains("virtio-blk or NVMe"), "{e}");
        let e = err("[a]\nroot = \"debian13\"\nstack = \"bcache-lvm-thin\"\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("of debian13-storage"), "{e}");
        let e = err("[a]\nroot = \"debian13\"\nstack = \"luks-integrity-raid-cache\"\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("luks-integrity-raid-cache holds the ext4 root alone"), "{e}");
        let e = err("[a]\nroot = \"debian13\"\ndisks = [{ fs = \"ext4\", bus = \"virtio-scsi-two-paths\" }]\n");
        assert!(e.contains("virtio-scsi-two-paths: one disk"), "{e}");
        let e = err("[Bad-Name]\nroot = \"debian12\"\ndisks = [{ fs = \"ext4\" }]\n");
        assert!(e.contains("lower-case letters"), "{e}");
    }

    #[test]
    fn the_boot_scenarios_are_valid() {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../leanrd/tests/boot/scenarios.toml");
        let all = super::load(&file).unwrap();
        assert!(all.len() >= 20, "{} scenarios", all.len());
    }
}

/// What [`Scenario::splash`] checks, on a boot's console (its journal and /init's log): Err
/// says what is wrong, Ok what was seen.
fn splash_carried_on(log: &str) -> Result<String, String> {
    let up = log.lines().find_map(|l| l.split("plymouth: the splash is up on ").nth(1));
    let up = up.ok_or("/init did not show the splash")?;
    let pid = up.split("(plymouthd pid ").nth(1).and_then(|r| r.split(',').next()).ok_or("no plymouthd pid")?;
    // systemd[1]: Received SIGRTMIN+20 from PID 131 (plymouthd).
    let heard: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("LEANRD-JOURNAL") && l.contains("(plymouthd)"))
        .filter_map(|l| l.split(" from PID ").nth(1)?.split(' ').next())
        .collect();
    if heard.is_empty() {
        return Err("the root's systemd heard from no plymouthd".into());
    }
    if let Some(other) = heard.iter().find(|p| **p != pid) {
        return Err(format!("a second plymouthd (pid {other}) beside /init's (pid {pid})"));
    }
    if !log.contains("Finished plymouth-quit-wait.service") {
        return Err("plymouth-quit-wait.service did not finish".into());
    }
    Ok(format!(
        "the splash from /init's plymouthd (pid {pid}) to the end: the root's systemd heard from it {} time(s) \
         and from no other; plymouth-quit-wait.service finished",
        heard.len()
    ))
}

#[cfg(test)]
mod splash_tests {
    use super::splash_carried_on;

    const UP: &str = "LEANRD-INITRD [    3.947] plymouth: the splash is up on /dev/dri/card0 (plymouthd pid 131, 1054 ms after its driver was asked for)\n";
    const QUIT: &str = "LEANRD-JOURNAL [   35.674075] leanrd-test systemd[1]: Finished plymouth-quit-wait.service - Hold until boot process finishes up.\n";

    fn heard(pid: u32) -> String {
        format!("LEANRD-JOURNAL [   35.5] leanrd-test systemd[1]: Received SIGRTMIN+21 from PID {pid} (plymouthd).\n")
    }

    #[test]
    fn the_daemon_from_the_initramfs_to_the_end() {
        assert!(splash_carried_on(&format!("{UP}{}{QUIT}", heard(131))).is_ok());
        let second = splash_carried_on(&format!("{UP}{}{}{QUIT}", heard(131), heard(402))).unwrap_err();
        assert!(second.contains("second plymouthd (pid 402)"), "{second}");
        assert!(splash_carried_on(&format!("{UP}{QUIT}")).is_err());
        assert!(splash_carried_on(&format!("{UP}{}", heard(131))).is_err());
        assert!(splash_carried_on(&format!("{}{QUIT}", heard(131))).is_err());
    }
}
