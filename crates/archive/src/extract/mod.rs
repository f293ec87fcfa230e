//! Restore an image's entries under a directory, safely.
//!
//! The rules, each against a name an archive can plant:
//! - names are checked: an absolute name is taken from the target directory, as the kernel takes
//!   it from the root it unpacks into; `..` is refused (`safe_components`);
//! - every parent directory is opened with `openat2(RESOLVE_BENEATH)`, so a symlink in the
//!   archive can never send a later entry outside the target directory;
//! - an existing name is replaced, never followed: a directory entry over a symlink (or any
//!   other non-directory) removes it first, as the kernel's `clean_path` does;
//! - every metadata call (chown, chmod, utimes) goes through a descriptor opened with
//!   `O_NOFOLLOW` (`O_PATH` for nodes and directories) and checked to be the kind of file
//!   the entry made, or through `AT_SYMLINK_NOFOLLOW`; never through a name that is followed;
//! - a hard link is made only to the very file this extraction created for its set (checked
//!   by device and inode), so a set member replaced by a device node or a fifo is refused.
//!
//! An entry that cannot be restored is recorded in [`Extractor::errors`] and the walk goes
//! on, as the kernel's unpacker does; the caller reports them and fails.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::rc::Rc;

use crate::error::{Context, Result, bail, invalid};
use leanrd_newc::{FileKind, symlink_len_ok};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

mod fd;

use crate::names::symlink_target;
use crate::read::{Problem, ReadEntry, Segment, Summing, Visitor};
use crate::select::Select;
use fd::{Ident, chmod_fd, errno, gid, make_dir, open_node, set_times, uid};

/// A file this extraction made, by identity.
/// A hard-link set: segment, device major and minor, inode.
type LinkKey = (usize, u32, u32, u32);

/// A directory whose mode and mtime are applied at the end (children are created first).
struct DirMeta {
    root: Rc<OwnedFd>,
    name: Vec<u8>,
    ident: Ident,
    perm: u32,
    mtime: u32,
}

/// An extraction in progress; use as the [`Visitor`] of [`crate::read::read_image`], then
/// call [`Extractor::finish`].
pub struct Extractor {
    /// The target directory.
    base: Rc<OwnedFd>,
    /// Where the current segment goes: `base`, or its own subdirectory ([`Extractor::subdir`]).
    root: Rc<OwnedFd>,
    /// Segments seen so far, over all images walked (numbers the subdirectories from 1).
    segments: usize,
    as_root: bool,
    /// Hard-link sets seen: path and identity of the first member.
    links: HashMap<LinkKey, (Vec<u8>, Ident)>,
    dirs: Vec<DirMeta>,
    /// Names this extraction made under `root`: replacing them is what the kernel does with a
    /// later entry; anything else there needs `force`. Emptied when `root` changes (each
    /// `--subdir` directory is new).
    made: HashSet<Vec<u8>>,
    /// Directories of the archive left out by the name patterns, by path under `root`: made
    /// with their own mode and owner when a selected name needs them.
    unselected_dirs: HashMap<Vec<u8>, leanrd_newc::Header>,
    /// mtime of a target directory itself (an entry named `.`).
    root_mtimes: Vec<(Rc<OwnedFd>, u32)>,
    /// Regular files restored.
    pub files: usize,
    /// Entries skipped on purpose (device nodes without root).
    pub warnings: Vec<String>,
    /// Entries that could not be restored, and what the reader found wrong: each one fails
    /// the extraction.
    pub errors: Vec<String>,
    /// Replace files that were there before the extraction, and go on past a data checksum
    /// that does not match (the kernel stops there).
    pub force: bool,
    /// Set owners as archived (cpio's default for root; `--no-preserve-owner` turns it off).
    pub owner: bool,
    /// Which entries to restore.
    pub select: Select,
    /// Each segment into its own directory, this name plus its number from 1 (3cpio's
    /// `--subdir`).
    pub subdir: Option<String>,
    /// A checksum did not match and `force` is off: nothing more is extracted.
    stopped: bool,
}

