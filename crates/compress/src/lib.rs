//! Every compression the Linux kernel can unpack an initramfs from, in the exact framing it
//! needs (see `shared/notes/kernel-facts.md`), and the decoders to read them back.
//!
//! Encoders are streaming `Write`s. Where the format allows, they use several threads and
//! give the same bytes whatever the thread count: zstd and xz always run their library's
//! multi-threaded mode; gzip, lz4 and lzo compress fixed-size chunks independently.
//!
//! ```
//! use std::io::Read;
//! use leanrd_compress::{Format, Spec, compress_vec, decoder};
//!
//! let data = b"070701 and more".repeat(1000);
//! let packed = compress_vec("xz:6".parse::<Spec>()?, 2, &data)?;
//! assert_eq!(Format::detect(&packed), Some(Format::Xz));
//! let mut back = Vec::new();
//! decoder(Format::Xz, &packed[..])?.read_to_end(&mut back)?;
//! assert_eq!(back, data);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod chunked;
mod format;
pub mod framing;
mod lz4legacy;
mod lzop;
mod pgzip;

use std::io::{self, BufRead, Read, Write};

pub use format::{Format, Spec};
pub use lz4legacy::{LZ4_LEGACY_MAGIC, Lz4LegacyDecoder, Lz4LegacyEncoder};
pub use lzop::{LzopDecoder, LzopEncoder};
pub use pgzip::ParallelGzEncoder;

/// A streaming compressor; call [`Encoder::finish`] to write the end of the stream.
pub trait Encoder: Write + Send {
    /// Write what is buffered and the end of the stream, then flush the writer.
    fn finish(self: Box<Self>) -> io::Result<()>;
}

struct Plain<W>(W);
impl<W: Write + Send> Write for Plain<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
impl<W: Write + Send> Encoder for Plain<W> {
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.0.flush()
    }
}

macro_rules! finishing {
    ($t:ty, $($g:tt)*) => {
        impl<$($g)*> Encoder for $t {
            fn finish(self: Box<Self>) -> io::Result<()> {
                let mut w = (*self).finish()?;
                w.flush()
            }
        }
    };
}
finishing!(bzip2::write::BzEncoder<W>, W: Write + Send);
finishing!(liblzma::write::XzEncoder<W>, W: Write + Send);

struct Zstd<'a, W: Write>(zstd::stream::write::Encoder<'a, W>);
impl<W: Write + Send> Write for Zstd<'_, W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
impl<W: Write + Send> Encoder for Zstd<'_, W> {
    fn finish(self: Box<Self>) -> io::Result<()> {
        self.0.finish()?.flush()
    }
}

/// Threads to use: all cores.
pub fn default_threads() -> u32 {
    // Asked once: std reads the cgroup's CPU quota files each time (eight system calls).
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1))
}

/// Largest zstd window the kernel's decoder is asked to allocate (2^27 = 128 MiB).
pub const ZSTD_MAX_WINDOW_LOG: u32 = 27;
/// xz block size: fixed, so that output does not depend on the thread count.
pub const XZ_BLOCK_SIZE: u64 = 8 << 20;

/// An encoder for `spec` writing into `w`. `size` is the exact number of bytes that will be
/// written, when known (zstd records it). The output is the same for any `threads` ≥ 1.
pub fn encoder<'a, W: Write + Send + 'a>(
    spec: Spec,
    threads: u32,
    size: Option<u64>,
    w: W,
) -> io::Result<Box<dyn Encoder + 'a>> {
    let threads = threads.max(1);
    let level = spec.level;
    Ok(match spec.format {
        Format::None => Box::new(Plain(w)),
        Format::Gzip => Box::new(ParallelGzEncoder::new(w, level as u32, threads)),
        Format::Bzip2 => Box::new(bzip2::write::BzEncoder::new(w, bzip2::Compression::new(level as u32))),
        Format::Lz4 => Box::new(Lz4LegacyEncoder::new(w, threads)),
        Format::Lzo => Box::new(LzopEncoder::new(w, threads)?),
        Format::Lzma => {
            let opts = liblzma::stream::LzmaOptions::new_preset(level as u32).map_err(io::Error::other)?;
            let stream = liblzma::stream::Stream::new_lzma_encoder(&opts).map_err(io::Error::other)?;
            Box::new(liblzma::write::XzEncoder::new_stream(w, stream))
        }
        Format::Xz => {
            // LZMA2 only (no BCJ filter) and CRC32: the kernel's XZ decoder supports nothing
            // else. The check is fixed here; no caller can ask for CRC64.
            let opts = liblzma::stream::LzmaOptions::new_preset(level as u32).map_err(io::Error::other)?;
            let mut filters = liblzma::stream::Filters::new();
            filters.lzma2(&opts);
            let stream = liblzma::stream::MtStreamBuilder::new()
                .threads(threads)
                .block_size(XZ_BLOCK_SIZE)
                .filters(filters)
                .check(liblzma::stream::Check::Crc32)
                .encoder()
                .map_err(io::Error::other)?;
            Box::new(liblzma::write::XzEncoder::new_stream(w, stream))
        }
        Format::Zstd => {
            use zstd::stream::raw::CParameter;
            let mut e = zstd::stream::write::Encoder::new(w, level)?;
            // Multi-threaded mode always (even with one worker): its output does not
            // depend on the worker count, single-threaded mode's does.
            e.multithread(threads)?;
            e.include_checksum(true)?;
            e.set_pledged_src_size(size)?;
            if level >= 20 {
                e.set_parameter(CParameter::WindowLog(ZSTD_MAX_WINDOW_LOG))?;
            }
            Box::new(Zstd(e))
        }
    })
}

