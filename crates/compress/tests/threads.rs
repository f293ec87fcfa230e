//! The compressed output is a function of the input and the settings only: the thread count
//! never changes a byte (reproducible images on any machine), in every format.

use leanrd_compress::{Spec, compress_vec};

/// A few MiB that compress like an initramfs: text, repeated binary, and noise.
fn input() -> Vec<u8> {
    let mut v = Vec::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..6_000u32 {
        v.extend_from_slice(format!("line {i}: the quick brown fox jumps over the lazy dog\n").as_bytes());
        v.extend_from_slice(&i.to_le_bytes().repeat(64));
        for _ in 0..96 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(x as u8);
        }
    }
    v
}

#[test]
fn output_does_not_depend_on_the_thread_count() {
    let data = input();
    assert!(data.len() > 2 << 20);
    for f in ["zstd", "zstd:19", "xz", "gzip", "lz4", "lzo", "bzip2", "lzma"] {
        let spec: Spec = f.parse().unwrap();
        let one = compress_vec(spec, 1, &data).unwrap();
        for threads in [2, 3] {
            assert!(compress_vec(spec, threads, &data).unwrap() == one, "{f} with {threads} threads");
        }
        assert!(compress_vec(spec, 1, &data).unwrap() == one, "{f} second run");
    }
}
