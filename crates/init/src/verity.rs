//! dm-verity roots and /usr, set up by /init with the device-mapper ioctls ([`crate::dm`]), as
//! systemd-veritysetup does: `roothash=`/`usrhash=` with `systemd.verity_{root,usr}_{data,hash,
//! options}=`, the devices otherwise found by the root hash's halves (the data partition's
//! PARTUUID is its first 128 bits, the verity partition's its last), a `*-verity-sig`
//! partition's signature handed to the kernel, and a root found by partition type (DPS) on the
//! disk the boot loader names when the command line names none (and /usr by its type on the
//! root's disk then: [`dps_find_usr`]).
//!
//! The kernel checks every block as it is read, and the signature against its keyrings
//! (`dm-verity.require_signatures=1` makes one necessary): /init reads the superblock, builds
//! the table veritysetup would, and reads the first data block once the device is live, so that
//! a hash tree that does not match stops the boot here, with a diagnosis, rather than at the
//! mount or later.
//!
//! Not veritysetup: it is 150 KB of cryptsetup's library and its dependencies for one ioctl
//! sequence /init already speaks, and /init's own diagnosis says what the kernel refused.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::DeviceRef;
use leanrd_contract::verity::{
    Fec, Geometry, PartRole, SUPERBLOCK_SIZE, Superblock, VerityOptions, VeritySig, flags, hash_halves, part_role,
    table, to_hex,
};

use crate::Init;
use crate::cmdline::VeritySpec;
use crate::devices::{self, Dev};
use crate::sys::{self, strerror};
use crate::wait::{DeviceWaiter, Waiter};

/// This machine's architecture, as DPS's table names it.
#[cfg(target_arch = "x86_64")]
pub const ARCH: &str = "x86_64";
/// This machine's architecture, as DPS's table names it.
#[cfg(target_arch = "aarch64")]
pub const ARCH: &str = "aarch64";

/// The EFI variable systemd-boot and systemd-stub set: the ESP's PARTUUID, the booted disk's.
pub const LOADER_DEVICE_PART_UUID: &str =
    "/sys/firmware/efi/efivars/LoaderDevicePartUUID-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";

/// The most a signature partition's JSON is read of (systemd's limit is the same order).
const SIG_MAX: usize = 64 * 1024;

/// A verity device to set up: its name (/dev/mapper/NAME), its root hash, options and devices.
pub struct Volume {
    /// `root` or `usr`.
    pub name: &'static str,
    /// The root hash.
    pub hash: Vec<u8>,
    /// What gave the hash, for messages (`roothash=`, the signature partition /dev/vda4).
    pub source: String,
    /// veritytab's options.
    pub options: VerityOptions,
    /// The data device.
    pub data: DeviceWaiter,
    /// The hash device.
    pub hash_dev: DeviceWaiter,
    /// The FEC device, when the options name one.
    pub fec: Option<DeviceWaiter>,
    /// Look for a signature partition beside the data partition (the devices were found by
    /// the hash's halves, as DPS places them).
    pub dps: bool,
    /// The signature partition's, when one is found (or the options'): DER PKCS#7.
    pub signature: Option<Vec<u8>>,
    /// The signing certificate's SHA-256 as the signature partition gives it
    /// (`certificateFingerprint`), for the diagnosis of a refused signature.
    pub signed_by: Option<String>,
}

