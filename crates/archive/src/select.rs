//! Which entries a reader command works on: segments by number (`--parts 1,3-`) and names by
//! shell pattern, as 3cpio and `cpio -i PATTERN` select them.
//!
//! Patterns are matched as the C library's `fnmatch(3)` without flags matches them, as GNU
//! cpio and 3cpio do (with leanrd's one fnmatch, [`leanrd_kmod::fnmatch`], held against libc's
//! below): `*` and `?` match `/` too, and a leading `.` needs no literal dot. A name is
//! matched as stored and as the kernel unpacks it ([`canonical`]: no leading `./` or `/`, no
//! `//`), so `usr/bin/*` selects `./usr/bin/ls` as well.

use std::cell::Cell;
use std::ops::RangeInclusive;

use crate::names::canonical;
use crate::read::ReadEntry;

/// Segments (counted from 1, as 3cpio counts them) and name patterns; empty means all.
#[derive(Debug, Clone, Default)]
pub struct Select {
    parts: Vec<RangeInclusive<usize>>,
    patterns: Vec<Vec<u8>>,
    /// Whether each pattern matched a name yet (a pattern that matches nothing is said).
    matched: Vec<Cell<bool>>,
}

impl Select {
    /// Parse `--parts` (`N`, `N-`, `N-M`, `-M`, separated by commas) and the patterns.
    pub fn new(parts: Option<&str>, patterns: &[impl AsRef<[u8]>]) -> Result<Select, String> {
        let parts = match parts {
            Some(p) => parse_parts(p)?,
            None => Vec::new(),
        };
        let patterns: Vec<Vec<u8>> = patterns
            .iter()
            .map(|p| p.as_ref())
            .map(|p| if p.contains(&0) { Err("a pattern cannot hold a NUL byte".to_string()) } else { Ok(p.to_vec()) })
            .collect::<Result<_, _>>()?;
        let matched = patterns.iter().map(|_| Cell::new(false)).collect();
        Ok(Select { parts, patterns, matched })
    }

    /// Whether segment `index` (counted from 0, as the reader counts) is selected.
    pub fn segment(&self, index: usize) -> bool {
        self.parts.is_empty() || self.parts.iter().any(|r| r.contains(&(index + 1)))
    }

    /// Whether no segment at or after `index` (from 0) can be selected: the walk may stop.
    pub fn past_last(&self, index: usize) -> bool {
        !self.parts.is_empty() && self.parts.iter().all(|r| *r.end() < index + 1)
    }

    /// Whether the name matches a pattern (or there are none).
    pub fn name(&self, name: &[u8]) -> bool {
        if self.patterns.is_empty() {
            return true;
        }
        // The unpacked spelling too, where it differs from the stored one.
        let plain = canonical(name);
        let names = [Some(name), (plain.as_ref() != name).then_some(plain.as_ref())];
        let mut any = false;
        for (p, m) in self.patterns.iter().zip(&self.matched) {
            let hit = names.into_iter().flatten().any(|n| leanrd_kmod::fnmatch(p, n));
            if hit {
                m.set(true);
                any = true;
            }
        }
        any
    }

    /// The patterns that matched no name so far (as given).
    pub fn unmatched(&self) -> Vec<String> {
        self.patterns
            .iter()
            .zip(&self.matched)
            .filter(|(_, m)| !m.get())
            .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
            .collect()
    }

    /// Whether the entry is selected, by segment and name.
    pub fn entry(&self, e: &ReadEntry) -> bool {
        self.segment(e.segment) && self.name(&e.name)
    }

    /// Whether names are filtered (parents of a selected name may then be left out).
    pub(crate) fn by_name(&self) -> bool {
        !self.patterns.is_empty()
    }
}

