//! The boot, stage by stage: listed modules, wait for the root (coldplug, uevents, the
//! block stack), mount it, switch to it.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use leanrd_contract::DeviceRef;
use rustix::fd::OwnedFd;

use crate::devices::{self, Dev};
use crate::wait::{self, Platform, Timing, Waiter};
use crate::{Init, btrfs, resume, root, stack, switch_root, sys, tpm, uevent, usr};

/// The running system behind the wait loop's seam.
struct Live<'a> {
    init: &'a mut Init,
    sock: Option<OwnedFd>,
}

impl Platform for Live<'_> {
    fn now_ms(&self) -> u64 {
        sys::now_ms()
    }
    fn sleep_ms(&mut self, ms: u64) {
        sys::sleep_ms(ms)
    }
    fn scan(&mut self) -> Vec<Dev> {
        let mut devs = devices::scan();
        // dm-multipath first: the maps made, their paths out of sight.
        if crate::multipath::assemble(self.init, &devs) {
            devs = devices::scan();
        }
        crate::multipath::hide_paths(&mut devs);
        btrfs::mark(self.init, &mut devs);
        devs
    }
    fn block_count(&self) -> usize {
        devices::block_names().len()
    }
    fn coldplug(&mut self) -> usize {
        let before = devices::block_names().len();
        self.init.mods.coldplug(SETTLE_MS, &mut self.init.log, &mut || devices::block_names().len() != before)
    }
    fn loading(&self) -> bool {
        self.init.mods.loading()
    }
    fn settle(&mut self) -> usize {
        let before = devices::block_names().len();
        self.init.mods.settle(SETTLE_MS, &mut self.init.log, &mut || devices::block_names().len() != before)
    }
    fn assemble(&mut self, devs: &[Dev], wanted: &[&DeviceRef]) -> bool {
        use rustix::fd::AsFd;
        stack::assemble(self.init, devs, wanted, self.sock.as_ref().map(|s| s.as_fd()))
    }
    fn has_events(&self) -> bool {
        self.sock.is_some()
    }
    fn events(&mut self, ms: u64) -> (bool, bool) {
        let Some(fd) = &self.sock else { return (false, false) };
        let ev = uevent::receive(fd, ms);
        let aliases = !ev.aliases.is_empty();
        self.init.mods.add_aliases(ev.aliases, &mut self.init.log);
        (ev.any, aliases)
    }
    fn devno_of(&self, path: &str) -> Option<(u32, u32)> {
        devices::devno_of(path)
    }
    fn debug(&mut self, msg: &str) {
        self.init.log.step(msg)
    }
}

