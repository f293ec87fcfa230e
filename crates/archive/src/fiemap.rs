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
    pub shared: u64,
    pub exclusive: u64,
    pub extents: u64,
}

/// Map the whole file. Fails with the OS error where FIEMAP is not supported.
pub fn usage(f: &File) -> io::Result<Usage> {
    let mut u = Usage::default();
    let mut start = 0u64;
    loop {
        let mut req = Request {
            start,
            length: u64::MAX - start,
            flags: FIEMAP_FLAG_SYNC,
            mapped: 0,
            count: BATCH as u32,
            reserved: 0,
            extents: [Extent::default(); BATCH],
        };
        // SAFETY: `req` is a valid struct fiemap followed by room for BATCH extents.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP as _, &mut req as *mut Request) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        if req.mapped == 0 {
            return Ok(u);
        }
        let mut last = false;
        for e in &req.extents[..req.mapped as usize] {
            u.total += e.length;
            u.extents += 1;
            if e.flags & FIEMAP_EXTENT_SHARED != 0 {
                u.shared += e.length;
            } else {
                u.exclusive += e.length;
            }
            start = e.logical + e.length;
            last |= e.flags & FIEMAP_EXTENT_LAST != 0;
        }
        if last {
            return Ok(u);
        }
    }
}
