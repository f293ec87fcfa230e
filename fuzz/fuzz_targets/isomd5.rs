//! `rd.live.check` (crates/init/src/isomd5.rs): isomd5sum's implanted MD5 in an ISO 9660
//! primary volume descriptor, parsed (`parse`) and held against the medium (`check`). The
//! medium is whatever was written to the stick. The input is the medium from sector 16 (the
//! volume descriptors) on; the 32 KiB before it are zeros.
//!
//! Holds to:
//! - nothing panics, whatever SKIPSECTORS and the volume size say;
//! - a medium `check` passes has the MD5 it says, computed here over the bytes it counts (the
//!   application-use field as spaces), and those bytes are on the medium;
//! - a sum implanted as implantisomd5 does (a reference implanter here, over the same volume
//!   descriptors) passes when the medium holds the bytes it counts, and is refused with an
//!   error (never a pass or a failure) when it does not.

#![no_main]

use leanrd_init::isomd5::{Checked, parse};
use libfuzzer_sys::fuzz_target;
use md5::{Digest, Md5};

const SECTOR: usize = 2048;
const FIELD: usize = 883;
const FIELD_LEN: usize = 512;

use leanrd_init::isomd5::check_bytes as run;

/// The primary volume descriptor as checkisomd5 finds it: the first type-1 descriptor from
/// sector 16, before the set terminator, among whole sectors that say CD001.
fn pvd_offset(img: &[u8]) -> Option<usize> {
    for n in 16..48 {
        let d = img.get(n * SECTOR..(n + 1) * SECTOR)?;
        if &d[1..6] != b"CD001" || d[0] == 255 {
            return None;
        }
        if d[0] == 1 {
            return Some(n * SECTOR);
        }
    }
    None
}

fn md5_of(img: &[u8], total: usize, pvd: usize) -> String {
    let mut b = img[..total].to_vec();
    if let Some(field) = b.get_mut(pvd + FIELD..(pvd + FIELD + FIELD_LEN).min(total)) {
        field.fill(b' ');
    }
    Md5::digest(&b).iter().map(|x| format!("{x:02x}")).collect()
}

fuzz_target!(|data: &[u8]| {
    let _ = parse(data, 0);
    let mut img = vec![0u8; 16 * SECTOR];
    img.extend_from_slice(data);

    let pvd = pvd_offset(&img);
    match run(&img) {
        Ok(Checked::Passed { md5, bytes }) => {
            let pvd = pvd.expect("a pass without a primary volume descriptor");
            let total = usize::try_from(bytes).unwrap();
            assert!(total <= img.len(), "a pass over bytes the medium does not have");
            assert_eq!(md5_of(&img, total, pvd), md5, "a pass with another MD5 than the bytes'");
        }
        Ok(Checked::Failed { implanted, read }) => assert_ne!(implanted, read),
        Ok(Checked::NotImplanted) | Err(_) => {}
    }

    // Implant a sum as implantisomd5 does, then check.
    let Some(pvd) = pvd else { return };
    let sectors = u32::from_be_bytes(img[pvd + 84..pvd + 88].try_into().unwrap()) as usize;
    let skip = (data.len() / 7) % 64;
    let field = format!("ISO MD5SUM = {};SKIPSECTORS = {skip};RHLISOSTATUS=1;", "0".repeat(32));
    img[pvd + FIELD..pvd + FIELD + FIELD_LEN].fill(b' ');
    let Some(total) = sectors.checked_sub(skip).map(|s| s * SECTOR) else {
        img[pvd + FIELD..pvd + FIELD + field.len()].copy_from_slice(field.as_bytes());
        assert!(run(&img).is_err(), "SKIPSECTORS past the volume's end is not refused");
        return;
    };
    let sum = if total <= img.len() { md5_of(&img, total, pvd) } else { "0".repeat(32) };
    let field = field.replace(&"0".repeat(32), &sum);
    img[pvd + FIELD..pvd + FIELD + field.len()].copy_from_slice(field.as_bytes());
    let r = run(&img);
    if total <= img.len() {
        assert_eq!(r, Ok(Checked::Passed { md5: sum, bytes: total as u64 }), "an implanted sum does not pass");
    } else {
        assert!(r.is_err(), "a medium shorter than its volume is not refused: {r:?}");
    }
});
