//! The console keymap: the binary form the generator compiled (`loadkeys -b`: "bkeymap", 256
//! flags for the kernel's keymaps, then 128 16-bit entries for each one defined), written into
//! the kernel with the VT's KDSKBENT ioctl, entry by entry — what busybox's loadkmap does,
//! without a program in the image.

use alloc::format;
use alloc::string::String;

use rustix::fd::BorrowedFd;

/// KDSKBENT (linux/kd.h): set one entry of one keymap.
const KDSKBENT: rustix::ioctl::Opcode = 0x4B47;
/// Keys per keymap in the binary form (the kernel has 256; loadkeys -b writes 128).
const KEYS: usize = 128;

/// struct kbentry.
#[repr(C)]
struct KbEntry {
    table: u8,
    index: u8,
    value: u16,
}

/// Call `f` with each entry of a binary keymap — (keymap, key, value) — after checking the
/// whole file; an error names what is wrong.
pub fn for_each(b: &[u8], mut f: impl FnMut(u8, u8, u16) -> Result<(), String>) -> Result<usize, String> {
    let body = b.strip_prefix(b"bkeymap").ok_or("not a binary keymap")?;
    let (flags, keys) = body.split_at_checked(256).ok_or("truncated")?;
    let maps = flags.iter().filter(|f| **f != 0).count();
    if keys.len() != maps * KEYS * 2 {
        return Err(format!("{} bytes of keys for {maps} keymaps", keys.len()));
    }
    let mut at = keys.chunks_exact(2);
    for (table, _) in flags.iter().enumerate().filter(|(_, f)| **f != 0) {
        for index in 0..KEYS {
            let v = at.next().ok_or("truncated")?;
            f(table as u8, index as u8, u16::from_le_bytes([v[0], v[1]]))?;
        }
    }
    Ok(maps * KEYS)
}

/// Load the keymap file into the kernel through a VT; how many entries were set.
pub fn apply(vt: BorrowedFd<'_>, data: &[u8]) -> Result<usize, String> {
    for_each(data, |table, index, value| {
        let e = KbEntry { table, index, value };
        // SAFETY: KDSKBENT reads a struct kbentry, which KbEntry is (repr(C), 4 bytes).
        unsafe { rustix::ioctl::ioctl(vt, rustix::ioctl::Setter::<KDSKBENT, KbEntry>::new(e)) }
            .map_err(|e| format!("KDSKBENT (keymap {table}, key {index}): {}", crate::sys::strerror(e)))
    })
}

/// KDSETMODE, KDGKBMODE, KDSKBMODE (linux/kd.h) and their values.
const KDSETMODE: rustix::ioctl::Opcode = 0x4B3A;
const KDGKBMODE: rustix::ioctl::Opcode = 0x4B44;
const KDSKBMODE: rustix::ioctl::Opcode = 0x4B45;
const KD_TEXT: usize = 0;
const K_XLATE: i32 = 1;
const K_UNICODE: usize = 3;

/// A VT left as a dead display server leaves it (plymouthd killed, not quit): back to text
/// mode (KD_GRAPHICS would keep the last frame up, nothing written shown) and its keyboard
/// back to characters when it was switched off or raw (plymouthd reads the keyboards through
/// evdev and turns the VT's off, K_OFF: nothing typed would reach the VT). What was changed.
pub fn text_again(vt: BorrowedFd<'_>) -> Result<String, String> {
    // SAFETY: KDSETMODE takes an int by value.
    unsafe { rustix::ioctl::ioctl(vt, rustix::ioctl::IntegerSetter::<KDSETMODE>::new_usize(KD_TEXT)) }
        .map_err(|e| format!("KDSETMODE KD_TEXT: {}", crate::sys::strerror(e)))?;
    // SAFETY: KDGKBMODE writes an int.
    let mode = unsafe { rustix::ioctl::ioctl(vt, rustix::ioctl::Getter::<KDGKBMODE, i32>::new()) }
        .map_err(|e| format!("KDGKBMODE: {}", crate::sys::strerror(e)))?;
    if mode == K_XLATE || mode == K_UNICODE as i32 {
        return Ok("text mode".into());
    }
    // SAFETY: KDSKBMODE takes an int by value.
    unsafe { rustix::ioctl::ioctl(vt, rustix::ioctl::IntegerSetter::<KDSKBMODE>::new_usize(K_UNICODE)) }
        .map_err(|e| format!("KDSKBMODE K_UNICODE: {}", crate::sys::strerror(e)))?;
    Ok(format!("text mode, keyboard mode {mode} to Unicode"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn reads_binary_keymaps() {
        let mut b = b"bkeymap".to_vec();
        let mut flags = [0u8; 256];
        flags[0] = 1;
        flags[2] = 1;
        b.extend(flags);
        for t in [0u16, 2] {
            for k in 0..KEYS as u16 {
                b.extend((t << 8 | k).to_le_bytes());
            }
        }
        let entries = |b: &[u8]| {
            let mut v = Vec::new();
            for_each(b, |t, i, x| {
                v.push((t, i, x));
                Ok(())
            })
            .map(|_| v)
        };
        let e = entries(&b).unwrap();
        assert_eq!(e.len(), 256);
        assert_eq!(e[1], (0, 1, 1));
        assert_eq!(e[128 + 5], (2, 5, 0x205));
        assert!(entries(&b[..b.len() - 1]).is_err());
        assert!(entries(&[b.as_slice(), b"x"].concat()).is_err());
        assert!(entries(b"bkeymap").is_err());
        assert!(entries(b"hello").is_err());
    }
}