impl Volume {
    /// The volume the command line asks for (`which`: `root` or `usr`), when it asks for one.
    pub fn wanted(
        name: &'static str,
        spec: &VeritySpec,
        off: bool,
        gpt_auto_off: bool,
    ) -> Result<Option<Volume>, String> {
        let Some(hash) = spec.hash.clone().filter(|_| !off) else { return Ok(None) };
        let param = if name == "root" { "roothash=" } else { "usrhash=" };
        let (first, last) = hash_halves(&hash).ok_or_else(|| format!("{param}: too short a hash"))?;
        let by_half = |given: &Option<DeviceRef>, half: String, what: &str| match given {
            Some(d) => Ok(d.clone()),
            None if gpt_auto_off => Err(format!(
                "{param} with rd.systemd.gpt_auto=0 needs systemd.verity_{name}_{what}= (its {what} device)"
            )),
            None => Ok(DeviceRef::PartUuid { uuid: half, offset: 0 }),
        };
        let data = by_half(&spec.data, first, "data")?;
        let hash_dev = by_half(&spec.hash_device, last, "hash")?;
        let fec = match &spec.options.fec_device {
            Some(f) => {
                Some(DeviceWaiter::new(role(name, 2), DeviceRef::parse(f).map_err(|e| format!("fec-device={f}: {e}"))?))
            }
            None => None,
        };
        Ok(Some(Volume {
            name,
            source: format!("{param}{}", to_hex(&hash)),
            dps: spec.data.is_none(),
            signature: spec.options.signature.clone(),
            signed_by: None,
            hash,
            options: spec.options.clone(),
            data: DeviceWaiter::new(role(name, 0), data),
            hash_dev: DeviceWaiter::new(role(name, 1), hash_dev),
            fec,
        }))
    }
}

/// The waiters' roles, as messages name them.
fn role(name: &str, which: usize) -> &'static str {
    match (name, which) {
        ("root", 0) => "systemd.verity_root_data",
        ("root", 1) => "systemd.verity_root_hash",
        ("root", _) => "the root's fec-device",
        (_, 0) => "systemd.verity_usr_data",
        (_, 1) => "systemd.verity_usr_hash",
        _ => "/usr's fec-device",
    }
}

impl Waiter for Volume {
    fn describe(&self) -> String {
        let mut parts: Vec<String> = [&self.data, &self.hash_dev]
            .into_iter()
            .chain(self.fec.as_ref())
            .filter(|w| w.found.is_none())
            .map(|w| w.describe())
            .collect();
        if parts.is_empty() {
            parts.push("nothing".into());
        }
        format!("the verity devices of {} ({})", self.source, parts.join(", "))
    }
    fn wants(&self) -> Option<&DeviceRef> {
        Some(&self.data.want)
    }
    fn offer(&mut self, devs: &[Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        let a = self.data.offer(devs, devno_of);
        let b = self.hash_dev.offer(devs, devno_of);
        let c = self.fec.as_mut().is_none_or(|f| f.offer(devs, devno_of));
        if a && self.dps
            && self.signature.is_none()
            && let Some(s) = signature_beside(self.data.found.as_ref(), &self.hash, devs)
        {
            self.signature = Some(s.signature);
            self.signed_by = s.fingerprint;
        }
        a && b && c
    }
}

/// The verity-sig partition's JSON on the data partition's disk that signs `hash`, if one does.
fn signature_beside(data: Option<&Dev>, hash: &[u8], devs: &[Dev]) -> Option<VeritySig> {
    let disk = data?.disk.as_ref()?;
    devs.iter()
        .filter(|d| d.disk.as_ref() == Some(disk))
        .filter(|d| d.probe.partflags & flags::NO_AUTO == 0)
        .filter(|d| {
            let r = d.probe.parttype.as_deref().and_then(|t| part_role(ARCH, t));
            matches!(r, Some(PartRole::RootVeritySig | PartRole::UsrVeritySig))
        })
        .filter_map(|d| read_sig(d).ok())
        .find(|s| s.root_hash == hash)
}

/// A signature partition's JSON.
fn read_sig(d: &Dev) -> Result<VeritySig, String> {
    let f = sys::open(&d.path()).map_err(|e| format!("{}: {}", d.path(), strerror(e)))?;
    let mut b = alloc::vec![0u8; SIG_MAX];
    let n = rustix::io::pread(&f, &mut b, 0).map_err(|e| format!("{}: {}", d.path(), strerror(e)))?;
    VeritySig::parse(&b[..n]).map_err(|e| format!("{} (a verity signature partition): {e}", d.path()))
}

/// The block device's size in bytes (sysfs), 0 when unknown.
fn size_of(d: &Dev) -> u64 {
    sys::read_string(&format!("/sys/class/block/{}/size", d.name))
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0)
        .saturating_mul(512)
}

