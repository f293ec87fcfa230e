//! Identify block devices without blkid: file-system superblocks (ext2/3/4, XFS, Btrfs,
//! vfat, F2FS, LUKS) for UUID/LABEL/TYPE, and the partition table (GPT, MBR) for
//! PARTUUID/PARTLABEL. Hand-written: the probing crates are either bindings to libblkid or
//! far larger than the few offsets needed here.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use rustix::fd::AsFd;

use crate::sys::read_at;

/// The type blkid gives a LUKS container.
pub const LUKS: &str = "crypto_LUKS";

/// What a device says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// The type, as blkid names it (ext4, xfs, btrfs, vfat, f2fs, iso9660, swap, [`LUKS`],
    /// [`MD_MEMBER`], [`LVM_MEMBER`], ...); None: nothing recognised.
    pub fstype: Option<String>,
    /// The UUID, as blkid writes it (8-4-4-4-12 hex; XXXX-XXXX for vfat; a timestamp for ISO
    /// 9660); None: none, or all zeros.
    pub uuid: Option<String>,
    /// The label (`LABEL=`); None: none set.
    pub label: Option<String>,
    /// The partition's PARTUUID, from its disk's table (filled in by [`crate::devices::scan`],
    /// not [`probe_fs`]); None: not a partition, or not in the table.
    pub partuuid: Option<String>,
    /// The partition's GPT name (PARTLABEL); None: MBR, unnamed, or not a partition.
    pub partlabel: Option<String>,
    /// The partition's GPT type GUID in lower-case hex; None: MBR, or not a partition.
    pub parttype: Option<String>,
    /// The partition's GPT attribute bits (DPS's read-only, no-auto, growfs); 0 for MBR.
    pub partflags: u64,
}

fn uuid_str(b: &[u8]) -> String {
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// GPT GUIDs store the first three fields little-endian.
pub fn guid_str(b: &[u8]) -> String {
    let mut x = b[..16].to_vec();
    x[0..4].reverse();
    x[4..6].reverse();
    x[6..8].reverse();
    uuid_str(&x)
}

fn cstr(b: &[u8]) -> Option<String> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let s = String::from_utf8_lossy(&b[..end]).trim_end().to_string();
    (!s.is_empty()).then_some(s)
}

/// The type blkid gives an md RAID member.
pub const MD_MEMBER: &str = "linux_raid_member";
/// The type blkid gives an LVM physical volume.
pub const LVM_MEMBER: &str = "LVM2_member";

/// The type blkid gives a standalone dm-integrity device (its superblock's magic `integrt` at 0).
pub const INTEGRITY: &str = "DM_integrity";
/// The type blkid gives a bcache backing or cache device.
pub const BCACHE: &str = "bcache";
/// Where a bcache superblock is (sector 8), and how much of it [`BcacheSb::parse`] reads.
pub const BCACHE_SB_AT: u64 = 4096;
/// See [`BCACHE_SB_AT`].
pub const BCACHE_SB_LEN: usize = 112;

/// What a bcache superblock (the kernel's `struct cache_sb_disk`) says: its magic at 24, the
/// device's UUID at 40, its cache set's at 56, its label at 72, its version at 16 (1, 4 and
/// 6 are backing devices; 0, 3 and 5 cache devices), its flags at 104 (a backing device's
/// state in bits 61-62).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BcacheSb {
    /// A backing device (else a cache device).
    pub backing: bool,
    /// The device's UUID (blkid's UUID=).
    pub uuid: String,
    /// The cache set's UUID: the set a cache device is in, or a backing device is attached to
    /// (when [`BcacheSb::attached`]).
    pub set_uuid: String,
    /// A backing device attached to a cache set (its state clean, dirty or stale, not
    /// detached): the kernel starts it only once that set is registered too.
    pub attached: bool,
    /// A backing device whose cache holds data not yet written back (state dirty).
    pub dirty: bool,
    /// The label; None: unset.
    pub label: Option<String>,
}