fn parse_parts(s: &str) -> Result<Vec<RangeInclusive<usize>>, String> {
    let num = |t: &str| -> Result<usize, String> {
        match t.trim().parse::<usize>() {
            Ok(0) => Err(format!("--parts {s:?}: segments are counted from 1")),
            Ok(n) => Ok(n),
            Err(_) => Err(format!("--parts {s:?}: {t:?} is not a segment number (N, N-, N-M or -M, comma-separated)")),
        }
    };
    s.split(',')
        .map(|r| {
            let r = r.trim();
            let range = match r.split_once('-') {
                None => {
                    let n = num(r)?;
                    n..=n
                }
                Some(("", "")) => return Err(format!("--parts {s:?}: '-' alone is no range")),
                Some(("", m)) => 1..=num(m)?,
                Some((n, "")) => num(n)?..=usize::MAX,
                Some((n, m)) => num(n)?..=num(m)?,
            };
            if range.is_empty() {
                return Err(format!("--parts {s:?}: {r} is an empty range"));
            }
            Ok(range)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts() {
        let s = Select::new(Some("1,3-4,7-"), &[] as &[&str]).unwrap();
        let on: Vec<usize> = (0..9).filter(|&i| s.segment(i)).collect();
        assert_eq!(on, [0, 2, 3, 6, 7, 8]);
        assert!(!s.past_last(100));
        let s = Select::new(Some("-2"), &[] as &[&str]).unwrap();
        assert!(s.segment(0) && s.segment(1) && !s.segment(2));
        assert!(!s.past_last(1) && s.past_last(2));
        for bad in ["0", "x", "3-2", "-", "1,,2", ""] {
            assert!(Select::new(Some(bad), &[] as &[&str]).is_err(), "{bad}");
        }
    }

    /// leanrd's fnmatch is the C library's without flags, on patterns and names made to hit
    /// every rule: stars, `?`, brackets with ranges, negation, classes and a leading `]`,
    /// backslashes in and out of brackets, unclosed brackets, bytes that are not ASCII. (Not
    /// collating symbols, equivalence classes or a range ending in `[`.)
    #[test]
    fn fnmatch_is_the_c_librarys() {
        let atoms: [&[u8]; 23] = [
            b".]",
            b"a",
            b"b",
            b"/",
            b".",
            b"*",
            b"?",
            b"[",
            b"]",
            b"!",
            b"^",
            b"-",
            b"\\",
            b"[:digit:]",
            b"[:alpha:]",
            b"[:space:]",
            b"[:punct:]",
            b"1",
            b"\xe9",
            b" ",
            b"\x0b",
            b"[!",
            b"\\]",
        ];
        let chars: [u8; 12] = [b'a', b'b', b'/', b'.', b'[', b']', b'-', b'\\', b'1', 0xe9, b' ', 0x0b];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let mut differ = Vec::new();
        for _ in 0..200_000 {
            let pat: Vec<u8> = (0..1 + next(7)).flat_map(|_| atoms[next(atoms.len())].to_vec()).collect();
            // Collating symbols, equivalence classes and a class as a range's end are left out
            // (see leanrd_kmod::fnmatch).
            if pat.windows(2).any(|w| w == b"[." || w == b"[=" || w == b"-[") {
                continue;
            }
            let name: Vec<u8> = (0..next(7)).map(|_| chars[next(chars.len())]).collect();
            let (cp, cn) =
                (std::ffi::CString::new(pat.clone()).unwrap(), std::ffi::CString::new(name.clone()).unwrap());
            // SAFETY: both are NUL-terminated strings that live across the call.
            let libc = unsafe { libc::fnmatch(cp.as_ptr(), cn.as_ptr(), 0) == 0 };
            if libc != leanrd_kmod::fnmatch(&pat, &name) && differ.len() < 10 {
                differ.push(format!(
                    "{:?} {:?}: libc {libc}",
                    String::from_utf8_lossy(&pat),
                    String::from_utf8_lossy(&name)
                ));
            }
        }
        assert!(differ.is_empty(), "{differ:#?}");
    }

    #[test]
    fn patterns_match_as_cpio_does() {
        let s = Select::new(None, &["usr/lib/modules/*/kernel/fs/*", "*.conf", "bin/?h"]).unwrap();
        assert!(s.name(b"usr/lib/modules/6.1/kernel/fs/ext4/ext4.ko"));
        assert!(s.name(b"./usr/lib/modules/6.1/kernel/fs/xfs/xfs.ko"));
        assert!(s.name(b"/./usr//lib/modules/6.1/kernel/fs/x"), "matched as unpacked");
        assert!(s.name(b"etc/modprobe.d/x.conf"), "* matches /");
        assert!(s.name(b"bin/sh") && !s.name(b"bin/bash"));
        assert!(!s.name(b"usr/lib/modules/6.1/kernel/drivers/x.ko"));
        assert!(s.name(b"caf\xe9.conf"), "names that are not UTF-8 match");
        assert!(Select::new(None, &[] as &[&str]).unwrap().name(b"anything"));
        let s = Select::new(None, &["a*", "zz"]).unwrap();
        assert!(s.name(b"abc") && !s.name(b"b"));
        assert_eq!(s.unmatched(), ["zz"]);
    }
}
