//! /init's prober on any device image (crates/init/src/probe.rs `probe_fs`, `partitions`):
//! superblocks (ext2/3/4, XFS, Btrfs, vfat, F2FS, ISO 9660), LUKS headers, md superblocks and
//! LVM2 labels, ZFS labels, swap and hibernation signatures, GPT and MBR. A disk anyone plugged in can
//! say anything. The image is written sparse into a memory file (`leanrd_fuzz::sparse_chunks`:
//! a size, then offset/length/bytes chunks), so that a few bytes reach the superblocks at
//! 64 KiB and the md superblocks near the end.
//!
//! Holds to:
//! - nothing panics, and nothing allocates beyond what the image holds (a GPT's entry count and
//!   size, say);
//! - the probe is a function of the bytes: twice, the same answer;
//! - what it reports can be matched and shown: no NUL in a type, UUID, label or partition
//!   label (a `DeviceRef` cannot hold one); a UUID or PARTUUID is non-empty, and one of the
//!   shapes blkid writes for the type;
//! - partitions are numbered from 1, increasing, each PARTUUID distinct in form;
//! - a verity superblock, a verity-sig partition's JSON or an EFI variable's bytes read from
//!   it never panic, and a superblock that parses with data blocks gives a table;
//! - a LUKS2 header's tokens (leanrd_contract::luks2, which /init reads to know which tokens
//!   want a PIN) come in the order of their numbers, each number once, and are the same when
//!   read from the image's first 64 KiB and from exactly the header's size.

#![no_main]

use leanrd_init::probe::{partitions, probe_fs};
use libfuzzer_sys::fuzz_target;

fn hex_uuid(u: &str) -> bool {
    let parts: Vec<&str> = u.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12]) && u.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit())
}

fuzz_target!(|data: &[u8]| {
    let f = leanrd_fuzz::sparse_image(data);
    let p = probe_fs(f);
    assert_eq!(probe_fs(f), p, "two probes of the same bytes differ");
    for v in [&p.fstype, &p.uuid, &p.label, &p.partuuid, &p.partlabel].into_iter().flatten() {
        assert!(!v.is_empty() && !v.contains('\0'), "{p:?}");
    }
    if let (Some(t), Some(u)) = (&p.fstype, &p.uuid) {
        let ok = match t.as_str() {
            "vfat" => u.len() == 9 && u.as_bytes()[4] == b'-',
            "iso9660" => u.len() == 22,
            // LUKS headers carry their UUID as text, as written.
            "crypto_LUKS" => true,
            // A ZFS member's UUID is its pool's GUID in decimal, as blkid writes it.
            "zfs_member" => u.bytes().all(|b| b.is_ascii_digit()),
            _ => hex_uuid(u),
        };
        assert!(ok, "a {t} UUID of an odd shape: {u:?}");
    }

    let head = leanrd_fuzz::read_image_at(f, 0, 64 * 1024);
    // A verity superblock (its table built from it), a verity-sig partition's JSON, the EFI
    // variable naming the booted disk: any bytes, never a panic.
    let o = leanrd_contract::verity::VerityOptions::default();
    if let Ok(sb) = leanrd_contract::verity::Superblock::parse(&head)
        && let Ok(g) = leanrd_contract::verity::Geometry::new(&o, Some(&sb))
    {
        let _ = (g.sectors(), leanrd_contract::verity::table(&g, "8:1", "8:2", &[1; 32], &o, None, None));
    }
    let _ = leanrd_contract::verity::VeritySig::parse(&head);
    let _ = leanrd_init::verity::loader_part_uuid(&head[..head.len().min(200)]);
    let tokens = leanrd_contract::luks2::tokens(&head);
    assert!(tokens.windows(2).all(|w| w[0].id < w[1].id), "{tokens:?}");
    if let Some(size) = leanrd_contract::luks2::header_size(&head)
        && size <= head.len()
    {
        assert_eq!(leanrd_contract::luks2::tokens(&leanrd_fuzz::read_image_at(f, 0, size)), tokens);
    }

    let parts = partitions(f);
    assert_eq!(partitions(f), parts);
    let mut last = 0;
    for e in &parts {
        assert!(e.number > last, "partition numbers not increasing: {parts:?}");
        last = e.number;
        assert!(hex_uuid(&e.partuuid) || (e.partuuid.len() == 11 && e.partuuid.as_bytes()[8] == b'-'));
        if let Some(l) = &e.partlabel {
            assert!(!l.is_empty() && !l.contains('\0'), "{parts:?}");
        }
    }
});
