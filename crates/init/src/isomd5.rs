//! `rd.live.check`: the medium's MD5, as isomd5sum's `implantisomd5` records it and its
//! `checkisomd5` (dracut's check) verifies it.
//!
//! implantisomd5 writes, into the primary volume descriptor's 512-byte application-use field
//! (offset 883), text such as `ISO MD5SUM = <32 hex>;SKIPSECTORS = 15;RHLISOSTATUS=1;...`.
//! The sum covers the ISO's first `volume space size - SKIPSECTORS` sectors, read with that
//! field as spaces. Written here (some 80 lines) because no crate reads it; the MD5 itself is
//! RustCrypto's `md-5`.

use alloc::format;
use alloc::string::String;

use md5::{Digest, Md5};

const SECTOR: u64 = 2048;
/// ECMA-119 8.4: the volume descriptors start at sector 16.
const FIRST_DESCRIPTOR: u64 = 16;
/// The application-use field of the primary volume descriptor (ECMA-119 8.4.32).
const APPDATA_OFFSET: usize = 883;
const APPDATA_SIZE: usize = 512;
/// The volume space size (ECMA-119 8.4.8): both-endian, the big-endian half here.
const SIZE_OFFSET: usize = 84;

/// What implantisomd5 recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Implanted {
    /// The sum, 32 hex digits.
    pub md5: String,
    /// Sectors at the end the sum leaves out.
    pub skip_sectors: u64,
    /// The ISO's size by its volume descriptor.
    pub iso_bytes: u64,
    /// Where the primary volume descriptor is.
    pub pvd_offset: u64,
}

/// The check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// The sum matches: the bytes read.
    Passed {
        /// The sum, 32 lower-case hex digits.
        md5: String,
        /// How many bytes it covers (the ISO's size less the skipped sectors).
        bytes: u64,
    },
    /// The medium is not what was implanted.
    Failed {
        /// The sum implantisomd5 recorded, 32 lower-case hex digits.
        implanted: String,
        /// The sum of what was read, 32 lower-case hex digits.
        read: String,
    },
    /// No implanted sum (or no ISO 9660 volume descriptor): nothing to check against.
    NotImplanted,
}

/// Parse the primary volume descriptor at `offset`; None when it carries no implanted sum.
pub fn parse(pvd: &[u8], offset: u64) -> Option<Implanted> {
    if pvd.len() < APPDATA_OFFSET + APPDATA_SIZE || pvd[0] != 1 || &pvd[1..6] != b"CD001" {
        return None;
    }
    let size = u32::from_be_bytes(pvd[SIZE_OFFSET..SIZE_OFFSET + 4].try_into().ok()?);
    let field = &pvd[APPDATA_OFFSET..APPDATA_OFFSET + APPDATA_SIZE];
    let text = core::str::from_utf8(&field[..field.iter().position(|&b| b == 0).unwrap_or(field.len())]).ok()?;
    let (mut md5, mut skip) = (None, None);
    for item in text.split(';') {
        let Some((k, v)) = item.split_once('=') else { continue };
        match (k.trim(), v.trim()) {
            ("ISO MD5SUM", v) if v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()) => {
                md5 = Some(v.to_ascii_lowercase())
            }
            ("SKIPSECTORS", v) => skip = v.parse::<u64>().ok(),
            _ => {}
        }
    }
    Some(Implanted { md5: md5?, skip_sectors: skip?, iso_bytes: u64::from(size) * SECTOR, pvd_offset: offset })
}

/// Reads the medium: fills the buffer from the offset, returns how much it read (0 at its end).
pub type ReadAt<'a> = dyn FnMut(u64, &mut [u8]) -> Result<usize, String> + 'a;

/// Check a medium, read through `read`.
pub fn check(read: &mut ReadAt) -> Result<Checked, String> {
    let mut pvd = alloc::vec![0u8; SECTOR as usize];
    let mut found = None;
    // The primary descriptor is nearly always the first; a boot record may come before it.
    for n in FIRST_DESCRIPTOR..FIRST_DESCRIPTOR + 32 {
        if read(n * SECTOR, &mut pvd)? < pvd.len() || &pvd[1..6] != b"CD001" || pvd[0] == 255 {
            break;
        }
        if pvd[0] == 1 {
            found = parse(&pvd, n * SECTOR);
            break;
        }
    }
    let Some(imp) = found else { return Ok(Checked::NotImplanted) };
    let total = imp
        .iso_bytes
        .checked_sub(imp.skip_sectors.saturating_mul(SECTOR))
        .ok_or_else(|| format!("the implanted SKIPSECTORS={} pass the ISO's end", imp.skip_sectors))?;
    let field = imp.pvd_offset + APPDATA_OFFSET as u64..imp.pvd_offset + (APPDATA_OFFSET + APPDATA_SIZE) as u64;
    let mut md5 = Md5::new();
    let mut buf = alloc::vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < total {
        let want = (total - at).min(buf.len() as u64) as usize;
        let n = read(at, &mut buf[..want])?;
        if n == 0 {
            return Err(format!("the medium ends at byte {at}, before the {total} its ISO 9660 header counts"));
        }
        // The application-use field is hashed as spaces (where the sum itself is written).
        for (i, b) in buf[..n].iter_mut().enumerate() {
            if field.contains(&(at + i as u64)) {
                *b = b' ';
            }
        }
        md5.update(&buf[..n]);
        at += n as u64;
    }
    let read = hex(&md5.finalize());
    Ok(if read == imp.md5 {
        Checked::Passed { md5: read, bytes: total }
    } else {
        Checked::Failed { implanted: imp.md5, read }
    })
}

