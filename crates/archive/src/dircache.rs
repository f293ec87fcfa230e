//! Names resolved from their parent directory's descriptor: a sorted tree or path list
//! names thousands of files in the same few directories, so `lstat` and `open` of each by its
//! full path would walk the same leading components again every time. The last parent
//! directory is kept open (`O_PATH`) and the base name looked up in it (`fstatat`, `openat`).
//! Opening the parent follows symlinks in it exactly as a full-path lookup would.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

/// What an entry needs of a source's `lstat`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lstat {
    /// File type and permission bits (`st_mode`).
    pub mode: u32,
    /// Owner's user ID.
    pub uid: u32,
    /// Owner's group ID.
    pub gid: u32,
    /// Number of hard links to the file.
    pub nlink: u64,
    /// Modification time, in seconds since the epoch (negative before it).
    pub mtime: i64,
    /// The device holding the file (`st_dev`): with `ino`, the file's identity for hard links.
    pub dev: u64,
    /// The device a character or block device node stands for (`st_rdev`); 0 for other files.
    pub rdev: u64,
    /// Inode number on `dev`.
    pub ino: u64,
    /// Size in bytes (a symlink's: its target's length).
    pub size: u64,
}

impl From<&std::fs::Metadata> for Lstat {
    fn from(m: &std::fs::Metadata) -> Lstat {
        use std::os::unix::fs::MetadataExt;
        Lstat {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            nlink: m.nlink(),
            mtime: m.mtime(),
            dev: m.dev(),
            rdev: m.rdev(),
            ino: m.ino(),
            size: m.len(),
        }
    }
}

impl From<&rustix::fs::Stat> for Lstat {
    // st_nlink is a u64 on x86-64 and a u32 on aarch64: the conversion is one or the other.
    #[allow(clippy::useless_conversion)]
    fn from(s: &rustix::fs::Stat) -> Lstat {
        Lstat {
            mode: s.st_mode,
            uid: s.st_uid,
            gid: s.st_gid,
            nlink: u64::from(s.st_nlink),
            mtime: s.st_mtime,
            dev: s.st_dev,
            rdev: s.st_rdev,
            ino: s.st_ino,
            size: s.st_size as u64,
        }
    }
}

/// The last parent directory looked in, kept open.
#[derive(Default)]
pub(crate) struct DirCache {
    dir: Option<(PathBuf, OwnedFd)>,
}

impl DirCache {
    /// The parent's descriptor and the base name, or None for a name without a parent.
    fn split<'p>(&mut self, path: &'p Path) -> Option<(&OwnedFd, &'p std::ffi::OsStr)> {
        let (parent, base) = (path.parent()?, path.file_name()?);
        if parent.as_os_str().is_empty() || path.as_os_str().as_encoded_bytes().ends_with(b"/") {
            return None;
        }
        if self.dir.as_ref().is_none_or(|(d, _)| d != parent) {
            let fd =
                rustix::fs::open(parent, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok()?;
            self.dir = Some((parent.to_path_buf(), fd));
        }
        self.dir.as_ref().map(|(_, fd)| (fd, base))
    }

    /// `lstat(path)`.
    pub(crate) fn lstat(&mut self, path: &Path) -> io::Result<Lstat> {
        match self.split(path) {
            Some((fd, base)) => Ok(Lstat::from(&rustix::fs::statat(fd, base, AtFlags::SYMLINK_NOFOLLOW)?)),
            None => Ok(Lstat::from(&std::fs::symlink_metadata(path)?)),
        }
    }

    /// `open(path, O_RDONLY)`.
    pub(crate) fn open(&mut self, path: &Path) -> io::Result<File> {
        match self.split(path) {
            Some((fd, base)) => {
                Ok(File::from(rustix::fs::openat(fd, base, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?))
            }
            None => File::open(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_answers_as_full_paths() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f"), b"hello").unwrap();
        std::os::unix::fs::symlink("f", d.join("l")).unwrap();
        std::os::unix::fs::symlink("a", t.path().join("via")).unwrap();
        let mut c = DirCache::default();
        for p in [d.join("f"), d.join("l"), t.path().join("via/b/f"), t.path().join("a")] {
            let want = Lstat::from(&std::fs::symlink_metadata(&p).unwrap());
            let got = c.lstat(&p).unwrap();
            assert_eq!((got.ino, got.mode, got.size), (want.ino, want.mode, want.size), "{}", p.display());
        }
        assert_eq!(std::io::read_to_string(c.open(&d.join("f")).unwrap()).unwrap(), "hello");
        assert!(c.lstat(&d.join("missing")).is_err());
        assert!(c.lstat(Path::new("relative-without-parent")).is_err());
    }
}
