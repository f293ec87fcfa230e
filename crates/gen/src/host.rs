//! Host-only detection: from /proc/self/mountinfo find the root (and a separate /usr), walk
//! sysfs from its block device through slaves (partitions, dm, md) down to the hardware, and
//! collect every ancestor's modalias and driver. Reads a proc/sys root given by the caller,
//! so it runs on fixture trees too.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use leanrd_contract::{
    DeviceRef, ISCSI_PORT, IscsiTarget, LiveRoot, NOT_BLOCK_FSTYPES, NfsRoot, NfsVersion, NvmfTarget, Root, RootKind,
    fstab_entries, unescape_octal,
};

use leanrd_archive::{Context, Result, bail};

use crate::keymap;
use crate::modprobe::ModprobeConf;
use crate::stack::StackLayer;

/// One mounted file system that the image must be able to mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted (mountinfo's fifth field, escapes undone).
    pub mountpoint: String,
    /// The file system type (`ext4`, `btrfs`, `nfs4`).
    pub fstype: String,
    /// What is mounted: the device (`/dev/mapper/root`) or the export (`SERVER:PATH`), escapes
    /// undone.
    pub source: String,
    /// The file system's device number (major, minor), as mountinfo gives it.
    pub dev: (u32, u32),
    /// The per-mount options (`rw,relatime`).
    pub options: String,
    /// The directory of the file system mounted there (a btrfs subvolume: `/@`).
    pub fsroot: String,
    /// The file system's own options (mountinfo's last field: NFS's `vers=`, `addr=`).
    pub super_options: String,
}

/// What the image needs, as found on the host.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The root's mount.
    pub root: Mount,
    /// A separate /usr's mount; None when /usr is no mount point of its own.
    pub usr: Option<Mount>,
    /// Every modalias on the way from the root's block devices to the hardware.
    pub modaliases: BTreeSet<String>,
    /// Drivers bound on the way (module names when sysfs tells them).
    pub drivers: BTreeSet<String>,
    /// The layers of the root's (and /usr's) block stacks.
    pub stack: BTreeSet<StackLayer>,
    /// Extra modules the stack implies (dm_crypt, raid1, ...).
    pub modules: BTreeSet<String>,
    /// Block devices walked, for messages.
    pub devices: Vec<String>,
    /// The swap the system hibernates to.
    pub resume: Option<ResumeDev>,
    /// What detection could not settle, for the build's warnings.
    pub notes: Vec<String>,
    /// The dm-crypt devices in the stacks walked.
    pub crypt: Vec<CryptDev>,
    /// Keyboards (input devices with letter keys), by sysfs name (see `detect_keyboards`).
    pub keyboards: Vec<String>,
    /// The modaliases and drivers of the devices the keyboards hang off: loaded before a
    /// passphrase is asked for.
    pub keyboard_modules: BTreeSet<String>,
    /// The driver of the display the machine boots on (its DRM card's device: the PCI GPU
    /// with `boot_vga`, else every card's), as modalias and driver: the `drm` feature's
    /// host-only modules, loaded before plymouthd starts.
    pub display_modules: BTreeSet<String>,
    /// The boot display's GPUs (those of `display_modules` on PCI): what says which of their
    /// driver's firmware they load (see [`crate::gpu`]).
    pub display_gpus: Vec<crate::gpu::DisplayGpu>,
    /// Every device on the way from what the boot needs (the root's, /usr's and the resume
    /// device's block devices, the keyboards) to the hardware, for the boot proof.
    pub links: Vec<Link>,
    /// What the walk in progress is for ("root", "/usr", "resume").
    pub role: String,
    /// The root as the image records it, when detection settles it: a root of a kind other
    /// than a block device (NFS: its network interfaces' devices are in `links`, role "root").
    /// None for a block root, named from its device when the configuration is composed.
    pub root_source: Option<Root>,
    /// The network interfaces walked for a root on the network.
    pub interfaces: Vec<String>,
    /// Every network interface that is up with a device, walked to the hardware (role
    /// `network`), whatever the root: their drivers go into a host-only image with the `net`
    /// feature when something other than the root needs the network (a Tang server, SSH).
    pub nics: Vec<Link>,
    /// The iSCSI targets the walked disks come from (their sessions), to log in to again.
    pub iscsi: Vec<IscsiTarget>,
    /// The initiator name those sessions logged in as.
    pub iscsi_initiator: Option<String>,
    /// The NVMe over TCP subsystems the walked disks come from.
    pub nvmf: Vec<NvmfTarget>,
    /// The host NQN their controllers connected with.
    pub nvmf_hostnqn: Option<String>,
    /// The host ID their controllers connected with.
    pub nvmf_hostid: Option<String>,
    /// The CPU's modalias (/sys/devices/system/cpu/modalias: `cpu:type:x86,ven...:feature:,...`),
    /// which says the features a module bound to CPU features (crc32c_intel: SSE4.2) needs. Its
    /// feature numbers are the running kernel's.
    pub cpu_modalias: Option<String>,
    /// The running kernel's release (/proc/sys/kernel/osrelease).
    pub running_kernel: Option<String>,
    /// /dev/disk/by-uuid's links: the block device's kernel name (`sda2`, `dm-0`) → the UUID
    /// its link names (the first link found when two name the same device).
    pub by_uuid: BTreeMap<String, String>,
    /// This boot's kernel command line (/proc/cmdline; empty when unreadable).
    pub cmdline: String,
    /// The system's /etc/fstab (empty when it has none).
    pub fstab: String,
    /// The CPU's microcode file, by vendor (from /proc/cpuinfo's first processor: see
    /// `compose::cpu_microcode`); None for a CPU leanrd has no file name for.
    pub cpu_microcode: Option<(&'static str, String)>,
    /// The system has an /etc/hostid (a ZFS root's pool is refused as another system's by an
    /// image without it).
    pub zfs_hostid: bool,
}

impl Facts {
    /// The kind of root this machine has.
    pub fn root_kind(&self) -> RootKind {
        self.root_source.as_ref().map_or(RootKind::Block, Root::kind)
    }
}

/// The root as the image records it: an NFS mount's `SERVER:PATH` and the version it
/// mounted with (mountinfo's `vers=`); the server as its address, since a name needs DNS.
pub(crate) fn nfs_root(m: &Mount) -> Result<NfsRoot> {
    let spec = format!("nfs:{}", m.source);
    let mut n = match Root::parse(&spec, None) {
        Ok(Root::Nfs(n)) => n,
        Ok(_) => bail!("{}: the NFS root \"{}\" is not SERVER:PATH", m.mountpoint, m.source),
        Err(e) => bail!("{}: the NFS root cannot be recorded: {e}", m.mountpoint),
    };
    let opt = |k: &str| m.super_options.split(',').find_map(|o| o.strip_prefix(k)).map(str::to_string);
    if let Some(a) = opt("addr=") {
        n.server = Some(if a.contains(':') { format!("[{a}]") } else { a });
    }
    let vers = opt("vers=").unwrap_or_else(|| if m.fstype == "nfs4" { "4".into() } else { "3".into() });
    if vers.starts_with('4') {
        n.version = NfsVersion::V4;
    }
    // Mounted read-write now: so again (the bootloader's `ro` is for a root the system
    // remounts from its fstab, which an NFS root's need not name).
    let rw = m.options.split(',').any(|o| o == "rw");
    // What the mount needs to be made again: the version, the transport, the ports (not
    // the defaults), the security flavour.
    let mut o = vec![format!("vers={vers}")];
    for key in ["proto=", "port=", "mountproto=", "mountport=", "sec="] {
        if let Some(v) =
            opt(key).filter(|v| !(key == "port=" && (v == "2049" || v == "0")) && !(key == "sec=" && v == "sys"))
        {
            o.push(format!("{key}{v}"));
        }
    }
    if rw {
        o.push("rw".into());
    }
    n.options = Some(o.join(","));
    Ok(n)
}

