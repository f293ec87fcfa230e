//! The kernel's "newc" cpio format, as `init/initramfs.c` reads it: header encoding and
//! decoding, 4-byte padding, and the arithmetic that puts file data on a chosen boundary by
//! zero-padding the name field.
//!
//! This crate is pure: no I/O, no file-system policy. Hand-written because no crate exposes
//! the newc layout at this level (name padding, exact offsets) — the cpio crates on crates.io
//! write or read whole archives through their own writer, which is exactly what reflinks forbid.
//!
//! ```
//! use leanrd_newc::{FileKind, Header, HEADER_LEN, aligned_namesize, encode_head};
//!
//! // A 5000-byte file whose data must start on a 4096-byte boundary, at archive offset 0.
//! let name = b"lib/modules/x.ko";
//! let namesize = aligned_namesize(0, name.len(), 4096).unwrap();
//! let h = Header { mode: FileKind::Regular.mode(0o644), nlink: 1, filesize: 5000, namesize, ..Header::default() };
//! assert_eq!(h.data_start() % 4096, 0);
//! let head = encode_head(&h, name);
//! assert_eq!(head.len() as u64, h.data_start());
//! let back = Header::decode(head[..HEADER_LEN as usize].try_into().unwrap()).unwrap();
//! assert_eq!((back.kind(), back.filesize), (Some(FileKind::Regular), 5000));
//! ```

#![deny(missing_docs)]

mod kind;

use thiserror::Error;

pub use kind::{FileKind, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK, kind_name};

/// Magic of the plain newc format.
pub const MAGIC_NEWC: &[u8; 6] = b"070701";
/// Magic of the newc format with a data checksum (a 32-bit byte sum) that the kernel verifies.
pub const MAGIC_CRC: &[u8; 6] = b"070702";
/// Length of a newc header, before the name.
pub const HEADER_LEN: u64 = 110;
/// The kernel's PATH_MAX: the largest name size (including the NUL padding) it accepts.
pub const PATH_MAX: u32 = 4096;
/// Whether the kernel reads a symlink's data of `len` bytes (its target): 1 to PATH_MAX;
/// outside that it skips the entry.
pub fn symlink_len_ok(len: u64) -> bool {
    (1..=u64::from(PATH_MAX)).contains(&len)
}

/// Name of the entry that ends a segment.
pub const TRAILER: &[u8] = b"TRAILER!!!";

/// Round `n` up to a multiple of 4.
pub const fn align4(n: u64) -> u64 {
    (n + 3) & !3
}

/// Round `n` up to a multiple of `a` (a > 0).
pub const fn align_up(n: u64, a: u64) -> u64 {
    n.div_ceil(a) * a
}

/// One newc header: the thirteen hex fields plus the magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// `true` for `070702` (with checksum).
    pub crc: bool,
    /// Inode number (hard links share one).
    pub ino: u32,
    /// File type and permission bits.
    pub mode: u32,
    /// Owner's user ID.
    pub uid: u32,
    /// Owner's group ID.
    pub gid: u32,
    /// Number of links.
    pub nlink: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: u32,
    /// Size of the data that follows the name.
    pub filesize: u32,
    /// Major number of the device holding the file.
    pub dev_major: u32,
    /// Minor number of the device holding the file.
    pub dev_minor: u32,
    /// Major number of a device node.
    pub rdev_major: u32,
    /// Minor number of a device node.
    pub rdev_minor: u32,
    /// Size of the name field including the terminating NUL and any NUL padding.
    pub namesize: u32,
    /// Sum of the data bytes (`070702` only; 0 otherwise).
    pub check: u32,
}

/// Why a header or name cannot be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("bad magic {0:?} (expected 070701 or 070702)")]
    /// The magic is neither `070701` nor `070702`.
    BadMagic(String),
    #[error("field {field} is not 8 hex digits: {text:?}")]
    /// A field is not eight hex digits.
    BadHex {
        /// The field's name.
        field: &'static str,
        /// What it held.
        text: String,
    },
    #[error("namesize {0} is outside 1..=4096")]
    /// The name size is 0 or over 4096.
    BadNameSize(u32),
    #[error("name field does not end with a NUL byte")]
    /// The name does not end in a NUL byte.
    NameNotTerminated,
}

const FIELDS: [&str; 13] = [
    "ino",
    "mode",
    "uid",
    "gid",
    "nlink",
    "mtime",
    "filesize",
    "devmajor",
    "devminor",
    "rdevmajor",
    "rdevminor",
    "namesize",
    "check",
];

impl Header {
    /// The file's kind; `None` for type bits no file has.
    pub fn kind(&self) -> Option<FileKind> {
        FileKind::from_mode(self.mode)
    }

    fn fields(&self) -> [u32; 13] {
        [
            self.ino,
            self.mode,
            self.uid,
            self.gid,
            self.nlink,
            self.mtime,
            self.filesize,
            self.dev_major,
            self.dev_minor,
            self.rdev_major,
            self.rdev_minor,
            self.namesize,
            self.check,
        ]
    }

