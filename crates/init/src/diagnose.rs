//! Everything useful about a failure, on one screen: why, the command line, the block
//! devices and what they are, modules that failed, and the notes steps left.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;

use crate::devices::Dev;

/// The diagnosis of a failed boot: what went wrong and what the machine had.
pub struct Report<'a> {
    /// Why the boot failed: the error that stopped it.
    pub why: &'a str,
    /// The kernel command line, its secrets redacted.
    pub cmdline: &'a str,
    /// The block devices found, with what probing found on each.
    pub devs: &'a [Dev],
    /// The modules that failed to load: name, and why.
    pub failed: &'a BTreeMap<String, String>,
    /// How many modules are loaded.
    pub loaded: usize,
    /// The module tables' error, the configuration's, the command line's, helpers'.
    pub notes: &'a [String],
}

impl Report<'_> {
    /// The report as console text: one `leanrd: ` line per heading or note, and a line per block
    /// device with its TYPE, UUID, LABEL, PARTUUID and PARTLABEL.
    pub fn text(&self) -> String {
        let mut s = format!(
            "leanrd: cannot boot: {}\nleanrd: kernel command line: {}\nleanrd: block devices seen:\n",
            self.why,
            self.cmdline.trim()
        );
        if self.devs.is_empty() {
            s += "  (none: no driver for the disk controller was loaded?)\n";
        }
        for d in self.devs {
            let p = &d.probe;
            let f = |k: &str, v: &Option<String>| v.as_ref().map(|x| format!(" {k}={x}")).unwrap_or_default();
            s += &format!(
                "  /dev/{:<10} TYPE={}{}{}{}{}{}\n",
                d.name,
                p.fstype.as_deref().unwrap_or("?"),
                f("UUID", &p.uuid),
                f("LABEL", &p.label),
                f("PARTUUID", &p.partuuid),
                f("PARTLABEL", &p.partlabel),
                if d.complete == Some(false) { " (btrfs: members missing)" } else { "" }
            );
        }
        if !self.failed.is_empty() {
            s += "leanrd: modules that failed to load:\n";
            for (m, why) in self.failed {
                s += &format!("  {m}: {why}\n");
            }
        }
        s += &format!("leanrd: {} modules loaded\n", self.loaded);
        for n in self.notes {
            s += &format!("leanrd: {n}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::tests::{dev, fs};
    use alloc::vec;

    #[test]
    fn says_why_and_what_was_there() {
        let devs = vec![dev("vda1", (254, 1), Some("vda"), 1, fs("ext4", "1111", Some("root"), None, None))];
        let mut failed = BTreeMap::new();
        failed.insert("nvme".into(), crate::modules::load_error("/lib/modules/k/nvme.ko", crate::sys::Errno::NOEXEC));
        let notes = vec![String::from("lvm failed (exit status 5)")];
        let r = Report {
            why: "waited 5 s for root=UUID=x",
            cmdline: "quiet root=UUID=x\n",
            devs: &devs,
            failed: &failed,
            loaded: 3,
            notes: &notes,
        };
        let t = r.text();
        assert!(
            t.starts_with(
                "leanrd: cannot boot: waited 5 s for root=UUID=x\nleanrd: kernel command line: quiet root=UUID=x\n"
            ),
            "{t}"
        );
        assert!(t.contains("  /dev/vda1       TYPE=ext4 UUID=1111 LABEL=root\n"), "{t}");
        assert!(t.contains("  nvme: ") && t.contains("(errno 8)"), "{t}");
        assert!(t.ends_with("leanrd: 3 modules loaded\nleanrd: lvm failed (exit status 5)\n"), "{t}");
    }
}
