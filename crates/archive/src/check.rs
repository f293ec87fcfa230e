//! `leanrd check`: everything in an image that the kernel would not unpack as intended
//! (rules in shared/notes/kernel-facts.md), collected rather than stopped at.

use std::collections::HashMap;
use std::io::Read;

use anyhow::Result;
use leanrd_compress::{Format, ZSTD_MAX_WINDOW_LOG};
use leanrd_newc::{FileKind, PATH_MAX, S_IFLNK, S_IFMT, S_IFREG, checksum_update};

use crate::names::{Namespace, canonical, symlink_target};
use crate::read::{Problem, ReadEntry, Segment, SegmentEnd, Visitor};

/// Identity of a hard-link set member, to spot distinct files sharing an inode number.
#[derive(PartialEq, Eq, Clone, Copy)]
struct Ident {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: u32,
}

type LinkKey = (u32, u32, u32, u32);

/// The first member of a hard-link set.
struct Link {
    id: Ident,
    data_seen: bool,
    name: String,
    canon: Vec<u8>,
    /// Where it is, which is also its tag in the namespace while nothing replaced it.
    at: String,
}

/// Collects problems while the reader walks the image.
#[derive(Default)]
pub struct Checker {
    pub problems: Vec<String>,
    pub segments: usize,
    pub entries: usize,
    /// (dev major, dev minor, ino, type) → first member: identity, data seen, name.
    links: HashMap<LinkKey, Link>,
    /// What the kernel has created so far (the rootfs persists across segments).
    names: Namespace<String>,
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }
}

impl Checker {
    /// Names with `..`, and names the kernel cannot create because of what came before.
    fn names_problems(&mut self, e: &ReadEntry, at: &str) {
        let name = e.name_lossy();
        let clean = canonical(&e.name);
        if clean.split(|&b| b == b'/').any(|c| c == b"..") {
            self.problems.push(format!("{at}: {name}: name has a '..' component: it unpacks outside where it says"));
            return;
        }
        let Some(kind) = FileKind::from_mode(e.header.mode) else { return };
        if clean.is_empty() {
            return;
        }
        if let Err((m, first)) = self.names.insert(&clean, kind, at.to_string()) {
            let first = first.map(|f| format!(" ({f})")).unwrap_or_default();
            self.problems.push(format!("{at}: {name}: the kernel cannot create it: {m}{first}"));
        }
    }
}

impl Visitor for Checker {
    fn segment(&mut self, s: &Segment) -> Result<()> {
        self.segments += 1;
        self.links.clear(); // the kernel's link table resets with each archive
        for m in framing_problems(s.format, &s.head) {
            self.problems.push(format!("segment {} ({} at offset {}): {m}", s.index, s.format, s.offset));
        }
        Ok(())
    }

    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> Result<()> {
        self.entries += 1;
        let h = &e.header;
        let at = match e.data_offset {
            Some(_) => format!("segment {} offset {}", e.segment, e.stream_offset),
            None => format!("segment {} stream offset {}", e.segment, e.stream_offset),
        };
        let name = e.name_lossy();
        let kind = h.mode & S_IFMT;
        let mut problem = |m: String| self.problems.push(format!("{at}: {name}: {m}"));
        if kind == S_IFLNK && (h.filesize == 0 || h.filesize > PATH_MAX) {
            problem(format!("symlink target size {} is outside 1..=4096: the kernel skips it", h.filesize));
        } else if kind == S_IFLNK {
            let mut raw = Vec::new();
            data.read_to_end(&mut raw)?;
            let target = symlink_target(&raw);
            if target.is_empty() {
                problem("symlink target is empty: the kernel cannot create it".into());
            } else if target.len() >= PATH_MAX as usize {
                problem(format!("symlink target of {} bytes: the kernel's limit is 4095 (ENAMETOOLONG)", target.len()));
            }
        } else if kind != S_IFREG && kind != S_IFLNK && h.filesize != 0 {
            problem(format!(
                "a {} with {} bytes of data: the kernel skips it",
                leanrd_newc::kind_name(h.mode),
                h.filesize
            ));
        }
        self.names_problems(e, &at);
        let at_now = at.clone();
        let mut problem = |m: String| self.problems.push(format!("{at_now}: {name}: {m}"));
        // The kernel verifies the checksum of regular files' data only (GNU cpio -H crc and
        // gen_init_cpio -c store 0 for symlinks).
        if h.crc && kind == S_IFREG {
            let mut sum = 0u32;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = data.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                sum = checksum_update(sum, &buf[..n]);
            }
            if sum != h.check {
                problem(format!("checksum {:08x} does not match the data ({sum:08x}): the kernel stops here", h.check));
            }
        }
        if kind == S_IFREG && h.nlink >= 2 {
            let key = (h.dev_major, h.dev_minor, h.ino, kind);
            let id = Ident { mode: h.mode, uid: h.uid, gid: h.gid, mtime: h.mtime };
            let has_data = h.filesize > 0;
            let canon = canonical(&e.name).into_owned();
            match self.links.get_mut(&key) {
                None => {
                    self.links.insert(key, Link { id, data_seen: has_data, name: name.clone(), canon, at });
                }
                Some(first) => {
                    let first_name = &first.name;
                    // The kernel links to whatever has the first member's name now.
                    let now = self.names.get(&first.canon).map(|(_, tag)| tag.as_ref() == Some(&first.at));
                    let m = if now.is_none() {
                        Some(format!(
                            "inode {} is also {first_name}, which was not created: the kernel drops this one too",
                            h.ino
                        ))
                    } else if now == Some(false) {
                        Some(format!(
                            "inode {} is also {first_name}, which a later entry replaced: the kernel would link to that",
                            h.ino
                        ))
                    } else if first.id != id {
                        Some(format!(
                            "inode {} is also {first_name}, which has other metadata: the kernel would hard-link them",
                            h.ino
                        ))
                    } else if has_data && first.data_seen {
                        Some(format!(
                            "inode {} is also {first_name}, and both carry data: distinct files share an inode number",
                            h.ino
                        ))
                    } else {
                        None
                    };
                    first.data_seen |= has_data;
                    if let Some(m) = m {
                        self.problems.push(format!("{}: {name}: {m}", at_now));
                    }
                }
            }
        }
        Ok(())
    }

    fn segment_end(&mut self, _s: &SegmentEnd) -> Result<()> {
        Ok(())
    }

    fn problem(&mut self, p: &Problem) -> Result<()> {
        self.problems.push(p.to_string());
        Ok(())
    }
}

