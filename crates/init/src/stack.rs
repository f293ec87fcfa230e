//! The block stack the image can assemble — LUKS (cryptsetup, in [`crate::luks`]), LVM (lvm),
//! md RAID (mdadm) — each only when the configuration has its
//! [`Layer`](leanrd_contract::Layer), with the modules the layer lists loaded first.

use alloc::format;
use alloc::vec::Vec;

use leanrd_contract::{Capability, DeviceRef};
use rustix::fd::BorrowedFd;

use crate::Init;
use crate::devices::Dev;
use crate::probe;
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
fn prepare(init: &mut Init, c: Capability) -> bool {
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
    if !init.cmd.no_lvm && has(probe::LVM_MEMBER) && prepare(init, Capability::Lvm) {
        // No udev here: lvm creates the device nodes itself.
        let cfg = "activation { udev_sync = 0 udev_rules = 0 } devices { obtain_device_list_from_udev = 0 }";
        helper(init, "lvm", &["vgchange", "-ay", "--sysinit", "--config", cfg]);
    }
}

/// Run a helper; its failure is kept for the diagnosis (a failing step need not be fatal:
/// the root may be elsewhere).
fn helper(init: &mut Init, prog: &str, args: &[&str]) {
    if let Err(e) = sys::run(prog, args) {
        let what: Vec<&str> = args.iter().take(2).copied().collect();
        init.notes.push(format!("{e} [{prog} {}]", what.join(" ")));
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
