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

/// fnmatch(3) without flags, in the C locale: `*` and `?` (`/` and a leading `.` are not
/// special), bracket expressions (`[a-z]`, `[!...]`/`[^...]`, `]` first as a literal, POSIX
/// classes such as `[:digit:]`), and `\` quoting the next character (a pattern ending in a lone
/// `\` matches nothing); an unclosed `[` is a literal. Collating symbols and equivalence
/// classes of one character (`[.a.]`, `[=a=]`) are that character; their other spellings, an
/// unknown class and a range ending in `[`, which the C library reads in ways of its own, are
/// not held to it. The one fnmatch of leanrd: module
/// aliases here and in /init, and the reader's name patterns (held against libc's in
/// leanrd-archive's tests). Hand-written because /init is no_std and has no libc.
pub fn fnmatch(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if let Some(&c) = pat.get(p) {
            match c {
                b'*' => {
                    p += 1;
                    star = Some((p, i));
                    continue;
                }
                b'?' if i < s.len() => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' if i < s.len() => match bracket(pat, p, s[i]) {
                    Bracket::Match(true, next) => {
                        p = next;
                        i += 1;
                        continue;
                    }
                    Bracket::Match(false, _) => {}
                    Bracket::Unclosed if s[i] == b'[' => {
                        p += 1;
                        i += 1;
                        continue;
                    }
                    Bracket::Unclosed => {}
                    Bracket::Invalid => return false,
                },
                b'\\' => match pat.get(p + 1) {
                    None => return false,
                    Some(&q) if i < s.len() && s[i] == q => {
                        p += 2;
                        i += 1;
                        continue;
                    }
                    Some(_) => {}
                },
                c if i < s.len() && s[i] == c => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        } else if i == s.len() {
            return true;
        }
        // A mismatch: the last `*` takes one more character, if there is one.
        match star {
            Some((sp, si)) if si < s.len() => {
                star = Some((sp, si + 1));
                (p, i) = (sp, si + 1);
            }
            _ => return false,
        }
    }
}

/// A POSIX character class of the C locale, by name.
fn in_class(name: &[u8], c: u8) -> Option<bool> {
    Some(match name {
        b"alnum" => c.is_ascii_alphanumeric(),
        b"alpha" => c.is_ascii_alphabetic(),
        b"blank" => c == b' ' || c == b'\t',
        b"cntrl" => c.is_ascii_control(),
        b"digit" => c.is_ascii_digit(),
        b"graph" => c.is_ascii_graphic(),
        b"lower" => c.is_ascii_lowercase(),
        b"print" => c.is_ascii_graphic() || c == b' ',
        b"punct" => c.is_ascii_punctuation(),
        b"space" => c.is_ascii_whitespace() || c == 0x0b,
        b"upper" => c.is_ascii_uppercase(),
        b"xdigit" => c.is_ascii_hexdigit(),
        _ => return None,
    })
}

/// What a bracket expression says of one character.
enum Bracket {
    /// Whether it matched, and the index after the expression.
    Match(bool, usize),
    /// No closing `]`: the `[` is a literal.
    Unclosed,
    /// An unknown class, or a collating symbol or equivalence class that is not one closed
    /// character: the C library matches nothing with such a pattern.
    Invalid,
}

/// Match `c` against the bracket expression at `pat[p]`.
fn bracket(pat: &[u8], p: usize, c: u8) -> Bracket {
    let mut j = p + 1;
    let neg = matches!(pat.get(j), Some(b'!' | b'^'));
    if neg {
        j += 1;
    }
    let (mut matched, mut first) = (false, true);
    // `[:name:]`, `[.c.]` and `[=c=]` at `at`: (kind, its content, the index after it).
    let special = |at: usize| -> Option<(u8, &[u8], usize)> {
        let kind = *pat.get(at + 1).filter(|k| matches!(k, b':' | b'.' | b'='))?;
        if pat.get(at) != Some(&b'[') {
            return None;
        }
        let end = pat.get(at + 2..)?.windows(2).position(|w| w == [kind, b']']).map(|e| at + 2 + e);
        Some((kind, end.map_or(&[][..], |e| &pat[at + 2..e]), end.map_or(usize::MAX, |e| e + 2)))
    };
    // One element's character (`\` quotes the next; `[.c.]`, `[=c=]` are c): (it, the index after).
    let one = |at: usize| -> Result<Option<(u8, usize)>, ()> {
        match special(at) {
            Some((b':', ..)) | None => {}
            Some((_, [ch], next)) => return Ok(Some((*ch, next))),
            Some(_) => return Err(()),
        }
        Ok(match pat.get(at) {
            Some(b'\\') => pat.get(at + 1).map(|&q| (q, at + 2)),
            Some(&b) => Some((b, at + 1)),
            None => None,
        })
    };
    loop {
        let Some(&b) = pat.get(j) else { return Bracket::Unclosed };
        if b == b']' && !first {
            return Bracket::Match(matched != neg, j + 1);
        }
        first = false;
        if let Some((b':', name, next)) = special(j) {
            match in_class(name, c) {
                Some(hit) if next != usize::MAX => {
                    matched |= hit;
                    j = next;
                    continue;
                }
                _ => return Bracket::Invalid,
            }
        }
        // One character, perhaps the start of a range.
        let Ok(lo) = one(j) else { return Bracket::Invalid };
        let Some((lo, k)) = lo else { return Bracket::Unclosed };
        if pat.get(k) == Some(&b'-') && pat.get(k + 1).is_some_and(|&h| h != b']') {
            let Ok(hi) = one(k + 1) else { return Bracket::Invalid };
            let Some((hi, next)) = hi else { return Bracket::Unclosed };
            matched |= lo <= c && c <= hi;
            j = next;
        } else {
            matched |= lo == c;
            j = k;
        }
    }
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
