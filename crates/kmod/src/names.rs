//! Module names, alias patterns and the file names of compressed modules.

use alloc::string::String;

/// A module's canonical name: file stem without `.ko*`, `-` turned into `_`.
pub fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

/// The module name of a modules.dep path like `kernel/fs/ext4/ext4.ko.xz`.
pub fn name_of_path(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.find(".ko").map(|i| &base[..i]).unwrap_or(base);
    normalize(stem)
}

/// Normalise `-` to `_` outside bracket expressions, as modprobe does for alias patterns.
pub fn normalize_alias(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_brackets = false;
    for c in s.chars() {
        match c {
            '[' => in_brackets = true,
            ']' => in_brackets = false,
            '-' if !in_brackets => {
                out.push('_');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// fnmatch(3) without flags: `*`, `?`, `[...]` with ranges and `!`/`^` negation.
pub fn fnmatch(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let (mut star_p, mut star_i) = (usize::MAX, 0usize);
    while i < s.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star_p = p;
                    star_i = i;
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => match class(pat, p, s[i]) {
                    Some((true, next)) => {
                        p = next;
                        i += 1;
                        continue;
                    }
                    Some((false, _)) => {}
                    // An unclosed bracket is a literal '['.
                    None if s[i] == b'[' => {
                        p += 1;
                        i += 1;
                        continue;
                    }
                    None => {}
                },
                c if c == s[i] => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        }
        if star_p != usize::MAX {
            p = star_p + 1;
            star_i += 1;
            i = star_i;
        } else {
            return false;
        }
    }
    while p < pat.len() && pat[p] == b'*' {
        p += 1;
    }
    p == pat.len()
}

/// Match `c` against the bracket expression at `pat[p]`; returns (matched, index after it),
/// or None if the bracket is not closed (then `[` is literal).
fn class(pat: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let mut j = p + 1;
    let neg = matches!(pat.get(j), Some(b'!') | Some(b'^'));
    if neg {
        j += 1;
    }
    let mut matched = false;
    let mut first = true;
    while j < pat.len() && (first || pat[j] != b']') {
        first = false;
        if j + 2 < pat.len() && pat[j + 1] == b'-' && pat[j + 2] != b']' {
            if pat[j] <= c && c <= pat[j + 2] {
                matched = true;
            }
            j += 3;
        } else {
            if pat[j] == c {
                matched = true;
            }
            j += 1;
        }
    }
    if j >= pat.len() {
        return None;
    }
    Some((matched != neg, j + 1))
}

/// A compression a module file may be stored in (kernel/module/decompress.c knows these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleCompression {
    /// The file suffix after `.ko` (`.xz`).
    pub suffix: &'static str,
    /// The format's name as leanrd_compress and the kernel name it (`xz`, `zstd`, `gzip`):
    /// `CONFIG_MODULE_COMPRESS_{NAME}` selects it, `/sys/module/compression` shows it.
    pub format: &'static str,
}

/// The compressions depmod's module paths may end in (after `.ko`). The one definition: the
/// kernel configuration's symbols, /init's loading flag and the generator's decompression
/// all come from it.
pub const COMPRESSIONS: [ModuleCompression; 3] = [
    ModuleCompression { suffix: ".xz", format: "xz" },
    ModuleCompression { suffix: ".zst", format: "zstd" },
    ModuleCompression { suffix: ".gz", format: "gzip" },
];

/// A module path (`kernel/fs/ext4/ext4.ko.xz`) without its compression suffix, and that
/// compression.
pub fn split_compression(path: &str) -> (&str, Option<ModuleCompression>) {
    for c in COMPRESSIONS {
        if let Some(plain) = path.strip_suffix(c.suffix) {
            return (plain, Some(c));
        }
    }
    (path, None)
}

/// Whether a file name is a kernel module's (`.ko`, maybe compressed).
pub fn is_module_file(path: &str) -> bool {
    split_compression(path).0.ends_with(".ko")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnmatch_works_like_libc() {
        assert!(fnmatch(b"pci:v00001AF4d*sv*", b"pci:v00001AF4d00001001sv00001AF4sd00000002"));
        assert!(fnmatch(b"a?c", b"abc"));
        assert!(!fnmatch(b"a?c", b"ac"));
        assert!(fnmatch(b"usb:v*p*d*dc*dsc*dp*ic08isc06ip50in*", b"usb:v0781p5567d0100dc00dsc00dp00ic08isc06ip50in00"));
        assert!(fnmatch(b"x[0-9]y", b"x5y"));
        assert!(!fnmatch(b"x[!0-9]y", b"x5y"));
        assert!(fnmatch(b"x[!0-9]y", b"xay"));
        assert!(fnmatch(b"*", b""));
        assert!(fnmatch(b"a*b*c", b"aXXbYYc"));
        assert!(!fnmatch(b"a*b*c", b"aXXbYY"));
        assert!(fnmatch(b"[", b"["));
    }

    #[test]
    fn names_and_aliases_are_normalised() {
        assert_eq!(name_of_path("kernel/drivers/md/dm-crypt.ko.xz"), "dm_crypt");
        assert_eq!(normalize_alias("a-b[x-z]-c"), "a_b[x-z]_c");
    }

    #[test]
    fn compression_suffixes() {
        assert_eq!(split_compression("a/b.ko.zst"), ("a/b.ko", Some(COMPRESSIONS[1])));
        assert_eq!(split_compression("a/b.ko.zst").1.unwrap().format, "zstd");
        assert_eq!(split_compression("a/b.ko"), ("a/b.ko", None));
        assert!(is_module_file("x.ko.gz") && is_module_file("x.ko") && !is_module_file("x.ko.bz2"));
    }
}
