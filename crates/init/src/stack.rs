//! The block stack the image can assemble — LUKS (cryptsetup, in [`crate::luks`]), LVM (lvm,
//! with thin_check and cache_check for its pools), md RAID (mdadm), standalone dm-integrity
//! (integritysetup, in [`crate::integrity`]), bcache (in [`crate::bcache`]) — each only when the configuration has its
//! [`Layer`](leanrd_contract::Layer), with the modules the layer lists loaded first. dm-multipath
//! maps ([`crate::multipath`]) are made before any of these look at the devices, as they are
//! scanned, so that each layer above finds its device on the map rather than on one path
//! (LUKS or LVM on a multipath map).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use leanrd_contract::{Capability, DeviceRef};
use rustix::fd::BorrowedFd;

use crate::Init;
use crate::devices::Dev;
use crate::probe;
use crate::process;
use crate::sys;

/// One pass over the stack: unlock, then activate and assemble. True when a container was
/// unlocked. `events` (the uevent socket) is served while a passphrase prompt waits.
pub fn assemble(init: &mut Init, devs: &[Dev], wanted: &[&DeviceRef], events: Option<BorrowedFd<'_>>) -> bool {
    let unlocked = crate::luks::unlock(init, devs, wanted, events);
    if !unlocked {
        activate(init, devs);
    }
    unlocked
}

/// Load the modules a layer lists; false when the image does not have the layer.
pub(crate) fn prepare(init: &mut Init, c: Capability) -> bool {
    let Some(layer) = init.conf.layer(c) else { return false };
    let modules = layer.modules.clone();
    init.mods.load_many(&modules, &mut init.log);
    true
}

/// Assemble md arrays and activate LVM volume groups, when the image can and a probed device
/// carries their signature (nothing is loaded or run for a machine without them).
fn activate(init: &mut Init, devs: &[Dev]) {
    let has = |t: &str| devs.iter().any(|d| d.probe.fstype.as_deref() == Some(t));
    if !init.cmd.no_md && has(probe::MD_MEMBER) && prepare(init, Capability::Md) {
        helper(init, "mdadm", &["--assemble", "--scan", "--run"]);
    }
    if has(probe::INTEGRITY) && prepare(init, Capability::Integrity) {
        crate::integrity::open(init, devs);
    }
    if has(probe::BCACHE) && prepare(init, Capability::Bcache) {
        crate::bcache::register(init, devs);
    }
    if !init.cmd.no_lvm && has(probe::LVM_MEMBER) && prepare(init, Capability::Lvm) {
        let cfg = lvm_config(process::which("thin_check").as_deref(), process::which("cache_check").as_deref());
        let args = ["vgchange", "-ay", "--sysinit", "--config", &cfg];
        match process::run_capture("lvm", &args, 64 * 1024) {
            Err(e) => note(init, format!("{e} [lvm vgchange]")),
            Ok((st, said)) => {
                for n in lvm_problems(&String::from_utf8_lossy(&said)) {
                    note(init, n);
                }
                if let Err(how) = process::describe_status(st) {
                    note(init, format!("lvm failed ({how}) [lvm vgchange]"));
                }
            }
        }
        sys::reap();
    }
}

/// lvm's configuration here: no udev (lvm creates the device nodes itself), and the metadata
/// checkers where the image has them (lvm.conf's `thin_check_executable` and
/// `cache_check_executable` name the host's paths, or nothing: the compiled-in default).
fn lvm_config(thin_check: Option<&str>, cache_check: Option<&str>) -> String {
    let mut cfg =
        String::from("activation { udev_sync = 0 udev_rules = 0 } devices { obtain_device_list_from_udev = 0 }");
    let checkers: Vec<String> = [("thin_check_executable", thin_check), ("cache_check_executable", cache_check)]
        .into_iter()
        .filter_map(|(k, p)| Some(format!("{k} = \"{}\"", p?)))
        .collect();
    if !checkers.is_empty() {
        cfg.push_str(&format!(" global {{ {} }}", checkers.join(" ")));
    }
    cfg
}