/// Compress a whole buffer (tests, `advise`).
pub fn compress_vec(spec: Spec, threads: u32, data: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut e = encoder(spec, threads, Some(data.len() as u64), &mut out)?;
    e.write_all(data)?;
    e.finish()?;
    Ok(out)
}

/// The most memory the xz and lzma decoders may take: four times what the largest preset's
/// dictionary needs (64 MiB). The decoder allocates the dictionary a stream's header names
/// before it reads any data, so without a limit a 17-byte .lzma header asks for 3 GiB (found
/// by fuzz/ `archive`).
pub const XZ_MEMLIMIT: u64 = 256 << 20;

/// A decoder for one stream of `format` read from `r`. It consumes exactly the stream's
/// bytes from `r` (nothing past its end), so what follows can be read from `r` afterwards.
pub fn decoder<'a, R: BufRead + Send + 'a>(format: Format, r: R) -> io::Result<Box<dyn Read + Send + 'a>> {
    Ok(match format {
        Format::None => Box::new(r),
        Format::Gzip => Box::new(flate2::bufread::GzDecoder::new(r)),
        Format::Bzip2 => Box::new(bzip2::bufread::BzDecoder::new(r)),
        Format::Xz => {
            let s = liblzma::stream::Stream::new_stream_decoder(XZ_MEMLIMIT, 0).map_err(io::Error::other)?;
            Box::new(liblzma::bufread::XzDecoder::new_stream(r, s))
        }
        Format::Lzma => {
            let s = liblzma::stream::Stream::new_lzma_decoder(XZ_MEMLIMIT).map_err(io::Error::other)?;
            Box::new(liblzma::bufread::XzDecoder::new_stream(r, s))
        }
        Format::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(r)?.single_frame()),
        Format::Lz4 => Box::new(Lz4LegacyDecoder::new(r)),
        Format::Lzo => Box::new(LzopDecoder::new(r)),
    })
}

/// Decompress a whole buffer holding one stream (tests).
pub fn decompress_vec(format: Format, data: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    decoder(format, data)?.read_to_end(&mut out)?;
    Ok(out)
}

/// [`decompress_vec`] that refuses output beyond `limit` bytes (a hostile stream that would
/// fill memory), with an `InvalidData` error saying so.
pub fn decompress_vec_max(format: Format, data: &[u8], limit: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    decoder(format, data)?.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("decompresses to more than {limit} bytes")));
    }
    Ok(out)
}

/// Adler-32 as lzop uses it (no crate in the tree exposes it; it is a few lines).
pub(crate) fn adler32(mut a: u32, data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut s1, mut s2) = (a & 0xffff, a >> 16);
    for chunk in data.chunks(5552) {
        for &b in chunk {
            s1 += b as u32;
            s2 += s1;
        }
        s1 %= MOD;
        s2 %= MOD;
    }
    a = (s2 << 16) | s1;
    a
}

