//! A root on block devices that a network transport brings in (iSCSI, NVMe over TCP, NBD): wait
//! for a network interface (its driver comes by coldplug of the network class), bring the
//! network up ([`crate::net`]), connect each transport (one file each: [`crate::iscsi`],
//! [`crate::nvmf`], [`crate::nbd`]), then find the root like any block device — by `root=`,
//! with whatever stack sits on it, or the disk a transport names (`root=iscsi:`, the LUN
//! itself; `root=nbd:`, the NBD device).
//!
//! Each failure says which step failed: no link, no lease, a name DNS could not resolve, a
//! target nobody answers on (a TCP connection is tried first), a connection or login refused.
//! The connections outlive the initramfs; the interface is handed over up, as they need it.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use leanrd_contract::{DeviceRef, RootFeature, RootKind};

use crate::Init;
use crate::devices::Dev;
use crate::net::{self, Configured, NetWaiter};
use crate::root::{self, RootSource};
use crate::sys;
use crate::wait::{DeviceWaiter, Waiter};

/// Whether the root's devices come over a network transport: the command line or the image
/// names a target.
pub fn wanted(init: &Init) -> bool {
    crate::iscsi::Iscsi::wanted(init).is_some()
        || crate::nvmf::Nvmf::wanted(init).is_some()
        || crate::nbd::Nbd::wanted(init).is_some()
}

/// The source for a root on a network transport (`root` None: the transport's disk).
pub fn source(init: &mut Init, root: Option<DeviceWaiter>) -> Box<dyn RootSource> {
    init.mods.net = true;
    let mut transports: Vec<Box<dyn Transport>> = Vec::new();
    if let Some(t) = crate::iscsi::Iscsi::wanted(init) {
        transports.push(Box::new(t));
    }
    if let Some(t) = crate::nvmf::Nvmf::wanted(init) {
        transports.push(Box::new(t));
    }
    // `root=nbd:` names the root's disk: first, where the disk is looked for.
    if let Some(t) = crate::nbd::Nbd::wanted(init) {
        if t.device_root {
            transports.insert(0, Box::new(t));
        } else {
            transports.push(Box::new(t));
        }
    }
    Box::new(NetBlockSource::new(init, transports, root))
}

/// How long a target has to accept a TCP connection.
pub const CONNECT_MS: u64 = 5_000;

/// One network transport: connects to its targets over the network brought up.
pub trait Transport {
    /// For messages: "iSCSI", "NVMe/TCP", "NBD".
    fn name(&self) -> &'static str;
    /// What the image must have been built with for it.
    fn feature(&self) -> RootFeature;
    /// Connect to every target; the failures of the ones that did not (the boot goes on when
    /// one did), or Err when none did.
    fn connect(&mut self, init: &mut Init, up: &Configured) -> Result<Vec<String>, String>;
    /// The disk to take as the root when `root=` names none (the LUN of `root=iscsi:`): what
    /// it is, for messages, and how to find its kernel name once it is there.
    fn root_disk(&self) -> Option<(String, Locate)> {
        None
    }
}

/// Finds a transport's disk by its kernel name (in sysfs), once it is there.
pub type Locate = Box<dyn Fn() -> Option<String>>;

/// The root's device: the one `root=` names, or the disk a transport names, once it is there.
pub struct DiskWaiter {
    /// What the transport's disk is and how to find it, until it has a name (then the inner
    /// waiter has it).
    pending: Option<(String, Locate)>,
    inner: DeviceWaiter,
}

/// A root on block devices a network transport brings in: wait for an interface, bring the
/// network up and connect the transports, then wait for the root's disk and mount it.
pub struct NetBlockSource {
    transports: Vec<Box<dyn Transport>>,
    net: NetWaiter,
    dev: DiskWaiter,
    up: Option<Configured>,
}

