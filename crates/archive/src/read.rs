//! Stream an initramfs image the way the kernel's `unpack_to_rootfs` does: segments back to
//! back with zero bytes between them, each an uncompressed cpio archive (starting 4-aligned)
//! or a compressed stream recognised by its magic, which may itself hold several archives.
//!
//! The reader pushes events to a [`Visitor`]; nothing is loaded whole into memory. Fatal
//! format errors (bad magic, non-hex digits, truncation) end the walk with an error naming
//! the offset; what the kernel would accept only partly is reported as a [`Problem`].

use std::io::{self, BufRead, BufReader, Read};

use anyhow::{Context, Result, bail};
use leanrd_compress::Format;
use leanrd_newc::{DecodeError, HEADER_LEN, Header, PATH_MAX, TRAILER, decode_name};

/// Where a segment starts and what it is.
#[derive(Debug, Clone)]
pub struct Segment {
    pub index: usize,
    /// Offset of its first byte in the image file.
    pub offset: u64,
    pub format: Format,
    /// Its first bytes (up to [`SEGMENT_HEAD`]; fewer only where the image ends).
    pub head: Vec<u8>,
}

/// How a segment ended.
#[derive(Debug, Clone)]
pub struct SegmentEnd {
    pub index: usize,
    pub offset: u64,
    /// Bytes in the image file.
    pub len: u64,
    /// Bytes of cpio data after decompression.
    pub uncompressed: u64,
    pub entries: usize,
    pub trailer: bool,
}

/// One entry as read.
#[derive(Debug, Clone)]
pub struct ReadEntry {
    pub header: Header,
    pub name: Vec<u8>,
    pub segment: usize,
    /// Offset of the header in the segment's (uncompressed) stream.
    pub stream_offset: u64,
    /// Offset of the data in the image file, for uncompressed segments.
    pub data_offset: Option<u64>,
}

impl ReadEntry {
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// The name with control characters and bytes that are not UTF-8 escaped, as `ls -b`
    /// shows them: one line, nothing lost.
    pub fn name_escaped(&self) -> String {
        crate::names::escape(&self.name)
    }
}

/// Something the kernel would not unpack as intended; the walk goes on.
#[derive(Debug, Clone)]
pub struct Problem {
    pub segment: usize,
    /// Image offset (uncompressed segments) or offset in the decompressed stream.
    pub offset: u64,
    pub compressed: bool,
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
    fn segment(&mut self, _s: &Segment) -> Result<()> {
        Ok(())
    }
    /// `data` yields the entry's `filesize` bytes; whatever is not read is skipped.
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> Result<()>;
    fn segment_end(&mut self, _s: &SegmentEnd) -> Result<()> {
        Ok(())
    }
    fn problem(&mut self, _p: &Problem) -> Result<()> {
        Ok(())
    }
}

/// Where an image is read from: any stream, or a file, which can be moved through without
/// reading (file data that nobody asked for is skipped by a seek).
pub trait Source: Read + Send {
    /// Move `n` bytes forward without reading them, if this source can.
    fn seek_forward(&mut self, _n: u64) -> Option<io::Result<()>> {
        None
    }
}

/// Any stream, read through.
pub struct Stream0<R>(pub R);

impl<R: Read + Send> Read for Stream0<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read + Send> Source for Stream0<R> {}

impl Source for std::fs::File {
    fn seek_forward(&mut self, n: u64) -> Option<io::Result<()>> {
        use std::io::Seek;
        // A pipe or a character device opened as a file does not seek: read through it.
        let n = i64::try_from(n).ok()?;
        self.seek(io::SeekFrom::Current(n)).ok().map(|_| Ok(()))
    }
}

/// The image as read: a buffer that can show the next `n` bytes whatever was consumed
/// before (segment magics, compression headers), a count of bytes consumed, and skips that
/// seek where the source can. Hand-written because `BufReader` can neither guarantee a
/// look-ahead across its buffer's end nor skip without reading.
struct Input<S> {
    inner: S,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes consumed from the image.
    pos: u64,
    /// The source ended.
    eof: bool,
}

const INPUT_BUF: usize = 1 << 20;

impl<S: Source> Input<S> {
    fn new(inner: S) -> Input<S> {
        Input { inner, buf: vec![0; INPUT_BUF], start: 0, end: 0, pos: 0, eof: false }
    }

    /// Up to `n` bytes ahead (fewer only at the end of the image), not consumed.
    fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        let n = n.min(INPUT_BUF);
        while self.end - self.start < n && !self.eof {
            if self.buf.len() - self.start < n {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let k = self.inner.read(&mut self.buf[self.end..])?;
            if k == 0 {
                self.eof = true;
            }
            self.end += k;
        }
        Ok(&self.buf[self.start..self.end.min(self.start + n)])
    }

