//! The target's modprobe configuration (modprobe.d(5)): `options`, `blacklist`, `softdep` and
//! `alias` lines, read from the directories kmod reads, for the modules in the image. /init
//! gets options and blacklist in its configuration; softdep and alias lines go into the
//! image's module tables, which have the same line formats.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use leanrd_archive::{Context, Result};
use leanrd_kmod::normalize;

use crate::plan::host_path;

/// kmod's search order: a file name in an earlier directory hides the same name in later ones.
const DIRS: [&str; 5] =
    ["/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d"];

/// What modprobe.d says, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModprobeConf {
    /// (module, parameters).
    pub options: Vec<(String, String)>,
    /// Modules whose aliases are ignored (`blacklist MODULE`): never loaded for a modalias. Names
    /// normalised.
    pub blacklist: Vec<String>,
    /// Whole `softdep MODULE pre: ... post: ...` lines.
    pub softdeps: Vec<String>,
    /// (pattern, module).
    pub aliases: Vec<(String, String)>,
}

/// Lines with `\` continuations joined, comments and blank lines dropped.
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        if let Some(l) = line.strip_suffix('\\') {
            cur.push_str(l);
            cur.push(' ');
            continue;
        }
        cur.push_str(line);
        let l = std::mem::take(&mut cur);
        let l = l.trim();
        if !l.is_empty() && !l.starts_with('#') {
            out.push(l.to_string());
        }
    }
    out
}

impl ModprobeConf {
    /// Add the lines of one file. Commands leanrd does not carry (`install`, `remove`) and
    /// malformed lines are skipped, as modprobe skips them.
    pub fn parse(&mut self, text: &str) {
        for l in logical_lines(text) {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["options", m, params @ ..] if !params.is_empty() => {
                    self.options.push((normalize(m), params.join(" ")));
                }
                ["blacklist", m] => self.blacklist.push(normalize(m)),
                ["softdep", m, _, ..] => self.softdeps.push(format!("softdep {} {}", normalize(m), w[2..].join(" "))),
                ["alias", pattern, m] => self.aliases.push((pattern.to_string(), normalize(m))),
                _ => {}
            }
        }
    }

    /// Read every `*.conf` of the target's modprobe.d directories, in kmod's order: by file
    /// name, an earlier directory's file hiding a later one's of the same name.
    pub fn read(sysroot: &Path) -> Result<ModprobeConf> {
        let mut files: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
        for d in DIRS {
            let Ok(rd) = fs::read_dir(host_path(sysroot, d)) else { continue };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".conf") && !files.contains_key(&name) {
                    files.insert(name, e.path());
                }
            }
        }
        let mut c = ModprobeConf::default();
        for p in files.values() {
            // A dangling link (a file masked by a link to /dev/null reads as empty).
            let Ok(text) = fs::read(p) else { continue };
            let text = String::from_utf8(text).with_context(|| format!("{}: not text", p.display()))?;
            c.parse(&text);
        }
        Ok(c)
    }

    /// Only what concerns the modules in `set` (and names a blacklist applies to).
    pub(crate) fn for_modules(&self, set: &BTreeSet<String>) -> ModprobeConf {
        ModprobeConf {
            options: self.options.iter().filter(|(m, _)| set.contains(m)).cloned().collect(),
            blacklist: self.blacklist.iter().filter(|m| set.contains(*m)).cloned().collect(),
            softdeps: self
                .softdeps
                .iter()
                .filter(|l| l.split_whitespace().nth(1).is_some_and(|m| set.contains(m)))
                .cloned()
                .collect(),
            aliases: self.aliases.iter().filter(|(_, m)| set.contains(m)).cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_modprobe_d_as_kmod_does() {
        let t = tempfile::tempdir().unwrap();
        let (etc, lib) = (t.path().join("etc/modprobe.d"), t.path().join("usr/lib/modprobe.d"));
        fs::create_dir_all(&etc).unwrap();
        fs::create_dir_all(&lib).unwrap();
        fs::write(lib.join("a.conf"), "options loop max_loop=8\n").unwrap();
        fs::write(etc.join("a.conf"), "# mine\noptions loop max_loop=3 \\\n  max_part=1\nblacklist pcspkr\n").unwrap();
        fs::write(lib.join("b.conf"), "softdep nvme-core pre: crc32c\nalias my-disk virtio-blk\ninstall x /bin/true\n")
            .unwrap();
        fs::write(lib.join("c.txt"), "options loop max_loop=99\n").unwrap();
        let c = ModprobeConf::read(t.path()).unwrap();
        assert_eq!(c.options, [("loop".to_string(), "max_loop=3 max_part=1".to_string())], "etc hides usr/lib");
        assert_eq!(c.blacklist, ["pcspkr"]);
        assert_eq!(c.softdeps, ["softdep nvme_core pre: crc32c"]);
        assert_eq!(c.aliases, [("my-disk".to_string(), "virtio_blk".to_string())]);
        let only = c.for_modules(&BTreeSet::from(["loop".to_string(), "nvme_core".to_string()]));
        assert_eq!((only.options.len(), only.blacklist.len(), only.softdeps.len(), only.aliases.len()), (1, 0, 1, 0));
    }
}