/// The kernel log's last lines about dm-verity and device-mapper (why it refused a table).
fn kernel_says() -> Vec<String> {
    let Ok(f) = rustix::fs::open(
        "/dev/kmsg",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    let mut b = [0u8; 1024];
    // One record per read; EAGAIN at the end, EPIPE for a record overwritten meanwhile.
    loop {
        match rustix::io::read(&f, &mut b) {
            Ok(0) => break,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&b[..n]);
                let msg = rec.split_once(';').map(|(_, m)| m).unwrap_or("").lines().next().unwrap_or("");
                let msg = msg.trim();
                let said = (msg.contains("device-mapper: verity:")
                    || msg.contains("device-mapper: table:")
                    || (msg.contains("device-mapper") && msg.contains("error")))
                    && !msg.contains("using implementation")
                    && !msg.contains("using shash")
                    && out.last().is_none_or(|l| l != msg);
                if said {
                    out.push(msg.to_string());
                }
            }
            Err(sys::Errno::PIPE) | Err(sys::Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    let skip = out.len().saturating_sub(3);
    out.split_off(skip)
}

/// Whether dm-verity requires signatures (its `require_signatures` parameter).
fn signatures_required() -> bool {
    sys::read_string("/sys/module/dm_verity/parameters/require_signatures").is_some_and(|s| s.trim() == "Y")
}

/// Set the volume up as /dev/mapper/NAME (its devices found) and read its first block: the
/// device, or why not.
pub fn open(init: &mut Init, v: &Volume) -> Result<Dev, String> {
    let data = v.data.found.clone().ok_or("the verity data device was not found")?;
    let hash = v.hash_dev.found.clone().ok_or("the verity hash device was not found")?;
    let what = format!("dm-verity {} ({}, data {}, hash {})", v.name, v.source, data.path(), hash.path());
    init.mods.load("dm_mod", &mut init.log);
    init.mods.load("dm_verity", &mut init.log);
    let sb = if v.options.superblock {
        let f = sys::open(&hash.path()).map_err(|e| format!("{what}: {}: {}", hash.path(), strerror(e)))?;
        let b = sys::read_at(&f, v.options.hash_offset, SUPERBLOCK_SIZE).unwrap_or_default();
        let sb = Superblock::parse(&b).map_err(|e| {
            format!(
                "{what}: {} at byte {}: {e} (systemd.verity_{}_options=superblock=false,... when the hash device has \
                 none)",
                hash.path(),
                v.options.hash_offset,
                v.name
            )
        })?;
        Some(sb)
    } else {
        None
    };
    let g = Geometry::new(&v.options, sb.as_ref()).map_err(|e| format!("{what}: {e}"))?;
    if let Some(n) = g.digest_size()
        && n != v.hash.len()
    {
        return Err(format!(
            "{what}: the root hash has {} bytes, but {} gives {n}: not this device's hash",
            v.hash.len(),
            g.algorithm
        ));
    }
    let sectors = g.sectors().ok_or_else(|| format!("{what}: {} data blocks overflow", g.data_blocks))?;
    let have = size_of(&data);
    if have != 0 && have / 512 < sectors {
        return Err(format!(
            "{what}: the hash tree covers {} bytes, but {} has {have}",
            sectors.saturating_mul(512),
            data.path()
        ));
    }
    let devno = |d: &Dev| format!("{}:{}", d.devno.0, d.devno.1);
    let fec = match &v.fec {
        Some(w) => {
            let f = w.found.as_ref().ok_or("the FEC device was not found")?;
            // cryptsetup's VERITY_FEC_blocks: the data and the hash area, which ends where the
            // FEC data starts on a shared device, else at the hash device's end.
            let hash_bytes = if f.devno == hash.devno { v.options.fec_offset } else { size_of(&hash) };
            let blocks = g.data_blocks.saturating_add(hash_bytes / g.data_block_size as u64);
            Some(Fec { device: devno(f), offset: v.options.fec_offset, blocks, roots: v.options.fec_roots })
        }
        None => None,
    };
    // The signature: in this thread's keyring while the kernel reads it (at the table's load).
    let key_desc = format!("leanrd:verity:{}", v.name);
    let key = match &v.signature {
        Some(s) => Some(
            crate::process::add_user_key(&key_desc, s)
                .map_err(|e| format!("{what}: adding its signature to the kernel keyring: {}", strerror(e)))?,
        ),
        None => None,
    };
    let params =
        table(&g, &devno(&data), &devno(&hash), &v.hash, &v.options, fec.as_ref(), key.map(|_| key_desc.as_str()));
    init.log.step(&format!("verity {}: {params}", v.name));
    let r = crate::dm::create_readonly(v.name, &format!("LEANRD-VERITY-{}", v.name), "verity", sectors, &params);
    if let Some(k) = key {
        crate::process::unlink_key(k);
    }
    let devno = r.map_err(|e| {
        let said = kernel_says();
        let said = if said.is_empty() { String::new() } else { format!(" (the kernel: {})", said.join("; ")) };
        // Whose certificate the kernel lacks, when the signature partition says.
        let by = match &v.signed_by {
            Some(fp) => format!(" by the certificate whose SHA-256 is {fp}"),
            None => String::new(),
        };
        let why = if signatures_required() && e.step == "DM_TABLE_LOAD" {
            if v.signature.is_some() {
                format!(
                    "the kernel refused the root hash's signature{by} (dm-verity.require_signatures=1: it must be \
                     signed by a key in the kernel's trusted, secondary or platform keyring; under Secure Boot the \
                     firmware's db certificates are in the platform keyring)"
                )
            } else {
                "the kernel requires a signed root hash (dm-verity.require_signatures=1) and there is no signature \
                 (no verity-sig partition with this hash, no root-hash-signature= option)"
                    .into()
            }
        } else if v.signature.is_some() && e.step == "DM_TABLE_LOAD" {
            format!("the kernel refused the verity table or its root hash's signature{by}")
        } else {
            "the kernel refused the verity table".into()
        };
        format!("{what}: {why}: {}: {}{said}", e.step, strerror(e.errno))
    })?;
    let node = format!("/dev/mapper/{}", v.name);
    sys::mkdir_p("/dev/mapper");
    let _ = rustix::fs::mknodat(
        rustix::fs::CWD,
        node.as_str(),
        rustix::fs::FileType::BlockDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(devno.0, devno.1),
    );
    // The first block, read through the hash tree: a tree that does not match the root hash
    // (a flipped byte in the hash or the data device, the wrong hash) fails here.
    let f = sys::open(&node).map_err(|e| format!("{what}: {node}: {}", strerror(e)))?;
    let mut b = alloc::vec![0u8; g.data_block_size as usize];
    if let Err(e) = rustix::io::pread(&f, &mut b, 0) {
        drop(f);
        let said = kernel_says();
        let said = if said.is_empty() { String::new() } else { format!(" (the kernel: {})", said.join("; ")) };
        let _ = crate::dm::remove(v.name);
        return Err(format!(
            "{what}: its first block does not verify ({}): the hash tree does not match the root hash — the data \
             or the hash device is corrupted, or the hash is not theirs{said}",
            strerror(e)
        ));
    }
    if v.signature.is_some() {
        // The kernel checked it at the table's load (a refused one fails DM_TABLE_LOAD).
        init.log.step(&format!(
            "verity {}: the kernel accepted the signature of the root hash {} (from {}), dm-verity.require_signatures={}",
            v.name,
            to_hex(&v.hash),
            v.source,
            if signatures_required() { 1 } else { 0 }
        ));
    }
    init.log.step(&format!("verity {}: {node} is {}:{}, verified", v.name, devno.0, devno.1));
    devices::scan()
        .into_iter()
        .find(|d| d.devno == devno)
        .ok_or_else(|| format!("{what}: {node} ({}:{}) is not in /sys/class/block", devno.0, devno.1))
}

/// A root found by partition type (DPS): on the booted disk (the ESP that
/// `LoaderDevicePartUUID` names), the first root partition of this architecture not marked
/// no-auto; its verity partition by the halves of the hash a verity-sig partition there gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpsFound {
    /// The root partition.
    pub root: Dev,
    /// Its GPT flags said read-only.
    pub read_only: bool,
    /// Its GPT flags said grow the file system.
    pub growfs: bool,
    /// The signed root hash and the verity partition, when a signature partition gives one.
    pub verity: Option<(VeritySig, Dev, Dev)>,
}

/// The ESP's PARTUUID from the EFI variable's content (4 attribute bytes, then UTF-16LE).
pub fn loader_part_uuid(b: &[u8]) -> Option<String> {
    let text: Vec<u16> = b.get(4..)?.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    let s = String::from_utf16_lossy(&text);
    let s = s.trim_end_matches('\0').trim().to_ascii_lowercase();
    (s.len() == 36 && s.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-')).then_some(s)
}

/// What DPS finds among `devs` on the disk holding the ESP `esp` (its PARTUUID); Err says what
/// was looked for when nothing qualifies. `sig` reads a signature partition.
pub fn dps_find(
    devs: &[Dev],
    esp: Option<&str>,
    sig: &dyn Fn(&Dev) -> Result<VeritySig, String>,
) -> Result<DpsFound, String> {
    let Some(esp) = esp else {
        return Err(String::from(
            "no root partition is named (root= absent, gpt-auto, or /dev/mapper/root without roothash=) and there \
             is no LoaderDevicePartUUID EFI variable: the boot loader did not say which disk it booted from \
             (systemd-boot and systemd-stub set it), and a root is found by partition type only there (systemd's \
             rule); give root= or roothash=",
        ));
    };
    let disk = devs
        .iter()
        .find(|d| d.probe.partuuid.as_deref().is_some_and(|p| p.eq_ignore_ascii_case(esp)))
        .and_then(|d| d.disk.clone())
        .ok_or_else(|| format!("the booted disk (the ESP's PARTUUID={esp}, from LoaderDevicePartUUID) is not here"))?;
    let on_disk = |want| on_disk(devs, &disk, want);
    if let Some((s, root, v)) = signed_pair(devs, &disk, PartRole::Root, sig) {
        let f = root.probe.partflags;
        // A signed hash whose data and verity partitions are both here wins (systemd's
        // dissection picks the partitions the hash names).
        return Ok(DpsFound {
            root: root.clone(),
            read_only: true,
            growfs: f & flags::GROWFS != 0,
            verity: Some((s, root.clone(), v.clone())),
        });
    }
    let root = on_disk(PartRole::Root).into_iter().next().ok_or_else(|| {
        format!(
            "no root= and no partition of the root's type ({}, {ARCH}) without no-auto on the booted disk /dev/{disk}",
            leanrd_contract::verity::part_type(ARCH, PartRole::Root).unwrap_or("?")
        )
    })?;
    let f = root.probe.partflags;
    Ok(DpsFound {
        root: root.clone(),
        read_only: f & flags::READ_ONLY != 0,
        growfs: f & flags::GROWFS != 0,
        verity: None,
    })
}

/// The partitions of `disk` of the type `want` (this architecture's) not marked no-auto.
fn on_disk<'a>(devs: &'a [Dev], disk: &str, want: PartRole) -> Vec<&'a Dev> {
    devs.iter()
        .filter(|d| d.disk.as_deref() == Some(disk))
        .filter(|d| d.probe.parttype.as_deref().and_then(|t| part_role(ARCH, t)) == Some(want))
        .filter(|d| d.probe.partflags & flags::NO_AUTO == 0)
        .collect()
}