/// Run `f` over `items` on up to `threads` threads, keeping order.
pub(crate) fn par_map<T: Sync, U: Send>(items: &[T], threads: u32, f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    if threads <= 1 || items.len() <= 1 {
        return items.iter().map(&f).collect();
    }
    let f = &f;
    std::thread::scope(|s| {
        let per = items.len().div_ceil(threads as usize);
        let handles: Vec<_> = items.chunks(per).map(|c| s.spawn(move || c.iter().map(f).collect::<Vec<U>>())).collect();
        handles.into_iter().flat_map(|h| h.join().expect("compression worker panicked")).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        // Compressible but not trivial: a repeating text with a counter.
        let mut v = Vec::with_capacity(n);
        let mut i = 0u64;
        while v.len() < n {
            v.extend_from_slice(
                format!("line {i} of the sample, value {}\n", i.wrapping_mul(2654435761) % 1000).as_bytes(),
            );
            i += 1;
        }
        v.truncate(n);
        v
    }

    #[test]
    fn every_format_round_trips_and_is_detected() {
        for n in [0usize, 1, 1000, 300_000, 9 << 20] {
            let data = sample(n);
            for f in Format::ALL {
                let c = compress_vec(Spec::new(f), 2, &data).unwrap();
                if f != Format::None && n > 0 {
                    assert_eq!(Format::detect(&c), Some(f), "{f} n={n}");
                }
                assert_eq!(decompress_vec(f, &c).unwrap(), data, "{f} n={n}");
                if (2..=300_000).contains(&n) {
                    let e = decompress_vec_max(f, &c, n as u64 - 1).unwrap_err();
                    assert!(e.to_string().contains("more than"), "{f}: {e}");
                    assert_eq!(decompress_vec_max(f, &c, n as u64).unwrap(), data);
                }
            }
        }
    }

    #[test]
    fn output_does_not_depend_on_threads() {
        let data = sample(20 << 20);
        for f in [Format::Zstd, Format::Xz, Format::Gzip, Format::Lz4, Format::Lzo] {
            let a = compress_vec(Spec::new(f), 1, &data).unwrap();
            let b = compress_vec(Spec::new(f), 2, &data).unwrap();
            let c = compress_vec(Spec::new(f), 2, &data).unwrap();
            assert!(a == b && b == c, "{f}");
        }
    }

    #[test]
    fn decoders_stop_at_the_end_of_their_stream() {
        let data = sample(100_000);
        for f in Format::ALL.into_iter().filter(|&f| f != Format::None) {
            let mut c = compress_vec(Spec::new(f), 2, &data).unwrap();
            let end = c.len();
            c.extend_from_slice(&[0, 0, 0, 0, b'0', b'7']);
            let mut cur = io::Cursor::new(&c[..]);
            let mut out = Vec::new();
            decoder(f, &mut cur).unwrap().read_to_end(&mut out).unwrap();
            assert_eq!(out, data, "{f}");
            // Whatever the decoder left must start at or just after the padding.
            let consumed = cur.position() as usize;
            assert!(consumed == end || (f == Format::Lz4 && consumed == end + 4), "{f}: {consumed} vs {end}");
        }
    }

    /// A .lzma header naming a dictionary of gigabytes is refused before the decoder takes
    /// that memory; the largest preset's dictionary is not (fuzz/ `archive` found the first).
    #[test]
    fn a_dictionary_of_gigabytes_is_refused() {
        let data = sample(10_000);
        let packed = compress_vec(Spec::new(Format::Lzma), 1, &data).unwrap();
        let with_dict = |size: u32| {
            let mut p = packed.clone();
            p[1..5].copy_from_slice(&size.to_le_bytes());
            decompress_vec(Format::Lzma, &p)
        };
        assert_eq!(with_dict(64 << 20).unwrap(), data);
        let e = with_dict(0xb528_0000).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
        // The fuzzer's input itself: a header and a few bytes.
        let mut b = Vec::new();
        let r = decoder(Format::Lzma, &b"\x5d\x00\x00\x28\xb5\x2f\xfd\x00\x00\x00\x01\x00\x00\x00\x07"[..])
            .and_then(|mut d| d.read_to_end(&mut b));
        assert!(r.is_err());
    }

    #[test]
    fn xz_uses_crc32() {
        let c = compress_vec(Spec::new(Format::Xz), 2, b"hello").unwrap();
        assert_eq!(&c[6..8], &[0x00, 0x01]); // stream flags: check type 1 = CRC32
    }

    #[test]
    fn specs_parse() {
        assert_eq!("zstd:19".parse::<Spec>().unwrap(), Spec { format: Format::Zstd, level: 19 });
        assert_eq!("xz".parse::<Spec>().unwrap().level, 6);
        assert!("zstd:23".parse::<Spec>().is_err());
        assert!("brotli".parse::<Spec>().is_err());
        assert!("gzip:x".parse::<Spec>().is_err());
    }

    #[test]
    fn adler_matches_known_value() {
        assert_eq!(adler32(1, b"Wikipedia"), 0x11E6_0398);
    }
}
