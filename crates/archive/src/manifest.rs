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
use crate::names::{canonical, check_name, find_conflict, kernel_conflict};

/// A manifest line that cannot be used, with its place.
#[derive(Debug, Error)]
#[error("{file}:{line}: {msg}")]
pub struct ManifestError {
    /// The manifest's name, as the caller gave it (`origin`).
    pub file: String,
    /// The line, counting from 1.
    pub line: usize,
    /// What is wrong with the line.
    pub msg: String,
}

/// One manifest line split into fields, with what its errors need.
struct Line<'a> {
    f: Vec<&'a [u8]>,
    origin: &'a str,
    number: usize,
    norm: &'a Normalize,
}

fn word(w: &[u8]) -> String {
    String::from_utf8_lossy(w).into_owned()
}

impl Line<'_> {
    fn err(&self, msg: String) -> ManifestError {
        ManifestError { file: self.origin.to_string(), line: self.number, msg }
    }

    /// At least `n` fields (the type word included).
    fn want(&self, n: usize, usage: &str) -> Result<(), ManifestError> {
        if self.f.len() < n {
            return Err(self.err(format!("'{}' needs {} fields: {usage}", word(self.f[0]), n - 1)));
        }
        Ok(())
    }

    /// Exactly `n` fields.
    fn exact(&self, n: usize, usage: &str) -> Result<(), ManifestError> {
        self.want(n, usage)?;
        if self.f.len() > n {
            let (kind, found) = (word(self.f[0]), self.f.len() - 1);
            return Err(self.err(format!("'{kind}' takes {} fields, found {found}: {usage}", n - 1)));
        }
        Ok(())
    }

    /// A name as the kernel resolves it: `/a//b/./c/` is `a/b/c`.
    fn name(&self, s: &[u8]) -> Result<Vec<u8>, ManifestError> {
        check_name(s).map_err(|m| self.err(format!("{}: {m}", word(s))))?;
        let n = canonical(s).into_owned();
        if n.is_empty() {
            return Err(self.err(format!("{}: names the archive's root, which is not an entry", word(s))));
        }
        Ok(n)
    }

    fn text(&self, s: &[u8], what: &str) -> Result<String, ManifestError> {
        String::from_utf8(s.to_vec()).map_err(|_| self.err(format!("{what} {:?} is not text", word(s))))
    }

    fn mode(&self, s: &[u8]) -> Result<u32, ManifestError> {
        let s = self.text(s, "mode")?;
        let m = u32::from_str_radix(&s, 8).map_err(|_| self.err(format!("mode {s:?} is not an octal number")))?;
        if m > 0o7777 {
            return Err(self.err(format!("mode {s} has bits beyond 07777")));
        }
        Ok(m)
    }

    fn num(&self, s: &[u8], what: &str) -> Result<u32, ManifestError> {
        let t = self.text(s, what)?;
        t.parse::<u32>().map_err(|_| self.err(format!("{what} {t:?} is not a number")))
    }

    /// An entry from NAME MODE UID GID at fields `at`, `at + 1`, ...: `mode_at` is where the
    /// mode is (after a LOCATION or TARGET for files and symlinks).
    fn entry(&self, name: Vec<u8>, kind: FileKind, mode_at: usize, ino: u32) -> Result<Entry, ManifestError> {
        let (uid, gid) = self.norm.owner(self.num(self.f[mode_at + 1], "uid")?, self.num(self.f[mode_at + 2], "gid")?);
        let mut e = Entry::new(name, kind, self.mode(self.f[mode_at])?, Data::None);
        (e.uid, e.gid, e.mtime, e.ino, e.nlink) = (uid, gid, self.norm.synthetic_mtime(), ino, 1);
        Ok(e)
    }

    /// `file NAME LOCATION MODE UID GID [HARDLINK...]`: one entry per name, data on the last.
    fn file(&self, ino: u32, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Entry>, ManifestError> {
        self.want(6, "file NAME LOCATION MODE UID GID [HARDLINK...]")?;
        let loc = expand(self.f[2], lookup).map_err(|m| self.err(m))?;
        let md = fs::metadata(&loc).map_err(|e| self.err(format!("{}: {e}", loc.display())))?;
        if !md.is_file() {
            return Err(self.err(format!("{}: not a regular file", loc.display())));
        }
        let data = Data::file(loc, md.len()).map_err(|e| self.err(e.to_string()))?;
        let names = std::iter::once(self.f[1]).chain(self.f[6..].iter().copied());
        let names: Vec<Vec<u8>> = names.map(|n| self.name(n)).collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for n in names {
            let mut e = self.entry(n, FileKind::Regular, 3, ino)?;
            e.mtime = self.norm.mtime(md.mtime());
            out.push(e);
        }
        let nlink = out.len() as u32;
        for e in &mut out {
            e.nlink = nlink;
        }
        out.last_mut().expect("a name").data = data;
        Ok(out)
    }

    /// The entries of this line.
    fn entries(&self, ino: u32, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Entry>, ManifestError> {
        let e = match self.f[0] {
            b"file" => return self.file(ino, lookup),
            b"dir" => {
                self.exact(5, "dir NAME MODE UID GID")?;
                let mut e = self.entry(self.name(self.f[1])?, FileKind::Dir, 2, ino)?;
                e.nlink = 2;
                e
            }
            b"nod" => {
                self.exact(8, "nod NAME MODE UID GID b|c MAJ MIN")?;
                let kind = match self.f[5] {
                    b"b" => FileKind::BlockDev,
                    b"c" => FileKind::CharDev,
                    other => return Err(self.err(format!("device type {:?} is not b or c", word(other)))),
                };
                let mut e = self.entry(self.name(self.f[1])?, kind, 2, ino)?;
                e.rdev_major = self.num(self.f[6], "major")?;
                e.rdev_minor = self.num(self.f[7], "minor")?;
                e
            }
            b"slink" => {
                self.exact(6, "slink NAME TARGET MODE UID GID")?;
                let target = self.f[2].to_vec();
                if !symlink_len_ok(target.len() as u64) {
                    let n = target.len();
                    return Err(self.err(format!("symlink target of {n} bytes (the kernel allows 1 to {PATH_MAX})")));
                }
                let mut e = self.entry(self.name(self.f[1])?, FileKind::Symlink, 3, ino)?;
                e.data = Data::inline(target);
                e
            }
            b"pipe" | b"sock" => {
                let usage = format!("{} NAME MODE UID GID", word(self.f[0]));
                self.exact(5, &usage)?;
                let kind = if self.f[0] == b"pipe" { FileKind::Fifo } else { FileKind::Socket };
                self.entry(self.name(self.f[1])?, kind, 2, ino)?
            }
            other => {
                return Err(self.err(format!(
                    "unknown entry type {:?} (expected file, dir, nod, slink, pipe or sock)",
                    word(other)
                )));
            }
        };
        Ok(vec![e])
    }
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
        let line = raw.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        let f = line.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()).collect();
        let l = Line { f, origin, number: i + 1, norm };
        if line.contains(&0) {
            return Err(l.err("NUL byte in the line".into()));
        }
        for e in l.entries(ino, lookup)? {
            if let Some(m) = kernel_conflict(&e.name, e.kind()) {
                return Err(l.err(m));
            }
            if let Some(first) = names.insert(e.name.clone(), i + 1) {
                return Err(l.err(format!("{} is listed twice (first on line {first})", word(&e.name))));
            }
            out.push(e);
            lines.push(i + 1);
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

    /// A name that is newc's end marker: the kernel (and leanrd's reader) take the entry for
    /// the archive's end, so it would be missing, and a hard-link set broken at it (found by
    /// fuzz/ `manifest`).
    #[test]
    fn the_trailers_name_is_refused() {
        for text in [
            "dir /TRAILER!!! 755 0 0\n",
            "file /a ${SRC}/hosts 644 0 0 /b /TRAILER!!!\n",
            "pipe ./TRAILER!!!/ 644 0 0\n",
        ] {
            let e = p(text).unwrap_err().to_string();
            assert!(e.contains("TRAILER!!! is the end of an archive"), "{text:?}: {e}");
        }
        assert!(p("dir /TRAILER!!!x 755 0 0\n").is_ok());
    }

    /// The kernel's rootfs has /dev with /dev/console in it before it unpacks an image: a
    /// `dev` that is not a directory is never created (found by fuzz/ `manifest`, a hard link
    /// named dev; `check` reported it, the parser and the writer took it).
    #[test]
    fn the_kernels_dev_is_only_replaced_by_a_directory() {
        for text in ["file /a ${SRC}/hosts 644 0 0 /dev\n", "slink /dev x 777 0 0\n", "pipe ./dev/ 644 0 0\n"] {
            let e = p(text).unwrap_err().to_string();
            assert!(e.contains("the kernel's /dev holds /dev/console"), "{text:?}: {e}");
        }
        assert!(p("dir /dev 755 0 0\nnod /dev/console 600 0 0 c 5 1\npipe /root 644 0 0\n").is_ok());
        let e = Entry::new(b"dev".to_vec(), FileKind::Socket, 0o600, Data::None);
        assert!(crate::Layout::plan(vec![e], Default::default()).is_err());
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
