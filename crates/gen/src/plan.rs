//! The plan: what goes into the image, as plain data. Every entry points at its source on
//! the (sys)root file system — no staging copy — except generated or transformed files.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use leanrd_archive::{Context, Result, bail};
use leanrd_archive::{Data, Entry, Normalize};
use leanrd_newc::FileKind;

/// One planned entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A directory.
    Dir {
        /// Permission bits (`0o755`).
        mode: u32,
    },
    /// A regular file whose data is read from a file at build time.
    File {
        /// The file on the build machine it is read from: under the sysroot, or a generated or
        /// transformed file in the build's scratch directory, or the /init executable.
        src: PathBuf,
        /// Permission bits.
        mode: u32,
    },
    /// A symbolic link.
    Symlink {
        /// Where it points, as stored (absolute, or relative to its directory).
        target: String,
    },
    /// Generated content (config), kept in memory.
    Inline {
        /// The file's bytes.
        data: Vec<u8>,
        /// Permission bits.
        mode: u32,
    },
    /// A device node (`/dev/console`, `/dev/null`).
    Node {
        /// Its file type (a character or block device).
        kind: FileKind,
        /// Permission bits.
        perm: u32,
        /// The device's major number.
        major: u32,
        /// The device's minor number.
        minor: u32,
    },
}

/// Image path (absolute, no trailing slash) → item. Sorted, so parents come first.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The root of the system the files are taken from; image paths are found under it.
    pub sysroot: PathBuf,
    /// Every entry, by image path.
    pub items: BTreeMap<String, Item>,
    /// What the generator learnt of each module file it planned (image path → facts), so
    /// the boot proof need not decompress them again.
    pub modules: BTreeMap<String, crate::modules::ModuleFile>,
}

/// Join an absolute image path under the sysroot.
pub(crate) fn host_path(sysroot: &Path, p: &str) -> PathBuf {
    sysroot.join(p.trim_start_matches('/'))
}

/// Walk an absolute path a component at a time, following symbolic links as the kernel does
/// (an absolute target from the root, a relative one from its directory; at most 40): `step`
/// is given each path walked and whether it is the last component, and answers with a
/// symlink's target or None. The path reached, free of symlinks. One walk for the host's tree
/// (the plan) and for an image's (the boot proof).
pub(crate) fn walk_path<E>(
    path: &str,
    too_many: impl Fn(&str) -> E,
    mut step: impl FnMut(&str, bool) -> std::result::Result<Option<String>, E>,
) -> std::result::Result<String, E> {
    let mut todo: Vec<String> = clean(path).trim_start_matches('/').split('/').rev().map(str::to_string).collect();
    let mut cur = String::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        if c.is_empty() {
            continue;
        }
        let next = format!("{cur}/{c}");
        match step(&next, todo.is_empty())? {
            Some(target) => {
                hops += 1;
                if hops > 40 {
                    return Err(too_many(&next));
                }
                let resolved = if target.starts_with('/') { clean(&target) } else { clean(&format!("{cur}/{target}")) };
                // The resolved path replaces what was walked so far.
                todo.extend(resolved.trim_start_matches('/').split('/').rev().map(str::to_string));
                cur.clear();
            }
            None => cur = next,
        }
    }
    Ok(if cur.is_empty() { "/".into() } else { cur })
}

/// An absolute path on the sysroot with every symlink on the way followed within it (an
/// absolute target from the sysroot): where the file really is, as an image path.
pub(crate) fn real_path(sysroot: &Path, path: &str) -> Result<String> {
    let too_many = |p: &str| leanrd_archive::invalid!("{}: too many levels of symbolic links", p);
    walk_path(path, too_many, |next, _| {
        let hp = host_path(sysroot, next);
        match fs::symlink_metadata(&hp) {
            Ok(md) if md.file_type().is_symlink() => Ok(Some(fs::read_link(&hp)?.to_string_lossy().into_owned())),
            _ => Ok(None),
        }
    })
}

