//! Fixed-size chunks compressed independently on several threads. Chunk boundaries depend
//! only on the input, so the output is the same for any thread count.

use std::io::{self, Write};

use crate::par_map;

/// Buffers input and hands out batches of whole chunks to compress.
pub(crate) struct Chunked<W> {
    pub out: W,
    chunk: usize,
    threads: u32,
    buf: Vec<u8>,
}

impl<W: Write> Chunked<W> {
    pub fn new(out: W, chunk: usize, threads: u32) -> Self {
        Chunked { out, chunk, threads: threads.max(1), buf: Vec::new() }
    }

    /// Add input; whenever a batch of `threads` chunks is full, compress and emit it.
    pub fn push(&mut self, mut b: &[u8], f: &(impl Fn(&[u8]) -> Vec<u8> + Sync)) -> io::Result<()> {
        let batch = self.chunk * self.threads as usize;
        while !b.is_empty() {
            let take = (batch - self.buf.len()).min(b.len());
            self.buf.extend_from_slice(&b[..take]);
            b = &b[take..];
            if self.buf.len() == batch {
                self.emit(f)?;
            }
        }
        Ok(())
    }

    /// Compress and emit what is buffered (the last chunk may be short).
    pub fn emit(&mut self, f: &(impl Fn(&[u8]) -> Vec<u8> + Sync)) -> io::Result<()> {
        let chunks: Vec<&[u8]> = self.buf.chunks(self.chunk).collect();
        for framed in par_map(&chunks, self.threads, |c| f(c)) {
            self.out.write_all(&framed)?;
        }
        self.buf.clear();
        Ok(())
    }
}