/// Components of a safe relative name; an error for `..`. Leading slashes are dropped: the
/// kernel unpacks `/etc/x` where it unpacks `etc/x`, and so does `check` (a refusal here made
/// `extract` fail an image `check` passes: found by the archive fuzz target).
pub(crate) fn safe_components(name: &[u8]) -> Result<Vec<&[u8]>, String> {
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

/// `comps` as a path relative to the target directory (`.` for the directory itself).
fn rel_path(comps: &[&[u8]]) -> Vec<u8> {
    if comps.is_empty() { b".".to_vec() } else { join(comps) }
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
const DIR_PATH: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

impl Extractor {
    /// An extraction into `dir`, created if it is not there; an error when it cannot be created or
    /// opened.
    pub fn new(dir: &Path) -> Result<Extractor> {
        std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        let root = rustix::fs::open(dir, DIR_PATH, Mode::empty())
            .map_err(errno)
            .with_context(|| format!("{}: cannot open", dir.display()))?;
        let root = Rc::new(root);
        let as_root = rustix::process::geteuid().is_root();
        Ok(Extractor {
            base: root.clone(),
            root,
            segments: 0,
            as_root,
            links: HashMap::new(),
            dirs: Vec::new(),
            made: HashSet::new(),
            unselected_dirs: HashMap::new(),
            root_mtimes: Vec::new(),
            files: 0,
            warnings: Vec::new(),
            errors: Vec::new(),
            force: false,
            owner: as_root,
            select: Select::default(),
            subdir: None,
            stopped: false,
        })
    }

    /// Open (creating as needed, with a warning: the kernel would not) the directory `comps`
    /// beneath the root.
    fn open_dir(&mut self, comps: &[&[u8]]) -> Result<OwnedFd> {
        let p = rel_path(comps);
        match rustix::fs::openat2(&self.root, p.as_slice(), DIR_PATH, Mode::empty(), RESOLVE) {
            Ok(fd) => return Ok(fd),
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                bail!("{}: cannot open beneath the target directory: {}", String::from_utf8_lossy(&p), errno(e))
            }
        }
        // Create missing parents one level at a time, each opened beneath the last.
        let mut fd = rustix::fs::openat2(&self.root, ".", DIR_PATH, Mode::empty(), RESOLVE).map_err(errno)?;
        for (i, c) in comps.iter().enumerate() {
            let made = match rustix::fs::mkdirat(&fd, *c, Mode::from_raw_mode(0o755)) {
                Ok(()) => true,
                Err(rustix::io::Errno::EXIST) => false,
                Err(e) => bail!("{}: cannot create directory: {}", String::from_utf8_lossy(c), errno(e)),
            };
            fd = rustix::fs::openat2(&fd, *c, DIR_PATH, Mode::empty(), RESOLVE).map_err(errno).with_context(|| {
                format!("{}: cannot open beneath the target directory", String::from_utf8_lossy(&join(comps)))
            })?;
            if made {
                let path = join(&comps[..=i]);
                match self.unselected_dirs.remove(&path) {
                    // In the archive, left out by the patterns: made as archived.
                    Some(h) => {
                        self.set_owner(&fd, h.uid, h.gid)?;
                        let st = rustix::fs::fstat(&fd).map_err(errno)?;
                        let (root, ident) = (self.root.clone(), Ident::of(&st));
                        self.dirs.push(DirMeta {
                            root,
                            name: path.clone(),
                            ident,
                            perm: h.mode & 0o7777,
                            mtime: h.mtime,
                        });
                    }
                    None => self.warnings.push(format!(
                        "{}: not in the archive before the names under it; created (the kernel would drop them)",
                        String::from_utf8_lossy(&path)
                    )),
                }
                self.made.insert(path);
            }
        }
        Ok(fd)
    }

    /// Apply directory modes and mtimes (deepest first); call once after the walk. Then
    /// [`Extractor::errors`] says whether the extraction failed.
    pub fn finish(&mut self) {
        self.dirs.sort_by_key(|d| std::cmp::Reverse(d.name.len()));
        for d in std::mem::take(&mut self.dirs) {
            let comps: Vec<&[u8]> = d.name.split(|&b| b == b'/').collect();
            let (base, parent) = comps.split_last().expect("a directory entry has a name");
            // Only the directory this extraction made: a later entry may have replaced it (and
            // nothing is created now).
            let node = rustix::fs::openat2(&d.root, rel_path(parent).as_slice(), DIR_PATH, Mode::empty(), RESOLVE)
                .map_err(errno)
                .context("cannot open its parent")
                .and_then(|dir| open_node(&dir, base, FileKind::Dir, Some(d.ident)));
            // The owner was set at creation; chmod comes after it so that set-id bits stay.
            let r = node.and_then(|fd| {
                chmod_fd(&fd, d.perm)?;
                set_times(&fd, b"", d.mtime, AtFlags::EMPTY_PATH)
            });
            if let Err(e) = r {
                self.errors.push(format!("{}: cannot set mode and mtime: {e:#}", String::from_utf8_lossy(&d.name)));
            }
        }
        for (root, mtime) in std::mem::take(&mut self.root_mtimes) {
            let _ = set_times(&root, b"", mtime, AtFlags::EMPTY_PATH);
        }
    }

    /// Restore one entry; errors name the entry.
    fn restore(&mut self, e: &ReadEntry, data: &mut dyn Read) -> Result<()> {
        let comps = safe_components(&e.name).map_err(|m| invalid!("refusing it: {m}"))?;
        let h = &e.header;
        let Some(kind) = FileKind::from_mode(h.mode) else {
            bail!("unknown file type {:o}", h.mode & !0o7777);
        };
        let perm = h.mode & 0o7777;
        let Some((base, parent)) = comps.split_last() else {
            // The target directory itself ("." in the archive): only its mtime.
            if kind == FileKind::Dir {
                self.root_mtimes.push((self.root.clone(), h.mtime));
            }
            return Ok(());
        };
        let dir = self.open_dir(parent)?;
        let path = join(&comps);
        self.may_replace(&dir, base, &path, kind)?;
        self.made.insert(path.clone());
        if kind == FileKind::Dir {
            let node = make_dir(&dir, base)?;
            self.set_owner(&node, h.uid, h.gid)?;
            let st = rustix::fs::fstat(&node).map_err(errno)?;
            let root = self.root.clone();
            self.dirs.push(DirMeta { root, name: path, ident: Ident::of(&st), perm, mtime: h.mtime });
            return Ok(());
        }
        // Replace whatever is there, as the kernel does (an empty directory included).
        match rustix::fs::unlinkat(&dir, *base, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(rustix::io::Errno::ISDIR | rustix::io::Errno::PERM) => {
                rustix::fs::unlinkat(&dir, *base, AtFlags::REMOVEDIR)
                    .map_err(errno)
                    .context("cannot replace the directory there")?;
                // A directory this run made, replaced as the archive says: no mode to set.
                let root = &self.root;
                self.dirs.retain(|d| !(Rc::ptr_eq(&d.root, root) && d.name == path));
            }
            Err(err) => return Err(errno(err)).context("cannot replace the existing file"),
        }
        match kind {
            FileKind::Regular => self.restore_file(e, &comps, &dir, base, data),
            FileKind::Symlink => self.restore_symlink(e, &dir, base, data),
            FileKind::Dir => unreachable!("handled above"),
            _ => self.restore_node(e, kind, &dir, base),
        }
    }

    fn restore_symlink(&mut self, e: &ReadEntry, dir: &OwnedFd, base: &[u8], data: &mut dyn Read) -> Result<()> {
        let h = &e.header;
        if !symlink_len_ok(h.filesize.into()) {
            bail!("symlink target of {} bytes (the kernel allows 1 to 4096)", h.filesize);
        }
        let mut raw = Vec::new();
        data.read_to_end(&mut raw).context("cannot read link target")?;
        // As the kernel: the target ends at the first NUL (gen_init_cpio counts one).
        let target = symlink_target(&raw);
        if target.is_empty() {
            bail!("symlink target is empty");
        }
        if target.len() >= leanrd_newc::PATH_MAX as usize {
            bail!("symlink target of {} bytes: the kernel's limit is 4095 (ENAMETOOLONG); not made", target.len());
        }
        rustix::fs::symlinkat(target, dir, base).map_err(errno).context("cannot create symlink")?;
        if self.owner {
            match rustix::fs::chownat(dir, base, uid(h.uid), gid(h.gid), AtFlags::SYMLINK_NOFOLLOW) {
                Err(rustix::io::Errno::PERM) if !self.as_root => {}
                r => r.map_err(errno).context("cannot chown")?,
            }
        }
        set_times(dir, base, h.mtime, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// A device node, fifo or socket: made 0600, then owner, mode and times set through a
    /// descriptor checked to be what was made.
    fn restore_node(&mut self, e: &ReadEntry, kind: FileKind, dir: &OwnedFd, base: &[u8]) -> Result<()> {
        let h = &e.header;
        if kind.is_device() && !self.as_root {
            self.warnings.push(format!("{}: device node skipped (needs root)", e.name_lossy()));
            return Ok(());
        }
        let dev = rustix::fs::makedev(h.rdev_major, h.rdev_minor);
        let ft = rustix::fs::FileType::from_raw_mode(kind.bits());
        rustix::fs::mknodat(dir, base, ft, Mode::from_raw_mode(0o600), dev)
            .map_err(errno)
            .context("cannot create node")?;
        let node = open_node(dir, base, kind, None)?;
        self.set_owner(&node, h.uid, h.gid)?;
        chmod_fd(&node, h.mode & 0o7777)?;
        set_times(&node, b"", h.mtime, AtFlags::EMPTY_PATH)
    }

    fn restore_file(
        &mut self,
        e: &ReadEntry,
        comps: &[&[u8]],
        dir: &OwnedFd,
        base: &[u8],
        data: &mut dyn Read,
    ) -> Result<()> {
        let h = &e.header;
        let key = (e.segment, h.dev_major, h.dev_minor, h.ino);
        let first = if h.nlink >= 2 { self.links.get(&key).cloned() } else { None };
        let fd = if let Some((first, ident)) = first {
            let fc: Vec<&[u8]> = first.split(|&b| b == b'/').collect();
            let (fb, fp) = fc.split_last().expect("not empty");
            let fdir = self.open_dir(fp)?;
            // The set's first member must still be the file made for it.
            open_node(&fdir, fb, FileKind::Regular, Some(ident))
                .with_context(|| format!("cannot hard-link to {}", String::from_utf8_lossy(&first)))?;
            rustix::fs::linkat(&fdir, *fb, dir, base, AtFlags::empty()).map_err(errno).context("cannot hard-link")?;
            let fd = rustix::fs::openat(dir, base, OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .map_err(errno)
                .context("cannot open")?;
            if Ident::of(&rustix::fs::fstat(&fd).map_err(errno)?) != ident {
                bail!("the hard link was replaced while it was made");
            }
            fd
        } else {
            let fd = rustix::fs::openat(
                dir,
                base,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(errno)
            .context("cannot create")?;
            if h.nlink >= 2 {
                let ident = Ident::of(&rustix::fs::fstat(&fd).map_err(errno)?);
                self.links.insert(key, (join(comps), ident));
            }
            fd
        };
        let mut f = File::from(fd);
        if h.filesize > 0 {
            f.set_len(0).context("cannot truncate")?;
            let mut summed = Summing::new(data);
            io::copy(&mut summed, &mut f).context("cannot write")?;
            if h.crc && summed.sum() != h.check {
                if !self.force {
                    self.stopped = true;
                }
                bail!(
                    "data checksum {:08x} does not match the header's {:08x}: the kernel stops unpacking here{}",
                    summed.sum(),
                    h.check,
                    if self.force { " (--force: going on)" } else { "; so does extract (--force goes on)" }
                );
            }
        }
        self.set_owner(&f, h.uid, h.gid)?;
        rustix::fs::fchmod(&f, Mode::from_raw_mode(h.mode & 0o7777)).map_err(errno).context("cannot chmod")?;
        set_times(&f, b"", h.mtime, AtFlags::EMPTY_PATH)?;
        self.files += 1;
        Ok(())
    }

    /// Refuse to replace what was at `path` before this extraction began (a directory is
    /// merged into, not replaced), unless `force`: as cpio, extract does not destroy files
    /// it did not make.
    fn may_replace(&self, dir: &OwnedFd, base: &[u8], path: &[u8], kind: FileKind) -> Result<()> {
        if self.force || self.made.contains(path) {
            return Ok(());
        }
        match rustix::fs::statat(dir, base, AtFlags::SYMLINK_NOFOLLOW) {
            Err(_) => Ok(()),
            Ok(st) if kind == FileKind::Dir && FileKind::from_mode(st.st_mode) == Some(FileKind::Dir) => Ok(()),
            Ok(st) => bail!(
                "a {} is there already, not from this image: left as it is (--force replaces it)",
                FileKind::from_mode(st.st_mode).map_or("file of unknown type", FileKind::name)
            ),
        }
    }

    /// Set the owner recorded in the archive through a descriptor, when [`Extractor::owner`]
    /// says so; without root only a chown to oneself can work, so a refusal is a warning.
    fn set_owner(&mut self, fd: &impl AsFd, u: u32, g: u32) -> Result<()> {
        if !self.owner {
            return Ok(());
        }
        match rustix::fs::chownat(fd, "", uid(u), gid(g), AtFlags::EMPTY_PATH) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::PERM) if !self.as_root => {
                self.warnings.push(format!("cannot give a file to {u}:{g} without root; it stays yours"));
                Ok(())
            }
            Err(e) => Err(errno(e)).context("cannot chown"),
        }
    }
}

impl Visitor for Extractor {
    fn segment(&mut self, s: &Segment) -> Result<()> {
        self.segments += 1;
        if let Some(name) = self.subdir.as_ref().filter(|_| self.select.segment(s.index)) {
            let sub = format!("{name}{}", self.segments);
            // make_dir replaces a non-directory there and opens it O_NOFOLLOW.
            let fd = make_dir(&self.base, sub.as_bytes()).with_context(|| format!("{sub}: cannot create"))?;
            chmod_fd(&fd, 0o755).with_context(|| format!("{sub}: cannot chmod"))?;
            self.root = Rc::new(fd);
            self.made.clear();
            self.unselected_dirs.clear();
        }
        Ok(())
    }

    fn done(&self, next: usize) -> bool {
        self.select.past_last(next) || self.stopped
    }

    fn entry(&mut self, e: &ReadEntry, data: &mut dyn Read) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        if !self.select.entry(e) {
            if self.select.by_name()
                && e.header.kind() == Some(FileKind::Dir)
                && let Ok(c) = safe_components(&e.name)
            {
                self.unselected_dirs.insert(join(&c), e.header);
            }
            return Ok(());
        }
        if let Err(err) = self.restore(e, data) {
            self.errors.push(format!("{}: {err:#}", e.name_lossy()));
        }
        Ok(())
    }

    fn problem(&mut self, p: &Problem) -> Result<()> {
        if self.select.segment(p.segment) {
            self.errors.push(p.to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory the archive replaces with a symlink (the kernel does the same): the tree
    /// is the archive's, and there is no directory left whose mode would be an error to set
    /// (found by fuzz/ `archive`: check passed it, extract failed it).
    #[test]
    fn a_directory_replaced_later_is_no_error() {
        let img = b"07070100000001000041ED0000000000000000000000020000000000000000000000000000000000000000000000000000000200000000d\0\
            070701000000020000A1FF0000000000000000000000010000000000000001000000000000000000000000000000000000000200000000d\0t\0\0\0\
            07070100000000000000000000000000000000000000010000000000000000000000000000000000000000000000000000000B00000000TRAILER!!!\0\0\0\0";
        let t = tempfile::tempdir().unwrap();
        let mut x = Extractor::new(&t.path().join("x")).unwrap();
        crate::read::read_image(&img[..], &mut x).unwrap();
        x.finish();
        assert!(x.errors.is_empty(), "{:?}", x.errors);
        let target = std::fs::read_link(t.path().join("x/d")).unwrap();
        assert_eq!(target, Path::new("t"));
    }

    /// An owner of 0xffffffff (-1, no user): left as it is, as chown(2) and the kernel do;
    /// it was a panic in debug builds (rustix asserts a `Uid` is not -1). Found by
    /// tests/fuzz.rs's mutations run in a debug build.
    #[test]
    fn an_owner_of_minus_one_is_left_as_it_is() {
        let mut img = Vec::new();
        for (mode, name, data) in [(0o120777, &b"l"[..], &b"t"[..]), (0o100644, b"f", b"x")] {
            let h = leanrd_newc::Header {
                mode,
                uid: !0,
                gid: !0,
                nlink: 1,
                filesize: data.len() as u32,
                namesize: name.len() as u32 + 1,
                ..Default::default()
            };
            img.extend(leanrd_newc::encode_head(&h, name));
            img.extend(data);
            img.resize(leanrd_newc::align4(img.len() as u64) as usize, 0);
        }
        let t = tempfile::tempdir().unwrap();
        let mut x = Extractor::new(&t.path().join("x")).unwrap();
        x.owner = true;
        crate::read::read_image(&img[..], &mut x).unwrap();
        x.finish();
        assert!(x.errors.is_empty(), "{:?}", x.errors);
        assert_eq!(std::fs::read(t.path().join("x/f")).unwrap(), b"x");
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(safe_components(b"a/./b//c").unwrap(), vec![&b"a"[..], b"b", b"c"]);
        assert_eq!(safe_components(b"/etc/passwd").unwrap(), vec![&b"etc"[..], b"passwd"]);
        assert_eq!(safe_components(b"//0f").unwrap(), vec![&b"0f"[..]]);
        assert!(safe_components(b"a/../../x").is_err());
        assert!(safe_components(b"..").is_err());
        assert!(safe_components(b".").unwrap().is_empty());
    }
}
