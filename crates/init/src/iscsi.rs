//! A root on iSCSI: wait for a network interface, bring the network up ([`crate::net`]), log
//! in to each target with iscsistart (open-iscsi's boot-time initiator: the kernel's
//! iscsi_tcp does the I/O, iscsistart the login), then find the root's block device like any
//! other — by `root=` (`netroot=iscsi:...` names the target), or the LUN itself for
//! `root=iscsi:...`.
//!
//! Each failure says which step failed: no link, no lease, a name DNS could not resolve, a
//! target nobody answers on (a TCP connection tried first), a login the target refused.
//! The session outlives the initramfs; the root's iscsid (if installed) takes it over.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::{Capability, DeviceRef, IscsiTarget, RootKind};

use crate::Init;
use crate::devices::Dev;
use crate::net::{self, Configured, NetWaiter};
use crate::netconf::show_mac;
use crate::root::{self, RootSource};
use crate::sys::{self, strerror};
use crate::wait::{DeviceWaiter, Waiter};

/// How long a target has to accept a TCP connection.
const CONNECT_MS: u64 = 5_000;

pub struct IscsiSource {
    targets: Vec<IscsiTarget>,
    net: NetWaiter,
    dev: LunWaiter,
    up: Option<Configured>,
}

/// The root's device: the one `root=` names, or (no `root=`, `root=iscsi:`) the disk of
/// the first target's LUN, found in sysfs once the session is there.
pub struct LunWaiter {
    lun: Option<(String, u32)>,
    inner: DeviceWaiter,
}

impl IscsiSource {
    /// `root` None: the root is the LUN of the command line's first target.
    pub fn new(init: &Init, root: Option<DeviceWaiter>) -> Result<IscsiSource, String> {
        let targets = if init.cmd.iscsi.targets.is_empty() { &init.conf.iscsi } else { &init.cmd.iscsi.targets };
        let lun = match &root {
            Some(_) => None,
            None => {
                let t = targets.first().ok_or("root=iscsi: without a target")?;
                Some((t.name.clone(), t.lun.unwrap_or(0)))
            }
        };
        // A name no device has, until the LUN's disk is known.
        let inner = root.unwrap_or_else(|| DeviceWaiter::new("root", DeviceRef::Kernel(String::new())));
        Ok(IscsiSource {
            targets: targets.clone(),
            net: NetWaiter::new(init.cmd.net_wanted()),
            dev: LunWaiter { lun, inner },
            up: None,
        })
    }
}

/// The initiator's name: `rd.iscsi.initiator=`, the image's (host-only: the machine's own),
/// else one made from the interface's MAC (stable across boots, one per machine).
pub fn initiator(given: Option<&str>, mac: &[u8; 6]) -> String {
    match given {
        Some(i) => i.to_string(),
        None => format!("iqn.2026-11.org.leanrd:{}", show_mac(mac).replace(':', "")),
    }
}

/// iscsistart's arguments for one target (the credentials among them: never logged).
pub fn arguments(t: &IscsiTarget, addr: &str, initiator: &str, params: &[String]) -> Vec<String> {
    let mut a: Vec<String> = Vec::from([
        "-i".into(),
        initiator.into(),
        "-t".into(),
        t.name.clone(),
        "-g".into(),
        format!("{}", t.group.unwrap_or(1)),
        "-a".into(),
        addr.into(),
        "-p".into(),
        format!("{}", t.port()),
    ]);
    if let Some(c) = &t.chap {
        a.extend(["-u".into(), c.user.clone(), "-w".into(), c.password.clone()]);
        if let (Some(u), Some(p)) = (&c.in_user, &c.in_password) {
            a.extend(["-U".into(), u.clone(), "-W".into(), p.clone()]);
        }
    }
    for p in params {
        a.extend(["-P".into(), p.clone()]);
    }
    a
}

/// The disk a session's LUN became: /sys/class/iscsi_session/sessionN (its `targetname`)
/// holds targetH:C:T/H:C:T:LUN/block/NAME.
fn lun_disk(target: &str, lun: u32) -> Option<String> {
    let sessions = "/sys/class/iscsi_session";
    for (s, _) in sys::list_dir(sessions).ok()? {
        let dir = format!("{sessions}/{s}");
        if sys::read_string(&format!("{dir}/targetname")).is_none_or(|n| n.trim() != target) {
            continue;
        }
        let dev = format!("{dir}/device");
        for (t, _) in sys::list_dir(&dev).unwrap_or_default().into_iter().filter(|(t, _)| t.starts_with("target")) {
            for (addr, _) in sys::list_dir(&format!("{dev}/{t}")).unwrap_or_default() {
                if addr.rsplit(':').next().and_then(|l| l.parse::<u32>().ok()) != Some(lun) || !addr.contains(':') {
                    continue;
                }
                if let Some((name, _)) = sys::list_dir(&format!("{dev}/{t}/{addr}/block")).ok()?.into_iter().next() {
                    return Some(name);
                }
            }
        }
    }
    None
}

