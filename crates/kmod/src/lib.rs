//! The kernel module tables depmod writes (modules.dep, modules.alias, modules.softdep,
//! modules.builtin, modules.builtin.modinfo), and resolution of names and aliases to the
//! modules to load, as `modprobe --show-depends` does, plus soft dependencies.
//!
//! Hand-written: the tables are simple text, and the existing crates bind libkmod (C), which
//! the static /init must not need. No dependencies and `no_std` (alloc only), so the libc-free
//! /init shares this code.

#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

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

/// Why a table line could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub file: &'static str,
    pub line: usize,
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.msg)
    }
}

impl core::error::Error for ParseError {}

/// What a name or alias resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// Modules to load (dependencies first, the asked-for module last, soft dependencies
    /// around it), by name.
    Modules(Vec<String>),
    /// Built into the kernel: nothing to load.
    Builtin,
    /// Unknown to this kernel.
    Missing,
}

/// The module tables of one kernel.
#[derive(Debug, Default, Clone)]
pub struct ModuleDb {
    /// name → path relative to /lib/modules/KVER.
    pub paths: BTreeMap<String, String>,
    /// name → direct and indirect dependencies, as modules.dep lists them.
    pub deps: BTreeMap<String, Vec<String>>,
    /// (pattern, normalised) and module name, in file order (order matters: modprobe
    /// returns matches in this order).
    pub aliases: Vec<(String, String)>,
    /// name → (pre, post) soft dependencies, all lines merged.
    pub softdeps: BTreeMap<String, (Vec<String>, Vec<String>)>,
    pub builtin: BTreeSet<String>,
    /// Aliases of built-in modules (from modules.builtin.modinfo).
    pub builtin_aliases: Vec<(String, String)>,
    /// Prefix index over `aliases`: first 4 bytes of the pattern (when literal) → indices.
    index: BTreeMap<[u8; 4], Vec<usize>>,
    wild: Vec<usize>,
}

