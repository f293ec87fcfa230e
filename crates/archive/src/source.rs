//! Where an image's bytes come from, and the buffered reader the parser walks: a look-ahead
//! (`peek`) for segment detection, skipping without reading where the source can seek, and
//! a bounded reader for one entry's data.

use std::io::{self, BufRead, BufReader, Read};

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

/// A byte range of a file read as the whole image: the `.initrd` section of a UKI.
pub(crate) struct Window {
    file: std::fs::File,
    /// The ranges still to read, (file offset, end), in order; the first is being read.
    ranges: std::collections::VecDeque<(u64, u64)>,
}

impl Window {
    /// The file's bytes in `ranges` ((offset, length) each), read one after the other as one
    /// stream (a UKI's `.ucode` and `.initrd`, as the stub hands them to the kernel).
    pub(crate) fn new(file: std::fs::File, ranges: &[(u64, u64)]) -> Window {
        Window { file, ranges: ranges.iter().map(|&(o, l)| (o, o.saturating_add(l))).collect() }
    }
}

impl Read for Window {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        while let Some(&(pos, end)) = self.ranges.front() {
            let n = end.saturating_sub(pos).min(buf.len() as u64) as usize;
            if n == 0 && !buf.is_empty() {
                self.ranges.pop_front();
                continue;
            }
            let got = self.file.read_at(&mut buf[..n], pos)?;
            if got == 0 && n > 0 {
                // The file ends inside the range: the rest of the stream is missing.
                self.ranges.clear();
                return Ok(0);
            }
            self.ranges[0].0 += got as u64;
            return Ok(got);
        }
        Ok(0)
    }
}

impl Source for Window {
    fn seek_forward(&mut self, n: u64) -> Option<io::Result<()>> {
        // Past the end is the end (the reader then finds the image truncated, as it should).
        let mut n = n;
        while let Some(r) = self.ranges.front_mut() {
            let left = r.1.saturating_sub(r.0);
            if n < left {
                r.0 += n;
                break;
            }
            n -= left;
            self.ranges.pop_front();
        }
        Some(Ok(()))
    }
}

/// The image as read: a buffer that can show the next `n` bytes whatever was consumed
/// before (segment magics, compression headers), a count of bytes consumed, and skips that
/// seek where the source can. Hand-written because `BufReader` can neither guarantee a
/// look-ahead across its buffer's end nor skip without reading.
pub(crate) struct Input<S> {
    pub(crate) inner: S,
    pub(crate) buf: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Bytes consumed from the image.
    pub(crate) pos: u64,
    /// The source ended.
    pub(crate) eof: bool,
}

const INPUT_BUF: usize = 1 << 20;

impl<S: Source> Input<S> {
    pub(crate) fn new(inner: S) -> Input<S> {
        Input { inner, buf: vec![0; INPUT_BUF], start: 0, end: 0, pos: 0, eof: false }
    }

    /// Up to `n` bytes ahead (fewer only at the end of the image), not consumed.
    pub(crate) fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
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
    pub(crate) fn skip(&mut self, n: u64) -> io::Result<u64> {
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
pub(crate) trait Skip: BufRead {
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
pub(crate) struct Stream<'a> {
    pub(crate) r: &'a mut dyn Skip,
    pub(crate) pos: u64,
}

impl Stream<'_> {
    /// Read exactly `buf.len()` bytes; `Ok(false)` if the stream ended first.
    pub(crate) fn fill(&mut self, buf: &mut [u8]) -> io::Result<bool> {
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
    pub(crate) fn skip(&mut self, n: u64) -> io::Result<u64> {
        let k = self.r.skip_n(n)?;
        self.pos += k;
        Ok(k)
    }

    /// Skip zero bytes; returns the next byte (not consumed) if any.
    pub(crate) fn skip_zeros(&mut self) -> io::Result<Option<u8>> {
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

    pub(crate) fn peek(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let avail = self.r.fill_buf()?;
        Ok(avail[..avail.len().min(n)].to_vec())
    }
}

/// Reads entry data for the visitor, bounded to the entry's size.
pub(crate) struct DataReader<'s, 'a> {
    pub(crate) s: &'s mut Stream<'a>,
    pub(crate) left: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A window over two ranges reads them as one stream; a skip crosses from one into the
    /// next; the file ending inside a range ends the stream.
    #[test]
    fn a_window_reads_its_ranges_as_one_stream() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"..AB....CDEF").unwrap();
        let mut w = Window::new(f.try_clone().unwrap(), &[(2, 2), (8, 4)]);
        let mut all = Vec::new();
        w.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"ABCDEF");
        let mut w = Window::new(f.try_clone().unwrap(), &[(2, 2), (8, 4)]);
        assert!(w.seek_forward(3).unwrap().is_ok());
        let mut rest = Vec::new();
        w.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"DEF");
        let mut w = Window::new(f, &[(8, 100), (2, 2)]);
        let mut cut = Vec::new();
        w.read_to_end(&mut cut).unwrap();
        assert_eq!(cut, b"CDEF");
    }
}