    /// Skip `n` bytes: what is buffered, then a seek where the source can (only as far as
    /// the image goes: the bytes skipped are counted only once they are known to exist).
    fn skip(&mut self, n: u64) -> io::Result<u64> {
        let buffered = ((self.end - self.start) as u64).min(n);
        self.consume(buffered as usize);
        let left = n - buffered;
        if left > INPUT_BUF as u64 && !self.eof {
            // Seek to one byte short and read it: that proves the image is that long.
            match self.inner.seek_forward(left - 1) {
                Some(Ok(())) => {
                    let mut one = [0u8; 1];
                    if self.inner.read(&mut one)? == 1 {
                        self.pos += left;
                        return Ok(n);
                    }
                    self.eof = true;
                    return Ok(buffered); // the image ended: how far is not known
                }
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        let read = skip_by_reading(self, left)?;
        Ok(buffered + read)
    }
}

/// Skip up to `n` bytes of `r` by reading them; returns how many were there.
fn skip_by_reading(r: &mut dyn BufRead, n: u64) -> io::Result<u64> {
    let mut left = n;
    while left > 0 {
        let avail = r.fill_buf()?.len();
        if avail == 0 {
            break;
        }
        let k = (avail as u64).min(left) as usize;
        r.consume(k);
        left -= k as u64;
    }
    Ok(n - left)
}

impl<S: Source> Read for Input<S> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.start == self.end && out.len() >= INPUT_BUF {
            let k = self.inner.read(out)?;
            self.pos += k as u64;
            return Ok(k);
        }
        let avail = self.fill_buf()?;
        let k = avail.len().min(out.len());
        out[..k].copy_from_slice(&avail[..k]);
        self.consume(k);
        Ok(k)
    }
}

impl<S: Source> BufRead for Input<S> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.start == self.end && !self.eof {
            self.start = 0;
            self.end = self.inner.read(&mut self.buf)?;
            if self.end == 0 {
                self.eof = true;
            }
        }
        Ok(&self.buf[self.start..self.end])
    }
    fn consume(&mut self, amt: usize) {
        self.start += amt;
        self.pos += amt as u64;
    }
}

/// A buffered stream that can skip: the top-level input (seeking where it can) or a
/// decompressor (reading through).
trait Skip: BufRead {
    fn skip_n(&mut self, n: u64) -> io::Result<u64>;
}

impl<S: Source> Skip for Input<S> {
    fn skip_n(&mut self, n: u64) -> io::Result<u64> {
        self.skip(n)
    }
}

impl<R: Read> Skip for BufReader<R> {
    fn skip_n(&mut self, n: u64) -> io::Result<u64> {
        skip_by_reading(self, n)
    }
}

/// A stream position tracker over a segment's bytes.
struct Stream<'a> {
    r: &'a mut dyn Skip,
    pos: u64,
}

impl Stream<'_> {
    /// Read exactly `buf.len()` bytes; `Ok(false)` if the stream ended first.
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        let mut n = 0;
        while n < buf.len() {
            let k = self.r.read(&mut buf[n..])?;
            if k == 0 {
                return Ok(false);
            }
            n += k;
        }
        self.pos += n as u64;
        Ok(true)
    }

    /// Skip `n` bytes; returns how many were there.
    fn skip(&mut self, n: u64) -> io::Result<u64> {
        let k = self.r.skip_n(n)?;
        self.pos += k;
        Ok(k)
    }

    /// Skip zero bytes; returns the next byte (not consumed) if any.
    fn skip_zeros(&mut self) -> io::Result<Option<u8>> {
        loop {
            let avail = self.r.fill_buf()?;
            if avail.is_empty() {
                return Ok(None);
            }
            match avail.iter().position(|&b| b != 0) {
                Some(i) => {
                    let b = avail[i];
                    self.r.consume(i);
                    self.pos += i as u64;
                    return Ok(Some(b));
                }
                None => {
                    let n = avail.len();
                    self.r.consume(n);
                    self.pos += n as u64;
                }
            }
        }
    }

    fn peek(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let avail = self.r.fill_buf()?;
        Ok(avail[..avail.len().min(n)].to_vec())
    }
}

/// Reads entry data for the visitor, bounded to the entry's size.
struct DataReader<'s, 'a> {
    s: &'s mut Stream<'a>,
    left: u64,
}

impl Read for DataReader<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let max = (buf.len() as u64).min(self.left) as usize;
        let n = self.s.r.read(&mut buf[..max])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "image ends inside the entry's data"));
        }
        self.s.pos += n as u64;
        self.left -= n as u64;
        Ok(n)
    }
}

struct SegState {
    index: usize,
    /// Image offset of the stream's first byte for uncompressed segments.
    raw_base: Option<u64>,
    entries: usize,
    trailer: bool,
}

fn fmt_err(e: DecodeError) -> String {
    e.to_string()
}

