//! The names an archive may hold: rules shared by every input, the writer and `check`.
//!
//! The kernel's unpacker resolves each name from the root with ordinary path lookup, so a
//! name with a `..` component reaches somewhere else than it says, and a name under a regular
//! file (or a device, fifo or socket) cannot be created at all. leanrd refuses to write either
//! and `check` reports both; `extract` refuses them too.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;

use leanrd_newc::{FileKind, PATH_MAX, TRAILER};

use crate::entry::Entry;

/// Check one name as stored (no leading `/`): 1 to 4095 bytes, no NUL, no `..` component.
pub(crate) fn check_name(name: &[u8]) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty name".into());
    }
    if name.len() >= PATH_MAX as usize {
        return Err(format!("name is {} bytes; the kernel's limit is {}", name.len(), PATH_MAX - 1));
    }
    if name.contains(&0) {
        return Err("name contains a NUL byte".into());
    }
    if name.split(|&b| b == b'/').any(|c| c == b"..") {
        return Err("name has a '..' component".into());
    }
    if *canonical(name) == *TRAILER {
        return Err("TRAILER!!! is the end of an archive: the kernel would read it as one, not create it".into());
    }
    Ok(())
}

/// What the kernel makes of a symlink's data: the target ends at the first NUL (gen_init_cpio
/// stores it with its NUL, and counts it in the size).
pub fn symlink_target(data: &[u8]) -> &[u8] {
    data.iter().position(|&b| b == 0).map_or(data, |n| &data[..n])
}

/// Bytes as one line of text, as `ls -b` shows names: backslash escapes for `\\`, `\n`,
/// `\t` and the other control characters, and octal `\ooo` for bytes that are not UTF-8.
/// Valid UTF-8 without control characters comes out as it is.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() => {
                    let mut b = [0u8; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        out.push_str(&format!("\\{byte:03o}"));
                    }
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\{byte:03o}"));
        }
    }
    out
}

/// Whether entries of this kind can have names under them (a symlink can: the kernel
/// follows it to whatever directory it names).
fn can_hold(kind: Option<FileKind>) -> bool {
    matches!(kind, Some(FileKind::Dir | FileKind::Symlink) | None)
}

/// The parents of a name: `a/b/c` → `a`, `a/b`.
fn parents(name: &[u8]) -> impl Iterator<Item = &[u8]> {
    name.iter().enumerate().filter(|&(i, &b)| b == b'/' && i > 0).map(move |(i, _)| &name[..i])
}

/// Why the kernel cannot create `name` (canonical) as a `kind` over what its rootfs holds
/// before it unpacks an image ([`Namespace::new`]): /dev, with /dev/console in it, is not
/// replaced by anything but a directory.
pub(crate) fn kernel_conflict(name: &[u8], kind: Option<FileKind>) -> Option<String> {
    (name == b"dev" && kind != Some(FileKind::Dir)).then(|| {
        let k = kind.map_or("file of unknown type", FileKind::name);
        format!("dev cannot be {k}: the kernel's /dev holds /dev/console, so it cannot be replaced")
    })
}

/// Two entries of a list that cannot both be unpacked: `under` lies beneath `parent`, which
/// is not a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// Index of the entry whose name lies beneath `parent`.
    pub under: usize,
    /// Index of the entry that is not a directory but has `under` beneath it.
    pub parent: usize,
}

/// Compare `a` with `b` followed by a `/`, without building that name.
fn cmp_with_slash(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    match a[..n].cmp(&b[..n]) {
        Ordering::Equal if a.len() <= b.len() => Ordering::Less,
        Ordering::Equal => a[b.len()].cmp(&b'/'),
        o => o,
    }
}

/// A name as the kernel's path lookup sees it: without `.` components, leading, repeated or trailing
/// slashes. Borrowed when it is already so (as every tree input's names are).
pub fn canonical(name: &[u8]) -> Cow<'_, [u8]> {
    let clean = !name.starts_with(b"./")
        && !name.starts_with(b"/")
        && !name.ends_with(b"/")
        && !name.ends_with(b"/.")
        && name != b"."
        && !name.windows(2).any(|w| w == b"//")
        && !name.windows(3).any(|w| w == b"/./");
    if clean {
        return Cow::Borrowed(name);
    }
    let parts: Vec<&[u8]> = name.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".").collect();
    Cow::Owned(parts.join(&b'/'))
}