/// [`check`] on a medium held in memory.
pub fn check_bytes(img: &[u8]) -> Result<Checked, String> {
    check(&mut |at, buf| {
        let at = usize::try_from(at).unwrap_or(usize::MAX).min(img.len());
        let n = buf.len().min(img.len() - at);
        buf[..n].copy_from_slice(&img[at..at + n]);
        Ok(n)
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ISO-shaped image of `sectors` sectors: a primary volume descriptor at sector 16
    /// (after a boot record at 16 when `boot_record`), a terminator, and the sum implanted.
    fn iso(sectors: u32, boot_record: bool, skip: u64) -> Vec<u8> {
        let mut img: Vec<u8> = (0..sectors as usize * 2048).map(|i| (i * 7 % 251) as u8).collect();
        let pvd_at = if boot_record { 17 } else { 16 } * 2048;
        if boot_record {
            img[16 * 2048] = 0;
            img[16 * 2048 + 1..16 * 2048 + 6].copy_from_slice(b"CD001");
        }
        img[pvd_at] = 1;
        img[pvd_at + 1..pvd_at + 6].copy_from_slice(b"CD001");
        img[pvd_at + 84..pvd_at + 88].copy_from_slice(&sectors.to_be_bytes());
        let term = pvd_at + 2048;
        img[term] = 255;
        img[term + 1..term + 6].copy_from_slice(b"CD001");
        let field = pvd_at + APPDATA_OFFSET..pvd_at + APPDATA_OFFSET + APPDATA_SIZE;
        img[field.clone()].fill(b' ');
        let total = (sectors as u64 - skip) as usize * 2048;
        let sum = hex(&Md5::digest(&img[..total]));
        let text = format!("ISO MD5SUM = {sum};SKIPSECTORS = {skip};RHLISOSTATUS=1;");
        img[field.start..field.start + text.len()].copy_from_slice(text.as_bytes());
        img
    }

    use super::check_bytes as run;

    #[test]
    fn an_intact_medium_passes_and_a_damaged_one_fails() {
        for boot_record in [false, true] {
            let mut img = iso(700, boot_record, 15);
            assert!(matches!(run(&img), Ok(Checked::Passed { bytes, .. }) if bytes == 685 * 2048));
            // The skipped tail is not checked; a byte in the sum's range is.
            img[699 * 2048] ^= 1;
            assert!(matches!(run(&img), Ok(Checked::Passed { .. })));
            img[600 * 2048 + 5] ^= 1;
            assert!(matches!(run(&img), Ok(Checked::Failed { .. })), "{:?}", run(&img));
        }
    }

    /// Held against isomd5sum itself: an ISO made by xorriso, its sum implanted by
    /// implantisomd5; checkisomd5 and this agree on it intact and damaged.
    #[test]
    fn agrees_with_isomd5sum() {
        use std::process::Command;
        let sh = |c: &str| Command::new("sh").args(["-c", c]).output().is_ok_and(|o| o.status.success());
        if !sh("command -v xorriso && command -v implantisomd5 && command -v checkisomd5") {
            leanrd_testkit::skip::<()>("needs xorriso and isomd5sum");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let d = t.path().to_str().unwrap();
        assert!(sh(&format!(
            "mkdir {d}/top && head -c 3000000 /dev/urandom > {d}/top/data && \
             xorriso -as mkisofs -quiet -V CHECKED -o {d}/m.iso {d}/top 2>/dev/null && \
             implantisomd5 --force {d}/m.iso >/dev/null && checkisomd5 {d}/m.iso >/dev/null"
        )));
        let mut img = std::fs::read(format!("{d}/m.iso")).unwrap();
        assert!(matches!(run(&img), Ok(Checked::Passed { .. })), "{:?}", run(&img));
        // A byte of the file's data, flipped.
        let at = img.len() / 2;
        img[at] ^= 0x40;
        std::fs::write(format!("{d}/bad.iso"), &img).unwrap();
        assert!(!sh(&format!("checkisomd5 {d}/bad.iso >/dev/null")));
        assert!(matches!(run(&img), Ok(Checked::Failed { .. })), "{:?}", run(&img));
    }

    #[test]
    fn a_medium_without_a_sum_or_cut_short_is_told() {
        let plain = {
            let mut img = iso(64, false, 15);
            img[16 * 2048 + APPDATA_OFFSET..16 * 2048 + APPDATA_OFFSET + APPDATA_SIZE].fill(0);
            img
        };
        assert_eq!(run(&plain), Ok(Checked::NotImplanted));
        assert_eq!(run(&[0u8; 4096]), Ok(Checked::NotImplanted));
        let img = iso(700, false, 15);
        let e = run(&img[..300 * 2048]).unwrap_err();
        assert!(e.contains("the medium ends at byte 614400"), "{e}");
        // A hostile SKIPSECTORS past the end.
        let mut img = iso(64, false, 15);
        let f = 16 * 2048 + APPDATA_OFFSET;
        let text = b"ISO MD5SUM = 0123456789abcdef0123456789abcdef;SKIPSECTORS = 99999999999;";
        img[f..f + APPDATA_SIZE].fill(b' ');
        img[f..f + text.len()].copy_from_slice(text);
        assert!(run(&img).unwrap_err().contains("pass the ISO's end"));
    }
}
