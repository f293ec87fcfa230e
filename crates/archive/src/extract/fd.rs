//! The descriptor-level operations extraction is built from: every one acts on an open
//! descriptor or with `AT_SYMLINK_NOFOLLOW`, never through a name that is followed.

use std::io;

use crate::error::{Context, Result, bail};
use leanrd_newc::FileKind;
use std::os::fd::AsRawFd;

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::fs::{Timespec, Timestamps};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ident {
    dev: u64,
    ino: u64,
}

impl Ident {
    pub(super) fn of(st: &rustix::fs::Stat) -> Ident {
        Ident { dev: st.st_dev, ino: st.st_ino }
    }
}

pub(super) fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

/// The owner to give; None for 0xffffffff, which is no user: chown(2) reads -1 as "leave it",
/// as the kernel's unpacker passes it (and rustix refuses to make a `Uid` of it).
pub(super) fn uid(u: u32) -> Option<rustix::fs::Uid> {
    (u != !0).then(|| rustix::fs::Uid::from_raw(u))
}

pub(super) fn gid(g: u32) -> Option<rustix::fs::Gid> {
    (g != !0).then(|| rustix::fs::Gid::from_raw(g))
}

/// Make directory `base` in `dir`, replacing a non-directory that is there (never following
/// it), and return an `O_PATH` descriptor of the directory itself.
pub(super) fn make_dir(dir: &OwnedFd, base: &[u8]) -> Result<OwnedFd> {
    match rustix::fs::mkdirat(dir, base, Mode::from_raw_mode(0o700)) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST) => {
            let st = rustix::fs::statat(dir, base, AtFlags::SYMLINK_NOFOLLOW).map_err(errno).context("cannot stat")?;
            if FileKind::from_mode(st.st_mode) != Some(FileKind::Dir) {
                rustix::fs::unlinkat(dir, base, AtFlags::empty())
                    .map_err(errno)
                    .context("cannot replace the file there with a directory")?;
                rustix::fs::mkdirat(dir, base, Mode::from_raw_mode(0o700))
                    .map_err(errno)
                    .context("cannot create directory")?;
            }
        }
        Err(err) => return Err(errno(err)).context("cannot create directory"),
    }
    open_node(dir, base, FileKind::Dir, None)
}

/// An `O_PATH | O_NOFOLLOW` descriptor of `base` in `dir`, checked to be a `kind` (and, if
/// given, the very file `ident`).
pub(super) fn open_node(dir: &OwnedFd, base: &[u8], kind: FileKind, ident: Option<Ident>) -> Result<OwnedFd> {
    let mut flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if kind == FileKind::Dir {
        flags |= OFlags::DIRECTORY;
    }
    let fd = rustix::fs::openat(dir, base, flags, Mode::empty()).map_err(errno).context("cannot open")?;
    let st = rustix::fs::fstat(&fd).map_err(errno).context("cannot stat")?;
    let found = FileKind::from_mode(st.st_mode);
    if found != Some(kind) {
        bail!("expected a {}, found {}", kind.name(), found.map(FileKind::name).unwrap_or("an unknown file type"));
    }
    if ident.is_some_and(|i| i != Ident::of(&st)) {
        bail!("it is no longer the file this extraction made");
    }
    Ok(fd)
}

/// chmod through a descriptor (an `O_PATH` one included), never through a name:
/// `fchmodat2(fd, "", AT_EMPTY_PATH)` (Linux 6.6), else `/proc/self/fd/N` as glibc's
/// `fchmodat(AT_SYMLINK_NOFOLLOW)` does. rustix wraps neither for `O_PATH` descriptors.
pub(super) fn chmod_fd(fd: &OwnedFd, perm: u32) -> Result<()> {
    const SYS_FCHMODAT2: libc::c_long = 452;
    // SAFETY: a plain system call on an open descriptor and a NUL-terminated empty path.
    let r = unsafe { libc::syscall(SYS_FCHMODAT2, fd.as_raw_fd(), c"".as_ptr(), perm, libc::AT_EMPTY_PATH) };
    if r == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if !matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP)) {
        return Err(err).context("cannot chmod");
    }
    let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::chmod(proc.as_str(), Mode::from_raw_mode(perm))
        .map_err(errno)
        .context("cannot chmod (fchmodat2 is missing and /proc is not mounted?)")
}

pub(super) fn set_times(dir: &impl AsFd, base: &[u8], mtime: u32, flags: AtFlags) -> Result<()> {
    let t = Timespec { tv_sec: mtime as i64, tv_nsec: 0 };
    rustix::fs::utimensat(dir, base, &Timestamps { last_access: t, last_modification: t }, flags)
        .map_err(errno)
        .context("cannot set mtime")
}