/// Find an entry placed under a non-directory anywhere in `entries`, in any order (the
/// writer's rule: such an archive cannot be unpacked whichever comes first). Names are
/// compared as the kernel resolves them ([`canonical`]). Costs one sort of indices; an
/// already sorted list (a tree) skips it.
pub(crate) fn find_conflict(entries: &[Entry]) -> Option<Conflict> {
    let canon: Vec<Cow<[u8]>> = if entries.iter().all(|e| matches!(canonical(&e.name), Cow::Borrowed(_))) {
        Vec::new()
    } else {
        entries.iter().map(|e| canonical(&e.name)).collect()
    };
    let name = |i: u32| -> &[u8] { canon.get(i as usize).map(|c| &**c).unwrap_or(&entries[i as usize].name) };
    let mut idx: Vec<u32> = (0..entries.len() as u32).collect();
    if !idx.is_sorted_by(|&a, &b| name(a) <= name(b)) {
        idx.sort_by(|&a, &b| name(a).cmp(name(b)));
    }
    for &i in &idx {
        let e = &entries[i as usize];
        if can_hold(FileKind::from_mode(e.mode)) {
            continue;
        }
        let base = name(i);
        if base.is_empty() {
            continue;
        }
        // The first name not less than "base/": under base if it starts with it.
        let pos = idx.partition_point(|&j| cmp_with_slash(name(j), base) == Ordering::Less);
        if let Some(&j) = idx.get(pos)
            && name(j).len() > base.len()
            && name(j).starts_with(base)
            && name(j)[base.len()] == b'/'
        {
            return Some(Conflict { under: j as usize, parent: i as usize });
        }
    }
    None
}

/// The names an unpacker has made so far, in order, with what each is: for checking a stream
/// of entries the way the kernel unpacks it (a later entry replaces an earlier one of the same
/// name, as `clean_path` does; a name whose parent does not exist is dropped).
pub struct Namespace<T> {
    /// Name → kind and tag (`None`: there before the archive).
    seen: HashMap<Vec<u8>, (FileKind, Option<T>)>,
    /// Names that have something beneath them.
    has_children: std::collections::HashSet<Vec<u8>>,
}

impl<T: Clone> Default for Namespace<T> {
    fn default() -> Namespace<T> {
        Namespace::new()
    }
}

impl<T: Clone> Namespace<T> {
    /// The rootfs as the kernel has it before it unpacks an external image: what its built-in
    /// initramfs (usr/default_cpio_list) made, `/dev`, `/dev/console` and `/root`.
    pub fn new() -> Namespace<T> {
        let mut seen = HashMap::new();
        seen.insert(b"dev".to_vec(), (FileKind::Dir, None));
        seen.insert(b"dev/console".to_vec(), (FileKind::CharDev, None));
        seen.insert(b"root".to_vec(), (FileKind::Dir, None));
        Namespace { seen, has_children: [b"dev".to_vec()].into() }
    }

    /// What `name` (canonical) is now, and its tag.
    pub fn get(&self, name: &[u8]) -> Option<&(FileKind, Option<T>)> {
        self.seen.get(name)
    }

    /// Record `name` (canonical, see [`canonical`]) of `kind` (with `tag`, e.g. a line
    /// number). An error says why the kernel could not create it, naming the earlier entry's
    /// tag.
    pub fn insert(&mut self, name: &[u8], kind: FileKind, tag: T) -> Result<(), (String, Option<T>)> {
        for p in parents(name) {
            match self.seen.get(p) {
                None => {
                    return Err((format!("its parent {} is not in the archive", show(p)), None));
                }
                Some((k, t)) if !can_hold(Some(*k)) => {
                    return Err((
                        format!("{} is {}, not a directory: nothing can be created under it", show(p), k.name()),
                        t.clone(),
                    ));
                }
                Some(_) => {}
            }
        }
        if kind != FileKind::Dir
            && self.has_children.contains(name)
            && let Some((FileKind::Dir, t)) = self.seen.get(name)
        {
            return Err((
                format!("{} is a directory with entries under it: it cannot be replaced", show(name)),
                t.clone(),
            ));
        }
        for p in parents(name) {
            if !self.has_children.contains(p) {
                self.has_children.insert(p.to_vec());
            }
        }
        self.seen.insert(name.to_vec(), (kind, Some(tag)));
        Ok(())
    }
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Data;
    use leanrd_newc::FileKind;