/// The network interfaces that are up with a device behind them (loopback, bridges and other
/// virtual interfaces have none), sorted by name, each with its device walked to the hardware
/// like a disk's (role `role`).
fn network_links(root: &Path, role: &str) -> Result<Vec<(String, Vec<Link>)>> {
    let dir = root.join("sys/class/net");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .with_context(|| format!("{}: cannot read", dir.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let up = read_trim(&dir.join(&n).join("operstate")).is_some_and(|s| s == "up" || s == "unknown");
        let Ok(dev) = fs::canonicalize(dir.join(&n).join("device")) else { continue };
        if !up {
            continue;
        }
        let links = ancestors(root, &dev, role, &n);
        out.push((n, links));
    }
    Ok(out)
}

/// The network interfaces a network root may go over ([`network_links`]): their drivers are
/// the root's.
fn walk_network(root: &Path, f: &mut Facts, what: &str) -> Result<()> {
    let mut found = false;
    for (n, links) in network_links(root, "root")? {
        f.devices.push(n.clone());
        f.interfaces.push(n.clone());
        found |= !links.is_empty();
        for l in links {
            f.modaliases.extend(l.modalias.clone());
            f.drivers.extend(l.driver.clone());
            f.links.push(l);
        }
    }
    if !found {
        bail!("the root is on {what}, but no network interface with a device is up");
    }
    Ok(())
}

/// One device the boot needs a driver for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// "root", "/usr", "resume", "keyboard".
    pub role: String,
    /// The block device (or input device) it serves: `vda2`, `input3`.
    pub serves: String,
    /// The device, as its sysfs path under /sys/devices.
    pub device: String,
    /// Its modalias, when it has one.
    pub modalias: Option<String>,
    /// The driver bound to it: the module's name when sysfs tells it, else the driver's.
    pub driver: Option<String>,
}

/// A dm-crypt device found on the way to the root, /usr or the resume device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CryptDev {
    /// Its device-mapper name (what crypttab calls it).
    pub name: String,
    /// The LUKS header's UUID (from the dm UUID `CRYPT-LUKS2-<32 hex>-NAME`), dashed.
    pub luks_uuid: Option<String>,
    /// The kernel names of the devices it is on.
    pub backing: Vec<String>,
}

impl CryptDev {
    /// From a dm device's sysfs `dm/uuid` and `dm/name`: None unless it is dm-crypt.
    fn from_dm(uuid: &str, name: &str, backing: Vec<String>) -> Option<CryptDev> {
        let rest = uuid.strip_prefix("CRYPT-")?;
        let luks_uuid = rest
            .strip_prefix("LUKS1-")
            .or_else(|| rest.strip_prefix("LUKS2-"))
            .and_then(|r| r.get(..32))
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(|h| format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]));
        Some(CryptDev { name: name.to_string(), luks_uuid, backing })
    }
}

/// The swap a hibernated system resumes from, as the image will name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeDev {
    /// The swap device (for a swap file: the device holding it).
    pub device: DeviceRef,
    /// In pages, for a swap file.
    pub offset: Option<u64>,
    /// Where it was found: "/sys/power/resume", "/proc/swaps", ...
    pub source: String,
}

/// Parse /proc/self/mountinfo; the last mount at a mountpoint wins.
pub fn mounts(text: &str) -> Result<Vec<Mount>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-").with_context(|| format!("mountinfo:{}: no ' - '", n + 1))?;
        if f.len() < sep + 3 || sep < 6 {
            bail!("mountinfo:{}: too few fields", n + 1);
        }
        let (maj, min) = f[2].split_once(':').with_context(|| format!("mountinfo:{}: bad dev {}", n + 1, f[2]))?;
        out.push(Mount {
            mountpoint: unescape_octal(f[4]),
            fstype: f[sep + 1].to_string(),
            source: unescape_octal(f[sep + 2]),
            dev: (
                maj.parse().with_context(|| format!("mountinfo:{}: bad dev {}", n + 1, f[2]))?,
                min.parse().with_context(|| format!("mountinfo:{}: bad dev {}", n + 1, f[2]))?,
            ),
            options: f[5].to_string(),
            fsroot: unescape_octal(f[3]),
            super_options: f.get(sep + 3).map(|o| o.to_string()).unwrap_or_default(),
        });
    }
    Ok(out)
}

/// Detect from `root` (normally "/", which holds proc/ and sys/).
pub fn detect(root: &Path) -> Result<Facts> {
    let mi = root.join("proc/self/mountinfo");
    let text = fs::read_to_string(&mi).with_context(|| format!("{}: cannot read", mi.display()))?;
    let all = mounts(&text)?;
    let find = |mp: &str| all.iter().rev().find(|m| m.mountpoint == mp).cloned();
    let mut f = Facts { root: find("/").context("no mount at / in mountinfo")?, ..Facts::default() };
    f.usr = find("/usr");
    let mut targets = vec![f.root.clone()];
    targets.extend(f.usr.clone());
    for m in targets {
        f.role = if m.mountpoint == "/" { "root".into() } else { m.mountpoint.clone() };
        // The kind of root: a network root brings its interfaces' drivers, a kind leanrd
        // cannot boot is an error here (the image would not find its root).
        if m.mountpoint == "/" && NOT_BLOCK_FSTYPES.contains(&m.fstype.as_str()) {
            match m.fstype.as_str() {
                "nfs" | "nfs4" => {
                    f.root_source = Some(Root::Nfs(nfs_root(&m)?));
                    walk_network(root, &mut f, &format!("NFS ({})", m.source))?;
                    continue;
                }
                // A live system: its overlay's medium, where leanrd's and dracut's /init mount
                // it (/run/initramfs/live) or Debian's live-boot does (/run/live/medium).
                "overlay"
                    if let Some(med) = ["/run/initramfs/live", "/run/live/medium"].iter().find_map(|p| find(p)) =>
                {
                    let link = root.join(format!("sys/dev/block/{}:{}", med.dev.0, med.dev.1));
                    let dev = fs::canonicalize(&link).with_context(|| {
                        format!("the live medium {} ({}:{}) is not in sysfs", med.source, med.dev.0, med.dev.1)
                    })?;
                    let name = Path::new(&med.source)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let medium =
                        by_uuid(root, &name).map(DeviceRef::Uuid).or_else(|| DeviceRef::parse(&med.source).ok());
                    f.root_source = Some(Root::Live(LiveRoot { medium }));
                    for m in ["loop", "squashfs", "overlay", &format!("fs-{}", med.fstype)] {
                        f.modules.insert(m.to_string());
                    }
                    walk_block(root, &dev, &mut f, 0)?;
                    continue;
                }
                t => bail!(
                    "the root is {t} ({}): leanrd boots roots of these kinds only: {}",
                    m.source,
                    RootKind::ALL.map(|k| k.name()).join(", ")
                ),
            }
        }
        if m.fstype == "zfs" {
            zfs_mount(root, &m, &mut f)?;
            continue;
        }
        if m.dev.0 == 0 {
            // No block device number: btrfs (its members are listed in sysfs), or a network
            // or virtual file system (nothing to walk). Anything else cannot be resolved here,
            // and an image built without its drivers would not boot.
            let members = btrfs_members(root, &m);
            if members.is_empty() && !NOT_BLOCK_FSTYPES.contains(&m.fstype.as_str()) {
                bail!(
                    "{} on {} ({}, device {}:{}): cannot find its block devices{} (use --universal)",
                    m.mountpoint,
                    m.source,
                    m.fstype,
                    m.dev.0,
                    m.dev.1,
                    if m.fstype == "btrfs" { " in /sys/fs/btrfs" } else { "" }
                );
            }
            for dev in members {
                walk_block(root, &dev, &mut f, 0)?;
            }
            continue;
        }
        let link = root.join(format!("sys/dev/block/{}:{}", m.dev.0, m.dev.1));
        let dev = fs::canonicalize(&link).with_context(|| {
            format!(
                "the root's block device {}:{} ({}) is not in {}",
                m.dev.0,
                m.dev.1,
                m.source,
                root.join("sys/dev/block").display()
            )
        })?;
        walk_block(root, &dev, &mut f, 0)?;
    }
    Ok(f)
}