/// A signed hash on `disk` (`data`: [`PartRole::Root`] or [`PartRole::Usr`]) whose data and
/// verity partitions are both there, by its halves: the signature, data and verity partitions.
fn signed_pair<'a>(
    devs: &'a [Dev],
    disk: &str,
    data: PartRole,
    sig: &dyn Fn(&Dev) -> Result<VeritySig, String>,
) -> Option<(VeritySig, &'a Dev, &'a Dev)> {
    let (verity, sig_role) = match data {
        PartRole::Usr => (PartRole::UsrVerity, PartRole::UsrVeritySig),
        _ => (PartRole::RootVerity, PartRole::RootVeritySig),
    };
    let by = |role, uuid: &str| {
        on_disk(devs, disk, role)
            .into_iter()
            .find(|d| d.probe.partuuid.as_deref().is_some_and(|p| p.eq_ignore_ascii_case(uuid)))
    };
    on_disk(devs, disk, sig_role).into_iter().filter_map(|d| sig(d).ok()).find_map(|s| {
        let (first, last) = hash_halves(&s.root_hash)?;
        let (d, v) = (by(data, &first)?, by(verity, &last)?);
        Some((s, d, v))
    })
}

/// A /usr found by partition type (DPS) on the root's disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpsUsr {
    /// The /usr partition.
    pub usr: Dev,
    /// Its GPT flags said read-only (or its hash is signed).
    pub read_only: bool,
    /// The signed root hash and the usr-verity partition, when a usr-verity-sig partition there
    /// gives one.
    pub verity: Option<(VeritySig, Dev)>,
}