    /// The 110 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN as usize] {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut out = [0u8; HEADER_LEN as usize];
        out[..6].copy_from_slice(if self.crc { MAGIC_CRC } else { MAGIC_NEWC });
        for (i, v) in self.fields().iter().enumerate() {
            let f = &mut out[6 + 8 * i..14 + 8 * i];
            for (j, b) in f.iter_mut().enumerate() {
                *b = HEX[((v >> (28 - 4 * j)) & 0xf) as usize];
            }
        }
        out
    }

    /// Decode 110 header bytes. Checks the magic and the hex digits only; use
    /// [`Header::check_namesize`] for the kernel's name-size rule.
    pub fn decode(b: &[u8; HEADER_LEN as usize]) -> Result<Header, DecodeError> {
        let crc = match &b[..6] {
            m if m == MAGIC_NEWC => false,
            m if m == MAGIC_CRC => true,
            m => {
                return Err(DecodeError::BadMagic(String::from_utf8_lossy(m).into_owned()));
            }
        };
        let mut v = [0u32; 13];
        for (i, slot) in v.iter_mut().enumerate() {
            let text = &b[6 + 8 * i..14 + 8 * i];
            let mut x = 0u32;
            for &c in text {
                let d = match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    b'A'..=b'F' => c - b'A' + 10,
                    _ => {
                        return Err(DecodeError::BadHex {
                            field: FIELDS[i],
                            text: String::from_utf8_lossy(text).into_owned(),
                        });
                    }
                };
                x = (x << 4) | d as u32;
            }
            *slot = x;
        }
        Ok(Header {
            crc,
            ino: v[0],
            mode: v[1],
            uid: v[2],
            gid: v[3],
            nlink: v[4],
            mtime: v[5],
            filesize: v[6],
            dev_major: v[7],
            dev_minor: v[8],
            rdev_major: v[9],
            rdev_minor: v[10],
            namesize: v[11],
            check: v[12],
        })
    }

    /// The kernel's rule: 1 ≤ namesize ≤ PATH_MAX.
    pub fn check_namesize(&self) -> Result<(), DecodeError> {
        if self.namesize == 0 || self.namesize > PATH_MAX {
            Err(DecodeError::BadNameSize(self.namesize))
        } else {
            Ok(())
        }
    }

    /// Bytes from the start of the header to the start of the data (header, name, padding).
    pub fn data_start(&self) -> u64 {
        align4(HEADER_LEN + self.namesize as u64)
    }

    /// Bytes the whole entry occupies, padding included.
    pub fn entry_len(&self) -> u64 {
        self.data_start() + align4(self.filesize as u64)
    }

    /// True for the `TRAILER!!!` entry name.
    pub fn is_trailer_name(name: &[u8]) -> bool {
        name == TRAILER
    }
}

/// Extract the name from a name field: the bytes before the first NUL. The field's last
/// byte must be NUL (extra NULs before it are allowed: that is how data alignment works).
pub fn decode_name(field: &[u8]) -> Result<&[u8], DecodeError> {
    match field.last() {
        Some(0) => {}
        _ => return Err(DecodeError::NameNotTerminated),
    }
    let end = field.iter().position(|&c| c == 0).unwrap_or(field.len());
    Ok(&field[..end])
}

/// Encode a whole entry head: header, name, NUL padding up to `namesize`, and the zero
/// bytes that bring the data start to a multiple of 4.
pub fn encode_head(h: &Header, name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(h.data_start() as usize);
    encode_head_into(h, name, &mut out);
    out
}

/// [`encode_head`] appended to `out`.
pub fn encode_head_into(h: &Header, name: &[u8], out: &mut Vec<u8>) {
    debug_assert!(name.len() < h.namesize as usize);
    let at = out.len();
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(name);
    out.resize(at + h.data_start() as usize, 0);
}

/// The longest name whose data can be aligned: a 4-aligned header needs
/// `namesize ≡ 2 (mod 4)` for its data to start 4-aligned, and namesize is at most 4096.
pub const MAX_ALIGNABLE_NAME: usize = PATH_MAX as usize - 3;

/// The name size (≥ `name_len + 1`, ≤ PATH_MAX) that makes the data of an entry whose
/// header starts at `header_offset` begin at a multiple of `align`, if there is one.
/// `align` must be a multiple of 4 and `header_offset` 4-aligned.
pub fn aligned_namesize(header_offset: u64, name_len: usize, align: u64) -> Option<u32> {
    debug_assert!(align >= 4 && align.is_multiple_of(4) && header_offset.is_multiple_of(4));
    let min = name_len as u64 + 1;
    let base = header_offset + HEADER_LEN;
    // Smallest namesize ≥ min with (base + namesize) % align == 0.
    let target = align_up(base + min, align);
    let ns = target - base;
    (ns <= PATH_MAX as u64).then_some(ns as u32)
}

