//! gen_init_cpio manifests: parse them into entries, and print entries back as one.
//!
//! ```text
//! # comment
//! file NAME LOCATION MODE UID GID [HARDLINK...]
//! dir NAME MODE UID GID
//! nod NAME MODE UID GID b|c MAJ MIN
//! slink NAME TARGET MODE UID GID
//! pipe NAME MODE UID GID
//! sock NAME MODE UID GID
//! ```
//! `${VAR}` in LOCATION is replaced by the environment variable VAR. Names lose a leading
//! `/`. As in gen_init_cpio the data of a `file` with hard links goes on its last name.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use leanrd_newc::{PATH_MAX, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use thiserror::Error;

use crate::entry::{Data, Entry, Normalize};

/// A manifest line that cannot be used, with its place.
#[derive(Debug, Error)]
#[error("{file}:{line}: {msg}")]
pub struct ManifestError {
    pub file: String,
    pub line: usize,
    pub msg: String,
}

/// Parse a whole manifest. `origin` names it in errors; `lookup` resolves `${VAR}`.
/// Nothing is returned unless every line is valid.
pub fn parse(
    text: &str,
    origin: &str,
    norm: &Normalize,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Entry>, ManifestError> {
    let mut out = Vec::new();
    let mut names = HashSet::new();
    let mut ino = norm.first_ino;
    for (i, raw) in text.lines().enumerate() {
        let err = |msg: String| ManifestError { file: origin.to_string(), line: i + 1, msg };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let want = |n: usize, usage: &str| -> Result<(), ManifestError> {
            if f.len() < n { Err(err(format!("'{}' needs {} fields: {usage}", f[0], n - 1))) } else { Ok(()) }
        };
        let exact = |n: usize, usage: &str| -> Result<(), ManifestError> {
            want(n, usage)?;
            if f.len() > n {
                return Err(err(format!("'{}' takes {} fields, found {}: {usage}", f[0], n - 1, f.len() - 1)));
            }
            Ok(())
        };
        let name = |s: &str| -> Result<Vec<u8>, ManifestError> {
            let n = s.strip_prefix('/').unwrap_or(s);
            if n.is_empty() {
                return Err(err("empty name".into()));
            }
            if n.len() >= PATH_MAX as usize {
                return Err(err(format!("name is {} bytes; the kernel's limit is {}", n.len(), PATH_MAX - 1)));
            }
            Ok(n.as_bytes().to_vec())
        };
        let mode = |s: &str| -> Result<u32, ManifestError> {
            let m = u32::from_str_radix(s, 8).map_err(|_| err(format!("mode {s:?} is not an octal number")))?;
            if m > 0o7777 {
                return Err(err(format!("mode {s} has bits beyond 07777")));
            }
            Ok(m)
        };
        let num = |s: &str, what: &str| -> Result<u32, ManifestError> {
            s.parse::<u32>().map_err(|_| err(format!("{what} {s:?} is not a number")))
        };
        let mut push = |e: Entry| -> Result<(), ManifestError> {
            if !names.insert(e.name.clone()) {
                return Err(err(format!("{} is listed twice", String::from_utf8_lossy(&e.name))));
            }
            out.push(e);
            Ok(())
        };
        let mtime = norm.synthetic_mtime();
        let base = |name: Vec<u8>, mode: u32, uid: &str, gid: &str, ino: u32| -> Result<Entry, ManifestError> {
            let (uid, gid) = norm.owner(num(uid, "uid")?, num(gid, "gid")?);
            Ok(Entry {
                name,
                mode,
                uid,
                gid,
                nlink: 1,
                mtime,
                ino,
                dev_major: 0,
                dev_minor: 0,
                rdev_major: 0,
                rdev_minor: 0,
                data: Data::None,
            })
        };
        match f[0] {
            "file" => {
                want(6, "file NAME LOCATION MODE UID GID [HARDLINK...]")?;
                let loc = expand(f[2], lookup).map_err(err)?;
                let md = fs::metadata(&loc).map_err(|e| err(format!("{}: {e}", loc.display())))?;
                if !md.is_file() {
                    return Err(err(format!("{}: not a regular file", loc.display())));
                }
                if md.len() > u32::MAX as u64 {
                    return Err(err(format!("{}: larger than newc's 4 GiB limit", loc.display())));
                }
                let mut all = vec![name(f[1])?];
                for l in &f[6..] {
                    all.push(name(l)?);
                }
                let nlink = all.len() as u32;
                let last = all.len() - 1;
                for (k, n) in all.into_iter().enumerate() {
                    let mut e = base(n, S_IFREG | mode(f[3])?, f[4], f[5], ino)?;
                    e.nlink = nlink;
                    e.mtime = norm.mtime(md.mtime());
                    if k == last {
                        e.data = Data::File { path: loc.clone(), size: md.len() };
                    }
                    push(e)?;
                }
            }
            "dir" => {
                exact(5, "dir NAME MODE UID GID")?;
                let mut e = base(name(f[1])?, S_IFDIR | mode(f[2])?, f[3], f[4], ino)?;
                e.nlink = 2;
                push(e)?;
            }
            "nod" => {
                exact(8, "nod NAME MODE UID GID b|c MAJ MIN")?;
                let kind = match f[5] {
                    "b" => S_IFBLK,
                    "c" => S_IFCHR,
                    other => return Err(err(format!("device type {other:?} is not b or c"))),
                };
                let mut e = base(name(f[1])?, kind | mode(f[2])?, f[3], f[4], ino)?;
                e.rdev_major = num(f[6], "major")?;
                e.rdev_minor = num(f[7], "minor")?;
                push(e)?;
            }
            "slink" => {
                exact(6, "slink NAME TARGET MODE UID GID")?;
                let target = f[2].as_bytes().to_vec();
                if target.len() > PATH_MAX as usize {
                    return Err(err("symlink target is longer than PATH_MAX".into()));
                }
                let mut e = base(name(f[1])?, S_IFLNK | mode(f[3])?, f[4], f[5], ino)?;
                e.data = Data::Inline(target);
                push(e)?;
            }
            "pipe" => {
                exact(5, "pipe NAME MODE UID GID")?;
                push(base(name(f[1])?, S_IFIFO | mode(f[2])?, f[3], f[4], ino)?)?;
            }
            "sock" => {
                exact(5, "sock NAME MODE UID GID")?;
                push(base(name(f[1])?, S_IFSOCK | mode(f[2])?, f[3], f[4], ino)?)?;
            }
            other => {
                return Err(err(format!(
                    "unknown entry type {other:?} (expected file, dir, nod, slink, pipe or sock)"
                )));
            }
        }
        ino += 1;
    }
    Ok(out)
}

/// Replace `${VAR}` in a manifest LOCATION.
fn expand(loc: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
    let mut out = String::new();
    let mut rest = loc;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("unterminated ${{ in {loc:?}"))?;
        let var = &after[..end];
        let val = lookup(var).ok_or_else(|| format!("environment variable {var} is not set (used in {loc:?})"))?;
        out.push_str(&val);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(PathBuf::from(out))
}

