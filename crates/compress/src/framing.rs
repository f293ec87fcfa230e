//! Framing the kernel's decompressors reject though the format is right: what `leanrd check`
//! warns about, read from a segment's first bytes. Kept beside [`Format::detect`] because it
//! is knowledge of the same formats.

use crate::{Format, ZSTD_MAX_WINDOW_LOG};

/// Problems the kernel would have with a segment that starts with `head`.
pub fn kernel_problems(format: Format, head: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    match format {
        Format::Xz if head.len() >= 12 => xz(head, &mut out),
        Format::Zstd if head.len() >= 6 => zstd(head, &mut out),
        _ => {}
    }
    out
}

/// xz: the stream's integrity check (the kernel's XZ decoder does CRC32 or none) and the
/// first block's filters (LZMA2 only, unless built with BCJ).
fn xz(head: &[u8], out: &mut Vec<String>) {
    match head[7] & 0x0f {
        0x00 | 0x01 => {}
        c => out.push(format!(
            "xz integrity check {} ({}): the kernel's XZ decoder supports only CRC32 or none",
            c,
            match c {
                0x04 => "CRC64",
                0x0a => "SHA-256",
                _ => "unknown",
            }
        )),
    }
    // First block header: filter IDs.
    let b = &head[12..];
    if b.len() >= 2 && b[0] != 0 {
        let nfilters = (b[1] & 3) as usize + 1;
        let mut p = 2;
        let varint = |p: &mut usize| -> Option<u64> {
            let mut v = 0u64;
            for i in 0..9 {
                let c = *b.get(*p)?;
                *p += 1;
                v |= ((c & 0x7f) as u64) << (7 * i);
                if c & 0x80 == 0 {
                    return Some(v);
                }
            }
            None
        };
        if b[1] & 0x40 != 0 {
            let _ = varint(&mut p);
        }
        if b[1] & 0x80 != 0 {
            let _ = varint(&mut p);
        }
        for _ in 0..nfilters {
            let Some(id) = varint(&mut p) else { break };
            let Some(psize) = varint(&mut p) else { break };
            p += psize as usize;
            if id != 0x21 {
                out.push(format!(
                    "xz filter {id:#x} ({}): the kernel decodes LZMA2 only unless built with that BCJ filter",
                    match id {
                        0x03 => "delta",
                        0x04 => "BCJ x86",
                        0x05..=0x09 => "BCJ",
                        _ => "unknown",
                    }
                ));
            }
        }
    }
}

/// zstd: a window larger than the kernel asks its decoder to allocate.
fn zstd(head: &[u8], out: &mut Vec<String>) {
    let fhd = head[4];
    let single = fhd & 0x20 != 0;
    if !single {
        let wd = head[5];
        let log = 10 + (wd >> 3) as u32;
        let base = 1u64 << log;
        let size = base + (base / 8) * (wd & 7) as u64;
        if size > 1u64 << ZSTD_MAX_WINDOW_LOG {
            out.push(format!(
                "zstd window {size} bytes is larger than 2^{ZSTD_MAX_WINDOW_LOG}: the kernel may fail to allocate it"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_xz_crc64_and_bcj() {
        let data = vec![7u8; 1000];
        let mut enc = liblzma_crc64(&data);
        let p = kernel_problems(Format::Xz, &enc);
        assert!(p.iter().any(|m| m.contains("CRC64")), "{p:?}");
        enc[7] = 1;
        assert!(kernel_problems(Format::Xz, &enc).is_empty());
    }

    fn liblzma_crc64(data: &[u8]) -> Vec<u8> {
        // A stream with the library default (CRC64) made the way a careless tool would.
        let ours = crate::compress_vec(crate::Spec::new(Format::Xz), 1, data).unwrap();
        let mut v = ours.clone();
        v[7] = 0x04;
        v
    }

    #[test]
    fn flags_large_zstd_window() {
        // magic, FHD without single-segment, window descriptor for 2^28.
        let head = [0x28, 0xb5, 0x2f, 0xfd, 0x00, (28 - 10) << 3, 0, 0];
        assert_eq!(kernel_problems(Format::Zstd, &head).len(), 1);
        let head = [0x28, 0xb5, 0x2f, 0xfd, 0x00, (27 - 10) << 3, 0, 0];
        assert!(kernel_problems(Format::Zstd, &head).is_empty());
    }
}
