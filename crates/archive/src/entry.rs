//! The entry model shared by every input and the writer.

use crate::dircache::Lstat;
use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leanrd_newc::FileKind;

/// Where an entry's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// No data (directories, devices, fifos, and all but one member of a hard-link set).
    None,
    /// Bytes held in memory (symlink targets, generated files).
    Inline(Box<[u8]>),
    /// A regular file on disk, `size` bytes as seen when the input was read (newc sizes
    /// are 32-bit: see [`Data::file`]).
    File {
        /// The file to read the data from.
        path: Box<Path>,
        /// The data's length in bytes.
        size: u32,
    },
    /// A regular file at `root/NAME` (NAME: the entry's name), `size` bytes: what a tree
    /// input makes, so that 200,000 entries do not hold their path twice.
    Tree {
        /// The tree's directory, shared by all its entries.
        root: Arc<Path>,
        /// The data's length in bytes.
        size: u32,
    },
}

/// A file larger than newc can describe.
#[derive(Debug, thiserror::Error)]
#[error("{}: {size} bytes is larger than newc's 4 GiB limit", path.display())]
pub struct TooLarge {
    /// The file that is too large.
    pub path: PathBuf,
    /// Its size in bytes (4 GiB or more).
    pub size: u64,
}

/// newc stores sizes in 32 bits.
pub(crate) fn newc_size(path: &Path, size: u64) -> Result<u32, TooLarge> {
    u32::try_from(size).map_err(|_| TooLarge { path: path.to_path_buf(), size })
}

impl Data {
    /// The data of the regular file at `path`, `size` bytes long.
    pub fn file(path: impl Into<PathBuf>, size: u64) -> Result<Data, TooLarge> {
        let path = path.into();
        let size = newc_size(&path, size)?;
        Ok(Data::File { path: path.into_boxed_path(), size })
    }

    /// Bytes held in memory.
    pub fn inline(bytes: impl Into<Box<[u8]>>) -> Data {
        Data::Inline(bytes.into())
    }

    /// The data's length in bytes: the entry's newc `filesize`.
    pub fn len(&self) -> u64 {
        match self {
            Data::None => 0,
            Data::Inline(v) => v.len() as u64,
            Data::File { size, .. } | Data::Tree { size, .. } => *size as u64,
        }
    }

    /// Whether there are no data bytes (as for [`Data::None`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One archive member, fully resolved: the writer copies these fields into the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name as stored, without the terminating NUL.
    pub name: Box<[u8]>,
    /// File type and permission bits.
    pub mode: u32,
    /// Owner's user ID.
    pub uid: u32,
    /// Owner's group ID.
    pub gid: u32,
    /// Link count; a regular file with more than one is a member of a hard-link set, which the
    /// kernel links by (`dev_major`, `dev_minor`, `ino`).
    pub nlink: u32,
    /// Modification time, in seconds since the epoch (newc keeps 32 bits).
    pub mtime: u32,
    /// Inode number, as the header carries it (inputs number entries in order); the members of a
    /// hard-link set share one.
    pub ino: u32,
    /// Major number of the device the source file is on (c_maj); 0 unless `--keep-devno`.
    pub dev_major: u32,
    /// Minor number of the device the source file is on (c_min); 0 unless `--keep-devno`.
    pub dev_minor: u32,
    /// For a character or block device node, the major number it stands for; 0 otherwise.
    pub rdev_major: u32,
    /// For a character or block device node, the minor number it stands for; 0 otherwise.
    pub rdev_minor: u32,
    /// Where the data comes from (a regular file's contents, a symlink's target).
    pub data: Data,
}

impl Entry {
    /// An entry of `kind` with permissions `perm`: owner 0:0, mtime 0, inode 0, one link (a
    /// directory two), no device numbers. Set the rest by field.
    pub fn new(name: impl Into<Box<[u8]>>, kind: FileKind, perm: u32, data: Data) -> Entry {
        Entry {
            name: name.into(),
            mode: kind.mode(perm),
            uid: 0,
            gid: 0,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            mtime: 0,
            ino: 0,
            dev_major: 0,
            dev_minor: 0,
            rdev_major: 0,
            rdev_minor: 0,
            data,
        }
    }