/// What lvm's messages say went wrong with a thin or cache pool, for the diagnosis: a pool
/// whose metadata check failed (`Check of pool VG/POOL failed (status:N). Manual repair
/// required!`, from thin_check or cache_check), and a checker lvm skipped because the image
/// lacks it (`Check is skipped, please install recommended missing binary PATH!`).
fn lvm_problems(said: &str) -> Vec<String> {
    let mut v = Vec::new();
    for line in said.lines().map(str::trim) {
        if let Some(rest) = line.split("Check of pool ").nth(1)
            && let Some((pool, _)) = rest.split_once(" failed")
        {
            v.push(format!(
                "LVM pool {pool}: the check of its metadata (thin_check or cache_check) failed, so lvm leaves it and \
                 the LVs on it inactive; repair it from a rescue system with `lvconvert --repair {pool}`"
            ));
        } else if let Some(rest) = line.split("missing binary ").nth(1) {
            let prog = rest.trim_end_matches('!');
            v.push(format!(
                "lvm activated a pool without checking its metadata: {prog} is not in the image (install \
                 thin-provisioning-tools and build the image again)"
            ));
        }
    }
    v
}

/// A note for the diagnosis, once (the stack is looked at again on every pass).
pub(crate) fn note(init: &mut Init, n: String) {
    if !init.notes.contains(&n) {
        init.notes.push(n);
    }
}

/// Run a helper; its failure is kept for the diagnosis (a failing step need not be fatal:
/// the root may be elsewhere).
fn helper(init: &mut Init, prog: &str, args: &[&str]) {
    if let Err(e) = sys::run(prog, args) {
        let what: Vec<&str> = args.iter().take(2).copied().collect();
        note(init, format!("{e} [{prog} {}]", what.join(" ")));
    }
    sys::reap();
}

/// Tell the real root's udev that the device-mapper devices made here are set up. lvm and
/// cryptsetup ran without udev, so udev's database has no record of them; on the root's
/// coldplug ("add") udev's dm rules then treat each as not yet ready — no /dev/mapper links,
/// `SYSTEMD_READY=0` — and systemd waits 90 s for a /usr or swap named by /dev/mapper in the
/// fstab. The record udev keeps for a primary dm event is enough (what peers without udev
/// in the initramfs do too).
pub fn hand_over_to_udev(init: &mut Init) {
    let Ok(names) = sys::list_dir("/sys/block") else { return };
    for (name, _) in names.iter().filter(|(n, _)| n.starts_with("dm-")) {
        let Some(devno) = sys::read_string(&format!("/sys/block/{name}/dev")) else { continue };
        let db = format!("/run/udev/data/b{}", devno.trim());
        if sys::exists(&db) {
            continue;
        }
        sys::mkdir_p("/run/udev/data");
        match sys::write_file_mode(&db, "E:DM_UDEV_PRIMARY_SOURCE_FLAG=1\n", 0o644) {
            Ok(()) => init.log.step(&format!("udev: {name} recorded as set up")),
            Err(e) => init.log.error(&format!("{db}: {}", sys::strerror(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lvm_is_told_where_the_checkers_are() {
        let c = lvm_config(Some("/usr/sbin/thin_check"), None);
        assert!(c.ends_with(" global { thin_check_executable = \"/usr/sbin/thin_check\" }"), "{c}");
        assert!(!lvm_config(None, None).contains("global"));
        let c = lvm_config(Some("/a"), Some("/b"));
        assert!(c.contains("thin_check_executable = \"/a\" cache_check_executable = \"/b\""), "{c}");
    }

    #[test]
    fn failed_pool_checks_are_named() {
        let said = "  Check of pool vg0/pool failed (status:1). Manual repair required!\n  \
                    WARNING: Check is skipped, please install recommended missing binary /usr/sbin/cache_check!\n\
                    Check of pool \n  0 logical volume(s) in volume group \"vg0\" now active\n";
        let v = lvm_problems(said);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].starts_with("LVM pool vg0/pool: the check") && v[0].contains("lvconvert --repair vg0/pool"));
        assert!(v[1].contains("/usr/sbin/cache_check is not in the image"), "{}", v[1]);
        for hostile in ["Check of pool", "Check of pool  failed", "missing binary ", "\u{0}Check of pool x failed"] {
            let _ = lvm_problems(hostile);
        }
    }
}