/// The /usr partition DPS finds on `disk` (the root's), with its verity partition when a
/// usr-verity-sig partition signs a hash whose halves name both; None: the disk has no /usr
/// partition of this architecture's type (not marked no-auto). `sig` reads a signature
/// partition.
pub fn dps_find_usr(devs: &[Dev], disk: &str, sig: &dyn Fn(&Dev) -> Result<VeritySig, String>) -> Option<DpsUsr> {
    if let Some((s, usr, v)) = signed_pair(devs, disk, PartRole::Usr, sig) {
        return Some(DpsUsr { usr: usr.clone(), read_only: true, verity: Some((s, v.clone())) });
    }
    let usr = on_disk(devs, disk, PartRole::Usr).into_iter().next()?;
    Some(DpsUsr { usr: usr.clone(), read_only: usr.probe.partflags & flags::READ_ONLY != 0, verity: None })
}

/// [`dps_find_usr`] on this machine's devices (the root's disk is there: its partitions came
/// with the root's).
pub fn dps_usr(disk: &str) -> Option<DpsUsr> {
    dps_find_usr(&devices::scan(), disk, &read_sig)
}

/// A waiter for a DPS root: satisfied once the booted disk's partitions give one.
pub struct DpsWaiter {
    /// The ESP's PARTUUID, from the EFI variable (read once).
    pub esp: Option<String>,
    /// What was found.
    pub found: Option<DpsFound>,
    /// Why nothing qualifies yet.
    pub why: String,
}

