//! Inputs taken from the file system: a directory tree (`--root`) and a path list
//! (`--paths`, as `find . | cpio -o -H newc` takes it).
//!
//! Both follow GNU cpio's newc rules so that a path list gives the same bytes as
//! `cpio -o -H newc --ignore-devno --renumber-inodes` (with `first_ino` 0): leading `./` is
//! stripped, inodes are numbered in input order, and the members of a hard-link set are held
//! back until the last one is seen, then written newest first with the data on the last.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Context, Result, bail, invalid};
use leanrd_newc::FileKind;

use crate::dircache::DirCache;
use crate::entry::{Data, Entry, Normalize, newc_size};
use crate::layout::conflict_message;
use crate::names::{check_name, find_conflict};

/// Where input names come from.
#[derive(Debug, Clone)]
pub enum Sources {
    /// Names under a directory (`--root`): each is read at `root/NAME`.
    Tree {
        /// The directory the names are under.
        root: Arc<Path>,
        /// The names relative to `root`, as stored, in archive order.
        names: Vec<Box<[u8]>>,
    },
    /// A path list (`--paths`): each path is read as given and stored with leading `./`
    /// stripped; `line` is its line in the list, for errors.
    List {
        /// What errors call the list (`<stdin>`, a file name).
        origin: String,
        /// The list's paths, in archive order.
        items: Vec<ListItem>,
    },
}

/// One item of a path list.
#[derive(Debug, Clone)]
pub struct ListItem {
    /// The path as the list gives it.
    pub path: Box<[u8]>,
    /// Its line (item) number in the list, from 1; 0 when it has none.
    pub line: usize,
}

