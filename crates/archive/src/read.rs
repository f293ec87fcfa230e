//! Stream an initramfs image the way the kernel's `unpack_to_rootfs` does: segments back to
//! back with zero bytes between them, each an uncompressed cpio archive (starting 4-aligned)
//! or a compressed stream recognised by its magic, which may itself hold several archives.
//!
//! The reader pushes events to a [`Visitor`]; nothing is loaded whole into memory. Fatal
//! format errors (bad magic, non-hex digits, truncation) end the walk with an error naming
//! the offset; what the kernel would accept only partly is reported as a [`Problem`].

use std::io::{BufReader, Read};

use crate::error::{Context, Result, bail, invalid};
use crate::source::{DataReader, Input, Stream};
pub use crate::source::{Source, Stream0};
use leanrd_compress::Format;
use leanrd_newc::{HEADER_LEN, Header, PATH_MAX, TRAILER, decode_name};

/// Where a segment starts and what it is.
#[derive(Debug, Clone)]
pub struct Segment {
    /// Its number in the image, from 0.
    pub index: usize,
    /// Offset of its first byte in the image file.
    pub offset: u64,
    /// Its compression, recognised by its magic ([`Format::None`] for a plain cpio archive).
    pub format: Format,
    /// Its first bytes (up to [`SEGMENT_HEAD`]; fewer only where the image ends).
    pub head: Vec<u8>,
}

/// How a segment ended.
#[derive(Debug, Clone)]
pub struct SegmentEnd {
    /// The segment's number in the image, from 0.
    pub index: usize,
    /// Offset of the segment's first byte in the image file.
    pub offset: u64,
    /// Bytes in the image file.
    pub len: u64,
    /// Bytes of cpio data after decompression.
    pub uncompressed: u64,
    /// Entries read in it (trailers not counted).
    pub entries: usize,
    /// Whether its last header was the `TRAILER!!!` (the kernel needs none).
    pub trailer: bool,
}

/// One entry as read.
#[derive(Debug, Clone)]
pub struct ReadEntry {
    /// The decoded newc header.
    pub header: Header,
    /// The name as stored, without the terminating NUL.
    pub name: Vec<u8>,
    /// The segment it is in, from 0.
    pub segment: usize,
    /// Offset of the header in the segment's (uncompressed) stream.
    pub stream_offset: u64,
    /// Offset of the data in the image file, for uncompressed segments.
    pub data_offset: Option<u64>,
}

impl ReadEntry {
    /// The name as text, bytes that are not UTF-8 replaced (U+FFFD).
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// The name with control characters and bytes that are not UTF-8 escaped, as `ls -b`
    /// shows them: one line, nothing lost.
    pub fn name_escaped(&self) -> String {
        crate::names::escape(&self.name)
    }
}

/// Reads through, adding up the bytes as newc's 070702 checksum does (what `extract`, `check`
/// and `extract -O` compare with the header's).
pub struct Summing<'a> {
    r: &'a mut dyn Read,
    sum: u32,
}

impl<'a> Summing<'a> {
    /// A reader over `r` whose sum starts at 0.
    pub fn new(r: &'a mut dyn Read) -> Summing<'a> {
        Summing { r, sum: 0 }
    }

    /// The checksum of what was read so far.
    pub fn sum(&self) -> u32 {
        self.sum
    }
}

impl Read for Summing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.r.read(buf)?;
        self.sum = leanrd_newc::checksum_update(self.sum, &buf[..n]);
        Ok(n)
    }
}

/// Something the kernel would not unpack as intended; the walk goes on.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The segment it is in, from 0.
    pub segment: usize,
    /// Image offset (uncompressed segments) or offset in the decompressed stream.
    pub offset: u64,
    /// Whether the segment is compressed (then `offset` is in the decompressed stream).
    pub compressed: bool,
    /// What is wrong, and what the kernel does with it.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.compressed {
            write!(f, "segment {} (stream offset {}): {}", self.segment, self.offset, self.message)
        } else {
            write!(f, "offset {}: {}", self.offset, self.message)
        }
    }
}

/// Receives what the reader finds.
pub trait Visitor {
    /// A segment starts; an error ends the walk with it. Does nothing unless overridden.
    fn segment(&mut self, _s: &Segment) -> Result<()> {
        Ok(())
    }
    /// `data` yields the entry's `filesize` bytes; whatever is not read is skipped.
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> Result<()>;
    /// A segment ended; an error ends the walk with it. Does nothing unless overridden.
    fn segment_end(&mut self, _s: &SegmentEnd) -> Result<()> {
        Ok(())
    }
    /// Something the kernel would not unpack as intended; an error ends the walk with it. Does
    /// nothing unless overridden.
    fn problem(&mut self, _p: &Problem) -> Result<()> {
        Ok(())
    }
    /// Asked before segment `next` (from 0) is read: true ends the walk there (`--parts 1`
    /// need not decompress the rest).
    fn done(&self, _next: usize) -> bool {
        false
    }
}

