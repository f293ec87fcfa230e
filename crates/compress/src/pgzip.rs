//! gzip compressed on several threads, as pigz does: the input is cut into 1 MiB chunks,
//! each deflated on its own (primed with the 32 KiB before it) and ended with a sync flush (byte-aligned, not final), then an
//! empty final block; one gzip member with the CRC-32 and size of the whole. Hand-written
//! on top of flate2's raw deflate because the parallel gzip crates pull in a thread pool
//! and do not promise output independent of the thread count.

use std::io::{self, Write};

use flate2::{Compress, Compression, FlushCompress};

use crate::Encoder;
use crate::chunked::Chunked;

const CHUNK: usize = 1 << 20;
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];

/// A gzip writer compressing 1 MiB chunks on several threads into one gzip member (pigz's way).
pub struct ParallelGzEncoder<W: Write> {
    inner: Chunked<W>,
    level: u32,
    crc: crc32fast::Hasher,
    len: u64,
    started: bool,
}

/// Raw deflate of `data`, primed with `dict` (the input just before it, as pigz does).
fn deflate(level: u32, data: &[u8], dict: &[u8], flush: FlushCompress) -> Vec<u8> {
    let mut c = Compress::new(Compression::new(level), false);
    if !dict.is_empty() {
        c.set_dictionary(dict).expect("a raw deflate stream accepts a dictionary");
    }
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    loop {
        out.reserve(64.max(data.len() / 8));
        let at = c.total_in() as usize;
        c.compress_vec(&data[at..], &mut out, flush).expect("deflate cannot fail on valid input");
        // Finished when all input is in and zlib stopped with room to spare.
        if c.total_in() as usize == data.len() && out.len() < out.capacity() {
            break;
        }
    }
    out
}

impl<W: Write> ParallelGzEncoder<W> {
    /// Compress into `w` at `level` with `threads` threads.
    pub fn new(w: W, level: u32, threads: u32) -> Self {
        ParallelGzEncoder {
            inner: Chunked::new(w, CHUNK, threads as usize, threads),
            level,
            crc: crc32fast::Hasher::new(),
            len: 0,
            started: false,
        }
    }
    fn start(&mut self) -> io::Result<()> {
        if !self.started {
            self.started = true;
            self.inner.out.write_all(&HEADER)?;
        }
        Ok(())
    }
}

impl<W: Write> Write for ParallelGzEncoder<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.start()?;
        self.crc.update(b);
        self.len += b.len() as u64;
        let level = self.level;
        self.inner.push(b, &|c: &[u8], d: &[u8]| deflate(level, c, d, FlushCompress::Sync))?;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.out.flush()
    }
}

impl<W: Write + Send> Encoder for ParallelGzEncoder<W> {
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.start()?;
        let level = self.level;
        self.inner.emit(&|c: &[u8], d: &[u8]| deflate(level, c, d, FlushCompress::Sync))?;
        let end = deflate(level, &[], &[], FlushCompress::Finish);
        self.inner.out.write_all(&end)?;
        let crc = self.crc.clone().finalize();
        self.inner.out.write_all(&crc.to_le_bytes())?;
        self.inner.out.write_all(&(self.len as u32).to_le_bytes())?;
        self.inner.out.flush()
    }
}
