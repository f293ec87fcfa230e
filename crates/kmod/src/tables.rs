//! The tables depmod writes, read into a [`ModuleDb`] and written back for a subset of the
//! modules (what an image carries): the reader and the writer of one format, side by side.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::ModuleDb;
use crate::names::{name_of_path, normalize, normalize_alias};

/// The tables' contents, by file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tables {
    /// modules.dep.
    pub dep: Vec<u8>,
    /// modules.alias.
    pub alias: Vec<u8>,
    /// modules.softdep.
    pub softdep: Vec<u8>,
    /// modules.builtin: paths of the modules built into the kernel.
    pub builtin: Vec<u8>,
    /// modules.builtin.modinfo: NUL-separated `module.key=value` records.
    pub builtin_modinfo: Vec<u8>,
}

impl Tables {
    /// The file names, in the order of [`Tables::files`].
    pub const FILES: [&str; 5] =
        ["modules.dep", "modules.alias", "modules.softdep", "modules.builtin", "modules.builtin.modinfo"];

    /// Read each file with `read` (which gives an empty table for a missing file, or an
    /// error).
    pub fn read<E>(mut read: impl FnMut(&'static str) -> Result<Vec<u8>, E>) -> Result<Tables, E> {
        let [dep, alias, softdep, builtin, builtin_modinfo] = Tables::FILES;
        Ok(Tables {
            dep: read(dep)?,
            alias: read(alias)?,
            softdep: read(softdep)?,
            builtin: read(builtin)?,
            builtin_modinfo: read(builtin_modinfo)?,
        })
    }

    /// (file name, contents) of each table; modules.builtin.modinfo only when it has any.
    pub fn files(&self) -> Vec<(&'static str, &[u8])> {
        let [a, b, c, d, e] = Tables::FILES;
        let mut v = vec![(a, &self.dep[..]), (b, &self.alias[..]), (c, &self.softdep[..]), (d, &self.builtin[..])];
        if !self.builtin_modinfo.is_empty() {
            v.push((e, &self.builtin_modinfo[..]));
        }
        v
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Why a table line could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {msg}")]
pub struct ParseError {
    /// The table file the error is in.
    pub file: &'static str,
    /// Its line, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub msg: String,
}

impl ModuleDb {
    /// Read the tables.
    pub fn parse(t: &Tables) -> Result<ModuleDb, ParseError> {
        let (dep, alias, softdep) = (text(&t.dep), text(&t.alias), text(&t.softdep));
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
            // One path before the ':' (as a dependency, a path with white space would be read
            // as several).
            let m = m.trim();
            if m.is_empty() || m.contains(char::is_whitespace) {
                return Err(ParseError { file: "modules.dep", line: n + 1, msg: format!("\"{m}\" is not one path") });
            }
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
            // `alias PATTERN MODULE`, where the pattern may hold spaces (depmod writes a
            // module's MODULE_ALIAS as it is: arm64's "mt8183_mt6358_ts3a227_max98357 soc
            // card"): the module is the last word, the pattern everything between.
            let parsed = line
                .strip_prefix("alias")
                .filter(|r| r.starts_with(char::is_whitespace))
                .and_then(|r| r.trim().rsplit_once(char::is_whitespace))
                .map(|(p, m)| (p.trim_end(), m));
            let Some((pattern, module)) = parsed.filter(|(p, _)| !p.is_empty()) else {
                return Err(ParseError { file: "modules.alias", line: n + 1, msg: format!("bad line \"{line}\"") });
            };
            db.aliases.push((normalize_alias(pattern), normalize(module)));
        }
        for (n, line) in softdep.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            if words.next() != Some("softdep") {
                return Err(ParseError { file: "modules.softdep", line: n + 1, msg: format!("bad line \"{line}\"") });
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
        for line in text(&t.builtin).lines().map(str::trim).filter(|l| !l.is_empty()) {
            db.builtin.insert(name_of_path(line));
            db.builtin_paths.push(line.to_string());
        }
        for rec in t.builtin_modinfo.split(|&b| b == 0) {
            let Ok(rec) = core::str::from_utf8(rec) else { continue };
            if let Some((m, v)) = rec.split_once(".alias=") {
                db.builtin.insert(normalize(m));
                db.builtin_aliases.push((normalize_alias(v), normalize(m)));
            }
        }
        db.build_index();
        Ok(db)
    }

    /// The tables for a subset of the modules (an image's), in depmod's formats, so that
    /// [`ModuleDb::parse`] reads them back. `image_path` gives a module's path in the subset
    /// (e.g. without a compression suffix when modules are decompressed at build time).
    pub fn subset(&self, set: &BTreeSet<String>, image_path: impl Fn(&str) -> String) -> Tables {
        let mut names: Vec<&String> = set.iter().filter(|n| self.paths.contains_key(*n)).collect();
        names.sort_by_key(|n| &self.paths[*n]);
        let mut t = Tables::default();
        for n in &names {
            let deps: Vec<String> = self.deps[*n].iter().filter(|d| set.contains(*d)).map(|d| image_path(d)).collect();
            let sep = if deps.is_empty() { "" } else { " " };
            t.dep.extend(format!("{}:{sep}{}\n", image_path(n), deps.join(" ")).bytes());
        }
        for (pat, m) in self.aliases.iter().filter(|(_, m)| set.contains(m)) {
            t.alias.extend(format!("alias {pat} {m}\n").bytes());
        }
        for n in &names {
            if let Some((pre, post)) = self.softdeps.get(*n) {
                let mut line = format!("softdep {n}");
                for (key, list) in [("pre:", pre), ("post:", post)] {
                    if !list.is_empty() {
                        line += &format!(" {key} {}", list.join(" "));
                    }
                }
                t.softdep.extend(line.bytes().chain([b'\n']));
            }
        }
        for p in &self.builtin_paths {
            t.builtin.extend(p.bytes().chain([b'\n']));
        }
        // Built-in modules' aliases (modules.builtin.modinfo) are left out: nothing is loaded
        // for them, and an alias that only a built-in module has resolves to nothing either way.
        t
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::vec;

    pub(crate) fn tables(dep: &str, alias: &str, softdep: &str, builtin: &str, modinfo: &[u8]) -> Tables {
        Tables {
            dep: dep.into(),
            alias: alias.into(),
            softdep: softdep.into(),
            builtin: builtin.into(),
            builtin_modinfo: modinfo.into(),
        }
    }

    /// An alias with spaces in it, as depmod writes arm64's sound-card aliases: the module
    /// is the last word (the whole table was refused, and no module could be loaded).
    #[test]
    fn an_alias_may_hold_spaces() {
        let t = Tables {
            dep: b"kernel/sound/mt8183_mt6358_ts3a227_max98357.ko:\n".to_vec(),
            alias: b"alias mt8183_mt6358_ts3a227_max98357 soc card mt8183_mt6358_ts3a227_max98357\nalias  x  \n"
                .to_vec(),
            ..Tables::default()
        };
        let e = ModuleDb::parse(&t).unwrap_err();
        assert_eq!((e.file, e.line), ("modules.alias", 2), "a line without a module is still refused");
        let t = Tables { alias: t.alias[..t.alias.iter().position(|&b| b == b'\n').unwrap() + 1].to_vec(), ..t };
        let db = ModuleDb::parse(&t).unwrap();
        assert_eq!(db.aliases.len(), 1);
        assert_eq!(db.aliases[0].1, "mt8183_mt6358_ts3a227_max98357");
        assert!(matches!(
            db.resolve("mt8183_mt6358_ts3a227_max98357 soc card"),
            crate::Resolved::Modules(m) if m == ["mt8183_mt6358_ts3a227_max98357"]
        ));
    }

    #[test]
    fn bad_lines_are_errors() {
        let e = ModuleDb::parse(&tables("x\n", "", "", "", b"")).unwrap_err();
        assert_eq!(e.to_string(), "modules.dep:1: missing ':'");
        let e = ModuleDb::parse(&tables("", "alias x\n", "", "", b"")).unwrap_err();
        assert!(e.to_string().starts_with("modules.alias:1:"));
    }

    /// A modules.dep line with several paths before its ':' was taken as one module whose
    /// path held spaces, and one with none as a module named ""; written as another module's
    /// dependency, such a path read back as several modules, or none (found by fuzz/
    /// `kmod_tables`).
    #[test]
    fn one_path_before_the_colon() {
        let e = ModuleDb::parse(&tables("a.ko:\nkernel/x.ko kernel/ext4.ko: a.ko\n", "", "", "", b"")).unwrap_err();
        assert_eq!(e.to_string(), "modules.dep:2: \"kernel/x.ko kernel/ext4.ko\" is not one path");
        // No path at all: a module named "" that other modules' dependencies could name.
        let e = ModuleDb::parse(&tables("kernel/ext4.ko: x/\n:\n", "", "", "", b"")).unwrap_err();
        assert_eq!(e.to_string(), "modules.dep:2: \"\" is not one path");
        let db =
            ModuleDb::parse(&tables(" kernel/ext4.ko : kernel/jbd2.ko\nkernel/jbd2.ko:\n", "", "", "", b"")).unwrap();
        assert_eq!(db.paths["ext4"], "kernel/ext4.ko");
    }

    /// What the writer writes for a subset, the reader reads back to the same resolution.
    #[test]
    fn a_subset_reads_back() {
        let db = crate::resolve::tests::db();
        let set: BTreeSet<String> =
            ["ext4", "jbd2", "crc16", "crc32c_generic", "crc32c_intel"].map(String::from).into();
        let t = db.subset(&set, |n| db.paths[n].clone());
        let back = ModuleDb::parse(&t).unwrap();
        for w in ["fs-ext4", "vfat", "crypto-crc32c"] {
            assert_eq!(back.resolve(w), db.resolve(w), "{w}");
        }
        assert_eq!(back.resolve("virtio_blk"), crate::Resolved::Missing);
        assert_eq!(t.files()[3], ("modules.builtin", &b"kernel/fs/vfat/vfat.ko\n"[..]));
        let _ = vec![0];
    }
}