/// Strip leading `./` (and the slashes after it) the way GNU cpio does; a name that would
/// become empty is kept as it was.
pub(crate) fn cpio_name(raw: &[u8]) -> &[u8] {
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
/// Empty items are skipped; each keeps its line (item) number.
pub fn split_path_list(input: &[u8], null: bool) -> Vec<ListItem> {
    let sep = if null { 0 } else { b'\n' };
    input
        .split(|&c| c == sep)
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .map(|(i, s)| ListItem { path: s.into(), line: i + 1 })
        .collect()
}

/// Sources for a path list read from `origin`.
pub fn paths(origin: &str, items: Vec<ListItem>) -> Sources {
    Sources::List { origin: origin.to_string(), items }
}

/// Every file under `root` (not `root` itself), names relative to it, sorted bytewise so
/// that parents come before their children.
pub fn tree(root: &Path) -> Result<Sources> {
    let md = fs::metadata(root).with_context(|| format!("{}: cannot read the root directory", root.display()))?;
    if !md.is_dir() {
        bail!("{}: not a directory", root.display());
    }
    let mut names: Vec<Box<[u8]>> = Vec::new();
    let mut stack: Vec<Box<[u8]>> = vec![Box::default()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(OsStr::from_bytes(&rel));
        let rd = fs::read_dir(&dir).with_context(|| format!("{}: cannot list directory", dir.display()))?;
        for de in rd {
            let de = de.with_context(|| format!("{}: cannot list directory", dir.display()))?;
            let file_name = de.file_name();
            let base = file_name.as_bytes();
            let mut name = Vec::with_capacity(rel.len() + 1 + base.len());
            if !rel.is_empty() {
                name.extend_from_slice(&rel);
                name.push(b'/');
            }
            name.extend_from_slice(base);
            let name = name.into_boxed_slice();
            let ft = de.file_type().with_context(|| format!("{}: cannot stat", de.path().display()))?;
            if ft.is_dir() {
                stack.push(name.clone());
            }
            names.push(name);
        }
    }
    names.sort_unstable();
    Ok(Sources::Tree { root: Arc::from(root), names })
}

/// GNU cpio's inode numbering and hard-link deferral (see the module doc): one inode per
/// file, members of a link set held back until the last one, which carries the data.
struct Links {
    next_ino: u32,
    inos: HashMap<(u64, u64), u32>,
    /// Held-back members: GNU cpio prepends to its list; here the newest is last.
    deferred: Vec<((u64, u64), Entry)>,
}

impl Links {
    fn ino(&mut self, key: (u64, u64), in_set: bool) -> u32 {
        let next = &mut self.next_ino;
        let mut fresh = || {
            *next += 1;
            *next - 1
        };
        if in_set { *self.inos.entry(key).or_insert_with(fresh) } else { fresh() }
    }

    /// A member of a link set with `nlink` links: held back, or with the others flushed.
    fn place(&mut self, key: (u64, u64), nlink: u64, entry: Entry, out: &mut Vec<Entry>) {
        let seen = self.deferred.iter().filter(|d| d.0 == key).count() as u64;
        if seen + 1 < nlink {
            self.deferred.push((key, entry));
            return;
        }
        // The last link: flush the held-back ones (newest first), then this one with data.
        let mut i = self.deferred.len();
        while i > 0 {
            i -= 1;
            if self.deferred[i].0 == key {
                let mut e = self.deferred.remove(i).1;
                e.data = Data::None;
                out.push(e);
            }
        }
        out.push(entry);
    }

    /// Sets with members missing from the input: newest first, data on the last of each set.
    fn finish(mut self, out: &mut Vec<Entry>) {
        while let Some((key, mut e)) = self.deferred.pop() {
            if self.deferred.iter().any(|d| d.0 == key) {
                e.data = Data::None;
            }
            out.push(e);
        }
    }
}

/// Where an entry's data comes from: a regular file's source, a symlink's target.
fn data_of(kind: Option<FileKind>, root: &Option<Arc<Path>>, path: Cow<Path>, size: u64) -> Result<Data> {
    Ok(match kind {
        Some(FileKind::Regular) => match root {
            Some(r) => Data::Tree { root: r.clone(), size: newc_size(&path, size)? },
            None => Data::file(path.into_owned(), size)?,
        },
        Some(FileKind::Symlink) => {
            let target = fs::read_link(&path).with_context(|| format!("{}: cannot read symlink", path.display()))?;
            Data::inline(target.into_os_string().into_vec())
        }
        _ => Data::None,
    })
}

/// `lstat` every source and build entries in archive order, with GNU cpio's inode
/// numbering and hard-link deferral (see the module doc).
pub fn entries(sources: Sources, norm: &Normalize) -> Result<Vec<Entry>> {
    let mut links = Links { next_ino: norm.first_ino, inos: HashMap::new(), deferred: Vec::new() };
    type Items = Box<dyn Iterator<Item = (Box<[u8]>, usize)>>;
    let (root, items, origin): (Option<Arc<Path>>, Items, String) = match sources {
        Sources::Tree { root, names } => (Some(root), Box::new(Draining::new(names).map(|n| (n, 0))), String::new()),
        Sources::List { origin, items } => (None, Box::new(items.into_iter().map(|i| (i.path, i.line))), origin),
    };
    let mut out = Vec::with_capacity(items.size_hint().0);
    let mut dirs = DirCache::default();
    for (raw, line) in items {
        let (path, name): (Cow<Path>, Box<[u8]>) = match &root {
            Some(r) => (Cow::Owned(r.join(OsStr::from_bytes(&raw))), raw),
            None => (Cow::Owned(PathBuf::from(OsStr::from_bytes(&raw))), cpio_name(&raw).into()),
        };
        let at = || if line > 0 { format!("{origin}:{line}: ") } else { String::new() };
        check_name(&name).map_err(|m| invalid!("{}{}: {m}", at(), path.display()))?;
        let md = dirs.lstat(&path).with_context(|| format!("{}{}: cannot stat", at(), path.display()))?;
        let kind = FileKind::from_mode(md.mode);
        let in_set = kind == Some(FileKind::Regular) && md.nlink > 1;
        let key = (md.dev, md.ino);
        let ino = links.ino(key, in_set);
        let entry = norm.entry_from_metadata(name, &md, ino, data_of(kind, &root, path, md.size)?);
        if in_set {
            links.place(key, md.nlink, entry, &mut out);
        } else {
            out.push(entry);
        }
    }
    links.finish(&mut out);
    // A path list can name anything; a tree cannot hold a name under a file (and the
    // writer checks again either way).
    if root.is_none()
        && let Some(c) = find_conflict(&out)
    {
        bail!("{}{}", if origin.is_empty() { String::new() } else { format!("{origin}: ") }, conflict_message(&out, c));
    }
    Ok(out)
}

/// The items of a vector in order, its buffer given back as they are taken: a list of
/// 200,000 names is not held twice while it becomes entries.
struct Draining<T> {
    rev: Vec<T>,
}

impl<T> Draining<T> {
    fn new(mut v: Vec<T>) -> Draining<T> {
        v.reverse();
        Draining { rev: v }
    }
}

impl<T> Iterator for Draining<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        let x = self.rev.pop();
        if self.rev.capacity() > 4096 && self.rev.len() < self.rev.capacity() / 2 {
            self.rev.shrink_to_fit();
        }
        x
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.rev.len(), Some(self.rev.len()))
    }
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
        let items = |l: Vec<ListItem>| l.into_iter().map(|i| (i.path.to_vec(), i.line)).collect::<Vec<_>>();
        assert_eq!(
            items(split_path_list(b"a\nb\n\nc", false)),
            [(b"a".to_vec(), 1), (b"b".to_vec(), 2), (b"c".to_vec(), 4)]
        );
        assert_eq!(items(split_path_list(b"a\nb\0c\0", true)), [(b"a\nb".to_vec(), 1), (b"c".to_vec(), 2)]);
    }

    #[test]
    fn hard_link_sets_are_deferred() {
        let tmpdir = tempfile::tempdir().unwrap();
        let dir = tmpdir.path().to_path_buf();
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("a"), b"hello").unwrap();
        fs::hard_link(dir.join("a"), dir.join("b")).unwrap();
        fs::hard_link(dir.join("a"), dir.join("c")).unwrap();
        fs::write(dir.join("x"), b"x").unwrap();
        let src = |names: &[&str]| Sources::Tree {
            root: Arc::from(dir.as_path()),
            names: names.iter().map(|n| n.as_bytes().into()).collect(),
        };
        let norm = Normalize::default();
        let e = entries(src(&["a", "x", "b", "c"]), &norm).unwrap();
        let names: Vec<_> = e.iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
        assert_eq!(names, ["x", "b", "a", "c"]);
        assert_eq!(e[3].data.len(), 5);
        assert!(e[1].data.is_empty() && e[2].data.is_empty());
        assert_eq!((e[0].ino, e[1].ino, e[2].ino, e[3].ino), (1, 0, 0, 0));
        // A member missing: the held-back ones are written at the end, data on the last.
        let e = entries(src(&["c", "x", "a"]), &norm).unwrap();
        let names: Vec<_> = e.iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
        assert_eq!(names, ["x", "a", "c"]);
        assert_eq!((e[1].data.len(), e[2].data.len()), (0, 5));
    }
}
