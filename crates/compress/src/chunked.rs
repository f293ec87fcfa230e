//! Fixed-size chunks compressed independently on several threads. Chunk boundaries depend
//! only on the input, so the output is the same for any thread count.

use std::io::{self, Write};

use crate::par_map;

/// How much of the input before a chunk is handed to its compressor (deflate's window).
pub(crate) const CONTEXT: usize = 32 * 1024;

/// Buffers input and hands out batches of whole chunks to compress. Each chunk comes with
/// the input just before it (up to [`CONTEXT`] bytes), for compressors that can prime their
/// dictionary with it.
pub(crate) struct Chunked<W> {
    pub out: W,
    chunk: usize,
    /// Chunks a batch holds.
    per_batch: usize,
    /// Worker threads a batch is compressed on.
    pub(crate) threads: u32,
    buf: Vec<u8>,
    /// The end of the previous batch.
    tail: Vec<u8>,
}

impl<W: Write> Chunked<W> {
    /// Chunks of `chunk` bytes, `per_batch` of them compressed at a time on `threads`
    /// threads.
    pub(crate) fn new(out: W, chunk: usize, per_batch: usize, threads: u32) -> Self {
        let per_batch = per_batch.max(1);
        Chunked { out, chunk, per_batch, threads: threads.max(1), buf: Vec::new(), tail: Vec::new() }
    }

    /// Add input; whenever a batch is full, compress and emit it.
    pub(crate) fn push(&mut self, mut b: &[u8], f: &(impl Fn(&[u8], &[u8]) -> Vec<u8> + Sync)) -> io::Result<()> {
        let batch = self.chunk * self.per_batch;
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
    pub(crate) fn emit(&mut self, f: &(impl Fn(&[u8], &[u8]) -> Vec<u8> + Sync)) -> io::Result<()> {
        let (buf, tail) = (&self.buf, &self.tail);
        let jobs: Vec<(&[u8], &[u8])> = buf
            .chunks(self.chunk)
            .enumerate()
            .map(|(i, c)| {
                let start = i * self.chunk;
                let before = if start == 0 { &tail[..] } else { &buf[start.saturating_sub(CONTEXT)..start] };
                (c, before)
            })
            .collect();
        for framed in par_map(&jobs, self.threads, |(c, before)| f(c, before)) {
            self.out.write_all(&framed)?;
        }
        let keep = self.buf.len().min(CONTEXT);
        self.tail = self.buf[self.buf.len() - keep..].to_vec();
        self.buf.clear();
        Ok(())
    }
}