/// Print entries as a manifest that [`parse`] reads back to the same archive (hard-link
/// sets are printed as one `file` line when their members are adjacent, as inputs make them).
pub fn print(entries: &[Entry]) -> String {
    let mut s = String::new();
    let mut i = 0;
    while i < entries.len() {
        let e = &entries[i];
        let name = String::from_utf8_lossy(&e.name);
        let perm = e.mode & 0o7777;
        match e.mode & S_IFMT {
            S_IFREG => {
                // Gather the link set (same ino, adjacent, data on the last).
                let mut j = i;
                while e.nlink > 1 && j + 1 < entries.len() && entries[j + 1].ino == e.ino && entries[j].data.is_empty()
                {
                    j += 1;
                }
                let loc = match &entries[j].data {
                    Data::File { path, .. } => path.display().to_string(),
                    _ => "/dev/null".into(),
                };
                let _ = write!(s, "file /{name} {loc} {perm:o} {} {}", e.uid, e.gid);
                for l in &entries[i + 1..=j] {
                    let _ = write!(s, " /{}", String::from_utf8_lossy(&l.name));
                }
                s.push('\n');
                i = j + 1;
                continue;
            }
            S_IFDIR => {
                let _ = writeln!(s, "dir /{name} {perm:o} {} {}", e.uid, e.gid);
            }
            S_IFLNK => {
                let target = match &e.data {
                    Data::Inline(t) => String::from_utf8_lossy(t).into_owned(),
                    Data::File { path, .. } => fs::read_link(path).map(|p| p.display().to_string()).unwrap_or_default(),
                    Data::None => String::new(),
                };
                let _ = writeln!(s, "slink /{name} {target} {perm:o} {} {}", e.uid, e.gid);
            }
            S_IFCHR | S_IFBLK => {
                let t = if e.mode & S_IFMT == S_IFCHR { 'c' } else { 'b' };
                let _ = writeln!(s, "nod /{name} {perm:o} {} {} {t} {} {}", e.uid, e.gid, e.rdev_major, e.rdev_minor);
            }
            S_IFIFO => {
                let _ = writeln!(s, "pipe /{name} {perm:o} {} {}", e.uid, e.gid);
            }
            S_IFSOCK => {
                let _ = writeln!(s, "sock /{name} {perm:o} {} {}", e.uid, e.gid);
            }
            _ => {}
        }
        i += 1;
    }
    s
}

