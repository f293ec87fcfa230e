//! What the generator (reading /proc/self/mountinfo) and /init (reading the root's
//! /etc/fstab) both need to know about mount tables.

use alloc::string::String;
use alloc::vec::Vec;

/// File system types that are not on a block device: network and virtual ones. A root of
/// one of these needs no disk driver; a /usr of one of these is left to the system.
pub const NOT_BLOCK_FSTYPES: &[&str] =
    &["nfs", "nfs4", "cifs", "smb3", "tmpfs", "overlay", "virtiofs", "9p", "fuse", "none", "bind"];

/// mountinfo's and fstab's `\ooo` octal escapes (space is `\040`) undone.
pub fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c))) {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_escapes() {
        assert_eq!(unescape_octal("/mnt/my\\040disk\\134x"), "/mnt/my disk\\x");
        assert_eq!(unescape_octal("end\\04"), "end\\04");
        assert_eq!(unescape_octal("\\999 plain"), "\\999 plain");
    }
}
