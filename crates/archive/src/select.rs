//! Which entries a reader command works on: segments by number (`--parts 1,3-`) and names by
//! shell pattern, as 3cpio and `cpio -i PATTERN` select them.
//!
//! Patterns are matched with the C library's `fnmatch(3)` without flags, as GNU cpio and
//! 3cpio do: `*` and `?` match `/` too, and a leading `.` needs no literal dot. A name is
//! matched as stored and as the kernel unpacks it ([`canonical`]: no leading `./` or `/`, no
//! `//`), so `usr/bin/*` selects `./usr/bin/ls` as well.

use std::cell::Cell;
use std::ffi::CString;
use std::ops::RangeInclusive;

use crate::names::canonical;
use crate::read::ReadEntry;

/// Segments (counted from 1, as 3cpio counts them) and name patterns; empty means all.
#[derive(Debug, Clone, Default)]
pub struct Select {
    parts: Vec<RangeInclusive<usize>>,
    patterns: Vec<CString>,
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
        let patterns: Vec<CString> = patterns
            .iter()
            .map(|p| CString::new(p.as_ref()).map_err(|_| "a pattern cannot hold a NUL byte".to_string()))
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
        let c = |n: &[u8]| CString::new(n).ok();
        let raw = c(name);
        // The unpacked spelling only where it differs from the stored one.
        let plain = match canonical(name) {
            std::borrow::Cow::Owned(p) => c(&p),
            std::borrow::Cow::Borrowed(_) => None,
        };
        let mut any = false;
        for (p, m) in self.patterns.iter().zip(&self.matched) {
            let hit = [&raw, &plain].into_iter().flatten().any(|n| {
                // SAFETY: both are NUL-terminated strings that live across the call.
                unsafe { libc::fnmatch(p.as_ptr(), n.as_ptr(), 0) == 0 }
            });
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
            .map(|(p, _)| String::from_utf8_lossy(p.as_bytes()).into_owned())
            .collect()
    }

    /// Whether the entry is selected, by segment and name.
    pub fn entry(&self, e: &ReadEntry) -> bool {
        self.segment(e.segment) && self.name(&e.name)
    }

    /// Whether names are filtered (parents of a selected name may then be left out).
    pub fn by_name(&self) -> bool {
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