struct SegState {
    index: usize,
    /// Image offset of the stream's first byte for uncompressed segments.
    raw_base: Option<u64>,
    entries: usize,
    trailer: bool,
}

impl SegState {
    /// The image offset of stream position `pos` (the stream offset, in a compressed one).
    fn abs(&self, pos: u64) -> u64 {
        self.raw_base.map_or(pos, |b| b + pos)
    }
}

/// Parse cpio archives from `s` until a trailer (uncompressed: then return to the segment
/// scanner) or the end of the stream (compressed: several archives may follow each other
/// with zero padding, as the kernel allows).
fn parse_archives(s: &mut Stream, seg: &mut SegState, v: &mut dyn Visitor) -> Result<()> {
    let compressed = seg.raw_base.is_none();
    loop {
        if compressed && !next_archive(s, seg, v)? {
            return Ok(());
        }
        let start = s.pos;
        // After every entry the kernel goes back to its segment scanner: in an uncompressed
        // segment, anything but a header ('0') ends the segment there, trailer or not (zeros,
        // then maybe a compressed segment), and the scanner decides what it is.
        if !compressed && s.peek(1)?.first() != Some(&b'0') {
            return Ok(());
        }
        let at = seg.abs(start);
        let h = read_header(s, at)?;
        if h.namesize > PATH_MAX {
            skip_entry(s, at, &h)?;
            let message = format!("namesize {} exceeds PATH_MAX: the kernel skips this entry", h.namesize);
            v.problem(&Problem { segment: seg.index, offset: at, compressed, message })?;
            continue;
        }
        let mut field = vec![0u8; (h.data_start() - HEADER_LEN) as usize];
        if !s.fill(&mut field)? {
            bail!("offset {at}: name runs past the end of the image");
        }
        let name = decode_name(&field[..h.namesize as usize]).map_err(|e| invalid!("offset {at}: {e}"))?.to_vec();
        if name == TRAILER {
            seg.trailer = true;
            if h.filesize != 0 {
                s.skip(leanrd_newc::align4(h.filesize as u64))?;
            }
            if compressed {
                continue;
            }
            return Ok(());
        }
        seg.trailer = false;
        seg.entries += 1;
        let e = ReadEntry {
            header: h,
            name,
            segment: seg.index,
            stream_offset: start,
            data_offset: seg.raw_base.map(|b| b + s.pos),
        };
        visit(s, v, &e, at)?;
    }
}

/// Inside a compressed stream: skip the zero padding before the next archive; false at the
/// stream's end. An archive not 4-aligned is a problem (the kernel calls it broken padding).
fn next_archive(s: &mut Stream, seg: &SegState, v: &mut dyn Visitor) -> Result<bool> {
    if s.skip_zeros()?.is_none() {
        return Ok(false);
    }
    if !s.pos.is_multiple_of(4) {
        v.problem(&Problem {
            segment: seg.index,
            offset: s.pos,
            compressed: true,
            message: "archive inside the compressed stream does not start 4-aligned (kernel: broken padding)".into(),
        })?;
    }
    Ok(true)
}

/// One header, at image (or stream) offset `at`.
fn read_header(s: &mut Stream, at: u64) -> Result<Header> {
    let mut hb = [0u8; HEADER_LEN as usize];
    if !s.fill(&mut hb)? {
        bail!("offset {at}: truncated header (the image ends inside it)");
    }
    if let Some(why) = explain_junk(&hb) {
        bail!("offset {at}: {why}");
    }
    let h = Header::decode(&hb).map_err(|e| invalid!("offset {at}: {e}"))?;
    if h.namesize == 0 {
        bail!("offset {at}: namesize 0 (the kernel rejects the archive)");
    }
    Ok(h)
}

/// Skip an entry's name and data, as the kernel does with a name over PATH_MAX.
fn skip_entry(s: &mut Stream, at: u64, h: &Header) -> Result<()> {
    if s.skip(h.data_start() - HEADER_LEN)? < h.data_start() - HEADER_LEN {
        bail!("offset {at}: namesize {} runs past the end of the image", h.namesize);
    }
    let pad = leanrd_newc::align4(h.filesize as u64);
    if s.skip(pad)? < pad {
        bail!("offset {at}: filesize {} runs past the end of the image", h.filesize);
    }
    Ok(())
}

/// Hand an entry and its data to the visitor, then skip what it did not read and the
/// padding.
fn visit(s: &mut Stream, v: &mut dyn Visitor, e: &ReadEntry, at: u64) -> Result<()> {
    let size = e.header.filesize as u64;
    let mut dr = DataReader { s, left: size };
    // Context, not a new message: the cause (a broken pipe, say) stays findable.
    v.entry(e, &mut dr).with_context(|| format!("offset {at}"))?;
    let left = dr.left;
    if s.skip(left)? < left {
        bail!("offset {at}: {} declares {size} bytes of data but the image ends first", e.name_lossy());
    }
    s.skip(leanrd_newc::align4(size) - size)?;
    Ok(())
}

