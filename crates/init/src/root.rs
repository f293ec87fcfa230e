//! Mounting the root on /newroot: its type from `rootfstype=`, the probe or the
//! configuration (or every type the kernel knows), its options from `rootflags=`.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::Root;
use rustix::mount::MountFlags;

use crate::Init;
use crate::devices::Dev;
use crate::sys::{self, Errno, strerror};
use crate::wait::{DeviceWaiter, Waiter};

/// Where the root is mounted in the initramfs, and moved to / from at the switch.
pub const NEWROOT: &str = "/newroot";

/// Where the root comes from: what to wait for, then how to mount it on [`NEWROOT`]. A block
/// device is [`BlockRoot`]; another kind (a network root) is another implementation, chosen
/// in [`source`].
pub trait RootSource {
    /// The kind of root it mounts.
    fn kind(&self) -> leanrd_contract::RootKind;
    /// What must appear before [`RootSource::connect`] (a network transport's interface);
    /// None: nothing, the root's device comes by itself.
    fn first(&mut self) -> Option<&mut dyn Waiter> {
        None
    }
    /// Make the root's device appear once [`RootSource::first`] is there (log in to the
    /// iSCSI targets over the network brought up).
    fn connect(&mut self, _init: &mut Init) -> Result<(), String> {
        Ok(())
    }
    /// Whether it brings the network up itself (`rd.neednet=1` then does nothing more).
    fn brings_network(&self) -> bool {
        self.kind().needs_network()
    }
    /// What must appear before the root can be mounted.
    fn waiter(&mut self) -> &mut dyn Waiter;
    /// Mount the root on [`NEWROOT`] once the waiter has found what it needs; Err says why it
    /// could not be.
    fn mount(&mut self, init: &mut Init) -> Result<(), String>;
}

/// A root on a block device (through whatever stack the image assembles).
pub struct BlockRoot(pub DeviceWaiter);

impl RootSource for BlockRoot {
    fn kind(&self) -> leanrd_contract::RootKind {
        leanrd_contract::RootKind::Block
    }
    fn waiter(&mut self) -> &mut dyn Waiter {
        &mut self.0
    }
    fn mount(&mut self, init: &mut Init) -> Result<(), String> {
        let dev = self.0.found.clone().ok_or("the root device was not found")?;
        init.log.step(&format!("{}{}", leanrd_contract::steplog::ROOT_FOUND, dev.path()));
        mount(init, &dev)
    }
}

/// The root this boot uses: `root=` from the command line, else the one the image was built
/// for. One [`RootSource`] per kind of [`Root`].
pub fn source(init: &mut Init) -> Result<Box<dyn RootSource>, String> {
    if init.cmd.iscsi.lun_root {
        return Ok(crate::netblock::source(init, None));
    }
    let want = init.cmd.mounts.root.clone().or(init.conf.mounts.root.clone());
    let want = want.ok_or("no root= on the command line and none in the image")?;
    init.mods.net |= want.kind().needs_network();
    match want {
        Root::Block(d) => {
            let mut w = DeviceWaiter::new("root", d);
            let flags = init.cmd.mounts.rootflags.as_ref().or(init.conf.mounts.rootflags.as_ref());
            w.degraded = flags.is_some_and(|f| f.split(',').any(|o| o == "degraded"));
            // A block device that a network transport (iSCSI, NVMe/TCP) brings in.
            if crate::netblock::wanted(init) {
                return Ok(crate::netblock::source(init, Some(w)));
            }
            Ok(Box::new(BlockRoot(w)))
        }
        Root::Live(l) => {
            init.mods.optical = true;
            Ok(Box::new(crate::live::LiveSource::new(init, l)))
        }
        Root::Nfs(n) => {
            let want = init.cmd.net_wanted();
            Ok(Box::new(crate::nfs::NfsSource { want: n, waiter: crate::net::NetWaiter::new(want) }))
        }
    }
}

/// The types to try, in order: `rootfstype=` may list several, as for the kernel.
pub fn types(given: Option<&str>, known: &str) -> Vec<String> {
    match given {
        Some(t) => t.split(',').filter(|t| !t.is_empty()).map(str::to_string).collect(),
        None => known.lines().filter(|l| !l.starts_with("nodev")).map(|l| l.trim().to_string()).collect(),
    }
}

/// Mount `dev` on `target`: as `fstype` says (a comma list; `auto` or none: the probe's type,
/// else every type the kernel knows), with `flags` and the file system's own `options`.
pub fn mount_at(
    init: &mut Init,
    dev: &Dev,
    target: &str,
    fstype: Option<String>,
    flags: MountFlags,
    options: Option<&str>,
) -> Result<(), String> {
    let fstype = fstype.filter(|t| t != "auto").or(dev.probe.fstype.clone());
    let known =
        if fstype.is_none() { sys::read_string("/proc/filesystems").unwrap_or_default() } else { String::new() };
    let types = types(fstype.as_deref(), &known);
    for t in &types {
        init.mods.load(&format!("fs-{t}"), &mut init.log);
    }
    let mut last = Errno::NODEV;
    let source = dev.mount_source();
    for t in &types {
        match sys::mount(&source, target, t, flags, options) {
            Ok(()) => {
                let ro = if flags.contains(MountFlags::RDONLY) { "ro" } else { "rw" };
                let opts = options.filter(|o| !o.is_empty()).map(|o| format!(", {o}")).unwrap_or_default();
                init.log.step(&format!("mounted {source} ({t}, {ro}{opts}) on {target}"));
                return Ok(());
            }
            Err(e) => last = e,
        }
    }
    Err(format!("cannot mount {} ({}) on {target}: {}", dev.path(), types.join(","), strerror(last)))
}

/// The root: type from `rootfstype=`, the probe or the configuration; read-only unless `rw`;
/// `rootflags=` (else the configuration's) as its options.
pub fn mount(init: &mut Init, dev: &Dev) -> Result<(), String> {
    let fstype =
        init.cmd.mounts.rootfstype.clone().or(dev.probe.fstype.clone()).or(init.conf.mounts.rootfstype.clone());
    let flags = if init.cmd.rw { MountFlags::empty() } else { MountFlags::RDONLY };
    let options = init.cmd.mounts.rootflags.clone().or(init.conf.mounts.rootflags.clone());
    crate::fsck::check(init, dev, fstype.as_deref(), init.cmd.rw)?;
    mount_at(init, dev, NEWROOT, fstype, flags, options.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_come_from_the_option_or_the_kernel() {
        assert_eq!(types(Some("btrfs,,ext4"), ""), ["btrfs", "ext4"]);
        assert_eq!(types(None, "nodev\tsysfs\n\text4\nnodev\ttmpfs\n\tvfat\n"), ["ext4", "vfat"]);
    }
}
