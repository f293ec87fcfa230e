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

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use leanrd_newc::{FileKind, PATH_MAX, symlink_len_ok};
use thiserror::Error;

use crate::entry::{Data, Entry, Normalize};
use crate::layout::conflict_message;
use crate::names::{canonical, check_name, find_conflict};

/// A manifest line that cannot be used, with its place.
#[derive(Debug, Error)]
#[error("{file}:{line}: {msg}")]
pub struct ManifestError {
    pub file: String,
    pub line: usize,
    pub msg: String,
}

/// Parse a whole manifest. `origin` names it in errors; `lookup` resolves `${VAR}`.
/// Nothing is returned unless every line is valid. The text is bytes: names and locations
/// need not be UTF-8 (gen_init_cpio takes any bytes but NUL and white space).
pub fn parse(
    text: &[u8],
    origin: &str,
    norm: &Normalize,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Entry>, ManifestError> {
    let mut out = Vec::new();
    // The manifest line of each entry, for errors found across lines.
    let mut lines = Vec::new();
    let mut names = HashMap::new();
    let mut ino = norm.first_ino;
    for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
        let err = |msg: String| ManifestError { file: origin.to_string(), line: i + 1, msg };
        let line = raw.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        if line.contains(&0) {
            return Err(err("NUL byte in the line".into()));
        }
        let f: Vec<&[u8]> = line.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()).collect();
        let word = |w: &[u8]| String::from_utf8_lossy(w).into_owned();
        let kind = word(f[0]);
        let want = |n: usize, usage: &str| -> Result<(), ManifestError> {
            if f.len() < n { Err(err(format!("'{kind}' needs {} fields: {usage}", n - 1))) } else { Ok(()) }
        };
        let exact = |n: usize, usage: &str| -> Result<(), ManifestError> {
            want(n, usage)?;
            if f.len() > n {
                return Err(err(format!("'{kind}' takes {} fields, found {}: {usage}", n - 1, f.len() - 1)));
            }
            Ok(())
        };
        // Names are stored as the kernel resolves them: `/a//b/./c/` is `a/b/c`.
        let name = |s: &[u8]| -> Result<Vec<u8>, ManifestError> {
            check_name(s).map_err(|m| err(format!("{}: {m}", word(s))))?;
            let n = canonical(s).into_owned();
            if n.is_empty() {
                return Err(err(format!("{}: names the archive's root, which is not an entry", word(s))));
            }
            Ok(n)
        };
        let text = |s: &[u8], what: &str| -> Result<String, ManifestError> {
            String::from_utf8(s.to_vec()).map_err(|_| err(format!("{what} {:?} is not text", word(s))))
        };
        let mode = |s: &[u8]| -> Result<u32, ManifestError> {
            let s = text(s, "mode")?;
            let m = u32::from_str_radix(&s, 8).map_err(|_| err(format!("mode {s:?} is not an octal number")))?;
            if m > 0o7777 {
                return Err(err(format!("mode {s} has bits beyond 07777")));
            }
            Ok(m)
        };
        let num = |s: &[u8], what: &str| -> Result<u32, ManifestError> {
            let t = text(s, what)?;
            t.parse::<u32>().map_err(|_| err(format!("{what} {t:?} is not a number")))
        };
        let mut push = |e: Entry| -> Result<(), ManifestError> {
            if let Some(first) = names.insert(e.name.clone(), i + 1) {
                return Err(err(format!("{} is listed twice (first on line {first})", word(&e.name))));
            }
            out.push(e);
            lines.push(i + 1);
            Ok(())
        };
        let mtime = norm.synthetic_mtime();
        let base = |name: Vec<u8>,
                    kind: FileKind,
                    perm: u32,
                    uid: &[u8],
                    gid: &[u8],
                    ino: u32|
         -> Result<Entry, ManifestError> {
            let (uid, gid) = norm.owner(num(uid, "uid")?, num(gid, "gid")?);
            let mut e = Entry::new(name, kind, perm, Data::None);
            (e.uid, e.gid, e.mtime, e.ino, e.nlink) = (uid, gid, mtime, ino, 1);
            Ok(e)
        };
        match f[0] {
            b"file" => {
                want(6, "file NAME LOCATION MODE UID GID [HARDLINK...]")?;
                let loc = expand(f[2], lookup).map_err(err)?;
                let md = fs::metadata(&loc).map_err(|e| err(format!("{}: {e}", loc.display())))?;
                if !md.is_file() {
                    return Err(err(format!("{}: not a regular file", loc.display())));
                }
                let data = Data::file(loc, md.len()).map_err(|e| err(e.to_string()))?;
                let mut all = vec![name(f[1])?];
                for l in &f[6..] {
                    all.push(name(l)?);
                }
                let nlink = all.len() as u32;
                let last = all.len() - 1;
                for (k, n) in all.into_iter().enumerate() {
                    let mut e = base(n, FileKind::Regular, mode(f[3])?, f[4], f[5], ino)?;
                    e.nlink = nlink;
                    e.mtime = norm.mtime(md.mtime());
                    if k == last {
                        e.data = data.clone();
                    }
                    push(e)?;
                }
            }
            b"dir" => {
                exact(5, "dir NAME MODE UID GID")?;
                let mut e = base(name(f[1])?, FileKind::Dir, mode(f[2])?, f[3], f[4], ino)?;
                e.nlink = 2;
                push(e)?;
            }
            b"nod" => {
                exact(8, "nod NAME MODE UID GID b|c MAJ MIN")?;
                let kind = match f[5] {
                    b"b" => FileKind::BlockDev,
                    b"c" => FileKind::CharDev,
                    other => return Err(err(format!("device type {:?} is not b or c", word(other)))),
                };
                let mut e = base(name(f[1])?, kind, mode(f[2])?, f[3], f[4], ino)?;
                e.rdev_major = num(f[6], "major")?;
                e.rdev_minor = num(f[7], "minor")?;
                push(e)?;
            }
            b"slink" => {
                exact(6, "slink NAME TARGET MODE UID GID")?;
                let target = f[2].to_vec();
                if !symlink_len_ok(target.len() as u64) {
                    return Err(err(format!(
                        "symlink target of {} bytes (the kernel allows 1 to {PATH_MAX})",
                        target.len()
                    )));
                }
                let mut e = base(name(f[1])?, FileKind::Symlink, mode(f[3])?, f[4], f[5], ino)?;
                e.data = Data::inline(target);
                push(e)?;
            }
            b"pipe" => {
                exact(5, "pipe NAME MODE UID GID")?;
                push(base(name(f[1])?, FileKind::Fifo, mode(f[2])?, f[3], f[4], ino)?)?;
            }
            b"sock" => {
                exact(5, "sock NAME MODE UID GID")?;
                push(base(name(f[1])?, FileKind::Socket, mode(f[2])?, f[3], f[4], ino)?)?;
            }
            _ => {
                return Err(err(format!("unknown entry type {kind:?} (expected file, dir, nod, slink, pipe or sock)")));
            }
        }
        ino += 1;
    }
    if let Some(c) = find_conflict(&out) {
        let (line, first) = (lines[c.under], lines[c.parent]);
        let msg = format!("{} (line {first})", conflict_message(&out, c));
        return Err(ManifestError { file: origin.to_string(), line, msg });
    }
    Ok(out)
}