/// Lexically normalise an absolute path (`.` and `..` removed; `..` at the root stays there).
pub fn clean(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in Path::new(p).components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str().unwrap_or("")),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    format!("/{}", parts.join("/"))
}

impl Plan {
    /// An empty plan taking files from `sysroot`.
    pub fn new(sysroot: &Path) -> Plan {
        Plan { sysroot: sysroot.to_path_buf(), items: BTreeMap::new(), modules: BTreeMap::new() }
    }

    fn add_dirs_for(&mut self, path: &str) {
        let mut cur = String::new();
        let comps: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        for c in &comps[..comps.len().saturating_sub(1)] {
            cur.push('/');
            cur.push_str(c);
            self.items.entry(cur.clone()).or_insert(Item::Dir { mode: 0o755 });
        }
    }

    /// Add an item at `path`, with its parent directories. A parent that is a symlink in the
    /// plan (e.g. `/lib -> usr/lib`) is followed, so the item lands where the link points.
    /// Returns the path it landed at.
    pub fn put(&mut self, path: &str, item: Item) -> String {
        let path = self.resolve_parents(&clean(path));
        self.add_dirs_for(&path);
        self.items.insert(path.clone(), item);
        path
    }

    /// `path` with every planned symlink among its parents replaced by its target.
    pub(crate) fn resolve_parents(&self, path: &str) -> String {
        let mut cur = String::new();
        let comps: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let mut hops = 0;
        let mut i = 0;
        let mut rest: Vec<String> = comps.iter().map(|s| s.to_string()).collect();
        while i + 1 < rest.len() {
            let next = format!("{cur}/{}", rest[i]);
            if let (Some(Item::Symlink { target }), true) = (self.items.get(&next), hops < 40) {
                hops += 1;
                let resolved = if target.starts_with('/') { clean(target) } else { clean(&format!("{cur}/{target}")) };
                let mut new: Vec<String> =
                    resolved.trim_start_matches('/').split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
                new.extend(rest[i + 1..].iter().cloned());
                rest = new;
                cur.clear();
                i = 0;
                continue;
            }
            cur = next;
            i += 1;
        }
        format!("{cur}/{}", rest.last().map(String::as_str).unwrap_or(""))
    }

