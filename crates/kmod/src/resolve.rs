//! Resolution of a name, alias or modalias to the modules to load, as `modprobe
//! --show-depends` gives them, soft dependencies included.

use alloc::collections::BTreeSet;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::names::{fnmatch, normalize, normalize_alias};
use crate::{ModuleDb, Resolved};

impl ModuleDb {
    pub(crate) fn build_index(&mut self) {
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
        let bucket: &[usize] = match qb.get(..4) {
            Some(k) => self.index.get(&[k[0], k[1], k[2], k[3]]).map_or(&[], Vec::as_slice),
            None => &[],
        };
        // Both lists are in modules.alias order: merged, not sorted (a sort's code is kilobytes
        // of /init).
        let (mut a, mut b) = (self.wild.iter().peekable(), bucket.iter().peekable());
        let mut idx: Vec<usize> = Vec::with_capacity(self.wild.len() + bucket.len());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x <= y => a.next(),
                (Some(_), Some(_)) | (None, Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, None) => break,
            };
            idx.extend(next);
        }
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
pub(crate) mod tests {
    use super::*;
    use crate::tables::tests::tables;

    pub(crate) fn db() -> ModuleDb {
        ModuleDb::parse(&tables(
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
        ))
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
}