/// Boot: returns only when something failed, with why.
pub fn boot(init: &mut Init) -> Result<(), alloc::string::String> {
    // rd.driver.pre=, the modules the generator listed, then whatever the devices ask for.
    let pre = init.cmd.driver_pre.clone();
    init.mods.load_many(&pre, &mut init.log);
    let load = init.conf.load.clone();
    init.mods.load_many(&load, &mut init.log);
    init.log.step("listed modules loaded");
    // The splash, before anything can ask for a passphrase.
    crate::plymouth::start(init);
    // PCR 11's enter-initrd, before anything can be unsealed (systemd-pcrphase-initrd's), and
    // the UKI's signed predictions where the token plugin looks for them.
    tpm::hand_over_signatures(init);
    tpm::enter(init);
    let mut root = root::source(init)?;
    let network_root = root.brings_network();
    let mut usr = usr::given(init).map(|u| (usr::waiter(&u), u));
    // usrhash=: /usr is /dev/mapper/usr, verified (mount.usr= names it, or nothing does).
    let v = &init.cmd.verity;
    let mut usr_verity = crate::verity::Volume::wanted("usr", &v.usr, v.off, v.gpt_auto_off)?;
    if usr_verity.is_some() {
        usr = None;
    }
    let mut resume =
        resume::given(init).map(|r| (resume::ResumeWaiter::new(&r, init.cmd.noresume, init.cmd.resumewait), r));
    let delay = if resume.is_some() { init.cmd.rootdelay.max(init.cmd.resumedelay) } else { init.cmd.rootdelay };
    if delay > 0 {
        sys::sleep_ms(delay.saturating_mul(1000));
    }
    let timing = Timing { forever: init.cmd.rootwait, timeout_ms: init.cmd.timeout.saturating_mul(1000) };
    // Everything the boot waits for, together: the root's device, /usr's when it is known
    // before the root is mounted, the resume device (briefly: the boot goes on without it).
    let mut sock = uevent::socket();
    // A network transport's interface first, then its devices (logged in to).
    if let Some(w) = root.first() {
        let mut live = Live { init, sock };
        wait::run(&mut live, &mut [w], timing).map_err(|e| format!("{e}"))?;
        sock = live.sock.take();
        root.connect(init)?;
    }
    let mut live = Live { init, sock };
    let mut waiters: Vec<&mut dyn Waiter> = vec![root.waiter()];
    if let Some((w, _)) = &mut usr {
        waiters.push(w);
    }
    if let Some((w, _)) = &mut resume {
        waiters.push(w);
    }
    if let Some(w) = &mut usr_verity {
        waiters.push(w);
    }
    wait::run(&mut live, &mut waiters, timing).map_err(|e| format!("{e}"))?;
    drop(waiters);
    let sock = live.sock.take();
    // Drivers for devices the boot did not wait for: after the root's own modules, or to
    // the root's udev (all of them at boot with rd.leanrd.coldplug=all).
    if !init.mods.coldplug_all {
        init.mods.defer(&mut init.log);
    }
    // Before anything is mounted (even read-only: ext4 replays its journal). No driver may
    // be loading then: the kernel freezes every process before it resumes.
    if let Some((w, r)) = &mut resume {
        init.mods.finish(STRAGGLERS_MS, &mut init.log);
        // `noresume` never waits: the device may be a partition the kernel added just after
        // the root's (one look more, so that the log says whether it held an image).
        if w.dev.found.is_none() {
            w.offer(&devices::scan(), &devices::devno_of);
        }
        resume::attempt(init, r, w);
    }
    let post = init.cmd.driver_post.clone();
    init.mods.load_many(&post, &mut init.log);
    root.mount(init)?;
    init.log.step(leanrd_contract::steplog::ROOT_MOUNTED);
    crate::volatile::before_usr(init)?;
    if let Some(v) = &usr_verity {
        let dev = crate::verity::open(init, v)?;
        let c = &init.cmd.mounts;
        let u = usr::Usr {
            device: DeviceRef::Mapper("usr".into()),
            fstype: c.usrfstype.clone(),
            options: c.usrflags.clone(),
        };
        let mut w = usr::waiter(&u);
        w.found = Some(dev);
        usr = Some((w, u));
    }
    // Nothing named /usr and the root was found by partition type: /usr by its type on the
    // root's disk (mount.usr= and usrhash= override; rd.systemd.gpt_auto=0 finds no root so).
    if usr.is_none()
        && let Some(disk) = root.dps_disk()
    {
        usr = usr::by_type(init, &disk)?;
    }
    // Else /usr as the root's fstab says: waited for now.
    if usr.is_none()
        && let Some(u) = usr::from_root()
    {
        let mut w = usr::waiter(&u);
        let mut live = Live { init, sock };
        wait::run(&mut live, &mut [&mut w], timing)
            .map_err(|e| format!("{e} (the /usr line of {}/etc/fstab)", root::NEWROOT))?;
        usr = Some((w, u));
    }
    if let Some((w, u)) = &usr {
        usr::mount(init, u, w)?;
        init.log.step("/usr mounted");
    }
    crate::volatile::after_usr(init)?;
    // rd.neednet=1 with a local root: the network comes up now, for the root to use.
    if init.cmd.neednet && !network_root {
        need_network(init);
    }
    if init.cmd.shell {
        init.shell();
    }
    // Drivers coldplug began that the root did not wait for: done before their files go.
    init.mods.finish(STRAGGLERS_MS, &mut init.log);
    crate::ssh::stop(init);
    crate::clevis::release_network(init);
    // The stub's credentials where the root's systemd looks (it reads no /.extra itself).
    crate::stub::hand_over(init);
    switch_root::switch_root(init)
}

/// How long the wait loop lets drivers load before it looks at its clock and uevents again
/// (ms): a driver whose initialisation hangs does not hold back the boot's timeout.
const SETTLE_MS: u64 = 1_000;

/// How long the boot waits, once the root is ready, for drivers still loading (ms); one
/// that takes longer (its initialisation hangs) is left to the kernel.
const STRAGGLERS_MS: u64 = 10_000;

/// `rd.neednet=1`: bring the network up and hand it over, though the root is local. Its
/// drivers were loaded by coldplug with the storage's; a failure is logged, not fatal.
fn need_network(init: &mut Init) {
    let deadline = sys::now_ms().saturating_add(init.cmd.timeout.saturating_mul(1000));
    match network(init, deadline) {
        Ok(c) => crate::net::hand_over(&c),
        Err(e) => init.log.error(&format!("rd.neednet=1: {e}")),
    }
}

/// The network for a local root's needs (`rd.neednet=1`, a Tang server): wait for an
/// interface `ip=`/`BOOTIF=` allows (named by `ifname=` as it appears, its driver loaded by
/// coldplug meanwhile), at most 10 s and never past `deadline`, then bring it up by `deadline`.
pub fn network(init: &mut Init, deadline: u64) -> Result<crate::net::Configured, alloc::string::String> {
    use crate::wait::Waiter;
    let mut w = crate::net::NetWaiter::new(init.cmd.net_wanted());
    let start = sys::now_ms();
    let end = start.saturating_add(10_000).min(deadline);
    if !w.offer(&[], &|_| None) {
        init.mods.coldplug(SETTLE_MS.min(end.saturating_sub(start)), &mut init.log, &mut || false);
    }
    while !w.offer(&[], &|_| None) && sys::now_ms() < end {
        init.mods.settle(100, &mut init.log, &mut || false);
        sys::sleep_ms(100);
    }
    w.log_renames(&mut init.log);
    if !w.offer(&[], &|_| None) {
        return Err(format!("waited {} ms for {}", sys::now_ms() - start, w.describe()));
    }
    crate::net::bring_up(&w.0, deadline, &mut init.log)
}