/// Replace `${VAR}` in a manifest LOCATION.
fn expand(loc: &[u8], lookup: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
    let shown = String::from_utf8_lossy(loc);
    let mut out = Vec::new();
    let mut rest = loc;
    while let Some(start) = rest.windows(2).position(|w| w == b"${") {
        out.extend_from_slice(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.iter().position(|&b| b == b'}').ok_or_else(|| format!("unterminated ${{ in {shown:?}"))?;
        let var = String::from_utf8_lossy(&after[..end]);
        let val = lookup(&var).ok_or_else(|| format!("environment variable {var} is not set (used in {shown:?})"))?;
        out.extend_from_slice(val.as_bytes());
        rest = &after[end + 1..];
    }
    out.extend_from_slice(rest);
    Ok(PathBuf::from(std::ffi::OsString::from_vec(out)))
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
        let Some(kind) = e.kind() else {
            i += 1;
            continue;
        };
        match kind {
            FileKind::Regular => {
                // Gather the link set (same ino, adjacent, data on the last).
                let mut j = i;
                while e.nlink > 1 && j + 1 < entries.len() && entries[j + 1].ino == e.ino && entries[j].data.is_empty()
                {
                    j += 1;
                }
                let loc = match entries[j].source() {
                    Some(path) => path.display().to_string(),
                    None => "/dev/null".into(),
                };
                let _ = write!(s, "file /{name} {loc} {perm:o} {} {}", e.uid, e.gid);
                for l in &entries[i + 1..=j] {
                    let _ = write!(s, " /{}", String::from_utf8_lossy(&l.name));
                }
                s.push('\n');
                i = j + 1;
                continue;
            }
            FileKind::Dir => {
                let _ = writeln!(s, "dir /{name} {perm:o} {} {}", e.uid, e.gid);
            }
            FileKind::Symlink => {
                let target = match &e.data {
                    Data::Inline(t) => String::from_utf8_lossy(t).into_owned(),
                    Data::File { .. } | Data::Tree { .. } => e
                        .source()
                        .and_then(|p| fs::read_link(p).ok())
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    Data::None => String::new(),
                };
                let _ = writeln!(s, "slink /{name} {target} {perm:o} {} {}", e.uid, e.gid);
            }
            FileKind::CharDev | FileKind::BlockDev => {
                let t = kind.letter();
                let _ = writeln!(s, "nod /{name} {perm:o} {} {} {t} {} {}", e.uid, e.gid, e.rdev_major, e.rdev_minor);
            }
            FileKind::Fifo => {
                let _ = writeln!(s, "pipe /{name} {perm:o} {} {}", e.uid, e.gid);
            }
            FileKind::Socket => {
                let _ = writeln!(s, "sock /{name} {perm:o} {} {}", e.uid, e.gid);
            }
        }
        i += 1;
    }
    s
}

