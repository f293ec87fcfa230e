//! The lzop container around LZO1X-1 blocks, as the kernel's `unlzo` reads it: blocks of at
//! most 256 KiB, each with only the Adler-32 of its uncompressed data (F_ADLER32_D), a
//! block stored uncompressed when compression does not shrink it, and a zero length at the
//! end. Hand-written: no crate writes the lzop container; blocks come from `lzo1x`.

use std::io::{self, BufRead, Read, Write};

use crate::chunked::Chunked;
use crate::{Encoder, adler32};

const MAGIC: [u8; 9] = [0x89, b'L', b'Z', b'O', 0x00, 0x0d, 0x0a, 0x1a, 0x0a];
const BLOCK: usize = 256 * 1024;
const F_ADLER32_D: u32 = 0x1;
const F_ADLER32_C: u32 = 0x2;
const F_H_FILTER: u32 = 0x800;
const F_CRC32_D: u32 = 0x100;
const F_CRC32_C: u32 = 0x200;
const F_OS_UNIX: u32 = 0x0300_0000;

/// An lzop writer: chunks compressed with LZO1X on several threads, with lzop's header and checksums.
pub struct LzopEncoder<W: Write> {
    inner: Chunked<W>,
}

fn header() -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0x1030u16.to_be_bytes()); // version
    h.extend_from_slice(&0x2080u16.to_be_bytes()); // library version
    h.extend_from_slice(&0x0940u16.to_be_bytes()); // version needed to extract
    h.push(1); // method: LZO1X-1
    h.push(5); // level
    h.extend_from_slice(&(F_ADLER32_D | F_OS_UNIX).to_be_bytes());
    h.extend_from_slice(&0o100644u32.to_be_bytes()); // mode
    h.extend_from_slice(&0u32.to_be_bytes()); // mtime low
    h.extend_from_slice(&0u32.to_be_bytes()); // mtime high
    h.push(0); // no name
    let sum = adler32(1, &h);
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&sum.to_be_bytes());
    out
}

fn block(data: &[u8], _before: &[u8]) -> Vec<u8> {
    let c = lzo1x::compress(data, lzo1x::CompressLevel::default());
    let payload = if c.len() < data.len() { &c[..] } else { data };
    let mut v = Vec::with_capacity(payload.len() + 12);
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(&adler32(1, data).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

impl<W: Write> LzopEncoder<W> {
    /// Write lzop's header to `w`; compress with `threads` threads.
    pub fn new(mut w: W, threads: u32) -> io::Result<Self> {
        w.write_all(&header())?;
        // 64 blocks a batch (16 MiB) keeps the threads busy; `threads` threads, not more.
        Ok(LzopEncoder { inner: Chunked::new(w, BLOCK, 64, threads) })
    }
}

impl<W: Write> Write for LzopEncoder<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.inner.push(b, &block)?;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.out.flush()
    }
}

impl<W: Write + Send> Encoder for LzopEncoder<W> {
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.inner.emit(&block)?;
        self.inner.out.write_all(&0u32.to_be_bytes())?;
        self.inner.out.flush()
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Reads one lzop stream (any block checksums lzop writes are accepted and skipped).
pub struct LzopDecoder<R> {
    r: R,
    flags: Option<u32>,
    out: Vec<u8>,
    pos: usize,
    done: bool,
}

impl<R: BufRead> LzopDecoder<R> {
    /// Read an lzop stream from `r`.
    pub fn new(r: R) -> Self {
        LzopDecoder { r, flags: None, out: Vec::new(), pos: 0, done: false }
    }

    fn u8(&mut self) -> io::Result<u8> {
        let mut b = [0u8; 1];
        self.r.read_exact(&mut b)?;
        Ok(b[0])
    }
    fn u16(&mut self) -> io::Result<u16> {
        let mut b = [0u8; 2];
        self.r.read_exact(&mut b)?;
        Ok(u16::from_be_bytes(b))
    }
    fn u32(&mut self) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.r.read_exact(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }
    fn skip(&mut self, n: usize) -> io::Result<()> {
        let mut v = vec![0u8; n];
        self.r.read_exact(&mut v)
    }

    fn read_header(&mut self) -> io::Result<u32> {
        let mut m = [0u8; 9];
        self.r.read_exact(&mut m)?;
        if m != MAGIC {
            return Err(bad("lzo: bad magic".into()));
        }
        let version = self.u16()?;
        self.skip(2)?; // library version
        if version >= 0x0940 {
            self.skip(2)?; // version needed
        }
        let method = self.u8()?;
        if !(1..=3).contains(&method) {
            return Err(bad(format!("lzo: unsupported method {method}")));
        }
        if version >= 0x0940 {
            self.skip(1)?; // level
        }
        let flags = self.u32()?;
        if flags & F_H_FILTER != 0 {
            self.skip(4)?;
        }
        self.skip(8)?; // mode, mtime low
        if version >= 0x0940 {
            self.skip(4)?; // mtime high
        }
        let name_len = self.u8()? as usize;
        self.skip(name_len + 4)?; // name, header checksum
        Ok(flags)
    }

    fn next_block(&mut self) -> io::Result<bool> {
        let flags = match self.flags {
            Some(f) => f,
            None => {
                let f = self.read_header()?;
                self.flags = Some(f);
                f
            }
        };
        let dst_len = self.u32()? as usize;
        if dst_len == 0 {
            return Ok(false);
        }
        if dst_len > 64 << 20 {
            return Err(bad(format!("lzo: block of {dst_len} bytes is too large")));
        }
        let src_len = self.u32()? as usize;
        let mut sums = 0;
        if flags & F_ADLER32_D != 0 {
            sums += 1;
        }
        if flags & F_CRC32_D != 0 {
            sums += 1;
        }
        if src_len < dst_len {
            if flags & F_ADLER32_C != 0 {
                sums += 1;
            }
            if flags & F_CRC32_C != 0 {
                sums += 1;
            }
        }
        self.skip(4 * sums)?;
        if src_len > dst_len {
            return Err(bad(format!("lzo: compressed block {src_len} larger than its data {dst_len}")));
        }
        let mut src = vec![0u8; src_len];
        self.r.read_exact(&mut src)?;
        if src_len == dst_len {
            self.out = src;
        } else {
            self.out.resize(dst_len, 0);
            lzo1x::decompress(&src, &mut self.out).map_err(|e| bad(format!("lzo: {e:?}")))?;
        }
        self.pos = 0;
        Ok(true)
    }
}

impl<R: BufRead> Read for LzopDecoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.out.len() {
            if self.done || !self.next_block()? {
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.out.len() - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--threads 2` means two compression threads (it once meant 64).
    #[test]
    fn uses_the_threads_it_is_given() {
        for t in [1, 2, 8] {
            assert_eq!(LzopEncoder::new(Vec::new(), t).unwrap().inner.threads, t);
        }
    }
}