    /// The entry's kind; `None` for type bits no file has.
    pub fn kind(&self) -> Option<FileKind> {
        FileKind::from_mode(self.mode)
    }

    /// Whether it is a regular file.
    pub fn is_regular(&self) -> bool {
        self.kind() == Some(FileKind::Regular)
    }

    /// Where a regular file's data is read from.
    pub fn source(&self) -> Option<Cow<'_, Path>> {
        match &self.data {
            Data::File { path, .. } => Some(Cow::Borrowed(path)),
            Data::Tree { root, .. } => Some(Cow::Owned(root.join(OsStr::from_bytes(&self.name)))),
            Data::None | Data::Inline(_) => None,
        }
    }
}

/// The first entry that makes an archive a secret: a regular file that others may not read,
/// by its mode in the archive or by its source's mode on disk. An image holding one must not
/// be readable by others either (see [`crate::output::output_mode`]). `modes_from_sources`:
/// the entries' modes were taken from their sources (a tree or a path list), so the sources
/// are not looked at again; a manifest declares modes of its own.
pub fn first_secret(entries: &[Entry], modes_from_sources: bool) -> Option<&Entry> {
    use crate::output::is_secret;
    entries.iter().filter(|e| e.is_regular()).find(|e| {
        is_secret(e.mode)
            || !modes_from_sources
                && match &e.data {
                    Data::File { path, .. } => std::fs::metadata(path).is_ok_and(|m| is_secret(m.mode())),
                    // A tree entry's mode is its source's mode.
                    _ => false,
                }
    })
}

/// Normalisation applied to metadata taken from the file system, for reproducible output.
#[derive(Debug, Clone, Default)]
pub struct Normalize {
    /// Every mtime becomes this (`--mtime`).
    pub mtime: Option<u32>,
    /// mtimes later than this are clamped to it (SOURCE_DATE_EPOCH).
    pub clamp_mtime: Option<u32>,
    /// Every owner becomes this (`--owner`).
    pub owner: Option<(u32, u32)>,
    /// Keep the source's st_dev in c_maj/c_min (`--keep-devno`); zero otherwise.
    pub keep_devno: bool,
    /// First inode number given out (leanrd: 1; GNU cpio --renumber-inodes: 0).
    pub first_ino: u32,
}

impl Normalize {
    /// Defaults for leanrd: inodes from 1, SOURCE_DATE_EPOCH honoured if set and valid.
    pub fn from_env() -> Normalize {
        Normalize {
            clamp_mtime: std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|v| v.trim().parse::<u32>().ok()),
            first_ino: 1,
            ..Normalize::default()
        }
    }

    /// The mtime to store for a file whose real mtime is `t` (seconds, may be negative).
    pub fn mtime(&self, t: i64) -> u32 {
        if let Some(m) = self.mtime {
            return m;
        }
        let t = t.clamp(0, u32::MAX as i64) as u32;
        match self.clamp_mtime {
            Some(c) => t.min(c),
            None => t,
        }
    }

    /// mtime for entries that have no file behind them (manifest dirs, nodes, links).
    pub fn synthetic_mtime(&self) -> u32 {
        self.mtime.or(self.clamp_mtime).unwrap_or(0)
    }

    /// The owner (uid, gid) to store for a file owned by `uid`:`gid`: the `--owner` one when set.
    pub fn owner(&self, uid: u32, gid: u32) -> (u32, u32) {
        self.owner.unwrap_or((uid, gid))
    }

    /// Fill an entry's metadata from `lstat` of its source.
    pub(crate) fn entry_from_metadata(&self, name: Box<[u8]>, md: &Lstat, ino: u32, data: Data) -> Entry {
        let (uid, gid) = self.owner(md.uid, md.gid);
        let (dev_major, dev_minor) =
            if self.keep_devno { (rustix::fs::major(md.dev), rustix::fs::minor(md.dev)) } else { (0, 0) };
        Entry {
            name,
            mode: md.mode,
            uid,
            gid,
            nlink: md.nlink.min(u32::MAX as u64) as u32,
            mtime: self.mtime(md.mtime),
            ino,
            dev_major,
            dev_minor,
            rdev_major: rustix::fs::major(md.rdev),
            rdev_minor: rustix::fs::minor(md.rdev),
            data,
        }
    }
}
