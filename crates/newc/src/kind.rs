//! The file type bits of a mode, and [`FileKind`], the type that reads better than them.

/// A file type in `st_mode` (`S_IFMT` masks them).
pub const S_IFMT: u32 = 0o170000;
/// Socket.
pub const S_IFSOCK: u32 = 0o140000;
/// Symbolic link.
pub const S_IFLNK: u32 = 0o120000;
/// Regular file.
pub const S_IFREG: u32 = 0o100000;
/// Block device.
pub const S_IFBLK: u32 = 0o060000;
/// Directory.
pub const S_IFDIR: u32 = 0o040000;
/// Character device.
pub const S_IFCHR: u32 = 0o020000;
/// FIFO.
pub const S_IFIFO: u32 = 0o010000;

/// The file type of a mode, as a short word.
pub fn kind_name(mode: u32) -> &'static str {
    FileKind::from_mode(mode).map(FileKind::word).unwrap_or("unknown")
}

/// The file type bits of a mode (`mode & S_IFMT`), as a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A character device.
    CharDev,
    /// A block device.
    BlockDev,
    /// A FIFO.
    Fifo,
    /// A socket.
    Socket,
}

impl FileKind {
    /// The kind of `mode`; `None` for type bits no file has.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & S_IFMT {
            S_IFREG => FileKind::Regular,
            S_IFDIR => FileKind::Dir,
            S_IFLNK => FileKind::Symlink,
            S_IFCHR => FileKind::CharDev,
            S_IFBLK => FileKind::BlockDev,
            S_IFIFO => FileKind::Fifo,
            S_IFSOCK => FileKind::Socket,
            _ => return None,
        })
    }

    /// The `S_IF*` bits.
    pub fn bits(self) -> u32 {
        match self {
            FileKind::Regular => S_IFREG,
            FileKind::Dir => S_IFDIR,
            FileKind::Symlink => S_IFLNK,
            FileKind::CharDev => S_IFCHR,
            FileKind::BlockDev => S_IFBLK,
            FileKind::Fifo => S_IFIFO,
            FileKind::Socket => S_IFSOCK,
        }
    }

    /// A short word: `file`, `dir`, `symlink`, `char`, `block`, `fifo`, `socket`.
    pub fn word(self) -> &'static str {
        match self {
            FileKind::Regular => "file",
            FileKind::Dir => "dir",
            FileKind::Symlink => "symlink",
            FileKind::CharDev => "char",
            FileKind::BlockDev => "block",
            FileKind::Fifo => "fifo",
            FileKind::Socket => "socket",
        }
    }

    /// A mode of this kind with permission bits `perm`.
    pub fn mode(self, perm: u32) -> u32 {
        self.bits() | (perm & !S_IFMT)
    }

    /// The letter `ls -l` shows: `-`, `d`, `l`, `c`, `b`, `p`, `s`.
    pub fn letter(self) -> char {
        match self {
            FileKind::Regular => '-',
            FileKind::Dir => 'd',
            FileKind::Symlink => 'l',
            FileKind::CharDev => 'c',
            FileKind::BlockDev => 'b',
            FileKind::Fifo => 'p',
            FileKind::Socket => 's',
        }
    }

    /// A device node (its rdev numbers mean something).
    pub fn is_device(self) -> bool {
        matches!(self, FileKind::CharDev | FileKind::BlockDev)
    }

    /// As a phrase in a sentence: "a regular file", "a directory", ...
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Dir => "a directory",
            FileKind::Symlink => "a symlink",
            FileKind::CharDev => "a character device",
            FileKind::BlockDev => "a block device",
            FileKind::Fifo => "a fifo",
            FileKind::Socket => "a socket",
        }
    }
}