/// Parse cpio archives from `s` until a trailer (uncompressed: then return to the segment
/// scanner) or the end of the stream (compressed: several archives may follow each other
/// with zero padding, as the kernel allows).
fn parse_archives(s: &mut Stream, seg: &mut SegState, v: &mut dyn Visitor) -> Result<()> {
    let compressed = seg.raw_base.is_none();
    let abs = |seg: &SegState, pos: u64| seg.raw_base.map(|b| b + pos).unwrap_or(pos);
    loop {
        if compressed {
            match s.skip_zeros()? {
                None => return Ok(()),
                Some(_) => {
                    if !s.pos.is_multiple_of(4) {
                        v.problem(&Problem {
                            segment: seg.index,
                            offset: s.pos,
                            compressed,
                            message:
                                "archive inside the compressed stream does not start 4-aligned (kernel: broken padding)"
                                    .into(),
                        })?;
                    }
                }
            }
        }
        let start = s.pos;
        // After every entry the kernel goes back to its segment scanner: in an uncompressed
        // segment, anything but a header ('0') ends the segment there, trailer or not (zeros,
        // then maybe a compressed segment), and the scanner decides what it is.
        if !compressed && s.peek(1)?.first() != Some(&b'0') {
            return Ok(());
        }
        let mut hb = [0u8; HEADER_LEN as usize];
        if !s.fill(&mut hb)? {
            bail!("offset {}: truncated header (the image ends inside it)", abs(seg, start));
        }
        if let Some(why) = explain_junk(&hb) {
            bail!("offset {}: {why}", abs(seg, start));
        }
        let h = Header::decode(&hb).map_err(|e| anyhow::anyhow!("offset {}: {}", abs(seg, start), fmt_err(e)))?;
        if h.namesize == 0 {
            bail!("offset {}: namesize 0 (the kernel rejects the archive)", abs(seg, start));
        }
        if h.namesize > PATH_MAX {
            // The kernel skips such an entry (name and data) and goes on.
            let got = s.skip(h.data_start() - HEADER_LEN)?;
            if got < h.data_start() - HEADER_LEN {
                bail!("offset {}: namesize {} runs past the end of the image", abs(seg, start), h.namesize);
            }
            let pad = leanrd_newc::align4(h.filesize as u64);
            if s.skip(pad)? < pad {
                bail!("offset {}: filesize {} runs past the end of the image", abs(seg, start), h.filesize);
            }
            v.problem(&Problem {
                segment: seg.index,
                offset: abs(seg, start),
                compressed,
                message: format!("namesize {} exceeds PATH_MAX: the kernel skips this entry", h.namesize),
            })?;
            continue;
        }
        let mut field = vec![0u8; (h.data_start() - HEADER_LEN) as usize];
        if !s.fill(&mut field)? {
            bail!("offset {}: name runs past the end of the image", abs(seg, start));
        }
        let n = decode_name(&field[..h.namesize as usize])
            .map_err(|e| anyhow::anyhow!("offset {}: {}", abs(seg, start), fmt_err(e)))?;
        let name = n.to_vec();
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
        let data_pos = s.pos;
        let e = ReadEntry {
            header: h,
            name,
            segment: seg.index,
            stream_offset: start,
            data_offset: seg.raw_base.map(|b| b + data_pos),
        };
        let size = h.filesize as u64;
        {
            let mut dr = DataReader { s, left: size };
            // Context, not a new message: the cause (a broken pipe, say) stays findable.
            v.entry(&e, &mut dr).with_context(|| format!("offset {}", abs(seg, start)))?;
            let left = dr.left;
            if s.skip(left)? < left {
                bail!(
                    "offset {}: {} declares {} bytes of data but the image ends first",
                    abs(seg, start),
                    e.name_lossy(),
                    size
                );
            }
        }
        let pad = leanrd_newc::align4(size) - size;
        s.skip(pad)?;
    }
}

/// Explain bytes that are not a known segment start, when we recognise them.
pub fn explain_junk(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        Some("an lz4 frame-format stream: the kernel reads only the legacy format (lz4 -l)")
    } else if head.starts_with(b"070707") {
        Some("an old portable (odc, 070707) cpio archive, not newc: the kernel reads only newc (070701/070702)")
    } else if head.starts_with(&[0xc7, 0x71]) || head.starts_with(&[0x71, 0xc7]) {
        Some("an old binary cpio archive (070707/bin), not newc: the kernel reads only newc (070701/070702)")
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
pub fn read_image_file(f: std::fs::File, v: &mut dyn Visitor) -> Result<()> {
    read_source(f, v)
}

/// Bytes of a segment's start handed to [`Visitor::segment`] (compression headers).
pub const SEGMENT_HEAD: usize = 64;

fn read_source<S: Source>(src: S, v: &mut dyn Visitor) -> Result<()> {
    let mut base = Input::new(src);
    let mut index = 0;
    loop {
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
                leanrd_compress::decoder(format, &mut base)
                    .map_err(|e| anyhow::anyhow!("offset {offset}: {format}: {e}"))?,
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