/// A ZFS root (or a /usr dataset under it): the dataset recorded, zfs's module, and the pool's
/// devices walked like any root's (they may sit on LUKS, md, multipath). The devices come from
/// `zpool list -vHPL` (sysfs says nothing of which disks a pool holds).
fn zfs_mount(root: &Path, m: &Mount, f: &mut Facts) -> Result<()> {
    if m.mountpoint == "/" {
        f.root_source = Some(Root::Zfs(leanrd_contract::ZfsRoot { dataset: Some(m.source.clone()) }));
    } else {
        let under_root = match &f.root_source {
            Some(Root::Zfs(z)) => z.dataset.as_ref().is_some_and(|d| m.source.starts_with(&format!("{d}/"))),
            _ => false,
        };
        if !under_root {
            bail!(
                "{} is the ZFS dataset {}, not one under the root's dataset: leanrd's /init mounts a ZFS /usr only \
                 as a dataset under a ZFS root",
                m.mountpoint,
                m.source
            );
        }
        return Ok(());
    }
    f.modules.insert("zfs".into());
    let pool = m.source.split('/').next().unwrap_or(&m.source);
    let out = std::process::Command::new("zpool")
        .args(["list", "-vHPL", pool])
        .output()
        .with_context(|| format!("the root is the ZFS dataset {}: zpool list (install zfsutils-linux)", m.source))?;
    if !out.status.success() {
        bail!("zpool list -vHPL {pool}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let vdevs = zfs_vdevs(&String::from_utf8_lossy(&out.stdout));
    if vdevs.is_empty() {
        bail!("zpool list -vHPL {pool} names no device of the pool");
    }
    for v in vdevs {
        let name = Path::new(&v).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let link = root.join("sys/class/block").join(&name);
        let dev = fs::canonicalize(&link)
            .with_context(|| format!("the ZFS pool {pool}'s device {v} is not in {}", link.display()))?;
        walk_block(root, &dev, f, 0)?;
    }
    Ok(())
}

/// The devices of a pool in `zpool list -vHPL`'s output: the indented lines whose name is a
/// /dev path (mirror-0, raidz1-0, and the `logs`/`cache`/`spare` headings are not).
pub(crate) fn zfs_vdevs(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('\t') || l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("/dev/"))
        .map(str::to_string)
        .collect()
}

/// Everything host-only detection finds: the root's and /usr's stacks ([`detect`]), the
/// resume device ([`detect_resume`]) and the keyboards (`detect_keyboards`).
pub fn detect_all(root: &Path, sysroot: &Path) -> Result<Facts> {
    let mut f = detect(root)?;
    detect_resume(root, sysroot, &mut f).context("detecting the resume device")?;
    detect_keyboards(root, &mut f);
    detect_displays(root, &mut f);
    f.cpu_modalias = read_trim(&root.join("sys/devices/system/cpu/modalias")).filter(|m| m.starts_with("cpu:"));
    f.running_kernel = read_trim(&root.join("proc/sys/kernel/osrelease")).filter(|k| !k.is_empty());
    f.by_uuid = uuid_links(root);
    // No /sys/class/net (a fixture, a container): no interfaces.
    f.nics = network_links(root, "network").unwrap_or_default().into_iter().flat_map(|(_, l)| l).collect();
    f.cmdline = fs::read_to_string(root.join("proc/cmdline")).unwrap_or_default();
    f.fstab = fs::read_to_string(sysroot.join("etc/fstab")).unwrap_or_default();
    f.zfs_hostid = sysroot.join("etc/hostid").is_file();
    let cpuinfo = fs::read_to_string(root.join("proc/cpuinfo")).unwrap_or_default();
    f.cpu_microcode = crate::compose::cpu_microcode(&cpuinfo);
    Ok(f)
}

/// The system's own configuration that the image carries, read once before anything is
/// composed, for host-only and universal images alike: modprobe.d, and the console's keymap
/// and font.
#[derive(Debug, Clone, Default)]
pub(crate) struct SystemConfig {
    /// Every modprobe.d file's lines (see [`ModprobeConf::read`]).
    pub modprobe: ModprobeConf,
    /// The console's keymap and font (see [`keymap::console_setup`]).
    pub console: keymap::ConsoleSetup,
}

/// Read the system's configuration under `sysroot` (host-only: with `facts`, whose command
/// line may name the keymap). An error when a modprobe.d file cannot be read as text.
pub(crate) fn read_config(sysroot: &Path, facts: Option<&Facts>) -> Result<SystemConfig> {
    Ok(SystemConfig {
        modprobe: ModprobeConf::read(sysroot)?,
        console: keymap::console_setup(sysroot, facts.map(|f| f.cmdline.as_str())),
    })
}

/// The page size hibernation counts `resume_offset` in.
const PAGE: u64 = 4096;

/// The resume device: the kernel's current /sys/power/resume (and resume_offset) if set,
/// else the largest active swap in /proc/swaps (a partition, or a swap file with the place of
/// its first page from FIEMAP), else initramfs-tools' `RESUME=` in the system's
/// /etc/initramfs-tools/conf.d/resume, else the swap line of its fstab. Its block devices are
/// walked like the root's, so that a swap on LUKS or LVM brings those in.
pub fn detect_resume(root: &Path, sysroot: &Path, f: &mut Facts) -> Result<()> {
    let Some((name, r)) = find_resume(root, sysroot, &mut f.notes) else { return Ok(()) };
    if let Some(name) = name {
        let dir = root.join("sys/class/block").join(&name);
        match fs::canonicalize(&dir) {
            // Its devices' drivers and stack come in. One whose devices cannot be walked is
            // left out with a note, never a failed build: the image still boots, without resuming.
            Ok(dev) => {
                let mut g = f.clone();
                g.role = "resume".into();
                match walk_block(root, &dev, &mut g, 0) {
                    Ok(()) => *f = g,
                    Err(e) => {
                        f.notes.push(format!("resume device {name} ({}): {e}; the image will not resume", r.source));
                        return Ok(());
                    }
                }
            }
            Err(_) => {
                f.notes.push(format!("resume device {name} ({}): not in sysfs; its drivers may be missing", r.source))
            }
        }
    }
    f.resume = Some(r);
    Ok(())
}

/// The resume device and its kernel name (when known).
fn find_resume(root: &Path, sysroot: &Path, notes: &mut Vec<String>) -> Option<(Option<String>, ResumeDev)> {
    let named = |name: String, offset: Option<u64>, source: &str| {
        let device = by_uuid(root, &name).map(DeviceRef::Uuid).unwrap_or_else(|| DeviceRef::Kernel(name.clone()));
        Some((Some(name), ResumeDev { device, offset, source: source.into() }))
    };
    // The kernel's own setting (systemd and the hibernation tools write it).
    if let Some(devno) = read_trim(&root.join("sys/power/resume")).filter(|d| d != "0:0" && !d.is_empty()) {
        let offset = read_trim(&root.join("sys/power/resume_offset")).and_then(|o| o.parse().ok()).filter(|&o| o > 0);
        if let Some(name) = block_name(root, &devno) {
            return named(name, offset, "/sys/power/resume");
        }
    }
    // The largest active swap.
    if let Ok(text) = fs::read_to_string(root.join("proc/swaps")) {
        let mut swaps: Vec<(u64, String, String)> = text
            .lines()
            .skip(1)
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                Some((w.get(2)?.parse().ok()?, unescape_octal(w.first()?), w.get(1)?.to_string()))
            })
            .collect();
        swaps.sort_by_key(|s| std::cmp::Reverse(s.0));
        for (_, path, kind) in swaps {
            if kind == "partition" {
                if let Some(name) = name_of_path(root, &path) {
                    return named(name, None, "/proc/swaps");
                }
                continue;
            }
            match swap_file(root, &path) {
                Ok((name, offset)) => return named(name, Some(offset), "/proc/swaps (a swap file)"),
                Err(why) => notes.push(format!("swap file {path}: {why}; not used for resume")),
            }
        }
    }
    // What the system's configuration says.
    let conf = sysroot.join("etc/initramfs-tools/conf.d/resume");
    let from_conf = fs::read_to_string(&conf).ok().and_then(|t| {
        let v = t.lines().find_map(|l| l.trim().strip_prefix("RESUME="))?.trim_matches(['"', '\'']).to_string();
        Some((v, conf.display().to_string()))
    });
    let fstab = sysroot.join("etc/fstab");
    let from_fstab = || {
        let t = fs::read_to_string(&fstab).ok()?;
        let e = fstab_entries(&t).into_iter().find(|e| e.vfstype == "swap" && !e.noauto())?;
        // A swap file named by the fstab: its offset is not known without it being active.
        (!e.spec.starts_with('/') || e.spec.starts_with("/dev/")).then(|| (e.spec, fstab.display().to_string()))
    };
    let (spec, source) = from_conf.or_else(from_fstab)?;
    if spec.is_empty() || spec == "none" {
        return None;
    }
    match DeviceRef::parse(&spec) {
        Ok(device) => {
            let name = resolve_name(root, &device);
            Some((name, ResumeDev { device, offset: None, source }))
        }
        Err(e) => {
            notes.push(format!("{source}: {e}"));
            None
        }
    }
}

