//! The operating-system layer /init needs, without libc: files, directories, mounts, time
//! and error text on rustix's raw-syscall backend; processes are in [`crate::process`] (and
//! re-exported here, so stages use one `sys`).

use alloc::ffi::CString;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
pub use rustix::io::Errno;

pub use crate::process::{
    Exec, PATH, RunError, describe_status, exit, exit_code, fork, fork_quiet, reap, run, run_input, wait, wait_quiet,
    which,
};

/// mount(2), making the mount point first.
pub fn mount(
    src: &str,
    target: &str,
    fstype: &str,
    flags: rustix::mount::MountFlags,
    data: Option<&str>,
) -> Result<(), Errno> {
    mkdir_p(target);
    let data = data.map(|d| CString::new(d).map_err(|_| Errno::INVAL)).transpose()?;
    rustix::mount::mount(src, target, fstype, flags, data.as_deref())
}

/// Write all of `s` to stderr (the console for PID 1).
pub fn eprint(s: &str) {
    // SAFETY: fd 2 is the console the kernel opened for init; nothing closes it.
    let fd = unsafe { rustix::fd::BorrowedFd::borrow_raw(2) };
    write_all(fd, s.as_bytes());
}

/// Write all of `b` to `fd`, retrying short writes and EINTR; false when a write fails or
/// writes nothing.
pub fn write_all<Fd: AsFd>(fd: Fd, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        match rustix::io::write(&fd, b) {
            Ok(0) => return false,
            Ok(n) => b = &b[n..],
            Err(Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Open `path` read-only (close-on-exec).
pub fn open(path: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
}

/// Open an existing `path` write-only (close-on-exec): no create, no truncate, as sysfs, procfs
/// and device nodes want.
pub fn open_write(path: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
}

/// The whole content of a file.
pub fn read(path: &str) -> Result<Vec<u8>, Errno> {
    let fd = open(path)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// A file's text (lossy UTF-8), or `None` when it cannot be read.
pub fn read_string(path: &str) -> Option<String> {
    read(path).ok().map(|b| String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()))
}

/// Exactly `len` bytes at `off`, or `None`.
pub fn read_at<Fd: AsFd>(fd: Fd, off: u64, len: usize) -> Option<Vec<u8>> {
    let mut b = alloc::vec![0u8; len];
    let mut done = 0;
    while done < len {
        match rustix::io::pread(&fd, &mut b[done..], off + done as u64) {
            Ok(0) => return None,
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    Some(b)
}

/// Write `data` to an existing file (a sysfs or procfs attribute, a device node) with one
/// [`write_all`]; `Errno::IO` when not all of it was written.
pub fn write_file(path: &str, data: &str) -> Result<(), Errno> {
    let fd = open_write(path)?;
    if write_all(&fd, data.as_bytes()) { Ok(()) } else { Err(Errno::IO) }
}

/// Create (or truncate) `path` with `mode` and write `data`.
pub fn write_file_mode(path: &str, data: &str, mode: u32) -> Result<(), Errno> {
    let fd = rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(mode),
    )?;
    if write_all(&fd, data.as_bytes()) { Ok(()) } else { Err(Errno::IO) }
}

/// Whether `path` exists (following links; a dangling link does not).
pub fn exists(path: &str) -> bool {
    rustix::fs::stat(path).is_ok()
}

/// Whether `path` is a directory (following links).
pub fn is_dir(path: &str) -> bool {
    rustix::fs::stat(path).is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
}

/// `mkdir -p`, errors ignored (the mount that follows reports them).
pub fn mkdir_p(path: &str) {
    let mut cur = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        cur.push('/');
        cur.push_str(part);
        let _ = rustix::fs::mkdir(cur.as_str(), Mode::from_raw_mode(0o755));
    }
}

/// The entries of a directory (without `.` and `..`) with their types.
pub fn list_dir(path: &str) -> Result<Vec<(String, FileType)>, Errno> {
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(&fd)? {
        let Ok(e) = e else { break };
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push((String::from_utf8_lossy(name).into_owned(), e.file_type()));
    }
    Ok(out)
}

/// A symbolic link's target as it is written (lossy UTF-8); `None` when `path` is not a link
/// or cannot be read.
pub fn readlink(path: &str) -> Option<String> {
    rustix::fs::readlink(path, Vec::new()).ok().map(|c| c.to_string_lossy().into_owned())
}

/// Remove a file, or an (empty) directory.
pub fn remove(path: &str, dir: bool) {
    let flags = if dir { AtFlags::REMOVEDIR } else { AtFlags::empty() };
    let _ = rustix::fs::unlinkat(rustix::fs::CWD, path, flags);
}

/// Milliseconds on the monotonic clock.
///
/// The clock_gettime system call itself, not rustix's: rustix goes through the vDSO, whose
/// lookup code is over 2 KB of this binary, to save a microsecond on a call /init makes a few
/// hundred times per boot.
pub fn now_ms() -> u64 {
    let mut t = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime(CLOCK_MONOTONIC, &t) writes one struct timespec (Timespec is
    // the kernel's __kernel_timespec layout on 64-bit architectures).
    let r = unsafe { crate::process::syscall3(SYS_CLOCK_GETTIME, 1, &raw mut t as usize, 0) };
    if r != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

#[cfg(target_arch = "x86_64")]
const SYS_CLOCK_GETTIME: usize = 228;
#[cfg(target_arch = "aarch64")]
const SYS_CLOCK_GETTIME: usize = 113;

/// A duration of `ms` milliseconds as a timespec.
pub fn timespec_ms(ms: u64) -> rustix::time::Timespec {
    rustix::time::Timespec { tv_sec: (ms / 1000) as i64, tv_nsec: ((ms % 1000) * 1_000_000) as i64 }
}

/// Sleep for `ms` milliseconds (nanosleep; a signal may end it early).
pub fn sleep_ms(ms: u64) {
    let _ = rustix::thread::nanosleep(&timespec_ms(ms));
}

/// The C library's message for an errno, or the number.
pub fn strerror(e: Errno) -> String {
    match errstr(e) {
        "" => alloc::format!("error {}", e.raw_os_error()),
        s => s.to_string(),
    }
}

/// The C library's message for the errnos /init can meet (module loading, mounting, exec,
/// the network);
/// "" for others.
pub fn errstr(e: Errno) -> &'static str {
    match e {
        Errno::PERM => "Operation not permitted",
        Errno::NOENT => "No such file or directory",
        Errno::INTR => "Interrupted system call",
        Errno::IO => "Input/output error",
        Errno::NXIO => "No such device or address",
        Errno::NOEXEC => "Exec format error",
        Errno::BADF => "Bad file descriptor",
        Errno::AGAIN => "Resource temporarily unavailable",
        Errno::NOMEM => "Cannot allocate memory",
        Errno::ACCESS => "Permission denied",
        Errno::FAULT => "Bad address",
        Errno::NOTBLK => "Block device required",
        Errno::BUSY => "Device or resource busy",
        Errno::EXIST => "File exists",
        Errno::NODEV => "No such device",
        Errno::NOTDIR => "Not a directory",
        Errno::ISDIR => "Is a directory",
        Errno::INVAL => "Invalid argument",
        Errno::NOSPC => "No space left on device",
        Errno::ROFS => "Read-only file system",
        Errno::NOSYS => "Function not implemented",
        Errno::NAMETOOLONG => "File name too long",
        Errno::NODATA => "No data available",
        Errno::TIME => "Timer expired",
        Errno::NOPKG => "Package not installed",
        Errno::NOTSUP => "Operation not supported",
        Errno::UCLEAN => "Structure needs cleaning",
        Errno::NOKEY => "Required key not available",
        Errno::KEYREJECTED => "Key was rejected by service",
        Errno::BADMSG => "Bad message",
        Errno::OVERFLOW => "Value too large for defined data type",
        Errno::TIMEDOUT => "Connection timed out",
        Errno::CONNREFUSED => "Connection refused",
        Errno::HOSTUNREACH => "No route to host",
        Errno::NETUNREACH => "Network is unreachable",
        Errno::NETDOWN => "Network is down",
        Errno::PROTONOSUPPORT => "Protocol not supported",
        Errno::ADDRNOTAVAIL => "Cannot assign requested address",
        Errno::STALE => "Stale file handle",
        Errno::MEDIUMTYPE => "Wrong medium type",
        _ => "",
    }
}

/// Open a device node, waiting (up to 2 s) for devtmpfs to make it: a node for a device just
/// made (a loop device, an NVMe controller) appears a moment after the call that made it.
pub fn open_node(path: &str, flags: rustix::fs::OFlags) -> Result<rustix::fd::OwnedFd, Errno> {
    let end = now_ms().saturating_add(2000);
    loop {
        match rustix::fs::open(path, flags | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty()) {
            Err(Errno::NOENT) if now_ms() < end => sleep_ms(20),
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_directories() {
        assert!(read_string("/proc/self/status").unwrap().contains("Pid:"));
        assert_eq!(read("/nonexistent/x"), Err(Errno::NOENT));
        assert_eq!(strerror(Errno::NOENT), "No such file or directory");
        assert_eq!(strerror(Errno::from_raw_os_error(4000)), "error 4000");
        let names: Vec<String> = list_dir("/proc/self").unwrap().into_iter().map(|(n, _)| n).collect();
        assert!(names.iter().any(|n| n == "status") && !names.iter().any(|n| n == "." || n == ".."));
        assert!(is_dir("/proc") && !is_dir("/proc/self/status") && exists("/proc/self/status"));
        let fd = open("/proc/self/cmdline").unwrap();
        assert!(read_at(&fd, 0, 1).is_some() && read_at(&fd, 1 << 40, 1).is_none());
        let t = now_ms();
        sleep_ms(20);
        assert!(now_ms() >= t + 20);
    }
}
