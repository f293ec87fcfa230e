//! Fix every byte offset of an archive before any data is written: sizes are known up
//! front, so file data can be cloned into place in any order, in parallel.

use std::fs::File;
use std::io::Read;

use crate::error::{Context, Error, Result, bail};
use leanrd_newc::{
    FileKind, Header, MAX_ALIGNABLE_NAME, PATH_MAX, TRAILER, aligned_namesize, checksum_update, filler_namesize,
};

use crate::entry::{Data, Entry};
use crate::names::{Conflict, canonical, check_name, find_conflict, kernel_conflict};

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

/// One header at its place, as [`Layout::iter`] yields them.
#[derive(Debug, Clone)]
pub struct Placed<'a> {
    /// Offset of the header in the image file.
    pub offset: u64,
    /// The newc header, with its padded name size and checksum.
    pub header: Header,
    /// The name as stored, without the terminating NUL.
    pub name: &'a [u8],
    /// The entry it stands for; `None` for fillers and the trailer.
    pub entry: Option<&'a Entry>,
}

impl Placed<'_> {
    /// Offset of the data in the image file.
    pub fn data_offset(&self) -> u64 {
        self.offset + self.header.data_start()
    }

    /// The data source.
    pub fn data(&self) -> &Data {
        self.entry.map(|e| &e.data).unwrap_or(&Data::None)
    }

    /// Header, name, NUL padding: the bytes from the header's offset to its data.
    pub(crate) fn head_bytes(&self) -> Vec<u8> {
        leanrd_newc::encode_head(&self.header, self.name)
    }
}

/// A header that is not an entry: a filler (a repeat of a directory already in the
/// archive, before entry `before`) or the trailer (`before` = the number of entries).
#[derive(Debug, Clone)]
struct Extra {
    before: usize,
    header: Header,
    name: Box<[u8]>,
}

/// A complete plan: every header, where it goes, and where each file's data goes.
///
/// Only what cannot be derived is kept per entry (the padded name size, and the checksum
/// when asked for): the headers and their offsets are computed again by [`Layout::iter`],
/// which keeps a plan of 200,000 entries small.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The entries, in archive order (fillers and the trailer are not among them).
    pub entries: Vec<Entry>,
    namesizes: Vec<u16>,
    checks: Vec<u32>,
    extras: Vec<Extra>,
    /// Image offset just past the archive (4-aligned).
    pub end: u64,
    /// The options it was planned with.
    pub options: Options,
    /// Regular files big enough to be aligned.
    pub eligible: usize,
    /// Of those, the ones whose data is aligned.
    pub aligned: usize,
    /// Filler entries inserted because a name was too long to pad.
    pub fillers: usize,
}

/// The header of `e` with `namesize` and checksum `check`.
fn header_of(e: &Entry, crc: bool, namesize: u32, check: u32) -> Header {
    Header {
        crc,
        ino: e.ino,
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        nlink: e.nlink,
        mtime: e.mtime,
        filesize: e.data.len() as u32,
        dev_major: e.dev_major,
        dev_minor: e.dev_minor,
        rdev_major: e.rdev_major,
        rdev_minor: e.rdev_minor,
        namesize,
        check,
    }
}

/// A data alignment newc can give: a positive multiple of 4 (headers and data start at
/// multiples of 4). The one check, for the command line, the configuration and the layout.
pub fn check_data_align(a: u64) -> Result<u64, String> {
    if a >= 4 && a.is_multiple_of(4) {
        Ok(a)
    } else {
        Err(format!("data alignment {a} is not a positive multiple of 4"))
    }
}

/// [`check_data_align`] for clap's `value_parser`.
pub fn parse_data_align(s: &str) -> Result<u64, String> {
    check_data_align(s.parse().map_err(|e| format!("{s:?}: {e}"))?)
}

impl Layout {
    /// Plan `entries` in the order given.
    pub fn plan(entries: Vec<Entry>, options: Options) -> Result<Layout> {
        if let Some(a) = options.data_align {
            check_data_align(a).map_err(Error::Invalid)?;
        }
        if !options.base.is_multiple_of(4) {
            bail!("archive start {} is not 4-aligned", options.base);
        }
        if let Some(c) = find_conflict(&entries) {
            bail!("{}", conflict_message(&entries, c));
        }
        let mut namesizes = Vec::with_capacity(entries.len());
        let mut checks = Vec::new();
        let mut extras = Vec::new();
        let mut off = options.base;
        let (mut eligible, mut aligned, mut fillers) = (0, 0, 0);
        // The last directory written: a filler repeats it, which changes nothing on unpack.
        let mut last_dir: Option<usize> = None;
        for (i, e) in entries.iter().enumerate() {
            let size = e.data.len();
            if let Err(m) = check_name(&e.name) {
                bail!("{:?}: {m}", String::from_utf8_lossy(&e.name));
            }
            if let Some(m) = kernel_conflict(&canonical(&e.name), e.kind()) {
                bail!("{m}");
            }
            let check = if options.checksum { checksum(e)? } else { 0 };
            if options.checksum {
                checks.push(check);
            }
            let mut namesize = e.name.len() as u32 + 1;
            if let Some(a) = options.data_align.filter(|&a| e.is_regular() && size >= a) {
                eligible += 1;
                // Past MAX_ALIGNABLE_NAME no padding can align it: it stays unaligned.
                if e.name.len() <= MAX_ALIGNABLE_NAME {
                    while aligned_namesize(off, e.name.len(), a).is_none() {
                        let (dir, name) = match last_dir {
                            Some(d) => (header_of(&entries[d], options.checksum, 0, 0), &*entries[d].name),
                            None => (root_dir(options.checksum), &b"."[..]),
                        };
                        let ns = filler_namesize(off, name.len(), e.name.len(), a).unwrap_or(PATH_MAX);
                        let header = Header { namesize: ns, ..dir };
                        off += header.entry_len();
                        extras.push(Extra { before: i, header, name: name.into() });
                        fillers += 1;
                    }
                    namesize = aligned_namesize(off, e.name.len(), a).expect("checked above");
                    aligned += 1;
                }
            }
            if e.kind() == Some(FileKind::Dir) {
                last_dir = Some(i);
            }
            namesizes.push(namesize as u16);
            off += header_of(e, options.checksum, namesize, check).entry_len();
        }
        let header =
            Header { crc: options.checksum, nlink: 1, namesize: TRAILER.len() as u32 + 1, ..Header::default() };
        off += header.entry_len();
        extras.push(Extra { before: entries.len(), header, name: TRAILER.into() });
        Ok(Layout { entries, namesizes, checks, extras, end: off, options, eligible, aligned, fillers })
    }