impl BcacheSb {
    /// The superblock in `b` (read at [`BCACHE_SB_AT`]); None when it is not one, or of a
    /// version this does not know.
    pub fn parse(b: &[u8]) -> Option<BcacheSb> {
        const MAGIC: [u8; 16] =
            [0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81];
        if b.len() < BCACHE_SB_LEN || b[24..40] != MAGIC {
            return None;
        }
        let version = u64::from_le_bytes(b[16..24].try_into().ok()?);
        let backing = match version {
            1 | 4 | 6 => true,
            0 | 3 | 5 => false,
            _ => return None,
        };
        let state = (u64::from_le_bytes(b[104..112].try_into().ok()?) >> 61) & 3;
        Some(BcacheSb {
            backing,
            uuid: uuid_str(&b[40..56]),
            set_uuid: uuid_str(&b[56..72]),
            label: cstr(&b[72..104]),
            attached: backing && state != 0,
            dirty: backing && state == 2,
        })
    }
}

/// A member of a block stack: an md superblock (v1.1 at 0, v1.2 at 4 KiB, v1.0 near the end,
/// v0.90 in the last 64 KiB), a bcache superblock (at 4 KiB), a dm-integrity superblock (at 0) or an
/// LVM2 label (in one of the first four sectors). Checked
/// before file systems: a RAID1 member with metadata at the end also looks like the file
/// system it mirrors, and must not be mounted as that.
fn stack_member(f: rustix::fd::BorrowedFd<'_>) -> Option<&'static str> {
    const MD_MAGIC: [u8; 4] = 0xa92b_4efc_u32.to_le_bytes();
    let size = rustix::fs::seek(f, rustix::fs::SeekFrom::End(0)).unwrap_or(0);
    // Offsets past the end (u64::MAX) read nothing.
    let mut md_at = [0, 4096, u64::MAX, u64::MAX];
    if size >= 128 * 1024 {
        md_at[2] = (size - 8192) & !4095;
        md_at[3] = (size & !(65536 - 1)) - 65536;
    }
    if md_at.iter().any(|&o| read_at(f, o, 4).is_some_and(|b| b[..] == MD_MAGIC)) {
        return Some(MD_MEMBER);
    }
    if read_at(f, BCACHE_SB_AT, BCACHE_SB_LEN).is_some_and(|b| BcacheSb::parse(&b).is_some()) {
        return Some(BCACHE);
    }
    let head = read_at(f, 0, 2048)?;
    if head.starts_with(b"integrt\0") {
        return Some(INTEGRITY);
    }
    let lvm = head.chunks(512).any(|s| s.len() >= 32 && &s[0..8] == b"LABELONE" && &s[24..32] == b"LVM2 001");
    lvm.then_some(LVM_MEMBER)
}

/// Probe the file system (or LUKS header, or md/LVM member) on a device. One function on
/// purpose (a little over 70 lines): the signatures are tried in the order of their
/// precedence, each region read once, and the order is the rule.
pub fn probe_fs<Fd: AsFd>(fd: Fd) -> Probe {
    let f = fd.as_fd();
    let mut p = Probe::default();
    if let Some(t) = stack_member(f) {
        p.fstype = Some(t.into());
        if let Some(sb) = read_at(f, BCACHE_SB_AT, BCACHE_SB_LEN).and_then(|b| BcacheSb::parse(&b))
            && t == BCACHE
        {
            p.uuid = Some(sb.uuid);
            p.label = sb.label;
        }
        return p;
    }
    // LUKS1/2: magic at 0, UUID string at 168.
    if let Some(b) = read_at(f, 0, 512) {
        if b.starts_with(b"LUKS\xba\xbe") {
            p.fstype = Some(LUKS.into());
            p.uuid = cstr(&b[168..208]);
            if b[6..8] == [0, 2] {
                p.label = cstr(&b[24..72]);
            }
            return p;
        }
        if b.starts_with(b"XFSB") {
            p.fstype = Some("xfs".into());
            p.uuid = Some(uuid_str(&b[32..48]));
            p.label = cstr(&b[108..120]);
            return p;
        }
    }
    if let Some(b) = read_at(f, 1024, 1024) {
        if b[56..58] == [0x53, 0xEF] {
            let compat = u32::from_le_bytes([b[92], b[93], b[94], b[95]]);
            let incompat = u32::from_le_bytes([b[96], b[97], b[98], b[99]]);
            p.fstype = Some(
                if incompat & 0x2C0 != 0 {
                    "ext4"
                } else if compat & 0x4 != 0 {
                    "ext3"
                } else {
                    "ext2"
                }
                .into(),
            );
            p.uuid = Some(uuid_str(&b[104..120]));
            p.label = cstr(&b[120..136]);
            return p;
        }
        if b[0..4] == [0x10, 0x20, 0xF5, 0xF2] {
            p.fstype = Some("f2fs".into());
            p.uuid = Some(uuid_str(&b[108..124]));
            // The volume name is UTF-16LE at 124.
            let name: Vec<u16> =
                b[124..124 + 128].chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).take_while(|&c| c != 0).collect();
            p.label = Some(String::from_utf16_lossy(&name)).filter(|s| !s.is_empty());
            return p;
        }
    }
    if let Some(b) = read_at(f, 65536, 1024)
        && &b[64..72] == b"_BHRfS_M"
    {
        p.fstype = Some("btrfs".into());
        p.uuid = Some(uuid_str(&b[32..48]));
        p.label = cstr(&b[299..299 + 256]);
        return p;
    }
    // ISO 9660: the primary volume descriptor at 32 KiB, its volume identifier (space-padded)
    // the label; blkid's UUID is its modification time (YYYYMMDDHHMMSScc at 830), else its
    // creation time (at 813), written YYYY-MM-DD-HH-MM-SS-cc. Before the MBR check: a hybrid
    // ISO has an MBR too.
    if let Some(b) = read_at(f, 32768, 2048)
        && b[0] == 1
        && &b[1..6] == b"CD001"
    {
        p.fstype = Some(ISO9660.into());
        p.label = cstr(&b[40..72]);
        // Unset: sixteen '0' digits and a zero time zone.
        let set =
            |t: &[u8]| t[..16].iter().all(u8::is_ascii_digit) && (t[..16].iter().any(|&d| d != b'0') || t[16] != 0);
        if let Some(t) = [&b[830..847], &b[813..830]].into_iter().find(|t| set(t)) {
            let d = |r: core::ops::Range<usize>| core::str::from_utf8(&t[r]).unwrap_or("");
            p.uuid = Some(format!(
                "{}-{}-{}-{}-{}-{}-{}",
                d(0..4),
                d(4..6),
                d(6..8),
                d(8..10),
                d(10..12),
                d(12..14),
                d(14..16)
            ));
        }
        return p;
    }
    if let Some(b) = read_at(f, 0, 512)
        && b[510..512] == [0x55, 0xAA]
    {
        let fat32 = &b[82..87] == b"FAT32";
        let fat = fat32 || &b[54..57] == b"FAT";
        if fat {
            let (id, label) = if fat32 { (&b[67..71], &b[71..82]) } else { (&b[39..43], &b[43..54]) };
            p.fstype = Some("vfat".into());
            p.uuid = Some(format!("{:02X}{:02X}-{:02X}{:02X}", id[3], id[2], id[1], id[0]));
            p.label = cstr(label).filter(|l| l != "NO NAME");
            return p;
        }
    }
    // Swap: a signature in the last 10 bytes of its first page (4 KiB here; larger pages on
    // other machines), replaced by the kernel's while a hibernation image is in it. UUID and
    // label follow the 1 KiB of boot bits.
    for page in [4096u64, 8192, 16384, 65536] {
        let Some(sig) = read_at(f, page - 10, 10) else { break };
        let t = match &sig[..] {
            b"SWAPSPACE2" | b"SWAP-SPACE" => SWAP,
            b"S1SUSPEND\0" | b"S2SUSPEND\0" | b"ULSUSPEND\0" | b"LINHIB0001" => HIBERNATED,
            _ => continue,
        };
        p.fstype = Some(t.into());
        if let Some(b) = read_at(f, 1024, 48) {
            p.uuid = Some(uuid_str(&b[12..28])).filter(|u| u != "00000000-0000-0000-0000-000000000000");
            p.label = cstr(&b[28..44]);
        }
        return p;
    }
    // A ZFS pool's member: last, its labels are in the first 256 KiB, which other signatures
    // share (a disk once ZFS and reformatted keeps stale labels behind its new file system).
    if let Some(l) = crate::zfs::read_label(f) {
        p.fstype = Some(crate::zfs::MEMBER.into());
        p.label = Some(l.pool);
        p.uuid = Some(l.pool_guid.to_string());
    }
    p
}

