//! Everything useful about a failure, on one screen: why, the command line, the block
//! devices and what they are, modules that failed, and the notes steps left.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;

use crate::devices::Dev;

/// Why no block device was seen, for a root on one (a local disk, a live medium).
pub const NO_DISK_CONTROLLER: &str = "none: no driver for the disk controller was loaded?";

/// Why no block device was seen, for a root on one that a network transport brings in.
pub const NO_NETWORK_DISK: &str = "none: no disk came over the iSCSI or NVMe/TCP connection";

/// The diagnosis of a failed boot: what went wrong and what the machine had.
pub struct Report<'a> {
    /// Why the boot failed: the error that stopped it.
    pub why: &'a str,
    /// The kernel command line, its secrets redacted.
    pub cmdline: &'a str,
    /// The block devices found, with what probing found on each.
    pub devs: &'a [Dev],
    /// What to say when there are none (why there may be none); None: the root is not on a
    /// block device, and the block devices are listed only when there are some.
    pub no_disk_hint: Option<&'a str>,
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
        let mut s =
            format!("leanrd: cannot boot: {}\nleanrd: kernel command line: {}\n", self.why, self.cmdline.trim());
        match (self.devs.is_empty(), self.no_disk_hint) {
            (true, Some(hint)) => s += &format!("leanrd: block devices seen:\n  ({hint})\n"),
            (true, None) => {}
            (false, _) => s += "leanrd: block devices seen:\n",
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
            no_disk_hint: Some(NO_DISK_CONTROLLER),
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

    /// A root on block devices says why there may be none; one that is not (NFS) drops the
    /// heading when there are none, and lists them when there are.
    #[test]
    fn the_block_device_hint_only_for_a_root_on_block_devices() {
        let failed = BTreeMap::new();
        let r = |devs: &[Dev], hint| {
            Report { why: "x", cmdline: "", devs, no_disk_hint: hint, failed: &failed, loaded: 0, notes: &[] }.text()
        };
        let t = r(&[], Some(NO_DISK_CONTROLLER));
        assert!(
            t.contains("leanrd: block devices seen:\n  (none: no driver for the disk controller was loaded?)\n"),
            "{t}"
        );
        let t = r(&[], None);
        assert!(!t.contains("block devices") && !t.contains("disk controller"), "{t}");
        let devs = vec![dev("vda1", (254, 1), Some("vda"), 1, fs("ext4", "1111", None, None, None))];
        let t = r(&devs, None);
        assert!(t.contains("leanrd: block devices seen:\n  /dev/vda1 "), "{t}");
    }
}
