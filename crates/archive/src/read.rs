//! Stream an initramfs image the way the kernel's `unpack_to_rootfs` does: segments back to
//! back with zero bytes between them, each an uncompressed cpio archive (starting 4-aligned)
//! or a compressed stream recognised by its magic, which may itself hold several archives.
//!
//! The reader pushes events to a [`Visitor`]; nothing is loaded whole into memory. Fatal
//! format errors (bad magic, non-hex digits, truncation) end the walk with an error naming
//! the offset; what the kernel would accept only partly is reported as a [`Problem`].

use std::io::{self, BufRead, BufReader, Read};

use anyhow::{Result, bail};
use leanrd_compress::Format;
use leanrd_newc::{DecodeError, HEADER_LEN, Header, PATH_MAX, TRAILER, decode_name};

/// Where a segment starts and what it is.
#[derive(Debug, Clone)]
pub struct Segment {
    pub index: usize,
    /// Offset of its first byte in the image file.
    pub offset: u64,
    pub format: Format,
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

/// Counts bytes consumed from the image file.
struct Counted<R> {
    inner: R,
    pos: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.pos += amt as u64;
        self.inner.consume(amt)
    }
}

/// A stream position tracker over a segment's bytes.
struct Stream<'a> {
    r: &'a mut dyn BufRead,
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
    fn skip(&mut self, mut n: u64) -> io::Result<u64> {
        let start = n;
        while n > 0 {
            let avail = self.r.fill_buf()?;
            if avail.is_empty() {
                break;
            }
            let k = (avail.len() as u64).min(n) as usize;
            self.r.consume(k);
            n -= k as u64;
        }
        self.pos += start - n;
        Ok(start - n)
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
        if !compressed && s.peek(1)?.is_empty() {
            // The image ends where a header was due: the segment simply has no trailer.
            return Ok(());
        }
        let mut hb = [0u8; HEADER_LEN as usize];
        if !s.fill(&mut hb)? {
            bail!("offset {}: truncated header (image ends inside it)", abs(seg, start));
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
            v.entry(&e, &mut dr).map_err(|err| anyhow::anyhow!("offset {}: {err:#}", abs(seg, start)))?;
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

/// Walk every segment of the image read from `r`.
pub fn read_image<R: Read + Send>(r: R, v: &mut dyn Visitor) -> Result<()> {
    let mut base = Counted { inner: BufReader::with_capacity(1 << 20, r), pos: 0 };
    let mut index = 0;
    loop {
        // Between segments: zero bytes.
        let mut top = Stream { r: &mut base, pos: 0 };
        let Some(first) = top.skip_zeros()? else {
            return Ok(());
        };
        let offset = base.pos;
        let head = Stream { r: &mut base, pos: 0 }.peek(8)?;
        let format = if first == b'0' {
            if offset % 4 != 0 {
                bail!("offset {offset}: an uncompressed segment starts here, not 4-aligned: the kernel drops the rest");
            }
            Format::None
        } else {
            match Format::detect(&head) {
                Some(f) => f,
                None => match crate::check::explain_junk(&head) {
                    Some(why) => bail!("offset {offset}: {why}"),
                    None => bail!("offset {offset}: junk ({:02x?}), neither cpio nor a known compression", head),
                },
            }
        };
        v.segment(&Segment { index, offset, format })?;
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
            parse_archives(&mut s, &mut seg, v)
                .map_err(|e| anyhow::anyhow!("{format} segment at offset {offset}: {e:#}"))?;
            uncompressed = s.pos;
        }
        let end = base.pos;
        if !seg.trailer {
            v.problem(&Problem {
                segment: index,
                offset: end,
                compressed: format != Format::None,
                message: "segment has no TRAILER!!! at its end".into(),
            })?;
        }
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