/// Framing the kernel's decompressors reject, from a segment's first bytes.
pub fn framing_problems(format: Format, head: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    match format {
        Format::Xz if head.len() >= 12 => {
            match head[7] & 0x0f {
                0x00 | 0x01 => {}
                c => out.push(format!(
                    "xz integrity check {} ({}): the kernel's XZ decoder supports only CRC32 or none",
                    c,
                    match c {
                        0x04 => "CRC64",
                        0x0a => "SHA-256",
                        _ => "unknown",
                    }
                )),
            }
            // First block header: filter IDs.
            let b = &head[12..];
            if b.len() >= 2 && b[0] != 0 {
                let nfilters = (b[1] & 3) as usize + 1;
                let mut p = 2;
                let varint = |p: &mut usize| -> Option<u64> {
                    let mut v = 0u64;
                    for i in 0..9 {
                        let c = *b.get(*p)?;
                        *p += 1;
                        v |= ((c & 0x7f) as u64) << (7 * i);
                        if c & 0x80 == 0 {
                            return Some(v);
                        }
                    }
                    None
                };
                if b[1] & 0x40 != 0 {
                    let _ = varint(&mut p);
                }
                if b[1] & 0x80 != 0 {
                    let _ = varint(&mut p);
                }
                for _ in 0..nfilters {
                    let Some(id) = varint(&mut p) else { break };
                    let Some(psize) = varint(&mut p) else { break };
                    p += psize as usize;
                    if id != 0x21 {
                        out.push(format!(
                            "xz filter {id:#x} ({}): the kernel decodes LZMA2 only unless built with that BCJ filter",
                            match id {
                                0x03 => "delta",
                                0x04 => "BCJ x86",
                                0x05..=0x09 => "BCJ",
                                _ => "unknown",
                            }
                        ));
                    }
                }
            }
        }
        Format::Zstd if head.len() >= 6 => {
            let fhd = head[4];
            let single = fhd & 0x20 != 0;
            if !single {
                let wd = head[5];
                let log = 10 + (wd >> 3) as u32;
                let base = 1u64 << log;
                let size = base + (base / 8) * (wd & 7) as u64;
                if size > 1u64 << ZSTD_MAX_WINDOW_LOG {
                    out.push(format!(
                        "zstd window {size} bytes is larger than 2^{ZSTD_MAX_WINDOW_LOG}: the kernel may fail to allocate it"
                    ));
                }
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_xz_crc64_and_bcj() {
        let data = vec![7u8; 1000];
        let mut enc = liblzma_crc64(&data);
        let p = framing_problems(Format::Xz, &enc);
        assert!(p.iter().any(|m| m.contains("CRC64")), "{p:?}");
        enc[7] = 1;
        assert!(framing_problems(Format::Xz, &enc).is_empty());
    }

    fn liblzma_crc64(data: &[u8]) -> Vec<u8> {
        // A stream with the library default (CRC64) made the way a careless tool would.
        let ours = leanrd_compress::compress_vec(leanrd_compress::Spec::new(Format::Xz), 1, data).unwrap();
        let mut v = ours.clone();
        v[7] = 0x04;
        v
    }

    #[test]
    fn flags_large_zstd_window() {
        // magic, FHD without single-segment, window descriptor for 2^28.
        let head = [0x28, 0xb5, 0x2f, 0xfd, 0x00, (28 - 10) << 3, 0, 0];
        assert_eq!(framing_problems(Format::Zstd, &head).len(), 1);
        let head = [0x28, 0xb5, 0x2f, 0xfd, 0x00, (27 - 10) << 3, 0, 0];
        assert!(framing_problems(Format::Zstd, &head).is_empty());
    }
}
