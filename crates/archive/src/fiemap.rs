//! How much of a file's data is shared with other files (reflinks), from `FS_IOC_FIEMAP`.
//! Not wrapped by rustix; the structs are from linux/fiemap.h.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B; // _IOWR('f', 11, struct fiemap)
const FIEMAP_FLAG_SYNC: u32 = 0x1;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_EXTENT_SHARED: u32 = 0x2000;
const BATCH: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Extent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

#[repr(C)]
struct Request {
    start: u64,
    length: u64,
    flags: u32,
    mapped: u32,
    count: u32,
    reserved: u32,
    extents: [Extent; BATCH],
}

/// Bytes of a file's data, by whether their extents are shared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes in mapped extents (holes excluded).
    pub total: u64,
    /// Bytes in extents the file system marks as shared with other files (reflinked).
    pub shared: u64,
    /// Bytes in extents that belong to this file alone.
    pub exclusive: u64,
    /// Number of mapped extents.
    pub extents: u64,
}

/// Up to BATCH extents of `length` bytes of the file from `start`.
fn map(f: &File, start: u64, length: u64) -> io::Result<Box<Request>> {
    let mut req = Box::new(Request {
        start,
        length,
        flags: FIEMAP_FLAG_SYNC,
        mapped: 0,
        count: BATCH as u32,
        reserved: 0,
        extents: [Extent::default(); BATCH],
    });
    // SAFETY: `req` is a valid struct fiemap followed by room for BATCH extents.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP as _, &mut *req as *mut Request) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req)
}

/// Where on its device a file's first byte is (a swap file's header: the kernel's
/// `resume_offset` is this in pages). None when the start is a hole or the extent has no
/// plain physical place (inline, encoded, not yet allocated). On btrfs this is an address in
/// the file system's own space, not on a device.
pub fn physical_start(f: &File) -> io::Result<Option<u64>> {
    // FIEMAP_EXTENT_UNKNOWN | DELALLOC | ENCODED | DATA_ENCRYPTED | NOT_ALIGNED | DATA_INLINE
    const NOT_PLAIN: u32 = 0x2 | 0x4 | 0x8 | 0x80 | 0x100 | 0x200;
    let req = map(f, 0, 1)?;
    let e = &req.extents[0];
    Ok((req.mapped > 0 && e.logical == 0 && e.flags & NOT_PLAIN == 0).then_some(e.physical))
}

/// Map the whole file. Fails with the OS error where FIEMAP is not supported.
pub fn usage(f: &File) -> io::Result<Usage> {
    usage_range(f, 0, u64::MAX)
}

/// Map `len` bytes of the file from `from` (a UKI's .initrd section), extents clipped to it.
pub fn usage_range(f: &File, from: u64, len: u64) -> io::Result<Usage> {
    let end = from.saturating_add(len);
    let mut u = Usage::default();
    let mut start = from;
    while start < end {
        let req = map(f, start, end - start)?;
        if req.mapped == 0 {
            return Ok(u);
        }
        let mut last = false;
        for e in &req.extents[..req.mapped as usize] {
            let (a, b) = (e.logical.max(from), (e.logical + e.length).min(end));
            if b > a {
                u.total += b - a;
                u.extents += 1;
                if e.flags & FIEMAP_EXTENT_SHARED != 0 {
                    u.shared += b - a;
                } else {
                    u.exclusive += b - a;
                }
            }
            start = e.logical + e.length;
            last |= e.flags & FIEMAP_EXTENT_LAST != 0;
        }
        if last {
            return Ok(u);
        }
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first byte's place agrees with filefrag's first extent (in 4 KiB blocks), where
    /// the temporary directory's file system maps files to blocks (not tmpfs).
    #[test]
    fn physical_start_agrees_with_filefrag() {
        let dir = tempfile::tempdir_in(std::env::var_os("CARGO_TARGET_TMPDIR").unwrap_or("/var/tmp".into())).unwrap();
        let p = dir.path().join("swapfile");
        std::fs::write(&p, vec![7u8; 1 << 20]).unwrap();
        let f = File::open(&p).unwrap();
        let Ok(Some(start)) = physical_start(&f) else {
            leanrd_testkit::skip::<()>("no FIEMAP physical place here");
            return;
        };
        let o = std::process::Command::new("filefrag").args(["-v", "-b4096"]).arg(&p).output();
        let Ok(o) = o else { return };
        let text = String::from_utf8_lossy(&o.stdout);
        // "   0:        0..     255:    1234567..   1234822:    256:   last,eof"
        let first = text.lines().find(|l| l.trim_start().starts_with("0:")).expect(&text);
        let phys: u64 = first.split(':').nth(2).unwrap().split("..").next().unwrap().trim().parse().unwrap();
        assert_eq!(start / 4096, phys, "{text}");
    }
}