impl DpsWaiter {
    /// A waiter reading the EFI variable (efivarfs mounted first when the firmware is EFI).
    pub fn new(init: &mut Init) -> DpsWaiter {
        if sys::is_dir("/sys/firmware/efi") && !sys::exists(LOADER_DEVICE_PART_UUID) {
            init.mods.load("efivarfs", &mut init.log);
            let _ = sys::mount(
                "efivarfs",
                "/sys/firmware/efi/efivars",
                "efivarfs",
                rustix::mount::MountFlags::RDONLY,
                None,
            );
        }
        let esp = sys::read(LOADER_DEVICE_PART_UUID).ok().and_then(|b| loader_part_uuid(&b));
        DpsWaiter { esp, found: None, why: "a root partition by its type".into() }
    }
}

impl Waiter for DpsWaiter {
    fn describe(&self) -> String {
        format!("root=gpt-auto: {}", self.why)
    }
    fn wants(&self) -> Option<&DeviceRef> {
        None
    }
    fn offer(&mut self, devs: &[Dev], _: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        if self.found.is_none() {
            match dps_find(devs, self.esp.as_deref(), &read_sig) {
                Ok(f) => self.found = Some(f),
                Err(e) => self.why = e,
            }
        }
        self.found.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::tests::dev;
    use crate::probe::Probe;
    use alloc::vec;

    const HASH: &str = "0123456789abcdef0123456789abcdeffedcba9876543210fedcba9876543210";

    fn part(name: &str, disk: &str, n: u32, role: Option<PartRole>, partuuid: &str, fl: u64) -> Dev {
        let p = Probe {
            partuuid: Some(partuuid.into()),
            parttype: Some(
                role.and_then(|r| leanrd_contract::verity::part_type(ARCH, r))
                    .unwrap_or("0fc63daf-8483-4772-8e79-3d69d8477de4")
                    .into(),
            ),
            partflags: fl,
            ..Probe::default()
        };
        dev(name, (8, n), Some(disk), n, p)
    }

    #[test]
    fn the_command_line_names_the_devices_or_the_hash_halves_do() {
        let mut spec = VeritySpec { hash: Some(leanrd_contract::verity::hex(HASH).unwrap()), ..VeritySpec::default() };
        let v = Volume::wanted("root", &spec, false, false).unwrap().unwrap();
        assert_eq!(v.data.want, DeviceRef::PartUuid { uuid: "01234567-89ab-cdef-0123-456789abcdef".into(), offset: 0 });
        assert_eq!(
            v.hash_dev.want,
            DeviceRef::PartUuid { uuid: "fedcba98-7654-3210-fedc-ba9876543210".into(), offset: 0 }
        );
        assert!(v.dps);
        assert!(Volume::wanted("root", &spec, true, false).unwrap().is_none(), "systemd.verity=0");
        assert!(Volume::wanted("root", &spec, false, true).err().unwrap().contains("systemd.verity_root_data="));
        spec.data = Some(DeviceRef::parse("/dev/vda").unwrap());
        spec.hash_device = Some(DeviceRef::parse("/dev/vdb").unwrap());
        let v = Volume::wanted("usr", &spec, false, true).unwrap().unwrap();
        assert_eq!(
            (v.data.want.to_string(), v.hash_dev.want.to_string(), v.dps),
            ("/dev/vda".into(), "/dev/vdb".into(), false)
        );
        assert!(Volume::wanted("root", &VeritySpec::default(), false, false).unwrap().is_none());
    }

    #[test]
    fn the_efi_variable_gives_the_esps_partuuid() {
        let mut b = vec![7, 0, 0, 0];
        for c in "6A3E09C2-1B2C-4D5E-8F90-A1B2C3D4E5F6\0".encode_utf16() {
            b.extend_from_slice(&c.to_le_bytes());
        }
        assert_eq!(loader_part_uuid(&b).as_deref(), Some("6a3e09c2-1b2c-4d5e-8f90-a1b2c3d4e5f6"));
        assert_eq!(loader_part_uuid(&[1, 2]), None);
        assert_eq!(loader_part_uuid(&[0, 0, 0, 0, 0x41]), None);
        assert_eq!(loader_part_uuid(&[]), None);
    }

    #[test]
    fn dps_takes_the_booted_disks_root_and_its_signed_verity() {
        let (first, last) = hash_halves(&leanrd_contract::verity::hex(HASH).unwrap()).unwrap();
        let esp = "11111111-1111-1111-1111-111111111111";
        let devs = vec![
            // Another disk with a root partition: not the booted one.
            part("vda2", "vda", 2, Some(PartRole::Root), "22222222-2222-2222-2222-222222222222", 0),
            part("vdb1", "vdb", 1, None, esp, 0),
            part("vdb2", "vdb", 2, Some(PartRole::Root), "33333333-3333-3333-3333-333333333333", flags::NO_AUTO),
            part("vdb3", "vdb", 3, Some(PartRole::Root), &first, flags::GROWFS),
            part("vdb4", "vdb", 4, Some(PartRole::RootVerity), &last, flags::READ_ONLY),
            part("vdb5", "vdb", 5, Some(PartRole::RootVeritySig), "44444444-4444-4444-4444-444444444444", 0),
        ];
        let sig = |d: &Dev| {
            if d.name == "vdb5" {
                let j = format!(r#"{{"rootHash":"{HASH}","signature":"MIIB"}}"#);
                VeritySig::parse(j.as_bytes())
            } else {
                Err("not one".into())
            }
        };
        let f = dps_find(&devs, Some(esp), &sig).unwrap();
        assert_eq!(f.root.name, "vdb3");
        assert!(f.read_only && f.growfs);
        let (s, data, v) = f.verity.unwrap();
        assert_eq!((data.name.as_str(), v.name.as_str(), s.signature.len()), ("vdb3", "vdb4", 3));
        // Without a signature: the first root partition not marked no-auto, unverified.
        let f = dps_find(&devs, Some(esp), &|_| Err("none".into())).unwrap();
        assert_eq!((f.root.name.as_str(), f.read_only, f.verity.is_none()), ("vdb3", false, true));
        // The signature partition is found beside the data partition the halves named.
        assert!(signature_beside(Some(&devs[3]), &s.root_hash, &devs).is_none(), "read_sig reads real devices only");
        // Nothing qualifies: the diagnosis says what was looked for.
        let e = dps_find(&devs, None, &sig).unwrap_err();
        assert!(e.contains("LoaderDevicePartUUID"), "{e}");
        let e = dps_find(&devs[..1], Some(esp), &sig).unwrap_err();
        assert!(e.contains("booted disk") && e.contains(esp), "{e}");
        let e = dps_find(&devs[1..3], Some(esp), &sig).unwrap_err();
        assert!(e.contains("4f68bce3-e8cd-4db1-96e7-fbcaf984b709") && e.contains("/dev/vdb"), "{e}");
    }

    #[test]
    fn dps_takes_usr_beside_the_root_and_its_signed_verity() {
        let (first, last) = hash_halves(&leanrd_contract::verity::hex(HASH).unwrap()).unwrap();
        let devs = vec![
            // Another disk's /usr: never the root's.
            part("vda3", "vda", 3, Some(PartRole::Usr), &first, 0),
            part("vdb2", "vdb", 2, Some(PartRole::Root), "22222222-2222-2222-2222-222222222222", 0),
            part("vdb3", "vdb", 3, Some(PartRole::Usr), "33333333-3333-3333-3333-333333333333", flags::NO_AUTO),
            part("vdb4", "vdb", 4, Some(PartRole::Usr), "55555555-5555-5555-5555-555555555555", flags::READ_ONLY),
            part("vdb5", "vdb", 5, Some(PartRole::Usr), &first, 0),
            // The root's verity type with the right half: not /usr's.
            part("vdb6", "vdb", 6, Some(PartRole::RootVerity), &last, 0),
            part("vdb7", "vdb", 7, Some(PartRole::UsrVerity), &last, 0),
            part("vdb8", "vdb", 8, Some(PartRole::UsrVeritySig), "44444444-4444-4444-4444-444444444444", 0),
            part("vdb9", "vdb", 9, Some(PartRole::RootVeritySig), "66666666-6666-6666-6666-666666666666", 0),
        ];
        let sig_on = |name: &'static str| {
            move |d: &Dev| {
                if d.name == name {
                    VeritySig::parse(format!(r#"{{"rootHash":"{HASH}","signature":"MIIB"}}"#).as_bytes())
                } else {
                    Err("not one".into())
                }
            }
        };
        let f = dps_find_usr(&devs, "vdb", &sig_on("vdb8")).unwrap();
        let (s, v) = f.verity.unwrap();
        assert_eq!((f.usr.name.as_str(), v.name.as_str(), f.read_only, s.signature.len()), ("vdb5", "vdb7", true, 3));
        // A root-verity-sig partition does not sign /usr: the first /usr partition not no-auto.
        let f = dps_find_usr(&devs, "vdb", &sig_on("vdb9")).unwrap();
        assert_eq!((f.usr.name.as_str(), f.read_only, f.verity.is_none()), ("vdb4", true, true));
        // The signed hash's verity half on a root-verity partition only: unverified.
        let no_usr_verity: Vec<Dev> = devs.iter().filter(|d| d.name != "vdb7").cloned().collect();
        assert!(dps_find_usr(&no_usr_verity, "vdb", &sig_on("vdb8")).unwrap().verity.is_none());
        // No /usr partition on the root's disk (another disk's does not count).
        assert_eq!(dps_find_usr(&devs[..3], "vdb", &sig_on("vdb8")), None);
        assert_eq!(dps_find_usr(&devs, "vdc", &sig_on("vdb8")), None);
    }
}