impl NetBlockSource {
    /// `root` None: the first transport names the disk.
    pub fn new(init: &Init, transports: Vec<Box<dyn Transport>>, root: Option<DeviceWaiter>) -> NetBlockSource {
        let pending = if root.is_none() { transports.first().and_then(|t| t.root_disk()) } else { None };
        // A name no device has, until the transport's disk is known.
        let inner = root.unwrap_or_else(|| DeviceWaiter::new("root", DeviceRef::Kernel(String::new())));
        NetBlockSource {
            transports,
            net: NetWaiter::new(init.cmd.net_wanted()),
            dev: DiskWaiter { pending, inner },
            up: None,
        }
    }
}

impl Waiter for DiskWaiter {
    fn describe(&self) -> String {
        match &self.pending {
            Some((what, _)) => format!("{what} (connected, no disk appeared)"),
            None => self.inner.describe(),
        }
    }
    fn wants(&self) -> Option<&DeviceRef> {
        self.pending.is_none().then(|| self.inner.wants()).flatten()
    }
    fn offer(&mut self, devs: &[Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        if let Some((_, locate)) = &self.pending {
            match locate() {
                Some(name) => {
                    self.inner.want = DeviceRef::Kernel(name);
                    self.pending = None;
                }
                None => return false,
            }
        }
        self.inner.offer(devs, devno_of)
    }
}

impl RootSource for NetBlockSource {
    fn kind(&self) -> RootKind {
        RootKind::Block
    }

    fn first(&mut self) -> Option<&mut dyn Waiter> {
        Some(&mut self.net)
    }

    fn brings_network(&self) -> bool {
        true
    }

    fn connect(&mut self, init: &mut Init) -> Result<(), String> {
        self.net.log_renames(&mut init.log);
        // An image without a transport's feature was refused before the wait
        // (root::missing_feature); its layer's modules now.
        for t in &self.transports {
            if let Some(layer) = init.conf.layer(t.feature().capability()) {
                let modules = layer.modules.clone();
                init.mods.load_many(&modules, &mut init.log);
            }
        }
        let started = sys::now_ms();
        let deadline = started.saturating_add(init.cmd.timeout.max(5).saturating_mul(1000));
        // `rootwait`: the DHCP server may be booting with the storage; wait for it too.
        let until = if init.cmd.rootwait { u64::MAX } else { deadline };
        let up = net::bring_up(&self.net.0, until, &mut init.log)?;
        // A container on these devices bound to a Tang server, or asked for over SSH, uses
        // this interface as it is, and leaves it up for the root.
        crate::clevis::adopt(init, &up);
        // Until one transport connects: the storage server may be booting too. Tried again
        // after 1, 2, 4... s (at most 8) until the timeout, or for ever with `rootwait`.
        let mut pause = 1000;
        let mut tries = 0;
        loop {
            tries += 1;
            let mut failed = Vec::new();
            let mut any = false;
            for t in &mut self.transports {
                match t.connect(init, &up) {
                    Ok(notes) => {
                        any = true;
                        init.notes.extend(notes);
                    }
                    Err(e) => failed.push(e),
                }
            }
            if any {
                init.notes.extend(failed);
                break;
            }
            let now = sys::now_ms();
            if !init.cmd.rootwait && now.saturating_add(pause) >= deadline {
                self.up = Some(up);
                let secs = now.saturating_sub(started) / 1000;
                return Err(format!("{} (tried {tries} times in {secs} s)", failed.join("; ")));
            }
            init.log.step(&format!("{}; trying again in {} s", failed.join("; "), pause / 1000));
            sys::sleep_ms(pause);
            pause = (pause * 2).min(8000);
        }
        self.up = Some(up);
        Ok(())
    }

    fn waiter(&mut self) -> &mut dyn Waiter {
        &mut self.dev
    }

    fn mount(&mut self, init: &mut Init) -> Result<(), String> {
        let dev = self.dev.inner.found.clone().ok_or("the root device was not found")?;
        init.log.step(&format!("{}{}", leanrd_contract::steplog::ROOT_FOUND, dev.path()));
        root::mount(init, &dev)?;
        if let Some(up) = &self.up {
            net::hand_over(up);
        }
        Ok(())
    }
}
