//! iSCSI, a transport under a block root ([`crate::netblock`]): log in to each target with
//! iscsistart (open-iscsi's boot-time initiator: the kernel's iscsi_tcp does the I/O,
//! iscsistart the login), after a TCP connection to its portal shows it answers. The session
//! outlives the initramfs; the root's iscsid (if installed) takes it over. For `root=iscsi:`
//! the root is the LUN itself, found under the session in sysfs.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::{IscsiTarget, RootFeature};

use crate::Init;
use crate::net::{self, Configured};
use crate::netblock::{CONNECT_MS, Locate, Transport};
use crate::netconf::show_mac;
use crate::sys::{self, strerror};

/// The targets, with what the command line (else the image) says of logging in.
pub struct Iscsi {
    /// The targets to log in to, in order: the command line's, else the image's.
    pub targets: Vec<IscsiTarget>,
    /// `root=iscsi:`: the root is the first target's LUN.
    pub lun_root: bool,
}

impl Iscsi {
    /// The command line's targets, else the image's; None when there are none.
    pub fn wanted(init: &Init) -> Option<Iscsi> {
        let targets = if init.cmd.iscsi.targets.is_empty() { &init.conf.iscsi } else { &init.cmd.iscsi.targets };
        (!targets.is_empty()).then(|| Iscsi { targets: targets.clone(), lun_root: init.cmd.iscsi.lun_root })
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
    // iscsistart tries a boot login 30 times over; /init tries again itself until its
    // deadline, so one attempt is enough here (a parameter given on the command line, after
    // this one, wins).
    a.extend(["-P".into(), "node.session.initial_login_retry_max=1".into()]);
    for p in params {
        a.extend(["-P".into(), p.clone()]);
    }
    a
}

/// The disk a session's LUN became: /sys/class/iscsi_session/sessionN (its `targetname`)
/// holds targetH:C:T/H:C:T:LUN/block/NAME.
fn lun_disk(target: &str, lun: u32) -> Option<String> {
    let sessions = "/sys/class/iscsi_session";
    for (s, _) in sys::list_dir(sessions).unwrap_or_default() {
        let dir = format!("{sessions}/{s}");
        if sys::read_string(&format!("{dir}/targetname")).is_none_or(|n| n.trim() != target) {
            continue;
        }
        let dev = format!("{dir}/device");
        for (t, _) in sys::list_dir(&dev).unwrap_or_default().into_iter().filter(|(t, _)| t.starts_with("target")) {
            for (addr, _) in sys::list_dir(&format!("{dev}/{t}")).unwrap_or_default() {
                if !addr.contains(':') || addr.rsplit(':').next().and_then(|l| l.parse::<u32>().ok()) != Some(lun) {
                    continue;
                }
                let block = sys::list_dir(&format!("{dev}/{t}/{addr}/block")).unwrap_or_default();
                if let Some((name, _)) = block.into_iter().next() {
                    return Some(name);
                }
            }
        }
    }
    None
}

impl Transport for Iscsi {
    fn name(&self) -> &'static str {
        "iSCSI"
    }

    fn feature(&self) -> RootFeature {
        RootFeature::Iscsi
    }

    fn root_disk(&self) -> Option<(String, Locate)> {
        let t = self.targets.first().filter(|_| self.lun_root)?;
        let (name, lun) = (t.name.clone(), t.lun.unwrap_or(0));
        Some((format!("LUN {lun} of iSCSI target {name}"), Box::new(move || lun_disk(&name, lun))))
    }

    fn connect(&mut self, init: &mut Init, up: &Configured) -> Result<Vec<String>, String> {
        let given = init.cmd.iscsi.initiator.clone().or(init.conf.iscsi_initiator.clone());
        let me = initiator(given.as_deref(), &up.mac);
        let params = init.cmd.iscsi.params.clone();
        let mut failed = Vec::new();
        let mut done: Vec<(String, u16, &str)> = Vec::new();
        for t in &self.targets {
            // One login per portal and name (several LUNs of one target are one session).
            if done.iter().any(|(s, p, n)| *s == t.server && *p == t.port() && *n == t.name) {
                continue;
            }
            done.push((t.server.clone(), t.port(), &t.name));
            let addr = match net::server_address(&t.server, up, &mut init.log) {
                Ok(a) => a,
                Err(e) => {
                    failed.push(format!("iSCSI target {}: {e}", t.name));
                    continue;
                }
            };
            let at = net::host_port(&addr, t.port());
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
        if failed.len() == done.len() { Err(failed.join("; ")) } else { Ok(failed) }
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
             -P node.session.initial_login_retry_max=1 -P node.session.timeo.replacement_timeout=-1"
        );
        let t = IscsiTarget { group: Some(3), ..IscsiTarget::parse("iscsi:[fd00::1]::::iqn.z").unwrap() };
        assert_eq!(
            arguments(&t, "fd00::1", "i", &[]).join(" "),
            "-i i -t iqn.z -g 3 -a fd00::1 -p 3260 -P node.session.initial_login_retry_max=1"
        );
    }

    #[test]
    fn an_initiator_name_per_machine() {
        assert_eq!(initiator(None, &[0x52, 0x54, 0, 0x12, 0x34, 0x56]), "iqn.2026-11.org.leanrd:525400123456");
        assert_eq!(initiator(Some("iqn.given"), &[0; 6]), "iqn.given");
    }
}