    /// Bytes of the archive itself.
    pub fn len(&self) -> u64 {
        self.end - self.options.base
    }

    /// Whether the archive has no entries (it still has its trailer).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every header in order (fillers and the trailer included) at its offset.
    pub fn iter(&self) -> impl Iterator<Item = Placed<'_>> {
        let mut off = self.options.base;
        let mut extras = self.extras.iter().peekable();
        let mut i = 0;
        std::iter::from_fn(move || {
            let p = if let Some(x) = extras.next_if(|x| x.before == i) {
                Placed { offset: off, header: x.header, name: &x.name, entry: None }
            } else {
                let e = self.entries.get(i)?;
                let check = self.checks.get(i).copied().unwrap_or(0);
                let header = header_of(e, self.options.checksum, self.namesizes[i] as u32, check);
                i += 1;
                Placed { offset: off, header, name: &e.name, entry: Some(e) }
            };
            off += p.header.entry_len();
            Some(p)
        })
    }
}

/// "NAME cannot be unpacked: PARENT is a regular file, not a directory".
pub(crate) fn conflict_message(entries: &[Entry], c: Conflict) -> String {
    let kind = FileKind::from_mode(entries[c.parent].mode).map(FileKind::name).unwrap_or("not a directory");
    format!(
        "{} cannot be unpacked: {} is {kind}, not a directory",
        String::from_utf8_lossy(&entries[c.under].name),
        String::from_utf8_lossy(&entries[c.parent].name)
    )
}

/// The filler used when no directory precedes an entry that needs one: the root itself,
/// as every initramfs has it.
fn root_dir(crc: bool) -> Header {
    Header { crc, mode: FileKind::Dir.mode(0o755), nlink: 2, namesize: 2, ..Header::default() }
}

fn checksum(e: &Entry) -> Result<u32> {
    Ok(match &e.data {
        Data::None => 0,
        Data::Inline(v) => checksum_update(0, v),
        Data::File { size, .. } | Data::Tree { size, .. } => {
            let path = e.source().expect("a file entry has a source");
            let mut f = File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
            let mut buf = vec![0u8; 1 << 16];
            let (mut sum, mut left) = (0u32, *size as u64);
            while left > 0 {
                let n = f.read(&mut buf).with_context(|| format!("{}: read error", path.display()))?;
                if n == 0 {
                    bail!("{}: file shrank while archiving", path.display());
                }
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

    fn file(name: &str, size: u64) -> Entry {
        let mut e = Entry::new(name.as_bytes(), FileKind::Regular, 0o644, Data::inline(vec![7; size as usize]));
        e.ino = 1;
        e
    }

    #[test]
    fn aligns_every_eligible_file_even_with_long_names() {
        let long = "d/".repeat(2100) + "x";
        let mut entries = vec![];
        for i in 0..50u64 {
            entries.push(file(&format!("f{i}"), 4096 + i * 37));
            // Long names of every length near the cap, none a parent of another.
            let k = (3990 + i as usize) % 4095;
            entries.push(file(&format!("{}{i:03}", &long[..k - 3]), 5000));
            entries.push(file("small", 10));
        }
        entries.push(file(&format!("{}y", &long[..4093]), 5000)); // can never be aligned
        entries.push(file(&format!("{}z", &long[..4092]), 5000)); // can
        let l = Layout::plan(entries, Options { data_align: Some(4096), ..Default::default() }).unwrap();
        assert_eq!(l.eligible, 102);
        assert_eq!(l.aligned, 101);
        assert!(l.fillers > 0);
        let placed: Vec<_> = l.iter().collect();
        for p in &placed {
            assert_eq!(p.offset % 4, 0);
            assert!(p.header.namesize <= PATH_MAX);
            if p.header.filesize >= 4096 && p.header.namesize < 4095 {
                assert_eq!(p.data_offset() % 4096, 0, "{:?}", p.header);
            }
        }
        // Offsets are contiguous.
        for w in placed.windows(2) {
            assert_eq!(w[0].offset + w[0].header.entry_len(), w[1].offset);
        }
    }

    #[test]
    fn small_files_are_not_padded() {
        let l = Layout::plan(vec![file("a", 100)], Options { data_align: Some(4096), ..Default::default() }).unwrap();
        assert_eq!(l.iter().next().unwrap().header.namesize, 2);
        assert_eq!(l.eligible, 0);
    }

    #[test]
    fn alignment_is_relative_to_the_image() {
        let l =
            Layout::plan(vec![file("a", 8192)], Options { data_align: Some(4096), base: 1000, ..Default::default() })
                .unwrap();
        assert_eq!(l.iter().next().unwrap().data_offset() % 4096, 0);
        assert!(Layout::plan(vec![], Options { data_align: Some(6), ..Default::default() }).is_err());
    }
}
