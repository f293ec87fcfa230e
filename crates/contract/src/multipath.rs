//! dm-multipath as multipath-tools configures it: /etc/multipath.conf (and conf.d), the
//! bindings file (`ALIAS WWID`: the user-friendly names given so far) and the wwids file
//! (`/WWID/`: the WWIDs that have been multipathed), parsed once; /init reads the image's
//! copies of the system's files with it, and names and builds each map as multipath would.
//! What multipath-tools' own defaults are (libmultipath/defaults.h, 0.9 to 0.14):
//! user_friendly_names no, find_multipaths strict, no_path_retry undefined (fail),
//! path_grouping_policy failover, path_selector "service-time 0", alias_prefix mpath.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// The configuration file.
pub const MULTIPATH_CONF: &str = "/etc/multipath.conf";
/// Its drop-in directory (multipath-tools' default `config_dir`): `*.conf`, in name order,
/// read after it.
pub const MULTIPATH_CONF_DIR: &str = "/etc/multipath/conf.d";
/// The user-friendly names given so far.
pub const MULTIPATH_BINDINGS: &str = "/etc/multipath/bindings";
/// The WWIDs that have been multipathed.
pub const MULTIPATH_WWIDS: &str = "/etc/multipath/wwids";

/// Which devices become maps (`find_multipaths`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindMultipaths {
    /// `no`, `off`, `greedy`: every device with a WWID, one path or more.
    Greedy,
    /// `yes`, `on`, `smart`: a WWID in the wwids file, or seen on two paths or more.
    Yes,
    /// `strict` (the default): only a WWID in the wwids file.
    Strict,
}

/// What a map does when its last path fails (`no_path_retry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPathRetry {
    /// Not set: the `features` line decides (multipath-tools' default: fail).
    Undefined,
    /// `fail`: I/O fails at once.
    Fail,
    /// `queue`: I/O waits for a path, for ever (`queue_if_no_path`).
    Queue,
    /// A number of path checker intervals to queue for, after which multipathd fails I/O.
    Retries(u32),
}

/// What of multipath.conf a map is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipathConf {
    /// `user_friendly_names`: names from the bindings file (`mpatha`...) rather than the WWID.
    pub user_friendly_names: bool,
    /// `find_multipaths`.
    pub find_multipaths: FindMultipaths,
    /// `no_path_retry`.
    pub no_path_retry: NoPathRetry,
    /// `features` as given (`"1 queue_if_no_path"`); None: `0`.
    pub features: Option<String>,
    /// `path_grouping_policy multibus`: every path in one group; else failover (a group each).
    pub multibus: bool,
    /// `path_selector` (`"service-time 0"`: the selector and its argument count).
    pub path_selector: String,
    /// `alias_prefix`.
    pub alias_prefix: String,
    /// The `multipaths { multipath { wwid alias } }` entries: (WWID, alias).
    pub aliases: Vec<(String, String)>,
}

impl Default for MultipathConf {
    fn default() -> Self {
        MultipathConf {
            user_friendly_names: false,
            find_multipaths: FindMultipaths::Strict,
            no_path_retry: NoPathRetry::Undefined,
            features: None,
            multibus: false,
            path_selector: "service-time 0".into(),
            alias_prefix: "mpath".into(),
            aliases: Vec::new(),
        }
    }
}

/// The words of one line: whitespace-separated, `"..."` one word, a `#` or `!` outside quotes
/// starting a comment (multipath-tools' parser).
fn words(line: &str) -> Result<Vec<String>, &'static str> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '#' | '!' if !quoted => break,
            c if c.is_ascii_whitespace() && !quoted => {
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
    if quoted {
        return Err("a quote is not closed");
    }
    if any {
        out.push(cur);
    }
    Ok(out)
}