impl Waiter for LunWaiter {
    fn describe(&self) -> String {
        match &self.lun {
            Some((t, l)) if matches!(&self.inner.want, DeviceRef::Kernel(n) if n.is_empty()) => {
                format!("LUN {l} of iSCSI target {t} (logged in, no disk appeared)")
            }
            _ => self.inner.describe(),
        }
    }
    fn wants(&self) -> Option<&DeviceRef> {
        self.inner.wants()
    }
    fn offer(&mut self, devs: &[Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        if let Some((t, l)) = &self.lun
            && matches!(&self.inner.want, DeviceRef::Kernel(n) if n.is_empty())
        {
            match lun_disk(t, *l) {
                Some(name) => self.inner.want = DeviceRef::Kernel(name),
                None => return false,
            }
        }
        self.inner.offer(devs, devno_of)
    }
}

impl RootSource for IscsiSource {
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
        let Some(layer) = init.conf.layer(Capability::Iscsi) else {
            return Err("the root is on iSCSI, and this image cannot log in: it was built without the iscsi \
                        feature (leanrd build --include iscsi)"
                .into());
        };
        let modules = layer.modules.clone();
        init.mods.load_many(&modules, &mut init.log);
        let deadline = sys::now_ms().saturating_add(init.cmd.timeout.max(5).saturating_mul(1000));
        let up = net::bring_up(&self.net.0, deadline, &mut init.log)?;
        let given = init.cmd.iscsi.initiator.clone().or(init.conf.iscsi_initiator.clone());
        let me = initiator(given.as_deref(), &up.mac);
        let params = init.cmd.iscsi.params.clone();
        let mut failed = Vec::new();
        for t in &self.targets {
            let addr = match net::server_address(&t.server, &up, &mut init.log) {
                Ok(a) => a,
                Err(e) => {
                    failed.push(format!("iSCSI target {}: {e}", t.name));
                    continue;
                }
            };
            let at = if addr.contains(':') { format!("[{addr}]:{}", t.port()) } else { format!("{addr}:{}", t.port()) };
            if let Err(e) = net::tcp_reachable(&addr, t.port(), CONNECT_MS) {
                failed.push(format!(
                    "iSCSI target {} at {at} is unreachable from {}: {}",
                    t.name,
                    up.iface,
                    strerror(e)
                ));
                continue;
            }
            init.log.step(&format!("iscsi: logging in to {} at {at} as {me}", t.name));
            let args = arguments(t, &addr, &me, &params);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = crate::process::run_status("iscsistart", &args);
            crate::process::reap();
            match r.map(crate::process::describe_status) {
                Ok(Ok(())) => init.log.step(&format!("iscsi: logged in to {} at {at}", t.name)),
                Ok(Err(how)) => failed.push(format!(
                    "iSCSI login to {} at {at} failed (iscsistart: {how}): the target refused this initiator \
                     ({me}), its credentials, or has no such target name; iscsistart's messages are above",
                    t.name
                )),
                Err(e) => failed.push(format!("iSCSI target {}: {e}", t.name)),
            }
        }
        self.up = Some(up);
        if failed.len() == self.targets.len() {
            return Err(if failed.is_empty() {
                "the root is on iSCSI, and no target is named".into()
            } else {
                failed.join("; ")
            });
        }
        init.notes.extend(failed);
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
            // The root's own network setup finds the interface up, as the session needs it.
            net::hand_over(up);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iscsistart_is_told_everything() {
        let t = IscsiTarget::parse("iscsi:u:pw:iu:ipw@h::3261:1:iqn.x:y").unwrap();
        let a = arguments(&t, "10.0.0.1", "iqn.me", &["node.session.timeo.replacement_timeout=-1".into()]);
        assert_eq!(
            a.join(" "),
            "-i iqn.me -t iqn.x:y -g 1 -a 10.0.0.1 -p 3261 -u u -w pw -U iu -W ipw \
             -P node.session.timeo.replacement_timeout=-1"
        );
        let t = IscsiTarget { group: Some(3), ..IscsiTarget::parse("iscsi:[fd00::1]::::iqn.z").unwrap() };
        assert_eq!(arguments(&t, "fd00::1", "i", &[]).join(" "), "-i i -t iqn.z -g 3 -a fd00::1 -p 3260");
    }

    #[test]
    fn an_initiator_name_per_machine() {
        assert_eq!(initiator(None, &[0x52, 0x54, 0, 0x12, 0x34, 0x56]), "iqn.2026-11.org.leanrd:525400123456");
        assert_eq!(initiator(Some("iqn.given"), &[0; 6]), "iqn.given");
    }
}