/// Convenience: parse a manifest file (or `-` for stdin text already read) with the process
/// environment for `${VAR}`.
pub fn parse_with_env(text: &[u8], origin: &Path, norm: &Normalize) -> Result<Vec<Entry>, ManifestError> {
    parse(text, &origin.display().to_string(), norm, &|v| std::env::var(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<Entry>, ManifestError> {
        let norm = Normalize { first_ino: 1, ..Default::default() };
        parse(text.as_bytes(), "m", &norm, &|v| (v == "SRC").then(|| "/etc".to_string()))
    }

    #[test]
    fn parses_every_type() {
        let e = p("# c\n\ndir /bin 755 0 0\nfile /bin/hosts ${SRC}/hosts 644 0 0 /h2\n\
                   nod /dev/console 600 0 5 c 5 1\nslink /sh busybox 777 0 0\npipe /p 600 0 0\nsock /s 600 0 0\n")
        .unwrap();
        assert_eq!(e.len(), 7);
        assert_eq!(e[0].mode, 0o40755);
        assert_eq!(&*e[1].name, b"bin/hosts");
        assert_eq!((e[1].nlink, e[2].nlink, e[1].ino, e[2].ino), (2, 2, 2, 2));
        assert!(e[1].data.is_empty() && matches!(e[2].data, Data::File { .. }));
        assert_eq!((e[3].gid, e[3].rdev_major, e[3].rdev_minor, e[3].mode), (5, 5, 1, 0o20600));
        assert_eq!(e[4].data, Data::inline(&b"busybox"[..]));
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
            ("dir /a 755 0 0\ndir a 755 0 0\n", "m:2: a is listed twice (first on line 1)"),
            ("dir /../etc 755 0 0\n", "m:1: /../etc: name has a '..' component"),
            ("dir /a 755 0 0\nfile /a/b /etc/hosts 644 0 0 /../../evil\n", "m:2: /../../evil: name has a '..'"),
            ("dir /a\0b 755 0 0\n", "m:1: NUL byte"),
            (
                "file /f /etc/hosts 644 0 0\n\nfile /f/g /etc/hosts 644 0 0\n",
                "m:3: f/g cannot be unpacked: f is a regular file, not a directory (line 1)",
            ),
            ("file /f/g /etc/hosts 644 0 0\npipe /f 644 0 0\n", "m:1: f/g cannot be unpacked: f is a fifo"),
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
