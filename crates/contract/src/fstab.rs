//! What the generator (reading /proc/self/mountinfo) and /init (reading the root's
//! /etc/fstab) both need to know about mount tables.

use alloc::string::String;
use alloc::vec::Vec;

/// File system types that are not on a block device: network and virtual ones. A root of
/// one of these needs no disk driver; a /usr of one of these is left to the system.
pub const NOT_BLOCK_FSTYPES: &[&str] =
    &["nfs", "nfs4", "cifs", "smb3", "tmpfs", "overlay", "virtiofs", "9p", "fuse", "none", "bind"];

/// One line of an fstab, its escapes undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FstabEntry {
    /// The first field: what is mounted (a device reference such as `UUID=...`, a /dev path, or a
    /// server's export).
    pub spec: String,
    /// The second field: the mount point (`none` for swap).
    pub file: String,
    /// The third field: the file system type (`ext4`, `swap`, `nfs`, `auto`).
    pub vfstype: String,
    /// None when the line has no options field.
    pub mntops: Option<String>,
    /// The sixth field: 0 (or absent) means never checked at boot.
    pub passno: u32,
}

impl FstabEntry {
    /// Whether `noauto` is among its options (not mounted at boot).
    pub fn noauto(&self) -> bool {
        self.mntops.as_deref().is_some_and(|o| o.split(',').any(|x| x == "noauto"))
    }
}

/// The entries of an fstab (comments, blank and short lines skipped).
pub fn fstab_entries(text: &str) -> Vec<FstabEntry> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 3 || f[0].starts_with('#') {
                return None;
            }
            Some(FstabEntry {
                spec: unescape_octal(f[0]),
                file: unescape_octal(f[1]),
                vfstype: f[2].into(),
                mntops: f.get(3).map(|o| String::from(*o)),
                passno: f.get(5).and_then(|p| p.parse().ok()).unwrap_or(0),
            })
        })
        .collect()
}

/// The fstab entry for `mountpoint` (the last wins, as mount would), `/usr/` as `/usr`.
pub fn fstab_entry(text: &str, mountpoint: &str) -> Option<FstabEntry> {
    let want = mountpoint.trim_end_matches('/');
    fstab_entries(text).into_iter().rfind(|e| e.file.trim_end_matches('/') == want)
}

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
    fn fstab_lines() {
        let t = "# comment\n\nUUID=1 / ext4 errors=remount-ro 0 1\nLABEL=a\\040b /usr/ xfs noauto\nshort line\n\
                 /dev/sdb1 /usr btrfs subvol=@usr,ro 0 2\n";
        let e = fstab_entries(t);
        assert_eq!(e.len(), 3);
        assert_eq!((e[0].passno, e[0].mntops.as_deref()), (1, Some("errors=remount-ro")));
        assert_eq!((e[1].spec.as_str(), e[1].passno, e[1].noauto()), ("LABEL=a b", 0, true));
        assert_eq!(fstab_entry(t, "/usr").map(|e| (e.spec, e.passno)), Some(("/dev/sdb1".into(), 2)));
        assert_eq!(fstab_entry(t, "/").map(|e| e.vfstype), Some("ext4".into()));
        assert_eq!(fstab_entry(t, "/home"), None);
    }

    #[test]
    fn octal_escapes() {
        assert_eq!(unescape_octal("/mnt/my\\040disk\\134x"), "/mnt/my disk\\x");
        assert_eq!(unescape_octal("end\\04"), "end\\04");
        assert_eq!(unescape_octal("\\999 plain"), "\\999 plain");
    }
}