/// Name size for a filler entry (whose name is `filler_name_len` bytes) starting at
/// `offset` so that an entry with a name of `name_len` bytes placed after it can have its
/// data aligned to `align`. Returns the filler's namesize, or `None` when one filler cannot
/// reach an alignable offset (then place a maximal filler and ask again).
pub fn filler_namesize(offset: u64, filler_name_len: usize, name_len: usize, align: u64) -> Option<u32> {
    let min = filler_name_len as u64 + 1;
    // Try filler name sizes in steps of 4 (a filler has no data, so its end is
    // offset + align4(110 + ns)); at most align/4 + 1 candidates matter.
    let mut ns = min;
    while ns <= PATH_MAX as u64 {
        let next = offset + align4(HEADER_LEN + ns);
        if aligned_namesize(next, name_len, align).is_some() {
            return Some(ns as u32);
        }
        // Advance to the next name size that changes the padded length.
        ns = align4(HEADER_LEN + ns) + 4 - HEADER_LEN;
    }
    None
}

/// The 32-bit byte sum that `070702` stores in `check`.
pub fn checksum_update(sum: u32, data: &[u8]) -> u32 {
    data.iter().fold(sum, |s, &b| s.wrapping_add(b as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            crc: true,
            ino: 1,
            mode: 0o100644,
            uid: 1000,
            gid: 0xdeadbeef,
            nlink: 2,
            mtime: 1_700_000_000,
            filesize: 12345,
            dev_major: 8,
            dev_minor: 1,
            rdev_major: 0,
            rdev_minor: 0,
            namesize: 6,
            check: 99,
        };
        let b = h.encode();
        assert_eq!(&b[..6], b"070702");
        assert_eq!(&b[6..14], b"00000001");
        assert_eq!(Header::decode(&b).unwrap(), h);
    }

    #[test]
    fn decode_rejects_bad_input() {
        let mut b = Header::default().encode();
        b[0] = b'1';
        assert!(matches!(Header::decode(&b), Err(DecodeError::BadMagic(_))));
        let mut b = Header::default().encode();
        b[20] = b'g';
        assert_eq!(Header::decode(&b), Err(DecodeError::BadHex { field: "mode", text: "000000g0".into() }));
        let h = Header { namesize: 0, ..Default::default() };
        assert!(h.check_namesize().is_err());
        let h = Header { namesize: 4097, ..Default::default() };
        assert!(h.check_namesize().is_err());
        let h = Header { namesize: 4096, ..Default::default() };
        assert!(h.check_namesize().is_ok());
    }

    #[test]
    fn lowercase_hex_is_accepted() {
        let mut b = Header { mode: 0o40755, ..Default::default() }.encode();
        b[6 + 8..14 + 8].copy_from_slice(b"000041ed");
        assert_eq!(Header::decode(&b).unwrap().mode, 0o40755);
    }

    #[test]
    fn names() {
        assert_eq!(decode_name(b"abc\0").unwrap(), b"abc");
        assert_eq!(decode_name(b"abc\0\0\0\0").unwrap(), b"abc");
        assert_eq!(decode_name(b"abc"), Err(DecodeError::NameNotTerminated));
        assert_eq!(decode_name(b""), Err(DecodeError::NameNotTerminated));
    }

    #[test]
    fn head_is_padded_to_four() {
        let name = b"a";
        let h = Header { namesize: 2, ..Default::default() };
        let head = encode_head(&h, name);
        assert_eq!(head.len(), 112);
        assert_eq!(&head[110..], b"a\0");
        let h = Header { namesize: 3, ..Default::default() };
        assert_eq!(encode_head(&h, b"ab").len(), 116);
    }

    #[test]
    fn alignment_arithmetic() {
        for off in (0..20000u64).step_by(4) {
            for len in [1usize, 7, 100, 3000, 4000, 4095] {
                if let Some(ns) = aligned_namesize(off, len, 4096) {
                    assert!(ns as usize > len && ns <= PATH_MAX);
                    assert_eq!((off + HEADER_LEN + ns as u64) % 4096, 0);
                } else {
                    // A miss means the padding needed would pass PATH_MAX.
                    let need = align_up(off + HEADER_LEN + len as u64 + 1, 4096) - (off + HEADER_LEN);
                    assert!(need > PATH_MAX as u64);
                }
            }
        }
        // A filler always makes a 4096 alignment reachable in one step.
        for off in (0..8192u64).step_by(4) {
            for len in [1usize, 2000, 4000, MAX_ALIGNABLE_NAME] {
                if aligned_namesize(off, len, 4096).is_none() {
                    let f = filler_namesize(off, 1, len, 4096).expect("filler");
                    let next = off + align4(HEADER_LEN + f as u64);
                    assert!(aligned_namesize(next, len, 4096).is_some());
                }
            }
        }
        // Longer names can never be aligned: namesize would have to be 4097 or more.
        for off in (0..8192u64).step_by(4) {
            assert!(aligned_namesize(off, MAX_ALIGNABLE_NAME + 1, 4096).is_none());
            assert!(filler_namesize(off, 1, MAX_ALIGNABLE_NAME + 1, 4096).is_none());
        }
    }

    #[test]
    fn checksum_is_byte_sum() {
        assert_eq!(checksum_update(0, &[1, 2, 255]), 258);
        assert_eq!(checksum_update(u32::MAX, &[1]), 0);
    }
}
