//! The servers' storage and systemd-stub's hand-over, as text and bytes the machine gives:
//! multipath.conf, the bindings and wwids files and the name a map gets
//! (crates/contract/src/multipath.rs), integritytab (integritytab.rs), a SCSI disk's VPD page
//! 0x83 (`leanrd_init::multipath::wwid_from_vpd83`), and the credentials of the kernel's command
//! line and of SMBIOS type 11 (`leanrd_init::stub`).
//!
//! Holds to:
//! - nothing panics;
//! - a multipath.conf that does not read says where: the file and a line that exists;
//! - a map's name is its alias, its binding, a friendly name no binding holds, or its WWID;
//! - a WWID from VPD 0x83 is a designator type digit and printable ASCII;
//! - a credential that parses has a name systemd accepts, and a value no longer than its text;
//! - a ZFS label that parses names a pool ZFS would take (no '/') and at least one top-level
//!   vdev, the member's among them only if the label says so.

#![no_main]

use leanrd_contract::multipath::{MultipathConf, map_name, parse_bindings, parse_wwids};
use libfuzzer_sys::fuzz_target;

fn multipath(text: &str) {
    let mut conf = MultipathConf::default();
    if let Err(e) = conf.read(text, "/etc/multipath.conf") {
        let line: usize = e
            .strip_prefix("/etc/multipath.conf:")
            .and_then(|r| r.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("an error that names no line: {e}"));
        assert!((1..=text.lines().count().max(1)).contains(&line), "{e}");
    }
    let bindings = parse_bindings(text);
    let wwids = parse_wwids(text);
    for w in wwids.iter().take(4) {
        assert!(!w.is_empty());
        let name = map_name(&conf, &bindings, w, &|n| n.len() % 3 == 0);
        let alias = conf.aliases.iter().any(|(x, a)| x == w && *a == name);
        let bound = bindings.iter().any(|(a, x)| x == w && *a == name);
        let friendly = name.starts_with(&conf.alias_prefix) && !bindings.iter().any(|(a, _)| *a == name);
        assert!(alias || bound || friendly || name == *w, "{w} named {name}");
    }
}

fn zfs_label(bytes: &[u8]) {
    // The nvlist's header in front, so that most inputs reach the pairs.
    let mut b = vec![1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    b.extend_from_slice(bytes);
    for input in [bytes, &b[..]] {
        if let Some(l) = leanrd_init::zfs::parse_label(input) {
            assert!(!l.pool.contains('/') && leanrd_contract::zfs_name(&l.pool).is_ok(), "{l:?}");
            assert!(l.children >= 1, "{l:?}");
        }
    }
}

fn credentials(text: &str, bytes: &[u8]) {
    for binary in [false, true] {
        if let Ok((name, value)) = leanrd_init::stub::parse_set(text, binary) {
            assert!(leanrd_init::stub::name_valid(&name), "{name:?}");
            assert!(value.len() <= text.len(), "{} bytes from {} of text", value.len(), text.len());
        }
    }
    for c in leanrd_init::stub::smbios_credentials(bytes).into_iter().flatten() {
        assert!(leanrd_init::stub::name_valid(&c.0), "{:?}", c.0);
    }
}

fuzz_target!(|data: &[u8]| {
    // Each map_name may try many friendly names: the machine's files are small.
    if data.len() > 16 << 10 {
        return;
    }
    let text = String::from_utf8_lossy(data);
    multipath(&text);
    let _ = leanrd_contract::parse_integritytab(&text, "/etc/integritytab");
    if let Some(w) = leanrd_init::multipath::wwid_from_vpd83(data) {
        assert!(w.starts_with(['1', '2', '3', '8']), "{w}");
        assert!(w.bytes().all(|b| b.is_ascii_graphic()), "{w:?}");
    }
    credentials(&text, data);
    zfs_label(data);
});