/// Convenience: parse a manifest file (or `-` for stdin text already read) with the process
/// environment for `${VAR}`.
pub fn parse_with_env(text: &str, origin: &Path, norm: &Normalize) -> Result<Vec<Entry>, ManifestError> {
    parse(text, &origin.display().to_string(), norm, &|v| std::env::var(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<Entry>, ManifestError> {
        let norm = Normalize { first_ino: 1, ..Default::default() };
        parse(text, "m", &norm, &|v| (v == "SRC").then(|| "/etc".to_string()))
    }

    #[test]
    fn parses_every_type() {
        let e = p("# c\n\ndir /bin 755 0 0\nfile /bin/hosts ${SRC}/hosts 644 0 0 /h2\n\
                   nod /dev/console 600 0 5 c 5 1\nslink /sh busybox 777 0 0\npipe /p 600 0 0\nsock /s 600 0 0\n")
        .unwrap();
        assert_eq!(e.len(), 7);
        assert_eq!(e[0].mode, 0o40755);
        assert_eq!(e[1].name, b"bin/hosts");
        assert_eq!((e[1].nlink, e[2].nlink, e[1].ino, e[2].ino), (2, 2, 2, 2));
        assert!(e[1].data.is_empty() && matches!(e[2].data, Data::File { .. }));
        assert_eq!((e[3].gid, e[3].rdev_major, e[3].rdev_minor, e[3].mode), (5, 5, 1, 0o20600));
        assert_eq!(e[4].data, Data::Inline(b"busybox".to_vec()));
        assert_eq!(e[5].mode, 0o10600);
        assert_eq!(e[6].mode, 0o140600);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("dir /a 755 0 0\nfil /b x 644 0 0\n", "m:2: unknown entry type"),
            ("dir /a 7x5 0 0\n", "m:1: mode \"7x5\" is not an octal"),
            ("dir /a 755 0\n", "m:1: 'dir' needs 4 fields"),
            ("dir /a 755 0 0 extra\n", "m:1: 'dir' takes 4 fields"),
            ("file /a /nonexistent/x 644 0 0\n", "m:1: /nonexistent/x:"),
            ("file /a ${NOPE}/x 644 0 0\n", "m:1: environment variable NOPE"),
            ("nod /a 600 0 0 x 1 2\n", "m:1: device type"),
            ("dir /a 755 0 0\ndir a 755 0 0\n", "m:2: a is listed twice"),
            ("dir /a 755 -1 0\n", "m:1: uid"),
        ];
        for (text, want) in cases {
            let e = p(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn print_round_trips() {
        let text = "dir /bin 755 0 0\nfile /bin/hosts /etc/hosts 644 0 0 /h2\nnod /dev/console 600 0 5 c 5 1\n\
                    slink /sh busybox 777 0 0\npipe /p 600 0 0\nsock /s 600 0 0\n";
        let e = p(text).unwrap();
        assert_eq!(print(&e), text);
        assert_eq!(p(&print(&e)).unwrap(), e);
    }
}