/// Explain bytes that are not a known segment start, when we recognise them.
pub(crate) fn explain_junk(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        Some("an lz4 frame-format stream: the kernel reads only the legacy format (lz4 -l)")
    } else if head.starts_with(b"070707") {
        Some("an old portable (odc, 070707) cpio archive, not newc: the kernel reads only newc (070701/070702)")
    } else if head.starts_with(&[0xc7, 0x71]) || head.starts_with(&[0x71, 0xc7]) {
        Some("an old binary cpio archive (070707/bin), not newc: the kernel reads only newc (070701/070702)")
    } else if head.starts_with(b"MZ") {
        Some("a PE/EFI executable: a Unified Kernel Image is read from a file (its .initrd section), not from a pipe")
    } else if head.starts_with(&[0x50, 0x2a, 0x4d, 0x18]) {
        Some("a zstd skippable frame: the kernel does not recognise it")
    } else {
        None
    }
}

/// Walk every segment of the image read from `r`.
pub fn read_image<R: Read + Send>(r: R, v: &mut dyn Visitor) -> Result<()> {
    read_source(Stream0(r), v)
}

/// Walk every segment of the image in file `f`, seeking past file data that the visitor
/// does not read (in uncompressed segments).
/// A Unified Kernel Image is read as the image its stub hands the kernel: its `.ucode`
/// section, where it has one, then its `.initrd` (offsets are then in those sections as one
/// stream: [`file_offset`] maps them back to the file).
pub fn read_image_file(f: std::fs::File, v: &mut dyn Visitor) -> Result<()> {
    let parts = uki_initramfs(&f);
    if parts.is_empty() { read_source(f, v) } else { read_source(crate::source::Window::new(f, &parts), v) }
}

/// Where a UKI file keeps its initramfs: (offset, length) of `.ucode` (where it has one) and of
/// `.initrd`, in the order the stub hands them to the kernel; empty for anything else (and for
/// what cannot be read at an offset: a pipe).
pub fn uki_initramfs(f: &std::fs::File) -> Vec<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    let mut head = vec![0u8; 4096];
    match f.read_at(&mut head, 0) {
        Ok(n) => crate::uki::initramfs_sections(&head[..n]),
        Err(_) => Vec::new(),
    }
}

/// The file offset of byte `pos` of an image read from `parts` ([`uki_initramfs`]; empty: the
/// file is the image).
pub fn file_offset(parts: &[(u64, u64)], pos: u64) -> u64 {
    let mut pos = pos;
    for (i, &(offset, len)) in parts.iter().enumerate() {
        if pos < len || i + 1 == parts.len() {
            return offset + pos;
        }
        pos -= len;
    }
    pos
}

/// Bytes of a segment's start handed to [`Visitor::segment`] (compression headers).
pub const SEGMENT_HEAD: usize = 64;

fn read_source<S: Source>(src: S, v: &mut dyn Visitor) -> Result<()> {
    let mut base = Input::new(src);
    let mut index = 0;
    loop {
        if v.done(index) {
            return Ok(());
        }
        // Between segments: zero bytes.
        let mut top = Stream { r: &mut base, pos: 0 };
        let Some(first) = top.skip_zeros()? else {
            return Ok(());
        };
        let offset = base.pos;
        let head = base.peek(SEGMENT_HEAD)?.to_vec();
        let format = if first == b'0' {
            if !offset.is_multiple_of(4) {
                bail!("offset {offset}: an uncompressed segment starts here, not 4-aligned: the kernel drops the rest");
            }
            Format::None
        } else {
            match Format::detect(&head) {
                Some(f) => f,
                None => match explain_junk(&head) {
                    Some(why) => bail!("offset {offset}: {why}"),
                    None => bail!("offset {offset}: junk ({:02x?}), neither cpio nor a known compression", head),
                },
            }
        };
        v.segment(&Segment { index, offset, format, head })?;
        let mut seg = SegState { index, raw_base: None, entries: 0, trailer: false };
        let uncompressed;
        if format == Format::None {
            seg.raw_base = Some(offset);
            let mut s = Stream { r: &mut base, pos: 0 };
            parse_archives(&mut s, &mut seg, v)?;
            uncompressed = s.pos;
        } else {
            let mut dec = BufReader::with_capacity(
                1 << 20,
                leanrd_compress::decoder(format, &mut base).map_err(|e| invalid!("offset {offset}: {format}: {e}"))?,
            );
            let mut s = Stream { r: &mut dec, pos: 0 };
            parse_archives(&mut s, &mut seg, v).with_context(|| format!("{format} segment at offset {offset}"))?;
            uncompressed = s.pos;
        }
        // No trailer is no problem: the kernel unpacks entry by entry (the trailer only
        // resets its hard-link table).
        let end = base.pos;
        v.segment_end(&SegmentEnd {
            index,
            offset,
            len: end - offset,
            uncompressed,
            entries: seg.entries,
            trailer: seg.trailer,
        })?;
        index += 1;
    }
}