/// The kernel name of the block device MAJ:MIN.
fn block_name(root: &Path, devno: &str) -> Option<String> {
    let p = fs::canonicalize(root.join("sys/dev/block").join(devno)).ok()?;
    Some(p.file_name()?.to_string_lossy().into_owned())
}

/// The kernel name of a block device node path (/dev/vda2, /dev/mapper/vg-swap, /dev/dm-1).
fn name_of_path(root: &Path, path: &str) -> Option<String> {
    if let Some(dm) = path.strip_prefix("/dev/mapper/") {
        let rd = fs::read_dir(root.join("sys/class/block")).ok()?;
        return rd
            .flatten()
            .find(|e| read_trim(&e.path().join("dm/name")).as_deref() == Some(dm))
            .map(|e| e.file_name().to_string_lossy().into_owned());
    }
    if let Ok(md) = fs::metadata(root.join(path.trim_start_matches('/')))
        && std::os::unix::fs::FileTypeExt::is_block_device(&md.file_type())
    {
        use std::os::unix::fs::MetadataExt;
        let (maj, min) = (rustix::fs::major(md.rdev()), rustix::fs::minor(md.rdev()));
        if let Some(n) = block_name(root, &format!("{maj}:{min}")) {
            return Some(n);
        }
    }
    let name = Path::new(path).file_name()?.to_string_lossy().into_owned();
    root.join("sys/class/block").join(&name).exists().then_some(name)
}