/// The type blkid gives an ISO 9660 file system (a CD, or a live image written to a stick).
pub const ISO9660: &str = "iso9660";

/// The type blkid gives a swap area.
pub const SWAP: &str = "swap";
/// The type blkid gives a swap area holding a hibernation image (the kernel's signature in
/// place of swap's).
pub const HIBERNATED: &str = "swsuspend";

/// One partition-table entry: 1-based number, PARTUUID, PARTLABEL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartEntry {
    /// The partition's number, from 1 (the 2 of sda2).
    pub number: u32,
    /// The GPT entry's unique GUID in lower-case hex, or for MBR the disk signature and the number
    /// (`xxxxxxxx-NN`).
    pub partuuid: String,
    /// The GPT entry's name; None for MBR, or when empty.
    pub partlabel: Option<String>,
    /// The GPT entry's type GUID in lower-case hex; None for MBR.
    pub parttype: Option<String>,
    /// The GPT entry's attribute bits; 0 for MBR.
    pub flags: u64,
    /// Where the partition starts, in 512-byte sectors (kpartx's linear maps count in them).
    pub start: u64,
    /// Its length, in 512-byte sectors.
    pub sectors: u64,
    /// An MBR extended partition (types 0x05, 0x0f, 0x85): a container of logical partitions,
    /// not one to map.
    pub extended: bool,
}

