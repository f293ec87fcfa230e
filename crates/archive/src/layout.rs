//! Fix every byte offset of an archive before any data is written: sizes are known up
//! front, so file data can be cloned into place in any order, in parallel.

use std::fs::File;
use std::io::Read;

use anyhow::{Context, Result};
use leanrd_newc::{
    Header, MAX_ALIGNABLE_NAME, PATH_MAX, S_IFDIR, S_IFMT, TRAILER, aligned_namesize, checksum_update, filler_namesize,
};

use crate::entry::{Data, Entry};

/// How to lay an archive out.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Start the data of regular files of at least this many bytes at a multiple of it
    /// (a multiple of 4, typically the file-system block size).
    pub data_align: Option<u64>,
    /// Write `070702` headers with the data checksum.
    pub checksum: bool,
    /// Offset of the archive's first byte in the image file (alignment is relative to the
    /// image, which matters when the archive is appended as a later segment).
    pub base: u64,
}

/// What a placed header stands for.
#[derive(Debug, Clone)]
pub enum Slot {
    /// `entries[i]`.
    Entry(usize),
    /// A filler (a repeat of a directory already in the archive) or the trailer.
    Extra(Vec<u8>),
}

/// One header at its place.
#[derive(Debug, Clone)]
pub struct Placed {
    /// Offset of the header in the image file.
    pub offset: u64,
    pub header: Header,
    pub slot: Slot,
}

impl Placed {
    /// Offset of the data in the image file.
    pub fn data_offset(&self) -> u64 {
        self.offset + self.header.data_start()
    }
}

/// A complete plan: every header, where it goes, and where each file's data goes.
#[derive(Debug, Clone)]
pub struct Layout {
    pub entries: Vec<Entry>,
    pub placed: Vec<Placed>,
    /// Image offset just past the archive (4-aligned).
    pub end: u64,
    pub options: Options,
    /// Regular files big enough to be aligned.
    pub eligible: usize,
    /// Of those, the ones whose data is aligned.
    pub aligned: usize,
    /// Filler entries inserted because a name was too long to pad.
    pub fillers: usize,
}

impl Layout {
    /// Plan `entries` in the order given.
    pub fn plan(entries: Vec<Entry>, options: Options) -> Result<Layout> {
        if let Some(a) = options.data_align {
            anyhow::ensure!(a >= 4 && a % 4 == 0, "--data-align {a} is not a positive multiple of 4");
        }
        anyhow::ensure!(options.base.is_multiple_of(4), "archive start {} is not 4-aligned", options.base);
        let mut placed = Vec::with_capacity(entries.len() + 1);
        let mut off = options.base;
        let (mut eligible, mut aligned, mut fillers) = (0, 0, 0);
        // The last directory written: a filler repeats it, which changes nothing on unpack.
        let mut last_dir: Option<(Header, Vec<u8>)> = None;
        for (i, e) in entries.iter().enumerate() {
            let size = e.data.len();
            anyhow::ensure!(
                size <= u32::MAX as u64,
                "{}: {size} bytes is larger than newc's 4 GiB limit",
                String::from_utf8_lossy(&e.name)
            );
            anyhow::ensure!(
                !e.name.is_empty() && e.name.len() < PATH_MAX as usize && !e.name.contains(&0),
                "{:?}: a name must be 1 to 4095 bytes without NUL",
                String::from_utf8_lossy(&e.name)
            );
            let check = if options.checksum { checksum(e)? } else { 0 };
            let mut header = Header {
                crc: options.checksum,
                ino: e.ino,
                mode: e.mode,
                uid: e.uid,
                gid: e.gid,
                nlink: e.nlink,
                mtime: e.mtime,
                filesize: size as u32,
                dev_major: e.dev_major,
                dev_minor: e.dev_minor,
                rdev_major: e.rdev_major,
                rdev_minor: e.rdev_minor,
                namesize: e.name.len() as u32 + 1,
                check,
            };
            if let Some(a) = options.data_align.filter(|&a| e.is_regular() && size >= a) {
                eligible += 1;
                if e.name.len() > MAX_ALIGNABLE_NAME {
                    // No padding can align it (see MAX_ALIGNABLE_NAME): leave it unaligned.
                    last_dir_update(&mut last_dir, e, &header);
                    placed.push(Placed { offset: off, header, slot: Slot::Entry(i) });
                    off += header.entry_len();
                    continue;
                }
                while aligned_namesize(off, e.name.len(), a).is_none() {
                    let (dir, name) = last_dir.clone().unwrap_or_else(|| (root_dir(options.checksum), b".".to_vec()));
                    let ns = filler_namesize(off, name.len(), e.name.len(), a).unwrap_or(PATH_MAX);
                    let h = Header { namesize: ns, ..dir };
                    placed.push(Placed { offset: off, header: h, slot: Slot::Extra(name) });
                    off += h.entry_len();
                    fillers += 1;
                }
                header.namesize = aligned_namesize(off, e.name.len(), a).expect("checked above");
                aligned += 1;
            }
            last_dir_update(&mut last_dir, e, &header);
            placed.push(Placed { offset: off, header, slot: Slot::Entry(i) });
            off += header.entry_len();
        }
        let trailer =
            Header { crc: options.checksum, nlink: 1, namesize: TRAILER.len() as u32 + 1, ..Header::default() };
        placed.push(Placed { offset: off, header: trailer, slot: Slot::Extra(TRAILER.to_vec()) });
        off += trailer.entry_len();
        Ok(Layout { entries, placed, end: off, options, eligible, aligned, fillers })
    }

