//! The kernel command line and the configuration file the generator wrote into the image.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// Settings from the kernel command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cmdline {
    pub root: Option<String>,
    pub rootfstype: Option<String>,
    pub rootflags: Option<String>,
    pub rw: bool,
    pub init: Option<String>,
    pub rootwait: bool,
    pub rootdelay: u64,
    pub panic: Option<i64>,
    pub quiet: bool,
    pub debug: bool,
    pub shell: bool,
    /// Seconds to wait for root (leanrd.timeout=, default 30).
    pub timeout: u64,
    /// rd.luks.uuid= (repeatable): LUKS containers to unlock.
    pub luks_uuids: Vec<String>,
    /// rd.luks.name=UUID=NAME: mapper names.
    pub luks_names: Vec<(String, String)>,
    /// rd.luks.key=PATH: a key file inside the image.
    pub luks_key: Option<String>,
    /// rd.luks=0 / rd.lvm=0 / rd.md=0 turn the steps off.
    pub no_luks: bool,
    pub no_lvm: bool,
    pub no_md: bool,
}

/// Split a command line into words, honouring double quotes.
pub fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(core::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

impl Cmdline {
    pub fn parse(s: &str) -> Cmdline {
        let mut c = Cmdline { timeout: 30, ..Cmdline::default() };
        for w in words(s) {
            let (k, v) = match w.split_once('=') {
                Some((k, v)) => (k, Some(v.to_string())),
                None => (w.as_str(), None),
            };
            match (k, v) {
                ("root", Some(v)) => c.root = Some(v),
                ("rootfstype", Some(v)) => c.rootfstype = Some(v),
                ("rootflags", Some(v)) => c.rootflags = Some(v),
                ("ro", None) => c.rw = false,
                ("rw", None) => c.rw = true,
                ("init", Some(v)) => c.init = Some(v),
                ("rootwait", None) => c.rootwait = true,
                ("rootdelay", Some(v)) => c.rootdelay = v.parse().unwrap_or(0),
                ("panic", Some(v)) => c.panic = v.parse().ok(),
                ("quiet", None) => c.quiet = true,
                ("leanrd.debug", _) => c.debug = true,
                ("leanrd.shell", _) => c.shell = true,
                ("leanrd.timeout", Some(v)) => c.timeout = v.parse().unwrap_or(30),
                ("rd.luks.uuid", Some(v)) => c.luks_uuids.push(v.trim_start_matches("luks-").to_string()),
                ("rd.luks.name", Some(v)) => {
                    if let Some((u, n)) = v.split_once('=') {
                        c.luks_names.push((u.to_string(), n.to_string()));
                        c.luks_uuids.push(u.to_string());
                    }
                }
                ("rd.luks.key", Some(v)) => c.luks_key = Some(v),
                ("rd.luks", Some(v)) => c.no_luks = v == "0",
                ("rd.lvm", Some(v)) => c.no_lvm = v == "0",
                ("rd.md", Some(v)) => c.no_md = v == "0",
                _ => {}
            }
        }
        c
    }
}

/// /etc/leanrd/init.conf as the generator writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conf {
    pub kver: Option<String>,
    /// Names, aliases and modaliases to load before looking for root.
    pub load: Vec<String>,
    /// The root the image was built for (used when the command line has no root=).
    pub root: Option<String>,
    pub rootfstype: Option<String>,
    pub features: Vec<String>,
}

impl Conf {
    pub fn parse(s: &str) -> Conf {
        let mut c = Conf::default();
        for line in s.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let v = v.trim();
            match k {
                "kver" => c.kver = Some(v.to_string()),
                "load" => c.load.extend(v.split_whitespace().map(str::to_string)),
                "root" => c.root = Some(v.to_string()),
                "rootfstype" => c.rootfstype = Some(v.to_string()),
                "features" => c.features.extend(v.split_whitespace().map(str::to_string)),
                _ => {}
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_command_line() {
        let c = Cmdline::parse(
            "BOOT_IMAGE=/vmlinuz root=UUID=1234-5678 rootflags=\"subvol=@,compress=zstd\" rw quiet panic=-1 \
             rd.luks.uuid=luks-abcd rd.luks.name=ef01=cryptroot leanrd.debug rootwait init=/bin/sh",
        );
        assert_eq!(c.root.as_deref(), Some("UUID=1234-5678"));
        assert_eq!(c.rootflags.as_deref(), Some("subvol=@,compress=zstd"));
        assert!(c.rw && c.quiet && c.debug && c.rootwait);
        assert_eq!(c.panic, Some(-1));
        assert_eq!(c.luks_uuids, ["abcd", "ef01"]);
        assert_eq!(c.luks_names, [("ef01".to_string(), "cryptroot".to_string())]);
        assert_eq!(c.init.as_deref(), Some("/bin/sh"));
        assert_eq!(c.timeout, 30);
    }

    #[test]
    fn parses_the_conf() {
        let c = Conf::parse("# x\nkver 6.1\nload a b\nload c\nroot UUID=x\nrootfstype ext4\nfeatures base luks\n");
        assert_eq!(c.load, ["a", "b", "c"]);
        assert_eq!(c.root.as_deref(), Some("UUID=x"));
        assert_eq!(c.features, ["base", "luks"]);
    }
}
