//! The lz4 "legacy" frame, the only lz4 framing the kernel's `unlz4` reads (`lz4 -l`):
//! a 4-byte magic, then chunks of at most 8 MiB of input, each stored as its little-endian
//! 32-bit compressed size and an LZ4 block. There is no end marker. Hand-written because
//! lz4 crates implement only the modern frame format; the blocks come from lz4_flex.

use std::io::{self, BufRead, Read, Write};

use crate::Encoder;
use crate::chunked::Chunked;

/// The magic of the LZ4 legacy frame, which the kernel decompresses.
pub const LZ4_LEGACY_MAGIC: u32 = 0x184C_2102;
const CHUNK: usize = 8 << 20;

/// An LZ4 legacy-frame writer: 8 MiB chunks compressed on several threads.
pub struct Lz4LegacyEncoder<W: Write> {
    inner: Chunked<W>,
    started: bool,
}

fn frame(chunk: &[u8], _before: &[u8]) -> Vec<u8> {
    let block = lz4_flex::block::compress(chunk);
    let mut v = Vec::with_capacity(block.len() + 4);
    v.extend_from_slice(&(block.len() as u32).to_le_bytes());
    v.extend_from_slice(&block);
    v
}

impl<W: Write> Lz4LegacyEncoder<W> {
    /// Compress into `w` with `threads` threads.
    pub fn new(w: W, threads: u32) -> Self {
        Lz4LegacyEncoder { inner: Chunked::new(w, CHUNK, threads as usize, threads), started: false }
    }
    fn start(&mut self) -> io::Result<()> {
        if !self.started {
            self.started = true;
            self.inner.out.write_all(&LZ4_LEGACY_MAGIC.to_le_bytes())?;
        }
        Ok(())
    }
}

impl<W: Write> Write for Lz4LegacyEncoder<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.start()?;
        self.inner.push(b, &frame)?;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.out.flush()
    }
}

impl<W: Write + Send> Encoder for Lz4LegacyEncoder<W> {
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.start()?;
        self.inner.emit(&frame)?;
        self.inner.out.flush()
    }
}

/// Reads one legacy-frame stream. The stream ends at end of input, at a zero chunk size
/// (the zero padding the kernel needs before a following segment; those four bytes are
/// consumed), or at a further magic (a new stream continues it, as in the kernel).
pub struct Lz4LegacyDecoder<R> {
    r: R,
    /// Decompression buffer (kept at 8 MiB once allocated) and how much of it is valid.
    out: Vec<u8>,
    valid: usize,
    pos: usize,
    started: bool,
    done: bool,
}

impl<R: BufRead> Lz4LegacyDecoder<R> {
    /// Read the legacy frames from `r`.
    pub fn new(r: R) -> Self {
        Lz4LegacyDecoder { r, out: Vec::new(), valid: 0, pos: 0, started: false, done: false }
    }

    /// Read 4 bytes, or None at a clean end of input.
    fn word(&mut self) -> io::Result<Option<u32>> {
        let mut b = [0u8; 4];
        let mut n = 0;
        while n < 4 {
            let k = self.r.read(&mut b[n..])?;
            if k == 0 {
                if n == 0 {
                    return Ok(None);
                }
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "lz4: truncated chunk size"));
            }
            n += k;
        }
        Ok(Some(u32::from_le_bytes(b)))
    }

    fn next_chunk(&mut self) -> io::Result<bool> {
        if !self.started {
            self.started = true;
            if self.word()? != Some(LZ4_LEGACY_MAGIC) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "lz4: not a legacy frame"));
            }
        }
        loop {
            let size = match self.word()? {
                None | Some(0) => return Ok(false),
                Some(LZ4_LEGACY_MAGIC) => continue,
                Some(s) => s as usize,
            };
            if size > lz4_flex::block::get_maximum_output_size(CHUNK) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("lz4: chunk size {size:#x} is impossible (no zero padding after the lz4 segment?)"),
                ));
            }
            let mut block = vec![0u8; size];
            self.r.read_exact(&mut block)?;
            // The chunk's size is not stored: start from a guess and grow up to 8 MiB, so a
            // small stream does not pay for zeroing a whole chunk buffer.
            let mut cap = self.out.len().max((size * 4).min(CHUNK));
            self.valid = loop {
                if self.out.len() < cap {
                    self.out.resize(cap, 0);
                }
                match lz4_flex::block::decompress_into(&block, &mut self.out) {
                    Ok(n) => break n,
                    Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if cap < CHUNK => {
                        cap = (cap * 2).min(CHUNK);
                    }
                    Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("lz4: {e}"))),
                }
            };
            self.pos = 0;
            return Ok(true);
        }
    }
}

impl<R: BufRead> Read for Lz4LegacyDecoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.valid {
            if self.done || !self.next_chunk()? {
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.valid - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