    /// [`Plan::add_host_path`], and for a directory everything under it (a theme's images),
    /// in name order, at most `depth` levels down; symbolic links are kept as links.
    pub(crate) fn add_host_tree(&mut self, path: &str, depth: usize) -> Result<()> {
        let real = self.add_host_path(path)?;
        let hp = host_path(&self.sysroot, &real);
        if depth == 0 || !fs::symlink_metadata(&hp).is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        let mut names: Vec<String> = fs::read_dir(&hp)
            .with_context(|| format!("{}: cannot list", hp.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for n in names {
            self.add_host_tree(&format!("{}/{n}", real.trim_end_matches('/')), depth - 1)?;
        }
        Ok(())
    }

    /// Add a host file system path as it is on the host: every symlink on the way (e.g.
    /// `/lib -> usr/lib`, `/lib64/ld-linux-x86-64.so.2 -> ...`) becomes a symlink in the
    /// image and is followed. Returns the real (symlink-free) image path of the final file.
    pub(crate) fn add_host_path(&mut self, path: &str) -> Result<String> {
        let too_many = |p: &str| leanrd_archive::invalid!("{}: too many levels of symbolic links", p);
        walk_path(path, too_many, |next, last| {
            let hp = host_path(&self.sysroot, next);
            let md = fs::symlink_metadata(&hp).with_context(|| format!("{}: not found", hp.display()))?;
            if md.file_type().is_symlink() {
                let target = fs::read_link(&hp)?.to_string_lossy().into_owned();
                self.put(next, Item::Symlink { target: target.clone() });
                return Ok(Some(target));
            }
            let item = if md.is_dir() {
                Item::Dir { mode: md.mode() & 0o7777 }
            } else if md.is_file() {
                if !last {
                    bail!("{}: not a directory", hp.display());
                }
                Item::File { src: hp.clone(), mode: md.permissions().mode() & 0o7777 }
            } else {
                bail!("{}: not a regular file, directory or symlink", hp.display());
            };
            // Keep an existing entry (e.g. a directory added by a feature).
            self.items.entry(next.to_string()).or_insert(item);
            Ok(None)
        })
    }

    /// Entries for the archiver, normalised: owner 0:0, fixed mtimes.
    pub fn entries(&self, norm: &Normalize) -> Result<Vec<Entry>> {
        let mut out = Vec::with_capacity(self.items.len());
        let mtime = norm.synthetic_mtime();
        for (ino, (path, item)) in self.items.iter().enumerate() {
            let name = path.trim_start_matches('/').as_bytes().to_vec();
            let mut e = match item {
                Item::Dir { mode } => Entry::new(name, FileKind::Dir, *mode, Data::None),
                Item::File { src, mode } => {
                    let md = fs::metadata(src).with_context(|| format!("{}: cannot stat", src.display()))?;
                    Entry::new(name, FileKind::Regular, *mode, Data::file(src.clone(), md.len())?)
                }
                Item::Symlink { target } => Entry::new(name, FileKind::Symlink, 0o777, Data::inline(target.as_bytes())),
                Item::Inline { data, mode } => {
                    Entry::new(name, FileKind::Regular, *mode, Data::inline(data.as_slice()))
                }
                Item::Node { kind, perm, major, minor } => {
                    let mut e = Entry::new(name, *kind, *perm, Data::None);
                    (e.rdev_major, e.rdev_minor) = (*major, *minor);
                    e
                }
            };
            (e.uid, e.gid) = norm.owner.unwrap_or((0, 0));
            (e.mtime, e.ino) = (mtime, norm.first_ino + ino as u32);
            out.push(e);
        }
        Ok(out)
    }

    /// Device nodes every initramfs needs before devtmpfs is mounted.
    pub fn add_console(&mut self) {
        self.put("/dev/console", Item::Node { kind: FileKind::CharDev, perm: 0o600, major: 5, minor: 1 });
        self.put("/dev/null", Item::Node { kind: FileKind::CharDev, perm: 0o666, major: 1, minor: 3 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_chains_are_mirrored() {
        let tmpdir = tempfile::tempdir().unwrap();
        let t = tmpdir.path().to_path_buf();
        fs::create_dir_all(t.join("usr/lib/x86_64-linux-gnu")).unwrap();
        std::os::unix::fs::symlink("usr/lib", t.join("lib")).unwrap();
        fs::create_dir_all(t.join("lib64")).unwrap();
        fs::write(t.join("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"), b"ld").unwrap();
        std::os::unix::fs::symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", t.join("lib64/ld-linux-x86-64.so.2"))
            .unwrap();
        let mut p = Plan::new(&t);
        let real = p.add_host_path("/lib64/ld-linux-x86-64.so.2").unwrap();
        assert_eq!(real, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2");
        assert_eq!(p.items["/lib"], Item::Symlink { target: "usr/lib".into() });
        assert!(matches!(p.items["/lib64/ld-linux-x86-64.so.2"], Item::Symlink { .. }));
        assert!(matches!(p.items["/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"], Item::File { .. }));
        assert!(p.add_host_path("/nonexistent").is_err());
        p.put("/lib/modules/x/modules.dep", Item::Inline { data: vec![], mode: 0o644 });
        assert!(p.items.contains_key("/usr/lib/modules/x/modules.dep"));
        assert!(!p.items.keys().any(|k| k.starts_with("/lib/")));
    }

    #[test]
    fn clean_paths() {
        assert_eq!(clean("/a/./b/../c"), "/a/c");
        assert_eq!(clean("/../x"), "/x");
        assert_eq!(clean("a//b"), "/a/b");
    }
}