    fn e(name: &str, mode: u32) -> Entry {
        let mut e = Entry::new(name.as_bytes(), FileKind::Regular, 0, Data::None);
        e.mode = mode;
        e.nlink = 1;
        e
    }

    #[test]
    fn escapes_like_ls_b() {
        assert_eq!(escape(b"plain/name"), "plain/name");
        assert_eq!(escape("caf\u{e9}".as_bytes()), "caf\u{e9}");
        assert_eq!(escape(b"caf\xe9"), "caf\\351");
        assert_eq!(escape(b"a\nb\\c\x01"), "a\\nb\\\\c\\001");
        assert_eq!(symlink_target(b"busybox\0"), b"busybox");
        assert_eq!(symlink_target(b"x"), b"x");
    }

    #[test]
    fn names() {
        assert!(check_name(b"a/b").is_ok());
        assert!(check_name(b"a/..b").is_ok());
        assert!(check_name(b"../etc").is_err());
        assert!(check_name(b"a/../../evil").is_err());
        assert!(check_name(b"a/..").is_err());
        assert!(check_name(b"a\0b").is_err());
        assert!(check_name(b"").is_err());
        assert!(check_name(&[b'x'; 4096]).is_err());
    }

    #[test]
    fn conflicts_in_any_order() {
        let f = FileKind::Regular.mode(0o644);
        let d = FileKind::Dir.mode(0o755);
        assert_eq!(find_conflict(&[e("f", f), e("f/g", f)]), Some(Conflict { under: 1, parent: 0 }));
        assert_eq!(find_conflict(&[e("f/g", f), e("f", f)]), Some(Conflict { under: 0, parent: 1 }));
        assert_eq!(find_conflict(&[e("f", f), e("f-x", f), e("f.d/g", f), e("f/g/h", d)]).map(|c| c.parent), Some(0));
        assert_eq!(find_conflict(&[e("f", d), e("f/g", f), e("fg", f), e("f-", f)]), None);
        assert_eq!(find_conflict(&[e("a", f), e("ab/c", f)]), None);
        assert_eq!(find_conflict(&[e("f", f), e("./f//g", f)]).map(|c| c.parent), Some(0));
        assert_eq!(find_conflict(&[e("./f/", f), e("f/g", f)]).map(|c| c.parent), Some(0));
        assert_eq!(&*canonical(b"./a//b/./c/"), b"a/b/c");
    }

    #[test]
    fn namespace_follows_the_kernel() {
        let mut ns = Namespace::new();
        ns.insert(b"f", FileKind::Regular, 1).unwrap();
        assert_eq!(ns.insert(b"f/g", FileKind::Regular, 2).unwrap_err().1, Some(1));
        // A directory replaces the file; then names under it are fine.
        ns.insert(b"f", FileKind::Dir, 3).unwrap();
        ns.insert(b"f/g", FileKind::Regular, 4).unwrap();
        assert_eq!(ns.insert(b"f", FileKind::Regular, 5).unwrap_err().1, Some(3));
        ns.insert(b"l", FileKind::Symlink, 6).unwrap();
        ns.insert(b"l/x", FileKind::Regular, 7).unwrap();
        // A missing parent: dropped by the kernel. /dev is there before any archive.
        assert!(ns.insert(b"x/y/z", FileKind::Regular, 8).unwrap_err().0.contains("x is not in the archive"));
        ns.insert(b"dev/null", FileKind::CharDev, 9).unwrap();
    }
}