/// Read the partition table of a whole disk (GPT with 512 or 4096-byte sectors, else MBR).
pub fn partitions<Fd: AsFd>(fd: Fd) -> Vec<PartEntry> {
    let f = fd.as_fd();
    for sector in [512u64, 4096] {
        let Some(h) = read_at(f, sector, 92) else { continue };
        if &h[0..8] != b"EFI PART" {
            continue;
        }
        let lba = u64::from_le_bytes(core::array::from_fn(|i| h[72 + i]));
        let n = u32::from_le_bytes([h[80], h[81], h[82], h[83]]).min(1024);
        let size = u32::from_le_bytes([h[84], h[85], h[86], h[87]]) as usize;
        // A sane entry size (128, or a larger power of two up to 4 KiB); anything else is
        // garbage, and must not make PID 1 allocate gigabytes.
        if !(128..=4096).contains(&size) {
            return Vec::new();
        }
        let Some(off) = lba.checked_mul(sector) else { return Vec::new() };
        let Some(t) = read_at(f, off, n as usize * size) else { return Vec::new() };
        let mut out = Vec::new();
        for i in 0..n as usize {
            let e = &t[i * size..(i + 1) * size];
            if e[0..16].iter().all(|&c| c == 0) {
                continue;
            }
            let lba_at = |at: usize| u64::from_le_bytes(core::array::from_fn(|i| e[at + i]));
            let (first, last) = (lba_at(32), lba_at(40));
            let unit = sector / 512;
            let name: Vec<u16> =
                e[56..128].chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).take_while(|&c| c != 0).collect();
            out.push(PartEntry {
                number: i as u32 + 1,
                partuuid: guid_str(&e[16..32]),
                partlabel: Some(String::from_utf16_lossy(&name)).filter(|s| !s.is_empty()),
                parttype: Some(guid_str(&e[0..16])),
                flags: u64::from_le_bytes(core::array::from_fn(|i| e[48 + i])),
                start: first.saturating_mul(unit),
                sectors: last.saturating_sub(first).saturating_add(1).saturating_mul(unit),
                extended: false,
            });
        }
        return out;
    }
    // MBR: PARTUUID is the disk signature and the partition number.
    if let Some(b) = read_at(f, 0, 512)
        && b[510..512] == [0x55, 0xAA]
    {
        let sig = u32::from_le_bytes([b[440], b[441], b[442], b[443]]);
        return (0..4)
            .filter(|i| b[446 + 16 * i + 4] != 0)
            .map(|i| {
                let e = &b[446 + 16 * i..446 + 16 * (i + 1)];
                let at = |o: usize| u32::from_le_bytes([e[o], e[o + 1], e[o + 2], e[o + 3]]) as u64;
                PartEntry {
                    number: i as u32 + 1,
                    partuuid: format!("{sig:08x}-{:02x}", i + 1),
                    partlabel: None,
                    parttype: None,
                    flags: 0,
                    start: at(8),
                    sectors: at(12),
                    extended: matches!(e[4], 0x05 | 0x0f | 0x85),
                }
            })
            .collect();
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn guid_is_mixed_endian() {
        let b = [0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11, 0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b];
        assert_eq!(guid_str(&b), "c12a7328-f81f-11d2-ba4b-00a0c93ec93b");
    }

    /// bcache superblocks as make-bcache writes them, read as blkid reads them; anything else
    /// with the magic (a version unknown, too short) is not one, and nothing panics.
    #[test]
    fn finds_bcache_devices() {
        let t = tempfile::tempdir().unwrap();
        let have = |p: &str| Command::new(p).arg("-h").output().is_ok();
        if have("make-bcache") && have("blkid") {
            for (flag, backing) in [("-B", true), ("-C", false)] {
                let p = t.path().join(flag);
                std::fs::write(&p, std::vec![0u8; 8 << 20]).unwrap();
                let st = Command::new("make-bcache").args([flag, "--bucket", "32k"]).arg(&p).output().unwrap();
                assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
                let f = crate::sys::open(p.to_str().unwrap()).unwrap();
                let got = probe_fs(&f);
                let blkid = Command::new("blkid").args(["-p", "-o", "value", "-s", "UUID"]).arg(&p).output().unwrap();
                assert_eq!(got.fstype.as_deref(), Some(BCACHE));
                assert_eq!(got.uuid.as_deref(), Some(String::from_utf8_lossy(&blkid.stdout).trim()));
                let sb = BcacheSb::parse(&read_at(&f, BCACHE_SB_AT, BCACHE_SB_LEN).unwrap()).unwrap();
                assert_eq!((sb.backing, sb.attached, sb.dirty), (backing, false, false), "{flag}");
            }
        }
        let mut b = std::vec![0u8; BCACHE_SB_LEN];
        b[24..40].copy_from_slice(&[
            0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81,
        ]);
        b[16] = 1;
        b[111] = 0x40; // state 2: dirty
        let sb = BcacheSb::parse(&b).unwrap();
        assert!(sb.backing && sb.attached && sb.dirty && sb.label.is_none());
        b[16] = 2;
        assert_eq!(BcacheSb::parse(&b), None, "version 2 is not one");
        b[16] = 1;
        assert_eq!(BcacheSb::parse(&b[..BCACHE_SB_LEN - 1]), None);
        for seed in 0..200u64 {
            let mut x = b.clone();
            for (i, v) in x.iter_mut().enumerate().skip(40) {
                *v = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) >> 17) as u8;
            }
            let _ = BcacheSb::parse(&x);
        }
    }

    /// A dm-integrity superblock at 0 makes a stack member, whatever follows it.
    #[test]
    fn finds_a_dm_integrity_device() {
        let t = tempfile::tempdir().unwrap();
        let mut img = std::vec![0u8; 1 << 20];
        img[..8].copy_from_slice(b"integrt\0");
        img[1024 + 56..1024 + 58].copy_from_slice(&[0x53, 0xEF]);
        let p = t.path().join("int");
        std::fs::write(&p, &img).unwrap();
        let f = crate::sys::open(p.to_str().unwrap()).unwrap();
        assert_eq!(probe_fs(&f).fstype.as_deref(), Some(INTEGRITY));
    }

    /// md superblocks (every version's place) and LVM2 labels make a stack member, ahead of
    /// whatever file system the member also looks like.
    #[test]
    fn finds_md_and_lvm_members() {
        let t = tempfile::tempdir().unwrap();
        let size: u64 = 1 << 20;
        let magic = 0xa92b_4efc_u32.to_le_bytes();
        for (at, what) in [(0, "1.1"), (4096, "1.2"), ((size - 8192) & !4095, "1.0"), (size - 65536, "0.90")] {
            let mut img = std::vec![0u8; size as usize];
            img[1024 + 56..1024 + 58].copy_from_slice(&[0x53, 0xEF]); // an ext superblock too
            img[at as usize..at as usize + 4].copy_from_slice(&magic);
            let p = t.path().join(what);
            std::fs::write(&p, &img).unwrap();
            let f = crate::sys::open(p.to_str().unwrap()).unwrap();
            assert_eq!(probe_fs(&f).fstype.as_deref(), Some(MD_MEMBER), "md {what}");
        }
        let mut img = std::vec![0u8; size as usize];
        img[512..520].copy_from_slice(b"LABELONE");
        img[512 + 24..512 + 32].copy_from_slice(b"LVM2 001");
        let p = t.path().join("pv");
        std::fs::write(&p, &img).unwrap();
        let f = crate::sys::open(p.to_str().unwrap()).unwrap();
        assert_eq!(probe_fs(&f).fstype.as_deref(), Some(LVM_MEMBER));
        std::fs::write(&p, std::vec![0u8; size as usize]).unwrap();
        let f = crate::sys::open(p.to_str().unwrap()).unwrap();
        assert_eq!(probe_fs(&f).fstype, None);
    }

    /// An ISO 9660 image (xorriso's) gives its type, volume label and blkid's UUID, though it
    /// carries an MBR too (a hybrid image).
    #[test]
    fn finds_an_iso9660_label_and_uuid() {
        let mut img = std::vec![0u8; 64 * 1024];
        img[510..512].copy_from_slice(&[0x55, 0xAA]);
        let pvd = &mut img[32768..32768 + 2048];
        pvd[0] = 1;
        pvd[1..6].copy_from_slice(b"CD001");
        pvd[40..72].copy_from_slice(format!("{:<32}", "LEANRD_LIVE").as_bytes());
        pvd[813..830].copy_from_slice(b"2026112522300000\0");
        // No modification time: the creation time's.
        pvd[830..847].copy_from_slice(b"0000000000000000\0");
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("iso");
        std::fs::write(&path, &img).unwrap();
        let p = probe_fs(crate::sys::open(path.to_str().unwrap()).unwrap());
        assert_eq!(p.fstype.as_deref(), Some(ISO9660));
        assert_eq!(p.label.as_deref(), Some("LEANRD_LIVE"));
        assert_eq!(p.uuid.as_deref(), Some("2026-11-25-22-30-00-00"));
        // A modification time: blkid's UUID is that one.
        img[32768 + 830..32768 + 847].copy_from_slice(b"2026112600000042\x04");
        std::fs::write(&path, &img).unwrap();
        let p = probe_fs(crate::sys::open(path.to_str().unwrap()).unwrap());
        assert_eq!(p.uuid.as_deref(), Some("2026-11-26-00-00-00-42"));
    }

    /// A swap area with the kernel's hibernation signature in place of its own: a hibernation
    /// image, same UUID.
    #[test]
    fn tells_a_hibernation_image_from_an_empty_swap() {
        if !sh("command -v mkswap") {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let img = t.path().join("swap");
        let img = img.to_str().unwrap();
        assert!(sh(&format!("truncate -s 8M {img} && mkswap -q -U 5a5a5a5a-1111-2222-3333-444455556666 {img}")));
        let p = probe_fs(crate::sys::open(img).unwrap());
        assert_eq!(
            (p.fstype.as_deref(), p.uuid.as_deref()),
            (Some(SWAP), Some("5a5a5a5a-1111-2222-3333-444455556666"))
        );
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(img).unwrap().write_all_at(b"S1SUSPEND\0", 4086).unwrap();
        let p = probe_fs(crate::sys::open(img).unwrap());
        assert_eq!(
            (p.fstype.as_deref(), p.uuid.as_deref()),
            (Some(HIBERNATED), Some("5a5a5a5a-1111-2222-3333-444455556666"))
        );
    }

    /// blkid's view of an image file: TYPE, UUID, LABEL.
    fn blkid(path: &str) -> Probe {
        let o = Command::new("blkid").args(["-p", "-o", "export", path]).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        // The export format escapes a space as "\\ ".
        let get = |k: &str| text.lines().find_map(|l| l.strip_prefix(&format!("{k}=")).map(|v| v.replace("\\ ", " ")));
        Probe { fstype: get("TYPE"), uuid: get("UUID"), label: get("LABEL"), ..Probe::default() }
    }

    fn sh(cmd: &str) -> bool {
        Command::new("sh").args(["-c", cmd]).output().is_ok_and(|o| o.status.success())
    }

    /// Every file system /init probes, made by its own mkfs (unprivileged, in image files),
    /// must read as blkid reads it.
    #[test]
    fn probes_like_blkid() {
        if !sh("command -v blkid") {
            leanrd_testkit::skip::<()>("no blkid (util-linux)");
            return;
        }
        let tmpdir = tempfile::tempdir().unwrap();
        let dir = tmpdir.path().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            ("ext4", "mkfs.ext4 -q -F -L root-ext4 IMG", 64),
            ("ext2", "mkfs.ext2 -q -F -L e2 IMG", 64),
            ("xfs", "mkfs.xfs -q -f -L xfsroot IMG", 320),
            ("btrfs", "mkfs.btrfs -q -f -L 'btrfs root' IMG", 128),
            ("vfat", "mkfs.vfat -n ESP IMG", 64),
            ("f2fs", "mkfs.f2fs -q -f -l f2label IMG", 128),
            ("swap", "mkswap -q -L swaplabel IMG", 16),
            (
                "luks",
                "echo pw | cryptsetup luksFormat -q --type luks2 --label sealed --pbkdf pbkdf2 \\
                 --pbkdf-force-iterations 1000 IMG -",
                32,
            ),
        ];
        let mut checked = 0;
        for (name, mkfs, mb) in cases {
            let img = dir.join(name);
            let img = img.to_str().unwrap();
            if !sh(&format!("truncate -s {mb}M {img} && {}", mkfs.replace("IMG", img))) {
                leanrd_testkit::skip::<()>(&std::format!("{name}: its mkfs is missing or failed"));
                continue;
            }
            let f = crate::sys::open(img).unwrap();
            assert_eq!(probe_fs(&f), blkid(img), "{name}");
            checked += 1;
        }
        // GPT: PARTUUID and PARTLABEL of each entry, as sfdisk wrote them.
        let gpt = dir.join("gpt");
        let gpt = gpt.to_str().unwrap();
        std::fs::write(
            format!("{gpt}.sfdisk"),
            "label: gpt\nsize=4M, type=L, name=boot\n\
             type=4f68bce3-e8cd-4db1-96e7-fbcaf984b709, name=\"my root\", attrs=\"GUID:59,60\"\n",
        )
        .unwrap();
        assert!(sh(&format!("truncate -s 16M {gpt} && sfdisk -q {gpt} < {gpt}.sfdisk")));
        let o = Command::new("sfdisk").args(["--part-uuid", gpt, "2"]).output().unwrap();
        let uuid2 = String::from_utf8_lossy(&o.stdout).trim().to_lowercase();
        let parts = partitions(crate::sys::open(gpt).unwrap());
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[1].number, parts[1].partuuid.as_str()), (2, uuid2.as_str()));
        assert_eq!(parts[1].partlabel.as_deref(), Some("my root"));
        assert_eq!(parts[0].partlabel.as_deref(), Some("boot"));
        // The type and DPS's flags, as sfdisk wrote them.
        assert_eq!(parts[0].parttype.as_deref(), Some("0fc63daf-8483-4772-8e79-3d69d8477de4"));
        assert_eq!(parts[1].parttype.as_deref(), Some("4f68bce3-e8cd-4db1-96e7-fbcaf984b709"));
        assert_eq!((parts[0].flags, parts[1].flags), (0, (1 << 59) | (1 << 60)));
        // Where each starts and how long it is, in 512-byte sectors, as sfdisk says (kpartx's
        // linear maps are made from these).
        let o = Command::new("sfdisk").args(["-d", gpt]).output().unwrap();
        let dump = String::from_utf8_lossy(&o.stdout);
        let want: Vec<(u64, u64)> = dump
            .lines()
            .filter(|l| l.contains("start="))
            .map(|l| {
                let v = |k: &str| l.split(k).nth(1).unwrap().split(',').next().unwrap().trim().parse::<u64>().unwrap();
                (v("start="), v("size="))
            })
            .collect();
        assert_eq!(parts.iter().map(|p| (p.start, p.sectors)).collect::<Vec<_>>(), want);
        assert_eq!(want[0].1, 8192);
        // MBR: the disk signature and the partition number.
        std::fs::write(format!("{gpt}.sfdisk"), "label: dos\nlabel-id: 0x1234abcd\n,4M,L\n,,L\n").unwrap();
        assert!(sh(&format!("truncate -s 16M {gpt}.mbr && sfdisk -q {gpt}.mbr < {gpt}.sfdisk")));
        let parts = partitions(crate::sys::open(&format!("{gpt}.mbr")).unwrap());
        let ids: Vec<&str> = parts.iter().map(|p| p.partuuid.as_str()).collect();
        assert_eq!(ids, ["1234abcd-01", "1234abcd-02"]);
        assert_eq!((parts[0].start, parts[0].sectors, parts[0].extended), (2048, 8192, false));
        assert_eq!(parts[1].start, 2048 + 8192);
        assert!(checked >= 3, "too few file systems could be made here");
    }
}
