//! Inputs taken from the file system: a directory tree (`--root`) and a path list
//! (`--paths`, as `find . | cpio -o -H newc` takes it).
//!
//! Both follow GNU cpio's newc rules so that a path list gives the same bytes as
//! `cpio -o -H newc --ignore-devno --renumber-inodes` (with `first_ino` 0): leading `./` is
//! stripped, inodes are numbered in input order, and the members of a hard-link set are held
//! back until the last one is seen, then written newest first with the data on the last.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use leanrd_newc::{PATH_MAX, S_IFLNK, S_IFMT, S_IFREG};

use crate::entry::{Data, Entry, Normalize};

/// A source file: where to read it, and the name to store.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub name: Vec<u8>,
}

/// Strip leading `./` (and the slashes after it) the way GNU cpio does; a name that would
/// become empty is kept as it was.
pub fn cpio_name(raw: &[u8]) -> &[u8] {
    let mut p = raw;
    while p.len() >= 2 && p[0] == b'.' && p[1] == b'/' {
        p = &p[1..];
        while p.first() == Some(&b'/') {
            p = &p[1..];
        }
    }
    if p.is_empty() { raw } else { p }
}

/// Split a path list read from stdin: NUL-separated with `null`, else newline-separated.
/// Empty items are skipped.
pub fn split_path_list(input: &[u8], null: bool) -> Vec<&[u8]> {
    let sep = if null { 0 } else { b'\n' };
    input.split(|&c| c == sep).filter(|s| !s.is_empty()).collect()
}

/// Sources for a path list: each path is both where to read and (after `./` stripping) the
/// stored name.
pub fn paths(list: &[&[u8]]) -> Vec<Source> {
    list.iter().map(|p| Source { path: PathBuf::from(OsStr::from_bytes(p)), name: cpio_name(p).to_vec() }).collect()
}

/// Sources for every file under `root` (not `root` itself), names relative to it, sorted
/// bytewise so that parents come before their children.
pub fn tree(root: &Path) -> Result<Vec<Source>> {
    let md = fs::metadata(root).with_context(|| format!("{}: cannot read the root directory", root.display()))?;
    if !md.is_dir() {
        bail!("{}: not a directory", root.display());
    }
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let rd = fs::read_dir(&dir).with_context(|| format!("{}: cannot list directory", dir.display()))?;
        for de in rd {
            let de = de.with_context(|| format!("{}: cannot list directory", dir.display()))?;
            let rel_child = rel.join(de.file_name());
            let ft = de.file_type().with_context(|| format!("{}: cannot stat", de.path().display()))?;
            if ft.is_dir() {
                stack.push(rel_child.clone());
            }
            out.push(Source { path: root.join(&rel_child), name: rel_child.as_os_str().as_bytes().to_vec() });
        }
    }
    out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// `lstat` every source and build entries in archive order, with GNU cpio's inode