/// The kernel name of the device a reference names, through /dev/disk links on the host.
pub(crate) fn resolve_name(root: &Path, d: &DeviceRef) -> Option<String> {
    let link = match d {
        DeviceRef::Uuid(u) => root.join("dev/disk/by-uuid").join(u),
        DeviceRef::Label(l) => root.join("dev/disk/by-label").join(l),
        DeviceRef::PartUuid { uuid, offset: 0 } => root.join("dev/disk/by-partuuid").join(uuid),
        DeviceRef::PartLabel(l) => root.join("dev/disk/by-partlabel").join(l),
        DeviceRef::DevNo { major, minor } => return block_name(root, &format!("{major}:{minor}")),
        DeviceRef::Mapper(n) => return name_of_path(root, &format!("/dev/mapper/{n}")),
        DeviceRef::Kernel(n) => return Some(n.clone()),
        _ => return None,
    };
    let target = fs::read_link(link).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// Every /dev/disk/by-uuid link: the device's kernel name → its UUID (the first link in
/// directory order when two name one device, as [`by_uuid`] finds it).
fn uuid_links(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(root.join("dev/disk/by-uuid")).into_iter().flatten().flatten() {
        let Some(name) = fs::read_link(e.path()).ok().and_then(|t| Some(t.file_name()?.to_string_lossy().into_owned()))
        else {
            continue;
        };
        out.entry(name).or_insert_with(|| e.file_name().to_string_lossy().into_owned());
    }
    out
}

/// The UUID /dev/disk/by-uuid gives the block device `name`.
pub(crate) fn by_uuid(root: &Path, name: &str) -> Option<String> {
    let rd = fs::read_dir(root.join("dev/disk/by-uuid")).ok()?;
    rd.flatten()
        .find(|e| fs::read_link(e.path()).is_ok_and(|t| t.file_name().is_some_and(|n| n == name)))
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

/// A swap file: the block device its file system is on, and where its first page is, in
/// pages (the kernel's `resume_offset`).
pub fn swap_file(root: &Path, path: &str) -> std::result::Result<(String, u64), String> {
    use std::os::unix::fs::MetadataExt;
    let p = root.join(path.trim_start_matches('/'));
    let file = fs::File::open(&p).map_err(|e| e.to_string())?;
    let md = file.metadata().map_err(|e| e.to_string())?;
    let (maj, min) = (rustix::fs::major(md.dev()), rustix::fs::minor(md.dev()));
    if maj == 0 {
        return btrfs_swap_file(root, path);
    }
    let name = block_name(root, &format!("{maj}:{min}")).ok_or(format!("its device {maj}:{min} is not in sysfs"))?;
    let start = leanrd_archive::fiemap::physical_start(&file)
        .map_err(|e| format!("FIEMAP: {e}"))?
        .ok_or("its first page has no plain place on the device")?;
    if start % PAGE != 0 {
        return Err(format!("its first page is not page-aligned on the device (byte {start})"));
    }
    Ok((name, start / PAGE))
}

/// A swap file on btrfs: FIEMAP gives addresses in the file system's own space, which only
/// btrfs' chunk tree maps to a device. btrfs-progs (6.1 and later) does that mapping; run it
/// rather than re-implement the chunk tree walk. Only a single-device file system: the kernel
/// hibernates to one device.
fn btrfs_swap_file(root: &Path, path: &str) -> std::result::Result<(String, u64), String> {
    let mi = fs::read_to_string(root.join("proc/self/mountinfo")).map_err(|e| e.to_string())?;
    let all = mounts(&mi).map_err(|e| e.to_string())?;
    let m = all
        .iter()
        .filter(|m| Path::new(path).starts_with(&m.mountpoint))
        .max_by_key(|m| m.mountpoint.len())
        .ok_or("no mount holds it")?;
    if m.fstype != "btrfs" {
        return Err(format!("on {} ({}), which has no single block device", m.mountpoint, m.fstype));
    }
    let members = btrfs_members(root, m);
    let [member] = members.as_slice() else {
        return Err(format!("on a btrfs of {} devices; the kernel hibernates to one", members.len()));
    };
    let name = member.file_name().map(|n| n.to_string_lossy().into_owned()).ok_or("no device name")?;
    let p = root.join(path.trim_start_matches('/'));
    let out = std::process::Command::new("btrfs")
        .args(["inspect-internal", "map-swapfile", "-r"])
        .arg(&p)
        .output()
        .map_err(|e| format!("btrfs inspect-internal map-swapfile: {e} (install btrfs-progs 6.1 or later)"))?;
    if !out.status.success() {
        return Err(format!("btrfs inspect-internal map-swapfile: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let offset =
        text.trim().parse().map_err(|_| format!("btrfs inspect-internal map-swapfile printed \"{}\"", text.trim()))?;
    Ok((name, offset))
}

/// The member devices (their sysfs directories) of the btrfs file system whose devices include
/// the mount's source: /sys/fs/btrfs/FSID/devices/NAME links to each member.
fn btrfs_members(root: &Path, m: &Mount) -> Vec<PathBuf> {
    if m.fstype != "btrfs" {
        return Vec::new();
    }
    let base = Path::new(&m.source).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mapper = m.source.strip_prefix("/dev/mapper/");
    let Ok(fsids) = fs::read_dir(root.join("sys/fs/btrfs")) else { return Vec::new() };
    for fsid in fsids.flatten() {
        let Ok(rd) = fs::read_dir(fsid.path().join("devices")) else { continue };
        let mut members: Vec<(String, PathBuf)> = rd
            .flatten()
            .filter_map(|e| Some((e.file_name().to_string_lossy().into_owned(), fs::canonicalize(e.path()).ok()?)))
            .collect();
        members.sort();
        let ours = members.iter().any(|(name, dir)| {
            *name == base || mapper.is_some_and(|n| read_trim(&dir.join("dm/name")).as_deref() == Some(n))
        });
        if ours {
            return members.into_iter().map(|(_, dir)| dir).collect();
        }
    }
    Vec::new()
}

/// The LVM layers a device-mapper device of LVM's is part of, and the modules its target
/// needs, from what LVM names it: a thin pool's device has the layer suffix `-tpool` on its
/// dm UUID (`-pool` on the pool LV's own), its sub-LVs end in `_tdata`/`_tmeta`; a cache
/// LV's sub-LVs end in `_corig`, `_cdata` and `_cmeta`; a raid1 LV's in `_rimage_N` and
/// `_rmeta_N`; a snapshot's origin and exception store have the layer suffixes `-real` and
/// `-cow`. lvm refuses LV names that contain these, so a user's LV is never mistaken for one.
pub(crate) fn lvm_kind(uuid: &str, dm_name: &str) -> (Vec<StackLayer>, Vec<&'static str>) {
    let (mut layers, mut modules) = (Vec::new(), Vec::new());
    let sub = |suffixes: &[&str]| suffixes.iter().any(|x| dm_name.ends_with(x));
    let image = |kind: &str| {
        dm_name.rsplit_once(kind).is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if uuid.ends_with("-tpool") || uuid.ends_with("-pool") || sub(&["_tdata", "_tmeta"]) {
        layers.push(StackLayer::Thin);
        modules.push("dm_thin_pool");
    }
    if sub(&["_corig", "_cdata", "_cmeta"]) {
        layers.push(StackLayer::Cache);
        modules.extend(["dm_cache", "dm_cache_smq"]);
    }
    if image("_rimage_") || image("_rmeta_") {
        modules.extend(["dm_raid", "raid1"]);
    }
    if uuid.ends_with("-real") || uuid.ends_with("-cow") {
        modules.push("dm_snapshot");
    }
    (layers, modules)
}

/// Whether a dm-integrity device is a LUKS2 container's own (cryptsetup's `NAME_dif` under a
/// container formatted with `--integrity`) rather than a standalone one: cryptsetup 2.8 names
/// it `CRYPT-SUBDEV-...`; 2.7 and older `CRYPT-INTEGRITY-UUID-NAME_dif`, UUID the container's
/// in 32 hex digits, where integritysetup's standalone devices are `CRYPT-INTEGRITY-NAME` (they
/// have no UUID); and its holder is the container (`held_by_luks2`, from sysfs).
pub(crate) fn luks2_integrity(uuid: &str, held_by_luks2: bool) -> bool {
    if uuid.starts_with("CRYPT-SUBDEV-") || held_by_luks2 {
        return true;
    }
    uuid.strip_prefix("CRYPT-INTEGRITY-").and_then(|r| r.split_once('-')).is_some_and(|(hex, name)| {
        hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) && name.ends_with("_dif")
    })
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn walk_block(root: &Path, dev: &Path, f: &mut Facts, depth: usize) -> Result<()> {
    if depth > 16 {
        bail!("{}: block device stack too deep", dev.display());
    }
    f.devices.push(dev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    // device-mapper and md: what they are, then their slaves.
    if let Some(uuid) = read_trim(&dev.join("dm/uuid")) {
        f.stack.insert(StackLayer::Dm);
        f.modules.insert("dm_mod".into());
        // veritysetup's and systemd-veritysetup's devices are CRYPT-VERITY-..., /init's
        // LEANRD-VERITY-...: no dm-crypt.
        if uuid.starts_with("CRYPT-VERITY-") || uuid.starts_with("LEANRD-VERITY-") {
            f.stack.insert(StackLayer::Verity);
            f.modules.insert("dm_verity".into());
        } else if uuid.starts_with("CRYPT-SUBDEV-") || uuid.starts_with("CRYPT-INTEGRITY-") {
            // dm-integrity: under a LUKS2 container formatted with --integrity (cryptsetup's
            // subdevice, its tags checked by an AEAD such as authenc(hmac(sha256),xts(aes)),
            // which the kernel asks /init for as it needs its parts), or standalone.
            f.modules.extend(["dm_integrity", "authenc", "hmac"].map(String::from));
            let held_by_luks2 = fs::read_dir(dev.join("holders")).is_ok_and(|rd| {
                rd.flatten()
                    .any(|h| read_trim(&h.path().join("dm/uuid")).is_some_and(|u| u.starts_with("CRYPT-LUKS2-")))
            });
            if !luks2_integrity(&uuid, held_by_luks2) {
                f.stack.insert(StackLayer::Integrity);
            }
        } else if uuid.starts_with("CRYPT-") {
            f.stack.insert(StackLayer::Crypt);
            f.modules.insert("dm_crypt".into());
            let name = read_trim(&dev.join("dm/name"))
                .unwrap_or_else(|| dev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
            let backing = fs::read_dir(dev.join("slaves"))
                .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            if let Some(c) = CryptDev::from_dm(&uuid, &name, backing)
                && !f.crypt.iter().any(|x| x.name == c.name)
            {
                f.crypt.push(c);
            }
        } else if uuid.starts_with("mpath-") || (uuid.starts_with("part") && uuid.contains("-mpath-")) {
            // A dm-multipath map (multipath-tools' DM UUID: mpath-WWID), or a partition map of
            // one (kpartx's: partN-mpath-WWID, a linear map over the map, walked next).
            f.stack.insert(StackLayer::Multipath);
            f.modules.insert("dm_multipath".into());
        } else if uuid.starts_with("LVM-") {
            f.stack.insert(StackLayer::Lvm);
            let name = read_trim(&dev.join("dm/name")).unwrap_or_default();
            let (layers, modules) = lvm_kind(&uuid, &name);
            f.stack.extend(layers);
            f.modules.extend(modules.iter().map(|m| m.to_string()));
        }
    }
    // A bcache device: its backing device is its slave; the cache set's devices are found
    // by /init at boot (registered with the backing device, whatever their names).
    if dev.join("bcache").is_dir() && dev.file_name().is_some_and(|n| n.to_string_lossy().starts_with("bcache")) {
        f.stack.insert(StackLayer::Bcache);
        f.modules.insert("bcache".into());
    }
    if let Some(level) = read_trim(&dev.join("md/level")) {
        f.stack.insert(StackLayer::Md);
        f.modules.insert("md_mod".into());
        let m = match level.as_str() {
            "raid4" | "raid5" | "raid6" => "raid456".to_string(),
            l => l.to_string(),
        };
        f.modules.insert(m);
    }
    let slaves = dev.join("slaves");
    if let Ok(rd) = fs::read_dir(&slaves) {
        let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        v.sort();
        for s in v {
            let real = fs::canonicalize(&s).with_context(|| format!("{}: broken link", s.display()))?;
            walk_block(root, &real, f, depth + 1)?;
        }
    }
    // A partition's disk is its parent directory.
    let disk =
        if dev.join("partition").exists() { dev.parent().unwrap_or(dev).to_path_buf() } else { dev.to_path_buf() };
    iscsi_session(root, &disk, f)?;
    nvmf_controllers(root, &disk, f)?;
    nbd_device(&disk, f, root)?;
    let serves = dev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for l in ancestors(root, &disk, &f.role, &serves) {
        f.modaliases.extend(l.modalias.clone());
        f.drivers.extend(l.driver.clone());
        f.links.push(l);
    }
    Ok(())
}

/// An iSCSI disk (a `sessionN` directory on its sysfs path): the session's target, portal
/// and portal group, to log in to again, with the initiator name it used; the network
/// interfaces that are up are walked to their drivers (once).
fn iscsi_session(root: &Path, disk: &Path, f: &mut Facts) -> Result<()> {
    let number = |a: &Path| a.file_name()?.to_str()?.strip_prefix("session")?.parse::<u32>().ok();
    let Some(n) = disk.ancestors().find_map(number) else { return Ok(()) };
    let class = root.join(format!("sys/class/iscsi_session/session{n}"));
    let conn = root.join(format!("sys/class/iscsi_connection/connection{n}:0"));
    let need = |dir: &Path, names: &[&str]| {
        names
            .iter()
            .find_map(|a| read_trim(&dir.join(a)).filter(|v| !v.is_empty() && v != "<NULL>"))
            .with_context(|| format!("{}: the root's iSCSI session has no {}", dir.display(), names.join(" or ")))
    };
    let name = need(&class, &["targetname"])?;
    let address = need(&conn, &["persistent_address", "address"])?;
    let port: u16 = need(&conn, &["persistent_port", "port"])?
        .parse()
        .with_context(|| format!("{}: the port is not a number", conn.display()))?;
    // Offloading adapters (qla4xxx, bnx2i, be2iscsi) log in in firmware: /init's iscsistart
    // over iscsi_tcp cannot make their sessions.
    let host = disk.ancestors().find_map(|a| a.file_name()?.to_str()?.strip_prefix("host").map(str::to_string));
    if let Some(driver) = host.and_then(|h| read_trim(&root.join(format!("sys/class/scsi_host/host{h}/proc_name"))))
        && driver != "iscsi_tcp"
    {
        bail!(
            "the root is on iSCSI through {driver} (an offloading adapter): leanrd's /init logs in over iscsi_tcp only"
        );
    }
    // The LUN is left out: /init finds the root by root=, and several LUNs of one target
    // (a volume group across them) are one login.
    let t = IscsiTarget {
        server: if address.contains(':') { format!("[{address}]") } else { address },
        port: (port != ISCSI_PORT).then_some(port),
        name,
        lun: None,
        group: read_trim(&class.join("tpgt")).and_then(|g| g.parse().ok()).filter(|g| *g != 1),
        netdev: None,
        chap: None,
    };
    if !f.iscsi.contains(&t) {
        f.iscsi.push(t.clone());
    }
    if f.iscsi_initiator.is_none() {
        f.iscsi_initiator =
            read_trim(&class.join("initiatorname")).filter(|v| !v.is_empty() && v != "<NULL>").or_else(|| {
                let text = fs::read_to_string(root.join("etc/iscsi/initiatorname.iscsi")).ok()?;
                text.lines().find_map(|l| l.trim().strip_prefix("InitiatorName=")).map(str::to_string)
            });
    }
    if f.stack.insert(StackLayer::Iscsi) {
        f.modules.insert("iscsi_tcp".into());
        let what = format!("iSCSI ({} at {}:{port})", t.name, t.server);
        walk_network(root, f, &what)?;
    }
    Ok(())
}

/// A Network Block Device (/dev/nbdN): the nbd layer, its module, and the network interfaces
/// that are up walked to their drivers. The export is not recorded: the kernel does not say
/// which server a device is connected to, so the command line names it (`root=nbd:`).
fn nbd_device(disk: &Path, f: &mut Facts, root: &Path) -> Result<()> {
    let name = disk.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let is_nbd = name.strip_prefix("nbd").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    if is_nbd && f.stack.insert(StackLayer::Nbd) {
        f.modules.insert("nbd".into());
        walk_network(root, f, &format!("NBD ({name})"))?;
    }
    Ok(())
}

/// An NVMe over Fabrics namespace (its disk under /sys/devices/virtual/nvme-subsystem/
/// nvme-subsysN, or nvme-fabrics/ctl/nvmeM without multipath): each controller of the
/// subsystem on TCP is recorded (address, port, local address, subsystem NQN) with the host
/// NQN and ID it connected with; another transport is an error (/init connects over TCP
/// only). The network interfaces that are up are walked to their drivers (once).
fn nvmf_controllers(root: &Path, disk: &Path, f: &mut Facts) -> Result<()> {
    let name = |a: &Path| a.file_name().and_then(|n| n.to_str()).map(str::to_string);
    let mut ctrls: Vec<String> = Vec::new();
    for a in disk.ancestors() {
        let (Some(n), Some(parent)) = (name(a), a.parent().and_then(name)) else { continue };
        if parent == "nvme-subsystem" && n.starts_with("nvme-subsys") {
            let dir = root.join("sys/class/nvme-subsystem").join(&n);
            let mut v: Vec<String> = fs::read_dir(&dir)
                .map(|rd| rd.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
                .unwrap_or_default();
            v.retain(|c| {
                c.strip_prefix("nvme").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            });
            v.sort();
            ctrls = v;
            break;
        }
        if parent == "ctl" && a.parent().and_then(Path::parent).and_then(name).as_deref() == Some("nvme-fabrics") {
            ctrls = vec![n];
            break;
        }
    }
    for c in ctrls {
        let dir = root.join("sys/class/nvme").join(&c);
        let transport = read_trim(&dir.join("transport")).unwrap_or_default();
        if transport == "pcie" || transport.is_empty() {
            continue;
        }
        if transport != "tcp" {
            bail!("the root is on NVMe over {transport} ({c}): leanrd's /init connects to NVMe over TCP only");
        }
        let address = read_trim(&dir.join("address")).unwrap_or_default();
        let field = |k: &str| address.split(',').find_map(|kv| kv.strip_prefix(k)).map(str::to_string);
        let nqn = read_trim(&dir.join("subsysnqn"))
            .with_context(|| format!("{}: the root's NVMe/TCP controller has no subsysnqn", dir.display()))?;
        let traddr = field("traddr=").with_context(|| format!("{}: no traddr in \"{address}\"", dir.display()))?;
        let spec = format!(
            "tcp,{traddr},{},{},{nqn}",
            field("host_traddr=").unwrap_or_default(),
            field("trsvcid=").unwrap_or_default()
        );
        let t = match NvmfTarget::parse(&spec) {
            Ok(t) => t,
            Err(e) => bail!("{}: {e}", dir.display()),
        };
        if !f.nvmf.contains(&t) {
            f.nvmf.push(t.clone());
        }
        f.nvmf_hostnqn = f.nvmf_hostnqn.take().or_else(|| read_trim(&dir.join("hostnqn")));
        f.nvmf_hostid = f.nvmf_hostid.take().or_else(|| read_trim(&dir.join("hostid")));
        if f.stack.insert(StackLayer::Nvmf) {
            f.modules.insert("nvme_tcp".into());
            walk_network(
                root,
                f,
                &format!("NVMe over TCP ({} at {}:{})", t.nqn.as_deref().unwrap_or(""), t.address, t.port()),
            )?;
        }
    }
    Ok(())
}

/// The drivers of a block device (its sysfs directory) that is not part of the root's stack:
/// the disk's (for a partition) and every ancestor's modalias and driver.
pub(crate) fn device_drivers(
    root: &Path,
    dev: &Path,
    modaliases: &mut BTreeSet<String>,
    drivers: &mut BTreeSet<String>,
) {
    let disk = if dev.join("partition").exists() { dev.parent().unwrap_or(dev) } else { dev };
    for l in ancestors(root, disk, "", "") {
        modaliases.extend(l.modalias);
        drivers.extend(l.driver);
    }
}

/// A block device's file system type as udev recorded it (`ID_FS_TYPE` in
/// /run/udev/data/bMAJ:MIN).
pub(crate) fn fs_type(root: &Path, name: &str) -> Option<String> {
    let devno = read_trim(&root.join("sys/class/block").join(name).join("dev"))?;
    let db = fs::read_to_string(root.join("run/udev/data").join(format!("b{devno}"))).ok()?;
    db.lines().find_map(|l| l.strip_prefix("E:ID_FS_TYPE=")).filter(|t| !t.is_empty()).map(str::to_string)
}

/// Every device from `start` up to /sys/devices, with its modalias and its driver (the
/// module's name when sysfs tells it).
fn ancestors(root: &Path, start: &Path, role: &str, serves: &str) -> Vec<Link> {
    let top = fs::canonicalize(root.join("sys/devices")).unwrap_or_else(|_| root.join("sys/devices"));
    let mut out = Vec::new();
    let mut cur = start;
    while cur.starts_with(&top) && cur != top {
        let modalias = read_trim(&cur.join("modalias")).filter(|a| !a.is_empty());
        let driver = fs::canonicalize(cur.join("driver")).ok().and_then(|drv| {
            let module = fs::canonicalize(drv.join("module")).ok().and_then(|m| m.file_name().map(|n| n.to_owned()));
            let name = module.or_else(|| drv.file_name().map(|n| n.to_owned()))?;
            Some(name.to_string_lossy().replace('-', "_"))
        });
        if modalias.is_some() || driver.is_some() {
            let device = cur.strip_prefix(&top).unwrap_or(cur).display().to_string();
            out.push(Link { role: role.into(), serves: serves.into(), device, modalias, driver });
        }
        match cur.parent() {
            Some(p) => cur = p,
            None => break,
        }
    }
    out
}

/// Whether an input device's `capabilities/key` bitmap (hex words, most significant first,
/// each as wide as the kernel's long) has every letter key: a keyboard, not a power button,
/// a lid switch or a mouse.
pub(crate) fn has_letter_keys(bitmap: &str) -> bool {
    // KEY_Q..KEY_P, KEY_A..KEY_L, KEY_Z..KEY_M (linux/input-event-codes.h).
    const LETTERS: [std::ops::RangeInclusive<usize>; 3] = [16..=25, 30..=38, 44..=50];
    let words: Vec<u64> = bitmap.split_whitespace().rev().map(|w| u64::from_str_radix(w, 16).unwrap_or(0)).collect();
    let bit = |n: usize| words.get(n / 64).is_some_and(|w| w >> (n % 64) & 1 == 1);
    LETTERS.iter().all(|r| r.clone().all(bit))
}

/// The boot display's DRM driver ([`Facts::display_modules`]): the card whose PCI device has
/// `boot_vga` = 1, else every card (a machine with one GPU that is not on PCI). Only the
/// device itself: the buses above it are the kernel's or coldplug's. The firmware framebuffer's
/// own driver (simpledrm, built in where it exists) has no module to add. A PCI GPU with a
/// driver is also recorded with its ids and IP blocks ([`Facts::display_gpus`]).
pub(crate) fn detect_displays(root: &Path, f: &mut Facts) {
    let Ok(rd) = fs::read_dir(root.join("sys/class/drm")) else { return };
    let mut cards: Vec<(String, PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix("card")?;
            (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(())?;
            Some((name, fs::canonicalize(e.path().join("device")).ok()?))
        })
        .collect();
    cards.sort();
    let boot: Vec<&(String, PathBuf)> =
        cards.iter().filter(|(_, d)| read_trim(&d.join("boot_vga")).as_deref() == Some("1")).collect();
    let chosen: Vec<&(String, PathBuf)> = if boot.is_empty() { cards.iter().collect() } else { boot };
    for (name, dev) in chosen {
        if let Some(l) = ancestors(root, dev, "display", name).into_iter().next() {
            f.display_modules.extend(l.modalias.clone());
            f.display_modules.extend(l.driver.clone());
            let own = dev.ends_with(&l.device);
            if let Some(g) =
                l.driver.as_deref().filter(|_| own).and_then(|d| crate::gpu::DisplayGpu::read(dev, d, &l.device))
            {
                f.display_gpus.push(g);
            }
        }
    }
}

/// The keyboards (/sys/class/input devices with letter keys) and what drives them: the
/// modaliases and drivers of every device they hang off — the HID device (hid-generic or a
/// vendor driver), its USB interface (usbhid) or I2C device (i2c-hid), the host controller
/// (xhci_pci), or the serio port (atkbd) and i8042. The input device's own modalias is left
/// out: it names input handlers (joydev, evbug...), not drivers.
pub(crate) fn detect_keyboards(root: &Path, f: &mut Facts) {
    let Ok(rd) = fs::read_dir(root.join("sys/class/input")) else { return };
    let mut found: Vec<(String, PathBuf)> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("input"))
        .filter(|e| read_trim(&e.path().join("capabilities/key")).is_some_and(|k| has_letter_keys(&k)))
        .filter_map(|e| Some((e.file_name().to_string_lossy().into_owned(), fs::canonicalize(e.path()).ok()?)))
        .collect();
    found.sort();
    for (name, dev) in found {
        let parent = dev.parent().unwrap_or(&dev).to_path_buf();
        for l in ancestors(root, &parent, "keyboard", &name) {
            f.keyboard_modules.extend(l.modalias.clone());
            f.keyboard_modules.extend(l.driver.clone());
            f.links.push(l);
        }
        f.keyboards.push(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_luks2_containers_integrity_device_is_not_a_standalone_one() {
        let hex = "0c0c0c0c111142228333444444444444";
        // cryptsetup 2.8's name, and 2.7's (Debian 13's cryptsetup 2.7.5).
        assert!(luks2_integrity(&format!("CRYPT-SUBDEV-{hex}-root_crypt_dif"), false));
        assert!(luks2_integrity(&format!("CRYPT-INTEGRITY-{hex}-root_crypt_dif"), false));
        // integritysetup's own, whatever its name; unless a LUKS2 container holds it.
        assert!(!luks2_integrity("CRYPT-INTEGRITY-introot", false));
        assert!(!luks2_integrity("CRYPT-INTEGRITY-data_dif", false));
        assert!(!luks2_integrity(&format!("CRYPT-INTEGRITY-{hex}-introot"), false));
        assert!(luks2_integrity("CRYPT-INTEGRITY-introot", true));
    }

    #[test]
    fn a_pools_devices_from_zpool_list() {
        let text = "rpool\t9.50G\t1.2G\t8.3G\t-\t-\t0%\t12%\t1.00x\tONLINE\t-\n\
                    \tmirror-0\t9.50G\t1.2G\t8.3G\t-\t-\t0%\t12.0%\t-\tONLINE\n\
                    \t/dev/vdb1\t9.5G\t-\t-\t-\t-\t-\t-\t-\tONLINE\n\
                    \t/dev/dm-0\t9.5G\t-\t-\t-\t-\t-\t-\t-\tONLINE\n\
                    logs\t-\t-\t-\t-\t-\t-\t-\t-\t-\n\
                    \t/dev/nvme0n1p3\t1G\t-\t-\t-\t-\t-\t-\t-\tONLINE\n";
        assert_eq!(zfs_vdevs(text), ["/dev/vdb1", "/dev/dm-0", "/dev/nvme0n1p3"]);
        assert!(zfs_vdevs("rpool\t1G\n").is_empty());
    }

    #[test]
    fn lvm_sub_lvs_name_their_layer() {
        let k = |uuid: &str, name: &str| super::lvm_kind(uuid, name);
        assert_eq!(k("LVM-aaaa-tpool", "vg-pool-tpool"), (vec![StackLayer::Thin], vec!["dm_thin_pool"]));
        assert_eq!(k("LVM-aaaa", "vg-pool_tmeta").0, [StackLayer::Thin]);
        assert_eq!(k("LVM-aaaa", "vg-root_corig"), (vec![StackLayer::Cache], vec!["dm_cache", "dm_cache_smq"]));
        assert_eq!(k("LVM-aaaa", "vg-fast_cpool_cdata").0, [StackLayer::Cache]);
        assert_eq!(k("LVM-aaaa", "vg-r_rimage_0"), (vec![], vec!["dm_raid", "raid1"]));
        assert_eq!(k("LVM-aaaa", "vg-r_rmeta_12").1, ["dm_raid", "raid1"]);
        assert_eq!(k("LVM-aaaa-cow", "vg-snap-cow"), (vec![], vec!["dm_snapshot"]));
        // A linear LV, names that only look like sub-LVs, a writecache's origin.
        for (u, n) in
            [("LVM-a", "vg-root"), ("LVM-a", "vg-r_rimage_"), ("LVM-a", "vg-r_rimage_x"), ("LVM-a", "vg-w_wcorig")]
        {
            assert_eq!(k(u, n), (vec![], vec![]), "{n}");
        }
    }

    #[test]
    fn parses_mountinfo() {
        let t = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
                 23 22 0:21 / /proc rw - proc proc rw\n\
                 30 22 254:2 / /usr rw master:3 - xfs /dev/mapper/vg-usr\\040x rw\n";
        let m = mounts(t).unwrap();
        assert_eq!(
            m[0],
            Mount {
                mountpoint: "/".into(),
                fstype: "ext4".into(),
                source: "/dev/vda1".into(),
                dev: (254, 1),
                options: "rw,relatime".into(),
                fsroot: "/".into(),
                super_options: "rw".into(),
            }
        );
        assert_eq!(m[2].source, "/dev/mapper/vg-usr x");
        assert!(mounts("garbage\n").is_err());
    }

    #[test]
    fn an_nfs_root_is_recorded_by_address_and_version() {
        let t = "22 1 0:40 / / ro,relatime shared:1 - nfs4 srv.test:/srv/root \
                 ro,vers=4.2,rsize=131072,proto=tcp,addr=10.77.0.1,clientaddr=10.77.0.50\n\
                 23 1 0:41 / /mnt rw - nfs [fd00::1]:/x rw,vers=3,addr=fd00::1\n";
        let m = mounts(t).unwrap();
        let n = nfs_root(&m[0]).unwrap();
        assert_eq!(Root::Nfs(n).to_string(), "nfs4:10.77.0.1:/srv/root:vers=4.2,proto=tcp");
        let n = nfs_root(&m[1]).unwrap();
        assert_eq!(Root::Nfs(n).to_string(), "nfs:[fd00::1]:/x:vers=3,rw");
    }
}