impl MultipathConf {
    /// Read `text` (the file `file`, for messages) over what is already set, as multipath-tools
    /// reads multipath.conf and then each conf.d file. Sections and keywords leanrd has no use
    /// for (`devices`, `overrides`, `blacklist`...) are skipped, as long as their braces
    /// balance; an error names the file, the line and what is wrong.
    pub fn read(&mut self, text: &str, file: &str) -> Result<(), String> {
        // Each open section and the line that opened it.
        let mut sections: Vec<(String, usize)> = Vec::new();
        let mut entry: (Option<String>, Option<String>) = (None, None);
        for (i, line) in text.lines().enumerate() {
            let at = |why: &str| format!("{file}:{}: {why}", i + 1);
            let mut w = words(line).map_err(at)?;
            if w.is_empty() {
                continue;
            }
            if w[0] == "}" {
                let Some((s, _)) = sections.pop() else { return Err(at("a '}' closes no section")) };
                if s == "multipath"
                    && sections.last().map(|(s, _)| s.as_str()) == Some("multipaths")
                    && let (Some(wwid), Some(alias)) = core::mem::take(&mut entry)
                {
                    self.aliases.retain(|(x, _)| *x != wwid);
                    self.aliases.push((wwid, alias));
                }
                continue;
            }
            if w.last().map(String::as_str) == Some("{") {
                w.pop();
                if w.len() != 1 {
                    return Err(at("a section is one name and '{'"));
                }
                if w[0] == "multipath" {
                    entry = (None, None);
                }
                sections.push((w.remove(0), i + 1));
                continue;
            }
            let key = w[0].as_str();
            let value = w[1..].join(" ");
            let bool_of = |v: &str| match v {
                "yes" | "on" | "1" => Ok(true),
                "no" | "off" | "0" => Ok(false),
                _ => Err(at(&format!("{key} {v}: yes or no expected"))),
            };
            match (sections.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>().as_slice(), key) {
                (["defaults"], "user_friendly_names") => self.user_friendly_names = bool_of(&value)?,
                (["defaults"], "find_multipaths") => {
                    self.find_multipaths = match value.as_str() {
                        "no" | "off" | "0" | "greedy" => FindMultipaths::Greedy,
                        "yes" | "on" | "1" | "smart" => FindMultipaths::Yes,
                        "strict" => FindMultipaths::Strict,
                        v => {
                            return Err(at(&format!("find_multipaths {v}: no, yes, greedy, smart or strict expected")));
                        }
                    }
                }
                (["defaults"], "no_path_retry") => {
                    self.no_path_retry = match value.as_str() {
                        "fail" => NoPathRetry::Fail,
                        "queue" => NoPathRetry::Queue,
                        v => match v.parse::<u32>() {
                            Ok(0) => NoPathRetry::Fail,
                            Ok(n) => NoPathRetry::Retries(n),
                            Err(_) => return Err(at(&format!("no_path_retry {v}: fail, queue or a number expected"))),
                        },
                    }
                }
                (["defaults"], "features") => self.features = Some(value),
                (["defaults"], "path_grouping_policy") => self.multibus = value == "multibus",
                (["defaults"], "path_selector") => {
                    let ok = value.split(' ').count() >= 2
                        && value.split(' ').nth(1).is_some_and(|n| n.parse::<u32>().is_ok())
                        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b" -_".contains(&b));
                    if !ok {
                        return Err(at(&format!("path_selector \"{value}\": \"NAME COUNT [ARGS]\" expected")));
                    }
                    self.path_selector = value;
                }
                (["defaults"], "alias_prefix") => self.alias_prefix = value,
                (["multipaths", "multipath"], "wwid") => entry.0 = Some(value),
                (["multipaths", "multipath"], "alias") => {
                    if value.is_empty() || value.contains('/') || value.len() >= 128 {
                        return Err(at(&format!("alias \"{value}\" is not a device-mapper name")));
                    }
                    entry.1 = Some(value)
                }
                _ => {}
            }
        }
        if let Some((s, line)) = sections.last() {
            return Err(format!("{file}:{line}: section {s} is not closed"));
        }
        Ok(())
    }

    /// The map's `features` argument: `queue_if_no_path` when the host's no_path_retry is
    /// `queue` (or unset and its features line has it). `no_path_retry N` queues for N checker
    /// intervals under multipathd, which counts them; with no daemon to count, /init loads such
    /// a map failing at once (a read through a map without paths would otherwise block PID 1
    /// for ever), and the root's multipathd adopts it and turns queueing on (a table reload of
    /// the same map: no path lost, no rename).
    pub fn features(&self) -> &'static str {
        let listed = self.features.as_deref().is_some_and(|f| f.split(' ').any(|w| w == "queue_if_no_path"));
        match self.no_path_retry {
            NoPathRetry::Queue => "1 queue_if_no_path",
            NoPathRetry::Undefined if listed => "1 queue_if_no_path",
            _ => "0",
        }
    }
}

/// The bindings file's entries, (alias, WWID), in order; lines that are not two words are
/// skipped, as multipath-tools skips them.
pub fn parse_bindings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let l = l.split('#').next()?;
            let mut w = l.split_whitespace();
            let (a, b) = (w.next()?, w.next()?);
            w.next().is_none().then(|| (a.to_string(), b.to_string()))
        })
        .collect()
}

/// The wwids file's WWIDs (`/WWID/` lines).
pub fn parse_wwids(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('/')?.strip_suffix('/').filter(|w| !w.is_empty()).map(String::from))
        .collect()
}

/// The user-friendly name number `id` (from 1): `a`..`z`, `aa`..., as multipath-tools'
/// format_devname spells it.
pub fn friendly_name(prefix: &str, id: u32) -> String {
    let mut letters = Vec::new();
    let mut id = id;
    while id >= 1 {
        id -= 1;
        letters.push(b'a' + (id % 26) as u8);
        id /= 26;
    }
    letters.reverse();
    format!("{prefix}{}", String::from_utf8_lossy(&letters))
}

