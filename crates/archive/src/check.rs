//! `leanrd check`: everything in an image that the kernel would not unpack as intended
//! (rules in shared/notes/kernel-facts.md), collected rather than stopped at.

use std::collections::HashMap;
use std::io::Read;

use crate::error::Result;
use leanrd_newc::{FileKind, Header, PATH_MAX, symlink_len_ok};

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

/// A hard-link set of regular files: (dev major, dev minor, inode).
type LinkKey = (u32, u32, u32);

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
    /// Every problem found, one line each, with where it is; empty when the kernel would unpack
    /// the image as intended.
    pub problems: Vec<String>,
    /// Segments walked.
    pub segments: usize,
    /// Entries walked, over all segments (trailers not counted).
    pub entries: usize,
    /// (dev major, dev minor, ino, type) → first member: identity, data seen, name.
    links: HashMap<LinkKey, Link>,
    /// What the kernel has created so far (the rootfs persists across segments).
    names: Namespace<String>,
}

impl Checker {
    /// A checker that has seen nothing yet.
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

/// A symlink the kernel skips or cannot create.
fn symlink_problem(h: &Header, data: &mut dyn Read) -> Result<Option<String>> {
    if !symlink_len_ok(h.filesize.into()) {
        return Ok(Some(format!("symlink target size {} is outside 1..=4096: the kernel skips it", h.filesize)));
    }
    let mut raw = Vec::new();
    data.read_to_end(&mut raw)?;
    let target = symlink_target(&raw);
    Ok(if target.is_empty() {
        Some("symlink target is empty: the kernel cannot create it".into())
    } else if target.len() >= PATH_MAX as usize {
        Some(format!("symlink target of {} bytes: the kernel's limit is 4095 (ENAMETOOLONG)", target.len()))
    } else {
        None
    })
}

/// A regular file's data that does not match its 070702 checksum. The kernel verifies the
/// checksum of regular files' data only (GNU cpio -H crc and gen_init_cpio -c store 0 for
/// symlinks).
fn checksum_problem(h: &Header, data: &mut dyn Read) -> Result<Option<String>> {
    if !h.crc {
        return Ok(None);
    }
    let mut summed = crate::read::Summing::new(data);
    std::io::copy(&mut summed, &mut std::io::sink())?;
    let sum = summed.sum();
    Ok((sum != h.check)
        .then(|| format!("checksum {:08x} does not match the data ({sum:08x}): the kernel stops here", h.check)))
}

impl Checker {
    /// A hard-link member the kernel would not link as the archive says.
    fn link_problem(&mut self, e: &ReadEntry, at: &str) -> Option<String> {
        let h = &e.header;
        let key = (h.dev_major, h.dev_minor, h.ino);
        let id = Ident { mode: h.mode, uid: h.uid, gid: h.gid, mtime: h.mtime };
        let has_data = h.filesize > 0;
        let Some(first) = self.links.get_mut(&key) else {
            let canon = canonical(&e.name).into_owned();
            self.links.insert(key, Link { id, data_seen: has_data, name: e.name_lossy(), canon, at: at.to_string() });
            return None;
        };
        let first_name = &first.name;
        // The kernel links to whatever has the first member's name now.
        let now = self.names.get(&first.canon).map(|(_, tag)| tag.as_ref() == Some(&first.at));
        let ino = h.ino;
        let m = if now.is_none() {
            Some(format!("inode {ino} is also {first_name}, which was not created: the kernel drops this one too"))
        } else if now == Some(false) {
            Some(format!(
                "inode {ino} is also {first_name}, which a later entry replaced: the kernel would link to that"
            ))
        } else if first.id != id {
            Some(format!("inode {ino} is also {first_name}, which has other metadata: the kernel would hard-link them"))
        } else if has_data && first.data_seen {
            Some(format!("inode {ino} is also {first_name}, and both carry data: distinct files share an inode number"))
        } else {
            None
        };
        first.data_seen |= has_data;
        m
    }
}

impl Visitor for Checker {
    fn segment(&mut self, s: &Segment) -> Result<()> {
        self.segments += 1;
        self.links.clear(); // the kernel's link table resets with each archive
        for m in leanrd_compress::framing::kernel_problems(s.format, &s.head) {
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
        let mut found = Vec::new();
        match h.kind() {
            Some(FileKind::Symlink) => found.extend(symlink_problem(h, data)?),
            Some(FileKind::Regular) => {}
            None => found.push(format!(
                "file type {:o} is none the kernel knows: it skips the entry",
                h.mode & leanrd_newc::S_IFMT
            )),
            _ if h.filesize != 0 => found.push(format!(
                "a {} with {} bytes of data: the kernel skips it",
                leanrd_newc::kind_name(h.mode),
                h.filesize
            )),
            _ => {}
        }
        let problems: Vec<String> = found.drain(..).map(|m| format!("{at}: {name}: {m}")).collect();
        self.problems.extend(problems);
        self.names_problems(e, &at);
        if h.kind() == Some(FileKind::Regular) {
            found.extend(checksum_problem(h, data)?);
            if h.nlink >= 2 {
                found.extend(self.link_problem(e, &at));
            }
        }
        self.problems.extend(found.into_iter().map(|m| format!("{at}: {name}: {m}")));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry of no file type the kernel knows (mode 0 here) is skipped by the kernel, and
    /// `extract` refuses it: `check` must not pass the image (found by fuzz/ `archive`).
    #[test]
    fn an_entry_of_unknown_type_is_a_problem() {
        let h = Header { mode: 0o644, nlink: 1, namesize: 2, ..Header::default() };
        let mut img = leanrd_newc::encode_head(&h, b"x");
        let t = Header { nlink: 1, namesize: 11, ..Header::default() };
        img.extend(leanrd_newc::encode_head(&t, leanrd_newc::TRAILER));
        let mut c = Checker::new();
        crate::read::read_image(&img[..], &mut c).unwrap();
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert!(c.problems[0].contains("file type 0 is none the kernel knows"), "{:?}", c.problems);
    }
}