    /// Bytes of the archive itself.
    pub fn len(&self) -> u64 {
        self.end - self.options.base
    }

    pub fn is_empty(&self) -> bool {
        self.placed.is_empty()
    }

    /// The name stored for a placed header.
    pub fn name<'a>(&'a self, p: &'a Placed) -> &'a [u8] {
        match &p.slot {
            Slot::Entry(i) => &self.entries[*i].name,
            Slot::Extra(n) => n,
        }
    }

    /// The data source of a placed header.
    pub fn data<'a>(&'a self, p: &'a Placed) -> &'a Data {
        match &p.slot {
            Slot::Entry(i) => &self.entries[*i].data,
            Slot::Extra(_) => &Data::None,
        }
    }

    /// Header, name, NUL padding: the bytes from the header's offset to its data.
    pub fn head_bytes(&self, p: &Placed) -> Vec<u8> {
        leanrd_newc::encode_head(&p.header, self.name(p))
    }
}

fn last_dir_update(last_dir: &mut Option<(Header, Vec<u8>)>, e: &Entry, h: &Header) {
    if e.mode & S_IFMT == S_IFDIR {
        *last_dir = Some((*h, e.name.clone()));
    }
}

/// The filler used when no directory precedes an entry that needs one: the root itself,
/// as every initramfs has it.
fn root_dir(crc: bool) -> Header {
    Header { crc, mode: S_IFDIR | 0o755, nlink: 2, namesize: 2, ..Header::default() }
}

fn checksum(e: &Entry) -> Result<u32> {
    Ok(match &e.data {
        Data::None => 0,
        Data::Inline(v) => checksum_update(0, v),
        Data::File { path, size } => {
            let mut f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
            let mut buf = vec![0u8; 1 << 16];
            let (mut sum, mut left) = (0u32, *size);
            while left > 0 {
                let n = f.read(&mut buf).with_context(|| format!("{}: read error", path.display()))?;
                anyhow::ensure!(n > 0, "{}: file shrank while archiving", path.display());
                let n = n.min(left as usize);
                sum = checksum_update(sum, &buf[..n]);
                left -= n as u64;
            }
            sum
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Data;
    use leanrd_newc::S_IFREG;

    fn file(name: &str, size: u64) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            mode: S_IFREG | 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            mtime: 0,
            ino: 1,
            dev_major: 0,
            dev_minor: 0,
            rdev_major: 0,
            rdev_minor: 0,
            data: Data::Inline(vec![7; size as usize]),
        }
    }

    #[test]
    fn aligns_every_eligible_file_even_with_long_names() {
        let long = "d/".repeat(2100) + "x";
        let mut entries = vec![];
        for i in 0..50u64 {
            entries.push(file(&format!("f{i}"), 4096 + i * 37));
            entries.push(file(&long[..(3990 + i as usize) % 4095], 5000));
            entries.push(file("small", 10));
        }
        entries.push(file(&long[..4094], 5000)); // can never be aligned
        entries.push(file(&long[..4093], 5000)); // can
        let l = Layout::plan(entries, Options { data_align: Some(4096), ..Default::default() }).unwrap();
        assert_eq!(l.eligible, 102);
        assert_eq!(l.aligned, 101);
        assert!(l.fillers > 0);
        for p in &l.placed {
            assert_eq!(p.offset % 4, 0);
            assert!(p.header.namesize <= PATH_MAX);
            if p.header.filesize >= 4096 && p.header.namesize < 4095 {
                assert_eq!(p.data_offset() % 4096, 0, "{:?}", p.header);
            }
        }
        // Offsets are contiguous.
        for w in l.placed.windows(2) {
            assert_eq!(w[0].offset + w[0].header.entry_len(), w[1].offset);
        }
    }

    #[test]
    fn small_files_are_not_padded() {
        let l = Layout::plan(vec![file("a", 100)], Options { data_align: Some(4096), ..Default::default() }).unwrap();
        assert_eq!(l.placed[0].header.namesize, 2);
        assert_eq!(l.eligible, 0);
    }

    #[test]
    fn alignment_is_relative_to_the_image() {
        let l =
            Layout::plan(vec![file("a", 8192)], Options { data_align: Some(4096), base: 1000, ..Default::default() })
                .unwrap();
        assert_eq!(l.placed[0].data_offset() % 4096, 0);
        assert!(Layout::plan(vec![], Options { data_align: Some(6), ..Default::default() }).is_err());
    }
}