/// numbering and hard-link deferral (see the module doc).
pub fn entries(sources: Vec<Source>, norm: &Normalize) -> Result<Vec<Entry>> {
    struct Pending {
        key: (u64, u64),
        entry: Entry,
    }
    let mut next_ino = norm.first_ino;
    let mut link_inos: HashMap<(u64, u64), u32> = HashMap::new();
    let mut out = Vec::with_capacity(sources.len());
    // GNU cpio keeps deferred links in a list it prepends to; here the newest is last.
    let mut deferred: Vec<Pending> = Vec::new();
    for src in sources {
        if src.name.len() >= PATH_MAX as usize {
            bail!("{}: name is {} bytes; the kernel's limit is {}", src.path.display(), src.name.len(), PATH_MAX - 1);
        }
        let md = fs::symlink_metadata(&src.path).with_context(|| format!("{}: cannot stat", src.path.display()))?;
        let kind = md.mode() & S_IFMT;
        let is_link_set = kind == S_IFREG && md.nlink() > 1;
        let key = (md.dev(), md.ino());
        let ino = if is_link_set {
            *link_inos.entry(key).or_insert_with(|| {
                next_ino += 1;
                next_ino - 1
            })
        } else {
            next_ino += 1;
            next_ino - 1
        };
        let data = match kind {
            S_IFREG => {
                check_size(&src.path, md.len())?;
                Data::File { path: src.path.clone(), size: md.len() }
            }
            S_IFLNK => {
                let target =
                    fs::read_link(&src.path).with_context(|| format!("{}: cannot read symlink", src.path.display()))?;
                Data::Inline(target.into_os_string().into_vec())
            }
            _ => Data::None,
        };
        let entry = norm.entry_from_metadata(src.name, &md, ino, data);
        if !is_link_set {
            out.push(entry);
            continue;
        }
        let seen = deferred.iter().filter(|d| d.key == key).count() as u64;
        if seen + 1 == md.nlink() {
            // The last link: flush the held-back ones (newest first), then this one with data.
            let mut i = deferred.len();
            while i > 0 {
                i -= 1;
                if deferred[i].key == key {
                    let mut e = deferred.remove(i).entry;
                    e.data = Data::None;
                    out.push(e);
                }
            }
            out.push(entry);
        } else {
            deferred.push(Pending { key, entry });
        }
    }
    // Sets with members missing from the input: newest first, data on the last of each set.
    while let Some(p) = deferred.pop() {
        let mut e = p.entry;
        if deferred.iter().any(|d| d.key == p.key) {
            e.data = Data::None;
        }
        out.push(e);
    }
    Ok(out)
}

/// newc stores sizes in 32 bits.
pub fn check_size(path: &Path, len: u64) -> Result<()> {
    if len > u32::MAX as u64 {
        bail!("{}: {} bytes is larger than newc's 4 GiB limit", path.display(), len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_dot_slash_like_gnu_cpio() {
        assert_eq!(cpio_name(b"./a"), b"a");
        assert_eq!(cpio_name(b"././b"), b"b");
        assert_eq!(cpio_name(b".//x/y"), b"x/y");
        assert_eq!(cpio_name(b"./"), b"./");
        assert_eq!(cpio_name(b"."), b".");
        assert_eq!(cpio_name(b"/abs"), b"/abs");
        assert_eq!(cpio_name(b"d/./a"), b"d/./a");
        assert_eq!(cpio_name(b"../x"), b"../x");
    }

    #[test]
    fn splits_lists() {
        assert_eq!(split_path_list(b"a\nb\n\nc", false), vec![&b"a"[..], b"b", b"c"]);
        assert_eq!(split_path_list(b"a\nb\0c\0", true), vec![&b"a\nb"[..], b"c"]);
    }

    #[test]
    fn hard_link_sets_are_deferred() {
        let dir = std::env::temp_dir().join(format!("leanrd-input-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("a"), b"hello").unwrap();
        fs::hard_link(dir.join("a"), dir.join("b")).unwrap();
        fs::hard_link(dir.join("a"), dir.join("c")).unwrap();
        fs::write(dir.join("x"), b"x").unwrap();
        let src = |n: &str| Source { path: dir.join(n), name: n.as_bytes().to_vec() };
        let norm = Normalize::default();
        let e = entries(vec![src("a"), src("x"), src("b"), src("c")], &norm).unwrap();
        let names: Vec<_> = e.iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
        assert_eq!(names, ["x", "b", "a", "c"]);
        assert_eq!(e[3].data.len(), 5);
        assert!(e[1].data.is_empty() && e[2].data.is_empty());
        assert_eq!((e[0].ino, e[1].ino, e[2].ino, e[3].ino), (1, 0, 0, 0));
        // A member missing: the held-back ones are written at the end, data on the last.
        let e = entries(vec![src("c"), src("x"), src("a")], &norm).unwrap();
        let names: Vec<_> = e.iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
        assert_eq!(names, ["x", "a", "c"]);
        assert_eq!((e[1].data.len(), e[2].data.len()), (0, 5));
        fs::remove_dir_all(&dir).unwrap();
    }
}