/// The name map `wwid` gets, as multipath names it: the alias multipath.conf gives it; else, with
/// user_friendly_names, its binding, or the first `PREFIX<letters>` that neither the bindings
/// nor `taken` (the device-mapper names in use) have (multipath would add it to the bindings;
/// the root's multipathd keeps a map's existing name and records it); else the WWID.
pub fn map_name(
    conf: &MultipathConf,
    bindings: &[(String, String)],
    wwid: &str,
    taken: &dyn Fn(&str) -> bool,
) -> String {
    if let Some((_, a)) = conf.aliases.iter().find(|(w, _)| w == wwid) {
        return a.clone();
    }
    if !conf.user_friendly_names {
        return wwid.to_string();
    }
    if let Some((a, _)) = bindings.iter().find(|(_, w)| w == wwid) {
        return a.clone();
    }
    (1..=100_000u32)
        .map(|i| friendly_name(&conf.alias_prefix, i))
        .find(|n| !bindings.iter().any(|(a, _)| a == n) && !taken(n))
        .unwrap_or_else(|| wwid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn a_hosts_conf_is_read_as_multipath_reads_it() {
        let mut c = MultipathConf::default();
        let text = "# Debian's example\ndefaults {\n\tuser_friendly_names yes\n\tfind_multipaths \"yes\" ! why\n\
                    \tno_path_retry queue\n\tpath_selector \"round-robin 0\"\n\tpath_grouping_policy multibus\n}\n\
                    blacklist {\n\tdevnode \"^(ram|loop)[0-9]*\"\n\tdevice {\n\t\tvendor \"X\"\n\t}\n}\n\
                    multipaths {\n\tmultipath {\n\t\twwid 3600a0b80000\n\t\talias db\n\t}\n}\n";
        c.read(text, "/etc/multipath.conf").unwrap();
        assert!(c.user_friendly_names && c.multibus);
        assert_eq!(c.find_multipaths, FindMultipaths::Yes);
        assert_eq!(c.no_path_retry, NoPathRetry::Queue);
        assert_eq!(c.features(), "1 queue_if_no_path");
        assert_eq!(c.path_selector, "round-robin 0");
        assert_eq!(c.aliases, [("3600a0b80000".to_string(), "db".to_string())]);
        // A conf.d file over it.
        c.read("defaults {\nno_path_retry 12\n}\n", "/etc/multipath/conf.d/a.conf").unwrap();
        assert_eq!((c.no_path_retry, c.features()), (NoPathRetry::Retries(12), "0"));
        assert_eq!(MultipathConf::default().features(), "0");
        assert_eq!(MultipathConf::default().find_multipaths, FindMultipaths::Strict);
        let mut f = MultipathConf::default();
        f.read("defaults {\n features \"1 queue_if_no_path\"\n}", "x").unwrap();
        assert_eq!(f.features(), "1 queue_if_no_path");
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let mut c = MultipathConf::default();
        let e = c.read("defaults {\n  find_multipaths maybe\n}\n", "/etc/multipath.conf").unwrap_err();
        assert_eq!(e, "/etc/multipath.conf:2: find_multipaths maybe: no, yes, greedy, smart or strict expected");
        assert!(c.read("}\n", "f").unwrap_err().starts_with("f:1: a '}' closes"));
        assert_eq!(c.read("\ndefaults {\n", "f").unwrap_err(), "f:2: section defaults is not closed");
        assert!(c.read("defaults {\n user_friendly_names \"yes\n}\n", "f").unwrap_err().starts_with("f:2: a quote"));
        assert!(c.read("defaults {\n path_selector \"x\"\n}\n", "f").unwrap_err().starts_with("f:2: path_selector"));
        assert!(c.read("defaults {\n no_path_retry soon\n}\n", "f").is_err());
        assert!(c.read("multipaths {\n multipath {\n alias a/b\n }\n}\n", "f").is_err());
        for hostile in ["{", "{ {", "\"", "} }", "a b c {", "defaults {\n}\n}\n"] {
            let _ = MultipathConf::default().read(hostile, "h");
        }
    }

    #[test]
    fn names_are_given_as_multipath_gives_them() {
        let bindings = parse_bindings("# Multipath bindings, Version : 1.0\nmpatha 3600a0b80001\nmpathb 36001\nbad\n");
        assert_eq!(bindings, vec![("mpatha".into(), "3600a0b80001".into()), ("mpathb".into(), "36001".into())]);
        assert_eq!(parse_wwids("# comment\n/3600a0b80001/\n/36002/\nx\n//\n"), ["3600a0b80001", "36002"]);
        let none = |_: &str| false;
        let mut c = MultipathConf::default();
        assert_eq!(map_name(&c, &bindings, "3600a0b80001", &none), "3600a0b80001");
        c.user_friendly_names = true;
        assert_eq!(map_name(&c, &bindings, "3600a0b80001", &none), "mpatha");
        assert_eq!(map_name(&c, &bindings, "36009", &none), "mpathc");
        assert_eq!(map_name(&c, &bindings, "36009", &|n: &str| n == "mpathc"), "mpathd");
        c.aliases.push(("36009".into(), "data".into()));
        assert_eq!(map_name(&c, &bindings, "36009", &none), "data");
        assert_eq!(
            [1, 26, 27, 28, 702, 703].map(|i| friendly_name("mpath", i)),
            ["mpatha", "mpathz", "mpathaa", "mpathab", "mpathzz", "mpathaaa"]
        );
    }
}
