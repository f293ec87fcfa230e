//! Restore an image's entries under a directory, safely: names are checked (no absolute
//! names, no `..`), and every parent directory is opened with `openat2(RESOLVE_BENEATH)`, so
//! a symlink in the archive can never send a later write outside the target directory.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::Path;

use anyhow::{Context, Result, bail};
use leanrd_newc::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Timespec, Timestamps};

use crate::read::{ReadEntry, Visitor};

/// An extraction in progress; use as the [`Visitor`] of [`crate::read::read_image`], then
/// call [`Extractor::finish`].
pub struct Extractor {
    root: OwnedFd,
    as_root: bool,
    /// Hard-link sets seen: (segment, dev, ino) → path of the first member.
    links: HashMap<(usize, u32, u32, u32), Vec<u8>>,
    dir_times: Vec<(Vec<u8>, u32)>,
    pub files: usize,
    pub warnings: Vec<String>,
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

/// Components of a safe relative name; an error for absolute names and `..`.
pub fn safe_components(name: &[u8]) -> Result<Vec<&[u8]>, String> {
    if name.first() == Some(&b'/') {
        return Err("absolute name".into());
    }
    let mut out = Vec::new();
    for c in name.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("name has a '..' component".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn join(c: &[&[u8]]) -> Vec<u8> {
    c.join(&b'/')
}

impl Extractor {
    pub fn new(dir: &Path) -> Result<Extractor> {
        std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        let root = rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(errno)
            .with_context(|| format!("{}: cannot open", dir.display()))?;
        Ok(Extractor {
            root,
            as_root: rustix::process::geteuid().is_root(),
            links: HashMap::new(),
            dir_times: Vec::new(),
            files: 0,
            warnings: Vec::new(),
        })
    }

    /// Open (creating as needed) the directory `comps` beneath the root.
    fn open_dir(&self, comps: &[&[u8]]) -> Result<OwnedFd> {
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let path = join(comps);
        let p = if path.is_empty() { b".".to_vec() } else { path };
        match rustix::fs::openat2(&self.root, p.as_slice(), flags, Mode::empty(), how) {
            Ok(fd) => return Ok(fd),
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                bail!("{}: cannot open beneath the target directory: {}", String::from_utf8_lossy(&p), errno(e))
            }
        }
        // Create missing parents one level at a time, each checked.
        let mut fd = rustix::fs::openat2(&self.root, ".", flags, Mode::empty(), how).map_err(errno)?;
        for c in comps {
            match rustix::fs::mkdirat(&fd, *c, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => bail!("{}: cannot create directory: {}", String::from_utf8_lossy(c), errno(e)),
            }
            fd = rustix::fs::openat2(&fd, *c, flags, Mode::empty(), how).map_err(errno).with_context(|| {
                format!("{}: cannot open beneath the target directory", String::from_utf8_lossy(&join(comps)))
            })?;
        }
        Ok(fd)
    }

    /// Apply directory mtimes (deepest first); call once after the walk.
    pub fn finish(mut self) -> Result<Vec<String>> {
        self.dir_times.sort_by_key(|d| std::cmp::Reverse(d.0.len()));
        for (name, mtime) in std::mem::take(&mut self.dir_times) {
            let comps: Vec<&[u8]> = name.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
            if let Ok(fd) = self.open_dir(&comps) {
                let _ = set_times(&fd, b".", mtime);
            }
        }
        Ok(self.warnings)
    }
}

fn set_times(dir: &OwnedFd, base: &[u8], mtime: u32) -> io::Result<()> {
    let t = Timespec { tv_sec: mtime as i64, tv_nsec: 0 };
    rustix::fs::utimensat(dir, base, &Timestamps { last_access: t, last_modification: t }, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(errno)
}

impl Visitor for Extractor {
    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> Result<()> {
        let shown = e.name_lossy();
        let comps = safe_components(&e.name).map_err(|m| anyhow::anyhow!("refusing {shown:?}: {m}"))?;
        let h = &e.header;
        let kind = h.mode & S_IFMT;
        let perm = Mode::from_raw_mode(h.mode & 0o7777);
        if comps.is_empty() {
            // The target directory itself ("." in the archive).
            if kind == S_IFDIR {
                self.dir_times.push((Vec::new(), h.mtime));
            }
            return Ok(());
        }
        let (base, parent) = comps.split_last().expect("not empty");
        let dir = self.open_dir(parent)?;
        let ctx = |what: &str, err: rustix::io::Errno| anyhow::anyhow!("{shown}: cannot {what}: {}", errno(err));
        // Replace whatever non-directory is there, as the kernel does.
        if kind != S_IFDIR {
            match rustix::fs::unlinkat(&dir, *base, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(rustix::io::Errno::ISDIR) | Err(rustix::io::Errno::PERM) => {
                    let _ = rustix::fs::unlinkat(&dir, *base, AtFlags::REMOVEDIR);
                }
                Err(err) => return Err(ctx("replace the existing file", err)),
            }
        }
        match kind {
            S_IFDIR => {
                match rustix::fs::mkdirat(&dir, *base, Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(err) => return Err(ctx("create directory", err)),
                }
                self.dir_times.push((join(&comps), h.mtime));
            }
            S_IFREG => {
                let key = (e.segment, h.dev_major, h.dev_minor, h.ino);
                let first = if h.nlink >= 2 { self.links.get(&key).cloned() } else { None };
                let fd = if let Some(first) = first {
                    let fc: Vec<&[u8]> = first.split(|&b| b == b'/').collect();
                    let (fb, fp) = fc.split_last().expect("not empty");
                    let fdir = self.open_dir(fp)?;
                    rustix::fs::linkat(&fdir, *fb, &dir, *base, AtFlags::empty()).map_err(|e| ctx("hard-link", e))?;
                    rustix::fs::openat(&dir, *base, OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                        .map_err(|e| ctx("open", e))?
                } else {
                    if h.nlink >= 2 {
                        self.links.insert(key, join(&comps));
                    }
                    rustix::fs::openat(
                        &dir,
                        *base,
                        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o600),
                    )
                    .map_err(|e| ctx("create", e))?
                };
                let mut f = File::from(fd);
                if h.filesize > 0 {
                    f.set_len(0).with_context(|| format!("{shown}: cannot truncate"))?;
                    io::copy(data, &mut f).with_context(|| format!("{shown}: cannot write"))?;
                }
                if self.as_root {
                    let _ = rustix::fs::fchown(
                        &f,
                        Some(rustix::fs::Uid::from_raw(h.uid)),
                        Some(rustix::fs::Gid::from_raw(h.gid)),
                    );
                }
                rustix::fs::fchmod(&f, perm).map_err(|e| ctx("chmod", e))?;
                self.files += 1;
            }
            S_IFLNK => {
                if h.filesize == 0 || h.filesize > leanrd_newc::PATH_MAX {
                    bail!("{shown}: symlink target of {} bytes (the kernel allows 1 to 4096)", h.filesize);
                }
                let mut target = Vec::new();
                data.read_to_end(&mut target).with_context(|| format!("{shown}: cannot read link target"))?;
                rustix::fs::symlinkat(target.as_slice(), &dir, *base).map_err(|e| ctx("create symlink", e))?;
            }
            S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK => {
                if matches!(kind, S_IFCHR | S_IFBLK) && !self.as_root {
                    self.warnings.push(format!("{shown}: device node skipped (needs root)"));
                    return Ok(());
                }
                let ft = rustix::fs::FileType::from_raw_mode(kind);
                let dev = rustix::fs::makedev(h.rdev_major, h.rdev_minor);
                rustix::fs::mknodat(&dir, *base, ft, perm, dev).map_err(|e| ctx("create node", e))?;
            }
            other => bail!("{shown}: unknown file type {other:o}"),
        }
        if kind != S_IFREG {
            if self.as_root {
                let _ = rustix::fs::chownat(
                    &dir,
                    *base,
                    Some(rustix::fs::Uid::from_raw(h.uid)),
                    Some(rustix::fs::Gid::from_raw(h.gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            if kind != S_IFLNK {
                rustix::fs::chmodat(&dir, *base, perm, AtFlags::empty()).map_err(|e| ctx("chmod", e))?;
            }
        }
        if kind != S_IFDIR {
            set_times(&dir, base, h.mtime).with_context(|| format!("{shown}: cannot set mtime"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(safe_components(b"a/./b//c").unwrap(), vec![&b"a"[..], b"b", b"c"]);
        assert!(safe_components(b"/etc/passwd").is_err());
        assert!(safe_components(b"a/../../x").is_err());
        assert!(safe_components(b"..").is_err());
        assert!(safe_components(b".").unwrap().is_empty());
    }
}
