//! bcache: a backing device cached by a cache set (an SSD), seen as /dev/bcacheN once both are
//! registered with the kernel. /init registers every device whose superblock says bcache by
//! writing its path to /sys/fs/bcache/register, as bcache-tools' udev rule does, with no
//! program in the image. The kernel starts /dev/bcacheN when the backing device and its
//! cache set are both there; one attached to a set that never comes is not started, and /init
//! waits for the root as the kernel's bcache waits, the diagnosis saying which set is missing.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::Init;
use crate::devices::Dev;
use crate::probe::{self, BCACHE_SB_AT, BCACHE_SB_LEN, BcacheSb};
use crate::sys;

/// Where a device is registered.
const REGISTER: &str = "/sys/fs/bcache/register";

/// Register the bcache devices among `devs` that are not yet (a registered one has a `bcache`
/// directory in sysfs).
pub fn register(init: &mut Init, devs: &[Dev]) {
    for d in devs.iter().filter(|d| d.probe.fstype.as_deref() == Some(probe::BCACHE)) {
        if sys::exists(&format!("/sys/class/block/{}/bcache", d.name)) {
            continue;
        }
        let dev = format!("/dev/{}", d.name);
        // One write, its errno kept (sys::write_file reports a failed write as EIO).
        match sys::open_write(REGISTER).and_then(|fd| rustix::io::write(&fd, dev.as_bytes())) {
            Ok(_) => init.log.step(&format!("bcache: {dev} registered")),
            // Registered meanwhile (by the kernel's own scan, or a second path).
            Err(sys::Errno::BUSY) | Err(sys::Errno::EXIST) => {}
            Err(e) => {
                crate::stack::note(init, format!("bcache: {REGISTER}: cannot register {dev}: {}", sys::strerror(e)));
            }
        }
    }
}

/// For the diagnosis: each registered backing device the kernel has not started, because the
/// cache set it is attached to has no device registered.
pub fn waiting() -> Vec<String> {
    let Ok(names) = sys::list_dir("/sys/class/block") else { return Vec::new() };
    let mut v = Vec::new();
    for (name, _) in names {
        let running = sys::read_string(&format!("/sys/class/block/{name}/bcache/running"));
        if running.as_deref().map(str::trim) != Some("0") {
            continue;
        }
        let sb = sys::open(&format!("/dev/{name}"))
            .ok()
            .and_then(|f| sys::read_at(&f, BCACHE_SB_AT, BCACHE_SB_LEN))
            .and_then(|b| BcacheSb::parse(&b));
        v.push(waiting_text(&name, sb.as_ref()));
    }
    v
}

/// What the diagnosis says of backing device `name`, not started for want of its cache set.
fn waiting_text(name: &str, sb: Option<&BcacheSb>) -> String {
    let (who, set) = match sb {
        Some(sb) => (format!("{name} (bcache backing device {})", sb.uuid), format!("cache set {}", sb.set_uuid)),
        None => (format!("{name} (a bcache backing device)"), String::from("cache set")),
    };
    let loss = if sb.is_some_and(|s| s.dirty) {
        "its cache holds data not yet written back, which starting without it loses"
    } else {
        "its cache holds no data that is not on it (state clean)"
    };
    format!(
        "{who} is not started: its {set} is missing (no device of it registered). As the kernel's bcache does, \
         leanrd waits for the cache device; to boot without it, `echo 1 > /sys/class/block/{name}/bcache/running` \
         from the rescue shell ({loss})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backing_device_without_its_cache_is_named_with_its_set() {
        let mut sb = BcacheSb {
            backing: true,
            uuid: "d9e0986e-29b8-4dd2-b782-a28e6304c3f7".into(),
            set_uuid: "ffd136da-7122-4a2e-a711-39dbb4c8c6f0".into(),
            label: None,
            attached: true,
            dirty: false,
        };
        let t = waiting_text("vdb", Some(&sb));
        assert!(t.starts_with("vdb (bcache backing device d9e0986e-"), "{t}");
        assert!(t.contains("cache set ffd136da-7122-4a2e-a711-39dbb4c8c6f0 is missing") && t.contains("state clean"));
        sb.dirty = true;
        assert!(waiting_text("vdb", Some(&sb)).contains("not yet written back"));
        assert!(waiting_text("vdb", None).contains("its cache set is missing"));
    }
}
