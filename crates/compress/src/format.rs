//! [`Format`]: the compressions the kernel knows, by their first bytes; [`Spec`]: a format
//! and level as the command line gives them (`zstd:19`).

use std::fmt;
use std::str::FromStr;

use crate::LZ4_LEGACY_MAGIC;

/// A compression format the kernel recognises by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// No compression: the archive as it is.
    None,
    /// gzip (RFC 1952).
    Gzip,
    /// bzip2.
    Bzip2,
    /// The legacy .lzma format.
    Lzma,
    /// xz, with the CRC32 check the kernel takes.
    Xz,
    /// lzop's format.
    Lzo,
    /// LZ4 in the kernel's legacy frame.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Format {
    /// Every format, in the order `advise` measures them.
    pub const ALL: [Format; 8] =
        [Format::None, Format::Zstd, Format::Lz4, Format::Xz, Format::Gzip, Format::Bzip2, Format::Lzma, Format::Lzo];

    /// The names a format goes by: its own first (what leanrd prints), then those other tools
    /// use (`gz`, `zst`, `lzop`, `cat`), all accepted on the command line and in leanrd.toml.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Format::None => &["none", "cat"],
            Format::Gzip => &["gzip", "gz"],
            Format::Bzip2 => &["bzip2", "bz2"],
            Format::Lzma => &["lzma"],
            Format::Xz => &["xz"],
            Format::Lzo => &["lzo", "lzop"],
            Format::Lz4 => &["lz4"],
            Format::Zstd => &["zstd", "zst"],
        }
    }

    /// The format's own name (`zstd`): the first of [`Format::names`].
    pub fn name(self) -> &'static str {
        self.names()[0]
    }

    /// The format of this name (`xz`), as [`Format::name`] gives it.
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Recognise a compressed stream by its magic, as `lib/decompress.c` does.
    pub fn detect(head: &[u8]) -> Option<Format> {
        let m = |p: &[u8]| head.starts_with(p);
        Some(if m(&[0x1f, 0x8b]) || m(&[0x1f, 0x9e]) {
            Format::Gzip
        } else if m(b"BZh") {
            Format::Bzip2
        } else if m(&[0x5d, 0x00, 0x00]) {
            Format::Lzma
        } else if m(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Format::Xz
        } else if m(&[0x89, b'L', b'Z', b'O', 0x00]) {
            Format::Lzo
        } else if m(&LZ4_LEGACY_MAGIC.to_le_bytes()) {
            Format::Lz4
        } else if m(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Format::Zstd
        } else {
            return None;
        })
    }

    /// Level used when none is given.
    pub fn default_level(self) -> i32 {
        match self {
            Format::Zstd => 3,
            Format::Xz | Format::Lzma => 6,
            Format::Gzip => 6,
            Format::Bzip2 => 9,
            Format::Lz4 | Format::Lzo | Format::None => 1,
        }
    }

    /// Valid levels.
    pub fn levels(self) -> (i32, i32) {
        match self {
            Format::Zstd => (1, 22),
            Format::Xz | Format::Lzma => (0, 9),
            Format::Gzip | Format::Bzip2 => (1, 9),
            Format::Lzo => (1, 9),
            Format::Lz4 | Format::None => (1, 1),
        }
    }

    /// Zero bytes the kernel needs after a segment of this format before anything else:
    /// the lz4 legacy frame has no end marker, so a following segment must be preceded by
    /// at least four zero bytes.
    pub fn trailing_zeros(self) -> u64 {
        if self == Format::Lz4 { 4 } else { 0 }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format and level, written `FORMAT[:LEVEL]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The format.
    pub format: Format,
    /// Its level (meaning depends on the format).
    pub level: i32,
}

impl Spec {
    /// `format` at its default level.
    pub fn new(format: Format) -> Spec {
        Spec { format, level: format.default_level() }
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if matches!(self.format, Format::None | Format::Lz4) {
            write!(f, "{}", self.format)
        } else {
            write!(f, "{}:{}", self.format, self.level)
        }
    }
}

impl FromStr for Spec {
    type Err = String;
    fn from_str(s: &str) -> Result<Spec, String> {
        let (name, level) = match s.split_once(':') {
            Some((n, l)) => (n, Some(l)),
            None => (s, None),
        };
        let Some(format) = Format::ALL.into_iter().find(|f| f.names().contains(&name)) else {
            let known: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
            return Err(format!("unknown compression {name:?} ({})", known.join(", ")));
        };
        let level = match level {
            None => format.default_level(),
            Some(l) => {
                let v: i32 = l.parse().map_err(|_| format!("compression level {l:?} is not a number"))?;
                let (lo, hi) = format.levels();
                if v < lo || v > hi {
                    return Err(format!("{name} level {v} is outside {lo}..={hi}"));
                }
                v
            }
        };
        Ok(Spec { format, level })
    }
}
