//! Standalone dm-integrity: each device whose superblock says dm-integrity is opened with
//! integritysetup, under the name and with the options /etc/integritytab gives it (the image
//! has the system's copy), else as `integrity-KNAME` with integritysetup's defaults (crc32c
//! tags, a journal). One not in the table but opened is still checked: a tag that does not
//! match its data is a read error, never data handed on.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use leanrd_contract::{INTEGRITYTAB, IntegrityEntry, parse_integritytab};

use crate::Init;
use crate::devices::{self, Dev};
use crate::probe;
use crate::process;
use crate::stack::note;
use crate::sys;

/// Open the dm-integrity devices among `devs` that nothing holds yet.
pub fn open(init: &mut Init, devs: &[Dev]) {
    let table: Vec<IntegrityEntry> = match sys::read_string(INTEGRITYTAB) {
        None => Vec::new(),
        Some(t) => parse_integritytab(&t, INTEGRITYTAB).unwrap_or_else(|e| {
            note(init, e);
            Vec::new()
        }),
    };
    for d in devs.iter().filter(|d| d.probe.fstype.as_deref() == Some(probe::INTEGRITY)) {
        let held = sys::list_dir(&format!("/sys/class/block/{}/holders", d.name)).is_ok_and(|h| !h.is_empty());
        if held {
            continue;
        }
        let entry =
            table.iter().find(|e| devices::find(&e.device, devs, &devices::devno_of).is_some_and(|x| x.name == d.name));
        let name = entry.map_or_else(|| format!("integrity-{}", d.name), |e| e.name.clone());
        let path = d.path();
        let mut args: Vec<&str> = alloc::vec!["open", &path, &name];
        args.extend(entry.map_or(&[][..], |e| &e.args[..]).iter().map(String::as_str));
        match process::run("integritysetup", &args) {
            Ok(()) => init.log.step(&format!("integrity: {path} opened as /dev/mapper/{name}")),
            Err(e) => note(init, format!("{e} [integritysetup open {path} {name}]")),
        }
        sys::reap();
    }
}
