//! What the fuzz targets share: a scratch directory per process, device images written
//! sparse into a memory file, and reference writers for formats leanrd only reads (a DHCP
//! server's reply, an fstab line, implantisomd5's field). The targets are in fuzz_targets/.

use std::fs::File;
use std::io::Seek;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A directory of this process's own (on tmpfs when there is one), removed at exit; those of
/// processes that are gone (a crash does not exit) are removed when the next one starts.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() { base.to_path_buf() } else { std::env::temp_dir() };
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = e.file_name();
            let pid =
                name.to_str().and_then(|n| n.strip_prefix("leanrd-fuzz-")?.split('-').next()?.parse::<u32>().ok());
            if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let prefix = format!("leanrd-fuzz-{}-", std::process::id());
        let dir = tempfile::Builder::new().prefix(&prefix).tempdir_in(base).expect("scratch directory");
        let path = dir.keep();
        extern "C" fn remove() {
            if let Some(d) = DIR.get() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
        // SAFETY: registering a plain extern "C" function; libFuzzer ends with exit().
        unsafe { libc::atexit(remove) };
        path
    })
}

/// A memory file (memfd) holding `bytes`, reused from call to call, its offset at the start
/// (as a file the CLI opens).
pub fn memfile(bytes: &[u8]) -> &'static File {
    let mut f = memfd();
    f.set_len(0).expect("truncate");
    f.write_all_at(bytes, 0).expect("write");
    f.seek(std::io::SeekFrom::Start(0)).expect("seek");
    f
}

fn memfd() -> &'static File {
    static FD: OnceLock<File> = OnceLock::new();
    FD.get_or_init(|| {
        let fd: OwnedFd = rustix::fs::memfd_create("leanrd-fuzz", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd");
        File::from(fd)
    })
}

/// The sizes a device image may have (the first byte of the input picks one): the probe reads
/// near the end too (md 1.0 and 0.90 superblocks), and below 128 KiB it does not look there.
pub const IMAGE_SIZES: [u64; 8] = [8 << 10, 40 << 10, 72 << 10, 128 << 10, 192 << 10, 1 << 20, 8 << 20, 64 << 20];

/// A device image written sparse: the first byte picks its size from [`IMAGE_SIZES`], then
/// chunks follow, each a 32-bit little-endian offset (taken modulo the size), a 16-bit
/// little-endian length and that many bytes (fewer where the input ends). Everything else is
/// zeros. `fuzz/make-seeds` writes mkfs images in this form.
pub fn sparse_chunks(data: &[u8]) -> (u64, Vec<(u64, &[u8])>) {
    let Some((&k, mut rest)) = data.split_first() else { return (IMAGE_SIZES[0], Vec::new()) };
    let size = IMAGE_SIZES[k as usize % IMAGE_SIZES.len()];
    let mut chunks = Vec::new();
    while rest.len() >= 6 {
        let off = u64::from(u32::from_le_bytes(rest[..4].try_into().unwrap())) % size;
        let len = usize::from(u16::from_le_bytes([rest[4], rest[5]]));
        let body = &rest[6..];
        let n = len.min(body.len()).min((size - off) as usize);
        chunks.push((off, &body[..n]));
        rest = &body[len.min(body.len())..];
    }
    (size, chunks)
}

/// The sparse image of [`sparse_chunks`] in the memory file.
pub fn sparse_image(data: &[u8]) -> &'static File {
    let (size, chunks) = sparse_chunks(data);
    let f = memfd();
    f.set_len(0).expect("truncate");
    f.set_len(size).expect("size");
    for (off, bytes) in chunks {
        f.write_all_at(bytes, off).expect("write");
    }
    f
}

/// Read `len` bytes at `off` of an image (zeros past its end).
pub fn read_image_at(f: impl AsFd, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match rustix::io::pread(&f, &mut b[done..], off + done as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => done += n,
        }
    }
    b
}

/// A DHCP reply as a server writes it (RFC 2131/2132, long options split as RFC 3396 allows):
/// the reference writer that `Reply::parse`'s results must survive.
pub fn dhcp_reply(r: &leanrd_init::dhcp::Reply) -> Vec<u8> {
    let mut m = vec![0u8; 236];
    m[0] = 2;
    m[1] = 1;
    m[2] = 6;
    m[4..8].copy_from_slice(&r.xid.to_be_bytes());
    m[16..20].copy_from_slice(&r.address);
    m[20..24].copy_from_slice(&r.next_server);
    m[28..34].copy_from_slice(&r.chaddr);
    m.extend_from_slice(&[99, 130, 83, 99]);
    let mut opt = |code: u8, v: &[u8]| {
        // An empty value is one empty option; a long one, several in a row.
        let mut chunks: Vec<&[u8]> = v.chunks(255).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        for c in chunks {
            m.push(code);
            m.push(c.len() as u8);
            m.extend_from_slice(c);
        }
    };
    opt(53, &[r.kind]);
    if let Some(a) = r.mask {
        opt(1, &a);
    }
    if !r.routers.is_empty() {
        opt(3, &r.routers.concat());
    }
    if !r.dns.is_empty() {
        opt(6, &r.dns.concat());
    }
    for (code, t) in [(12, &r.hostname), (15, &r.domain), (17, &r.root_path)] {
        if let Some(t) = t {
            opt(code, t.as_bytes());
        }
    }
    if let Some(v) = r.mtu {
        opt(26, &v.to_be_bytes());
    }
    if let Some(a) = r.broadcast {
        opt(28, &a);
    }
    if let Some(v) = r.lease_secs {
        opt(51, &v.to_be_bytes());
    }
    if let Some(a) = r.server_id {
        opt(54, &a);
    }
    m.push(255);
    m
}

/// A field of an fstab line as `mount` expects it written: white space, `\` and a leading `#`
/// as octal escapes (`\040`).
pub fn fstab_escape(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.char_indices() {
        if c.is_whitespace() || c == '\\' || (i == 0 && c == '#') {
            let mut b = [0u8; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                out += &format!("\\{byte:03o}");
            }
        } else {
            out.push(c);
        }
    }
    out
}