impl ModuleDb {
    /// Parse the tables' text. `builtin_modinfo` is NUL-separated `module.key=value`.
    pub fn parse(
        dep: &str,
        alias: &str,
        softdep: &str,
        builtin: &str,
        builtin_modinfo: &[u8],
    ) -> Result<ModuleDb, ParseError> {
        let mut db = ModuleDb::default();
        for (n, line) in dep.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (m, rest) = line.split_once(':').ok_or_else(|| ParseError {
                file: "modules.dep",
                line: n + 1,
                msg: "missing ':'".into(),
            })?;
            let name = name_of_path(m);
            db.paths.insert(name.clone(), m.to_string());
            db.deps.insert(name, rest.split_whitespace().map(name_of_path).collect());
        }
        // Paths of dependencies are in modules.dep too (as keys), so names suffice.
        for (n, line) in alias.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 3 || f[0] != "alias" {
                return Err(ParseError { file: "modules.alias", line: n + 1, msg: format!("bad line {line:?}") });
            }
            db.aliases.push((normalize_alias(f[1]), normalize(f[2])));
        }
        for (n, line) in softdep.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            if words.next() != Some("softdep") {
                return Err(ParseError { file: "modules.softdep", line: n + 1, msg: format!("bad line {line:?}") });
            }
            let Some(m) = words.next() else {
                return Err(ParseError { file: "modules.softdep", line: n + 1, msg: "no module name".into() });
            };
            let e = db.softdeps.entry(normalize(m)).or_default();
            let mut post = false;
            for w in words {
                match w {
                    "pre:" => post = false,
                    "post:" => post = true,
                    w if post => e.1.push(w.to_string()),
                    w => e.0.push(w.to_string()),
                }
            }
        }
        for line in builtin.lines().filter(|l| !l.trim().is_empty()) {
            db.builtin.insert(name_of_path(line.trim()));
        }
        for rec in builtin_modinfo.split(|&b| b == 0) {
            let Ok(rec) = core::str::from_utf8(rec) else { continue };
            if let Some((m, v)) = rec.split_once(".alias=") {
                db.builtin.insert(normalize(m));
                db.builtin_aliases.push((normalize_alias(v), normalize(m)));
            }
        }
        db.build_index();
        Ok(db)
    }

    fn build_index(&mut self) {
        for (i, (pat, _)) in self.aliases.iter().enumerate() {
            let b = pat.as_bytes();
            if b.len() >= 4 && !b[..4].iter().any(|c| matches!(c, b'*' | b'?' | b'[')) {
                self.index.entry([b[0], b[1], b[2], b[3]]).or_default().push(i);
            } else {
                self.wild.push(i);
            }
        }
    }

    /// Modules whose alias patterns match `alias`, in modules.alias order, deduplicated.
    pub fn match_alias(&self, alias: &str) -> Vec<String> {
        let q = normalize_alias(alias);
        let qb = q.as_bytes();
        let mut idx: Vec<usize> = self.wild.clone();
        if qb.len() >= 4
            && let Some(v) = self.index.get(&[qb[0], qb[1], qb[2], qb[3]])
        {
            idx.extend(v);
        }
        idx.sort_unstable();
        let mut out: Vec<String> = Vec::new();
        for i in idx {
            let (pat, m) = &self.aliases[i];
            if fnmatch(pat.as_bytes(), qb) && !out.contains(m) {
                out.push(m.clone());
            }
        }
        out
    }

    fn builtin_alias(&self, alias: &str) -> bool {
        let q = normalize_alias(alias);
        self.builtin_aliases.iter().any(|(p, _)| fnmatch(p.as_bytes(), q.as_bytes()))
    }

    /// Resolve a module name or alias, with dependencies and (recursively) soft dependencies.
    pub fn resolve(&self, what: &str) -> Resolved {
        let name = normalize(what);
        let mods: Vec<String> = if self.paths.contains_key(&name) {
            vec![name.clone()]
        } else if self.builtin.contains(&name) {
            return Resolved::Builtin;
        } else {
            let m = self.match_alias(what);
            if m.is_empty() {
                return if self.builtin_alias(what) { Resolved::Builtin } else { Resolved::Missing };
            }
            // An alias that a built-in module also provides needs nothing loaded.
            if m.iter().all(|x| self.builtin.contains(x)) {
                return Resolved::Builtin;
            }
            m
        };
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for m in mods {
            self.closure(&m, &mut out, &mut seen, 0);
        }
        Resolved::Modules(out)
    }

    /// Dependencies first, then the module; pre-softdeps before, post-softdeps after.
    fn closure(&self, name: &str, out: &mut Vec<String>, seen: &mut BTreeSet<String>, depth: usize) {
        if depth > 64 || !seen.insert(name.to_string()) || !self.paths.contains_key(name) {
            return;
        }
        let (pre, post) = self.softdeps.get(name).cloned().unwrap_or_default();
        for s in &pre {
            self.soft(s, out, seen, depth);
        }
        if let Some(deps) = self.deps.get(name) {
            // modules.dep lists the deepest dependency last; load it first.
            for d in deps.iter().rev() {
                self.closure(d, out, seen, depth + 1);
            }
        }
        out.push(name.to_string());
        for s in &post {
            self.soft(s, out, seen, depth);
        }
    }

    fn soft(&self, what: &str, out: &mut Vec<String>, seen: &mut BTreeSet<String>, depth: usize) {
        let n = normalize(what);
        if self.paths.contains_key(&n) {
            self.closure(&n, out, seen, depth + 1);
        } else {
            for m in self.match_alias(what) {
                self.closure(&m, out, seen, depth + 1);
            }
        }
    }

    /// All modules whose path matches a glob like `kernel/drivers/ata/*` (fnmatch, `*`
    /// crossing `/`), sorted.
    pub fn glob(&self, pattern: &str) -> BTreeSet<String> {
        self.paths.iter().filter(|(_, p)| fnmatch(pattern.as_bytes(), p.as_bytes())).map(|(n, _)| n.clone()).collect()
    }
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

    fn db() -> ModuleDb {
        ModuleDb::parse(
            "kernel/fs/ext4/ext4.ko: kernel/fs/jbd2/jbd2.ko kernel/lib/crc16.ko\nkernel/fs/jbd2/jbd2.ko:\n\
             kernel/lib/crc16.ko:\nkernel/crypto/crc32c_generic.ko:\nkernel/arch/x86/crypto/crc32c-intel.ko:\n\
             kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko\n\
             kernel/drivers/virtio/virtio_ring.ko:\nkernel/fs/btrfs/btrfs.ko: kernel/lib/xor.ko\nkernel/lib/xor.ko:\n\
             kernel/lib/raid6/raid6_pq.ko:\n",
            "alias fs-ext4 ext4\nalias crypto-crc32c crc32c_generic\nalias crypto-crc32c crc32c-intel\n\
             alias virtio:d00000002v* virtio_blk\nalias fs-btrfs btrfs\n",
            "softdep ext4 pre: crypto-crc32c\nsoftdep btrfs pre: xor\nsoftdep btrfs pre: raid6_pq\n",
            "kernel/fs/vfat/vfat.ko\n",
            b"vfat.alias=fs-vfat\0unix.license=GPL\0",
        )
        .unwrap()
    }

    #[test]
    fn resolves_like_modprobe() {
        let d = db();
        assert_eq!(
            d.resolve("fs-ext4"),
            Resolved::Modules(vec![
                "crc32c_generic".into(),
                "crc32c_intel".into(),
                "crc16".into(),
                "jbd2".into(),
                "ext4".into()
            ])
        );
        assert_eq!(
            d.resolve("virtio:d00000002v00001AF4"),
            Resolved::Modules(vec!["virtio_ring".into(), "virtio_blk".into()])
        );
        // Every softdep line counts.
        let Resolved::Modules(b) = d.resolve("btrfs") else { panic!() };
        assert!(b.contains(&"raid6_pq".to_string()) && b.contains(&"xor".to_string()));
        assert_eq!(d.resolve("vfat"), Resolved::Builtin);
        assert_eq!(d.resolve("fs-vfat"), Resolved::Builtin);
        assert_eq!(d.resolve("nope"), Resolved::Missing);
        assert_eq!(d.glob("kernel/fs/*").len(), 3);
    }

    #[test]
    fn bad_lines_are_errors() {
        let e = ModuleDb::parse("x\n", "", "", "", b"").unwrap_err();
        assert_eq!(e.to_string(), "modules.dep:1: missing ':'");
        let e = ModuleDb::parse("", "alias x\n", "", "", b"").unwrap_err();
        assert!(e.to_string().starts_with("modules.alias:1:"));
    }
}
