//! leanrd's /init. As PID 1: mount the API file systems, load the modules the generator
//! listed, coldplug every device's modalias (and keep listening for uevents), find the root
//! by UUID/LABEL/PARTUUID/PARTLABEL/path, unlock/activate LUKS, LVM and md when the image has
//! them, mount the root and switch to it. On failure it says why, on one screen, and never
//! exits (PID 1 exiting panics the kernel without a word).
//!
//! As anything else it is the kernel's module helper (/proc/sys/kernel/modprobe points here):
//! `/init -q -- MODULE` loads MODULE with its dependencies.

//!
//! No libc: the binary (src/main.rs) starts the process itself and everything here runs on
//! rustix's raw syscalls ([`sys`]), with `alloc` for strings and tables. The library is
//! `no_std` so that its unit tests run on the host with std.

#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod config;
pub mod probe;
pub mod sys;

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use config::{Cmdline, Conf};
use leanrd_kmod::ModuleDb;
use rustix::fd::OwnedFd;
use rustix::fs::FileType;
use rustix::mount::{MountFlags, UnmountFlags};
use sys::{Errno, eprint, exists as has, strerror};

const CONF: &str = "/etc/leanrd/init.conf";

fn read_text(path: &str) -> String {
    sys::read_string(path).unwrap_or_default()
}

/// Log to the kernel log (timestamped by the kernel) when debugging, and to the console for
/// errors.
struct Log {
    debug: bool,
    kmsg: Option<OwnedFd>,
}

impl Log {
    fn debug(&mut self, msg: &str) {
        if self.debug
            && let Some(k) = &self.kmsg
        {
            sys::write_all(k, format!("<5>leanrd: {msg}\n").as_bytes());
        }
    }
    fn error(&self, msg: &str) {
        eprint(&format!("leanrd: {msg}\n"));
    }
}

fn mount(src: &str, target: &str, fstype: &str, flags: MountFlags, data: Option<&str>) -> Result<(), Errno> {
    sys::mkdir_p(target);
    let data = data.map(|d| alloc::ffi::CString::new(d).map_err(|_| Errno::INVAL)).transpose()?;
    rustix::mount::mount(src, target, fstype, flags, data.as_deref())
}

/// The module tables in the image and what has been loaded.
struct Modules {
    dir: String,
    db: ModuleDb,
    loaded: BTreeSet<String>,
    failed: BTreeMap<String, Errno>,
    seen_aliases: BTreeSet<String>,
    /// Why the image's module tables could not be read, if they could not.
    table_error: Option<String>,
}

impl Modules {
    fn open(kver: &str) -> Modules {
        let dir = format!("/lib/modules/{kver}");
        let rd = |f: &str| read_text(&format!("{dir}/{f}"));
        let (db, table_error) = match ModuleDb::parse(
            &rd("modules.dep"),
            &rd("modules.alias"),
            &rd("modules.softdep"),
            &rd("modules.builtin.names"),
            b"",
        ) {
            Ok(db) => (db, None),
            Err(e) => (ModuleDb::default(), Some(format!("{dir}/{e}: no modules can be loaded"))),
        };
        let loaded = read_text("/proc/modules")
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        Modules { dir, db, loaded, failed: BTreeMap::new(), seen_aliases: BTreeSet::new(), table_error }
    }

    /// Load a name, alias or modalias with everything it needs. Returns how many modules
    /// were newly loaded.
    fn load(&mut self, what: &str, log: &mut Log) -> usize {
        self.load_many(&[what.to_string()], log)
    }

    /// Load several names/aliases with everything they need, concurrently: each module
    /// starts (finit_module in a forked child) as soon as its dependencies and pre-softdeps
    /// are done, not when a whole "wave" is, so a slow module (ext4) does not hold back an
    /// unrelated chain (virtio_pci, then virtio_blk).
    fn load_many(&mut self, whats: &[String], log: &mut Log) -> usize {
        let mut pending: Vec<String> = Vec::new();
        for w in whats {
            if let leanrd_kmod::Resolved::Modules(list) = self.db.resolve(w) {
                for m in list {
                    if !self.loaded.contains(&m) && !self.failed.contains_key(&m) && !pending.contains(&m) {
                        pending.push(m);
                    }
                }
            }
        }
        let mut n = 0;
        let mut running: Vec<(i32, String)> = Vec::new();
        while !pending.is_empty() || !running.is_empty() {
            let busy = |d: &String| pending.contains(d) || running.iter().any(|(_, r)| r == d);
            let waits = |m: &String| {
                self.db.deps.get(m).is_some_and(|v| v.iter().any(busy))
                    || self
                        .db
                        .softdeps
                        .get(m)
                        .is_some_and(|(pre, _)| pre.iter().any(|s| busy(&leanrd_kmod::normalize(s))))
            };
            let mut ready: Vec<String> = pending.iter().filter(|m| !waits(m)).cloned().collect();
            if ready.is_empty() && running.is_empty() {
                ready.push(pending[0].clone()); // a cycle: break it in list order
            }
            pending.retain(|m| !ready.contains(m));
            let alone = ready.len() == 1 && running.is_empty();
            let mut done: Vec<(String, Result<(), Errno>)> = Vec::new();
            for m in ready {
                let Some(path) = self.db.paths.get(&m).map(|r| format!("{}/{r}", self.dir)) else {
                    done.push((m, Err(Errno::NOENT)));
                    continue;
                };
                // One module with nothing else to overlap: no need for a child.
                match if alone { Err(Errno::AGAIN) } else { sys::fork() } {
                    Ok(0) => sys::exit(finit(&path).err().map_or(0, |e| e.raw_os_error())),
                    Ok(pid) => running.push((pid, m)),
                    Err(_) => done.push((m, finit(&path))),
                }
            }
            if done.is_empty() && !running.is_empty() {
                match sys::wait_any() {
                    // Another child (a helper's orphan, reparented to PID 1): just reaped.
                    Some((pid, st)) => {
                        if let Some(i) = running.iter().position(|(p, _)| *p == pid) {
                            let (_, m) = running.swap_remove(i);
                            // The child's exit status is the errno (0: loaded).
                            let r = match sys::exit_code(st) {
                                Some(0) => Ok(()),
                                Some(e) => Err(Errno::from_raw_os_error(e)),
                                None => Err(Errno::CHILD),
                            };
                            done.push((m, r));
                        }
                    }
                    None => done.extend(running.drain(..).map(|(_, m)| (m, Err(Errno::CHILD)))),
                }
            }
            for (m, r) in done {
                match r {
                    Ok(()) => {
                        log.debug(&format!("loaded {m}"));
                        self.loaded.insert(m);
                        n += 1;
                    }
                    Err(e) => {
                        log.debug(&format!("{m}: {}", strerror(e)));
                        self.failed.insert(m, e);
                    }
                }
            }
        }
        n
    }

    /// Load drivers for every device in sysfs not seen before. Returns modules loaded.
    fn coldplug(&mut self, log: &mut Log) -> usize {
        let mut aliases = Vec::new();
        let mut stack = vec!["/sys/devices".to_string()];
        while let Some(d) = stack.pop() {
            let Ok(rd) = sys::list_dir(&d) else { continue };
            for (name, ft) in rd {
                if ft == FileType::Directory {
                    stack.push(format!("{d}/{name}"));
                } else if name == "modalias"
                    && let Some(a) = sys::read_string(&format!("{d}/{name}"))
                {
                    let a = a.trim().to_string();
                    if !a.is_empty() && self.seen_aliases.insert(a.clone()) {
                        aliases.push(a);
                    }
                }
            }
        }
        self.load_many(&aliases, log)
    }
}

/// Load one module file (an already loaded module counts as loaded).
fn finit(path: &str) -> Result<(), Errno> {
    let f = sys::open(path)?;
    match rustix::system::finit_module(&f, c"", 0) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A netlink socket for kernel uevents: devices that appear later get their drivers.
fn uevent_socket() -> Option<OwnedFd> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, netlink};
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        Some(netlink::KOBJECT_UEVENT),
    )
    .ok()?;
    rustix::net::bind(&fd, &netlink::SocketAddrNetlink::new(0, 1)).ok()?;
    Some(fd)
}

/// Wait up to `ms` for uevents; returns whether any came (a disk appearing has no MODALIAS)
/// and the MODALIAS values received.
fn uevents(fd: &OwnedFd, ms: u64) -> (bool, Vec<String>) {
    use rustix::event::{PollFd, PollFlags};
    let mut out = Vec::new();
    if !rustix::event::poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&sys::timespec_ms(ms))).is_ok_and(|n| n > 0) {
        return (false, out);
    }
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match rustix::net::recv(fd, &mut buf[..], rustix::net::RecvFlags::empty()) {
            Ok((n, _)) if n > 0 => n,
            _ => break,
        };
        for field in buf[..n].split(|&b| b == 0) {
            if let Some(a) = field.strip_prefix(b"MODALIAS=") {
                out.push(String::from_utf8_lossy(a).into_owned());
            }
        }
    }
    (true, out)
}

/// A block device and what probing found.
#[derive(Debug, Clone, Default)]
struct Dev {
    name: String,
    /// MAJOR:MINOR, as sysfs gives it.
    devno: String,
    /// For a partition: its disk and its number there.
    disk: Option<String>,
    partno: u32,
    probe: probe::Probe,
}

fn sys_block_names() -> Vec<String> {
    let mut v: Vec<String> =
        sys::list_dir("/sys/class/block").map(|rd| rd.into_iter().map(|(n, _)| n).collect()).unwrap_or_default();
    v.sort();
    v
}

/// Probe every block device (file systems; partition tables of whole disks).
fn scan() -> Vec<Dev> {
    let mut devs: Vec<Dev> = Vec::new();
    for n in sys_block_names() {
        let sys = format!("/sys/class/block/{n}");
        let Ok(f) = sys::open(&format!("/dev/{n}")) else { continue };
        let partno: u32 = read_text(&format!("{sys}/partition")).trim().parse().unwrap_or(0);
        // The link is ../../devices/.../DISK/PART for a partition of DISK.
        let disk =
            (partno > 0).then(|| sys::readlink(&sys).and_then(|l| l.rsplit('/').nth(1).map(str::to_string))).flatten();
        let devno = read_text(&format!("{sys}/dev")).trim().to_string();
        devs.push(Dev { probe: probe::probe_fs(&f), name: n, devno, disk, partno });
    }
    // PARTUUID/PARTLABEL: from each disk's table, matched to its partitions by number.
    for i in 0..devs.len() {
        if devs[i].disk.is_some() || !devs.iter().any(|p| p.disk.as_ref() == Some(&devs[i].name)) {
            continue;
        }
        let Ok(f) = sys::open(&format!("/dev/{}", devs[i].name)) else { continue };
        let parts = probe::partitions(&f);
        let disk = devs[i].name.clone();
        for d in devs.iter_mut().filter(|p| p.disk.as_ref() == Some(&disk)) {
            if let Some(e) = parts.iter().find(|e| e.number == d.partno) {
                d.probe.partuuid = Some(e.partuuid.clone());
                d.probe.partlabel = e.partlabel.clone();
            }
        }
    }
    devs
}

fn dm_name(dev: &str) -> Option<String> {
    sys::read_string(&format!("/sys/class/block/{dev}/dm/name")).map(|s| s.trim().to_string())
}

/// Undo udev's `\xNN` escapes in /dev/disk/by-label/ and by-partlabel/ names.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && let Some(v) = s.get(i + 2..i + 4).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Find the device a root= spec names, as the kernel and udev's /dev/disk links do:
/// UUID=, LABEL=, PARTUUID= (optionally `/PARTNROFF=N`), PARTLABEL=, /dev/disk/by-*/...,
/// /dev/mapper/NAME, MAJOR:MINOR, /dev/NAME, or any other path to a block device node
/// (/dev/VG/LV, /dev/md/NAME).
fn find(spec: &str, devs: &[Dev]) -> Option<String> {
    let eq = |a: &Option<String>, b: &str| a.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(b));
    let dev = |d: &Dev| format!("/dev/{}", d.name);
    let by = |f: &dyn Fn(&Dev) -> bool| devs.iter().find(|d| f(d)).map(dev);
    if let Some(u) = spec.strip_prefix("UUID=").or_else(|| spec.strip_prefix("/dev/disk/by-uuid/")) {
        return by(&|d| eq(&d.probe.uuid, u));
    }
    if let Some(l) = spec.strip_prefix("LABEL=") {
        return by(&|d| d.probe.label.as_deref() == Some(l));
    }
    if let Some(l) = spec.strip_prefix("/dev/disk/by-label/") {
        return by(&|d| d.probe.label.as_deref() == Some(&unescape(l)));
    }
    if let Some(u) = spec.strip_prefix("PARTUUID=").or_else(|| spec.strip_prefix("/dev/disk/by-partuuid/")) {
        let (u, off) = match u.split_once("/PARTNROFF=") {
            Some((u, off)) => (u, off.parse::<i64>().ok()?),
            None => (u, 0),
        };
        let base = devs.iter().find(|d| eq(&d.probe.partuuid, u))?;
        if off == 0 {
            return Some(dev(base));
        }
        let want = base.partno as i64 + off;
        return devs.iter().find(|d| d.disk.is_some() && d.disk == base.disk && d.partno as i64 == want).map(dev);
    }
    if let Some(l) = spec.strip_prefix("PARTLABEL=") {
        return by(&|d| d.probe.partlabel.as_deref() == Some(l));
    }
    if let Some(l) = spec.strip_prefix("/dev/disk/by-partlabel/") {
        return by(&|d| d.probe.partlabel.as_deref() == Some(&unescape(l)));
    }
    if let Some(m) = spec.strip_prefix("/dev/mapper/") {
        return by(&|d| dm_name(&d.name).as_deref() == Some(m));
    }
    // A major:minor number, as the kernel accepts.
    if let Some((a, b)) = spec.split_once(':')
        && let (Ok(ma), Ok(mi)) = (a.parse::<u32>(), b.parse::<u32>())
    {
        return by(&|d| d.devno == format!("{ma}:{mi}"));
    }
    let name = spec.strip_prefix("/dev/").unwrap_or(spec);
    if let Some(d) = devs.iter().find(|d| d.name == name) {
        return Some(dev(d));
    }
    // Any other node or link (lvm's /dev/VG/LV, mdadm's /dev/md/NAME): by device number.
    let st = rustix::fs::stat(spec).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::BlockDevice {
        return None;
    }
    let devno = format!("{}:{}", rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    by(&|d| d.devno == devno)
}

struct Init {
    log: Log,
    cmd: Cmdline,
    conf: Conf,
    mods: Modules,
    cmdline_text: String,
    notes: Vec<String>,
    /// The arguments and environment the kernel gave /init (command-line words it did not
    /// know, such as `single`, and `HOME`, `TERM`, `x=y`): handed on to the root's init.
    args: Vec<String>,
    env: Vec<String>,
}

impl Init {
    fn feature(&self, f: &str) -> bool {
        self.conf.features.iter().any(|x| x == f)
    }

    /// Unlock LUKS containers asked for on the command line, or the root itself when its
    /// UUID names a LUKS container. Returns true if something was unlocked.
    fn unlock(&mut self, devs: &[Dev], root: &str) -> bool {
        if self.cmd.no_luks || !self.feature("luks") || !has("/usr/sbin/cryptsetup") && !has("/sbin/cryptsetup") {
            return false;
        }
        let mut wanted: Vec<String> = self.cmd.luks_uuids.clone();
        if let Some(u) = root.strip_prefix("UUID=") {
            wanted.push(u.to_string());
        }
        let mut done = false;
        for d in devs.iter().filter(|d| d.probe.fstype.as_deref() == Some("crypto_LUKS")) {
            let Some(uuid) = d.probe.uuid.clone() else { continue };
            let all_luks = self.cmd.luks_uuids.is_empty() && !root.starts_with("UUID=");
            if !all_luks && !wanted.iter().any(|w| w.eq_ignore_ascii_case(&uuid)) {
                continue;
            }
            let name = self
                .cmd
                .luks_names
                .iter()
                .find(|(u, _)| u.eq_ignore_ascii_case(&uuid))
                .map(|(_, n)| n.clone())
                .unwrap_or_else(|| format!("luks-{uuid}"));
            if has(&format!("/dev/mapper/{name}")) {
                continue;
            }
            self.log.debug(&format!("unlocking /dev/{} as {name}", d.name));
            // cryptsetup needs /dev/mapper/control, and the kernel the crypt target.
            self.mods.load("dm_crypt", &mut self.log);
            let dev = format!("/dev/{}", d.name);
            let mut args = vec!["open", "--type", "luks", &dev, &name];
            if let Some(k) = &self.cmd.luks_key {
                args.extend(["--key-file", k]);
            }
            for _ in 0..3 {
                match sys::run("cryptsetup", &args) {
                    Ok(Ok(())) => {
                        done = true;
                        break;
                    }
                    Ok(Err(how)) => self.notes.push(format!("cryptsetup open {dev} failed ({how})")),
                    Err(e) => {
                        self.notes.push(e);
                        break;
                    }
                }
                if self.cmd.luks_key.is_some() {
                    break;
                }
            }
        }
        done
    }

    fn activate_lvm_md(&mut self) {
        if self.feature("mdraid") && !self.cmd.no_md {
            for m in ["md_mod", "raid1", "raid0", "raid10", "raid456"] {
                self.mods.load(m, &mut self.log);
            }
            self.helper("mdadm", &["--assemble", "--scan", "--run"]);
        }
        if self.feature("lvm") && !self.cmd.no_lvm {
            self.mods.load("dm_mod", &mut self.log);
            // No udev here: lvm creates the device nodes itself.
            let cfg = "activation { udev_sync = 0 udev_rules = 0 } devices { obtain_device_list_from_udev = 0 }";
            self.helper("lvm", &["vgchange", "-ay", "--sysinit", "--config", cfg]);
        }
    }

    /// Run a helper; its failure is kept for the diagnosis (a failing step need not be fatal:
    /// the root may be elsewhere).
    fn helper(&mut self, prog: &str, args: &[&str]) {
        match sys::run(prog, args) {
            Ok(Ok(())) => {}
            Ok(Err(how)) => self.notes.push(format!("{prog} {} failed ({how})", args.join(" "))),
            Err(e) => self.notes.push(e),
        }
        sys::reap();
    }

    /// Wait for the root device: coldplug, uevents, LUKS/LVM/md. Returns the device path.
    fn wait_for_root(&mut self, spec: &str) -> Result<String, String> {
        let start = sys::now_ms();
        let sock = uevent_socket();
        let forever = self.cmd.rootwait;
        let timeout = self.cmd.timeout.saturating_mul(1000);
        let mut last_scan = 0usize;
        let mut last_stack: Option<u64> = None;
        // Walk sysfs when devices may have appeared: at the start, after uevents, and every
        // second as a fallback (or always, without a uevent socket). Look for the root first:
        // the listed modules usually bring it, and then the walk is not needed at all.
        let mut walk = true;
        let mut last_walk = sys::now_ms();
        // Probe the block devices when they may have changed (at the start, after uevents,
        // after helpers made new ones), and every second as a fallback; not on every 100 ms
        // tick of an idle wait.
        let mut rescan = true;
        let mut scanned_at = 0;
        let mut devs = Vec::new();
        loop {
            if rescan || sock.is_none() || sys::now_ms() - scanned_at >= 1000 {
                devs = scan();
                scanned_at = sys::now_ms();
                rescan = false;
                if let Some(d) = find(spec, &devs) {
                    // A LUKS container named as root: unlock it and use what is inside.
                    let is_luks = devs
                        .iter()
                        .any(|x| format!("/dev/{}", x.name) == d && x.probe.fstype.as_deref() == Some("crypto_LUKS"));
                    if !is_luks {
                        return Ok(d);
                    }
                }
            }
            let loaded = if walk || sock.is_none() || sys::now_ms() - last_walk > 1000 {
                last_walk = sys::now_ms();
                self.mods.coldplug(&mut self.log)
            } else {
                0
            };
            if walk {
                self.log.debug(&format!("coldplug: {loaded} modules"));
            }
            walk = false;
            if loaded > 0 && !devs.is_empty() && sys_block_names().len() != devs.len() {
                rescan = true;
                continue; // new block devices: look again before anything else
            }
            if devs.len() != last_scan || loaded > 0 || last_stack.is_none_or(|t| sys::now_ms() - t > 2000) {
                last_scan = devs.len();
                last_stack = Some(sys::now_ms());
                let before = sys_block_names().len();
                if self.unlock(&devs, spec) {
                    rescan = true;
                    continue;
                }
                self.activate_lvm_md();
                if sys_block_names().len() != before {
                    rescan = true;
                    continue;
                }
            }
            if !forever && sys::now_ms() - start > timeout {
                return Err(format!("waited {} s for root={spec}", self.cmd.timeout));
            }
            match &sock {
                Some(fd) => {
                    let (any, aliases) = uevents(fd, 100);
                    rescan = any;
                    walk = !aliases.is_empty();
                    let new: Vec<String> =
                        aliases.into_iter().filter(|a| self.mods.seen_aliases.insert(a.clone())).collect();
                    self.mods.load_many(&new, &mut self.log);
                }
                None => sys::sleep_ms(100),
            }
        }
    }

    /// Everything useful about a failure, on one screen.
    fn diagnose(&mut self, why: &str) {
        let mut s = format!(
            "leanrd: cannot boot: {why}\nleanrd: kernel command line: {}\nleanrd: block devices seen:\n",
            self.cmdline_text.trim()
        );
        let devs = scan();
        if devs.is_empty() {
            s += "  (none: no driver for the disk controller was loaded?)\n";
        }
        for d in &devs {
            let p = &d.probe;
            let f = |k: &str, v: &Option<String>| v.as_ref().map(|x| format!(" {k}={x}")).unwrap_or_default();
            s += &format!(
                "  /dev/{:<10} TYPE={}{}{}{}{}\n",
                d.name,
                p.fstype.as_deref().unwrap_or("?"),
                f("UUID", &p.uuid),
                f("LABEL", &p.label),
                f("PARTUUID", &p.partuuid),
                f("PARTLABEL", &p.partlabel)
            );
        }
        if !self.mods.failed.is_empty() {
            s += "leanrd: modules that failed to load:\n";
            for (m, e) in &self.mods.failed {
                s += &format!("  {m}: {} (errno {})\n", strerror(*e), e.raw_os_error());
            }
        }
        s += &format!("leanrd: {} modules loaded\n", self.mods.loaded.len());
        if let Some(e) = &self.mods.table_error {
            s += &format!("leanrd: {e}\n");
        }
        for n in &self.notes {
            s += &format!("leanrd: {n}\n");
        }
        eprint(&s);
    }

    fn shell(&self) {
        for sh in ["/bin/sh", "/usr/bin/sh", "/bin/busybox"] {
            if has(sh) {
                eprint("leanrd: starting a rescue shell; exit it to try again\n");
                let args: &[&str] = if sh.ends_with("busybox") { &["sh"] } else { &[] };
                if let Err(e) = sys::run(sh, args) {
                    eprint(&format!("leanrd: {e}\n"));
                }
                sys::reap();
                return;
            }
        }
    }
}

/// Delete the initramfs contents (not crossing into other mounts), as switch_root must.
fn delete_tree(dir: &str, dev: u64) {
    let Ok(rd) = sys::list_dir(dir) else { return };
    for (name, _) in rd {
        let p = format!("{}/{name}", dir.trim_end_matches('/'));
        let Ok(st) = rustix::fs::lstat(p.as_str()) else { continue };
        if st.st_dev != dev {
            continue;
        }
        let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        if is_dir {
            delete_tree(&p, dev);
        }
        sys::remove(&p, is_dir);
    }
}

fn switch_root(init: &mut Init) -> Result<(), String> {
    let new = "/newroot";
    for m in ["/dev", "/proc", "/sys", "/run"] {
        let target = format!("{new}{m}");
        if sys::is_dir(&target) {
            let _ = rustix::mount::mount_move(m, target.as_str());
        }
    }
    let root_dev = rustix::fs::stat("/").map(|m| m.st_dev).map_err(|e| format!("stat /: {}", strerror(e)))?;
    rustix::process::chdir(new).map_err(|e| format!("cannot chdir to the new root: {}", strerror(e)))?;
    delete_tree("/", root_dev);
    rustix::mount::mount_move(".", "/").map_err(|e| format!("cannot move the new root to /: {}", strerror(e)))?;
    rustix::process::chroot(".").map_err(|e| format!("chroot failed: {}", strerror(e)))?;
    let _ = rustix::process::chdir("/");
    // Give module loading back to the real system.
    let _ = sys::write_file("/proc/sys/kernel/modprobe", "/sbin/modprobe");
    let mut candidates: Vec<String> = init.cmd.init.iter().cloned().collect();
    candidates.extend(["/sbin/init", "/etc/init", "/bin/init", "/bin/sh"].map(String::from));
    init.log.debug("switch_root done; exec init");
    for c in candidates {
        if !has(&c) {
            continue;
        }
        // The root's init gets what the kernel gave us, as with the kernel starting it.
        let mut argv = vec![c.as_str()];
        argv.extend(init.args.iter().skip(1).map(String::as_str));
        let env: Vec<&str> = if init.env.is_empty() {
            vec!["HOME=/", "TERM=linux"]
        } else {
            init.env.iter().map(String::as_str).collect()
        };
        let e = sys::Exec::new(&c, &argv, &env).exec();
        init.notes.push(format!("exec {c}: {}", strerror(e)));
    }
    Err("no init found in the new root (tried init=, /sbin/init, /etc/init, /bin/init, /bin/sh)".into())
}

fn boot(init: &mut Init) -> Result<(), String> {
    // Modules the generator listed, then whatever the devices ask for.
    let load = init.conf.load.clone();
    init.mods.load_many(&load, &mut init.log);
    init.log.debug("listed modules loaded");
    let spec =
        init.cmd.root.clone().or(init.conf.root.clone()).ok_or("no root= on the command line and none in the image")?;
    if init.cmd.rootdelay > 0 {
        sys::sleep_ms(init.cmd.rootdelay.saturating_mul(1000));
    }
    let dev = init.wait_for_root(&spec)?;
    init.log.debug(&format!("root is {dev}"));
    let probed = sys::open(&dev).ok().map(|f| probe::probe_fs(&f)).unwrap_or_default();
    let fstype = init.cmd.rootfstype.clone().or(probed.fstype.clone()).or(init.conf.rootfstype.clone());
    for t in fstype.iter().flat_map(|t| t.split(',')).filter(|t| !t.is_empty()) {
        init.mods.load(&format!("fs-{t}"), &mut init.log);
    }
    let flags = if init.cmd.rw { MountFlags::empty() } else { MountFlags::RDONLY };
    // rootfstype= may list several types, as for the kernel.
    let types: Vec<String> = match &fstype {
        Some(t) => t.split(',').filter(|t| !t.is_empty()).map(str::to_string).collect(),
        None => read_text("/proc/filesystems")
            .lines()
            .filter(|l| !l.starts_with("nodev"))
            .map(|l| l.trim().to_string())
            .collect(),
    };
    let mut last = Errno::NODEV;
    let mut ok = false;
    for t in &types {
        match mount(&dev, "/newroot", t, flags, init.cmd.rootflags.as_deref()) {
            Ok(()) => {
                ok = true;
                break;
            }
            Err(e) => last = e,
        }
    }
    if !ok {
        return Err(format!("cannot mount {dev} ({}) on /newroot: {}", types.join(","), strerror(last)));
    }
    init.log.debug("root mounted");
    if init.cmd.shell {
        init.shell();
    }
    switch_root(init)
}

fn reboot_or_wait(cmd: &Cmdline) -> ! {
    match cmd.panic {
        Some(n) if n != 0 => {
            if n > 0 {
                sys::sleep_ms(n as u64 * 1000);
            }
            rustix::fs::sync();
            let _ = rustix::system::reboot(rustix::system::RebootCommand::Restart);
        }
        _ => {}
    }
    loop {
        sys::sleep_ms(3_600_000);
    }
}

/// The kernel's module helper: `/init -q -- MODULE...`. Exits 1, as modprobe does, when a
/// module is unknown or fails to load.
fn modprobe_mode(args: &[String]) -> i32 {
    let names: Vec<String> = args.iter().skip(1).filter(|a| !a.starts_with('-')).cloned().collect();
    let kver = read_text("/proc/sys/kernel/osrelease").trim().to_string();
    let mut mods = Modules::open(&kver);
    let mut log = Log { debug: false, kmsg: None };
    let missing = names.iter().any(|n| matches!(mods.db.resolve(n), leanrd_kmod::Resolved::Missing));
    mods.load_many(&names, &mut log);
    if mods.failed.is_empty() && !missing { 0 } else { 1 }
}

/// The program: /init as PID 1, the module helper otherwise, with the arguments and
/// environment the kernel passed. Never returns.
pub fn main(args: Vec<String>, env: Vec<String>) -> ! {
    if !rustix::process::getpid().is_init() {
        if args.len() > 1 {
            sys::exit(modprobe_mode(&args));
        }
        eprint("leanrd-init: this is an initramfs /init and must run as PID 1\n");
        sys::exit(1);
    }
    let (nosuid, nodev, noexec) = (MountFlags::NOSUID, MountFlags::NODEV, MountFlags::NOEXEC);
    let _ = mount("devtmpfs", "/dev", "devtmpfs", nosuid, Some("mode=0755"));
    let _ = mount("proc", "/proc", "proc", nosuid | nodev | noexec, None);
    let _ = mount("sysfs", "/sys", "sysfs", nosuid | nodev | noexec, None);
    let _ = mount("tmpfs", "/run", "tmpfs", nosuid | nodev, Some("mode=0755"));
    let cmdline_text = read_text("/proc/cmdline");
    let cmd = Cmdline::parse(&cmdline_text);
    let conf = Conf::parse(&read_text(CONF));
    let kver = conf.kver.clone().unwrap_or_else(|| read_text("/proc/sys/kernel/osrelease").trim().to_string());
    // The kernel asks for modules (crypto-crc32c, fs-*) through its helper: us.
    let _ = sys::write_file("/proc/sys/kernel/modprobe", "/init");
    // /dev/kmsg drops a writer's lines after a burst of 10 unless told otherwise: every step
    // is wanted when debugging.
    if cmd.debug {
        let _ = sys::write_file("/proc/sys/kernel/printk_devkmsg", "on\n");
    }
    let mut log = Log { debug: cmd.debug, kmsg: sys::open_write("/dev/kmsg").ok() };
    log.debug("started");
    let mods = Modules::open(&kver);
    log.debug(&format!("module tables read: {} modules, {} loaded", mods.db.paths.len(), mods.loaded.len()));
    let mut init = Init { log, mods, cmd, conf, cmdline_text, notes: Vec::new(), args, env };
    loop {
        let err = match boot(&mut init) {
            Ok(()) => "switch_root returned".to_string(),
            Err(e) => e,
        };
        init.diagnose(&err);
        let rescue = init.feature("rescue") || has("/bin/sh");
        if rescue {
            init.shell();
            // After the shell, try once more (the user may have fixed things).
            let _ = rustix::mount::unmount("/newroot", UnmountFlags::DETACH);
            continue;
        }
        init.log.error("no rescue shell in this image (add --include rescue)");
        reboot_or_wait(&init.cmd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, devno: &str, disk: Option<&str>, partno: u32, p: probe::Probe) -> Dev {
        Dev { name: name.into(), devno: devno.into(), disk: disk.map(Into::into), partno, probe: p }
    }

    fn devs() -> Vec<Dev> {
        let fs = |t: &str, u: &str, l: Option<&str>, pu: Option<&str>, pl: Option<&str>| probe::Probe {
            fstype: Some(t.into()),
            uuid: Some(u.into()),
            label: l.map(Into::into),
            partuuid: pu.map(Into::into),
            partlabel: pl.map(Into::into),
        };
        vec![
            dev("sda", "8:0", None, 0, probe::Probe::default()),
            dev("sda1", "8:1", Some("sda"), 1, fs("vfat", "AB12-CD34", Some("EFI"), Some("aaaa-1"), Some("esp"))),
            dev("sda2", "8:2", Some("sda"), 2, fs("ext4", "1111-2222", Some("my root"), Some("aaaa-2"), Some("r"))),
            dev("vda", "254:0", None, 0, fs("xfs", "3333-4444", Some("data"), None, None)),
        ]
    }

    #[test]
    fn finds_root_by_every_kind_of_name() {
        let d = devs();
        let f = |s: &str| find(s, &d);
        assert_eq!(f("UUID=1111-2222").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("UUID=ab12-cd34").as_deref(), Some("/dev/sda1"), "UUIDs compare without case");
        assert_eq!(f("/dev/disk/by-uuid/3333-4444").as_deref(), Some("/dev/vda"));
        assert_eq!(f("LABEL=my root").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("/dev/disk/by-label/my\\x20root").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("PARTUUID=AAAA-2").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("PARTUUID=aaaa-1/PARTNROFF=1").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("PARTUUID=aaaa-1/PARTNROFF=5"), None);
        assert_eq!(f("PARTLABEL=esp").as_deref(), Some("/dev/sda1"));
        assert_eq!(f("/dev/disk/by-partlabel/r").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("8:2").as_deref(), Some("/dev/sda2"));
        assert_eq!(f("/dev/vda").as_deref(), Some("/dev/vda"));
        assert_eq!(f("vda").as_deref(), Some("/dev/vda"));
        assert_eq!(f("UUID=none"), None);
        assert_eq!(f("LABEL=data2"), None);
        assert_eq!(f("/dev/nonexistent/x"), None);
    }

    #[test]
    fn unescapes_udev_names() {
        assert_eq!(unescape("a\\x20b\\x2fc"), "a b/c");
        assert_eq!(unescape("plain"), "plain");
        assert_eq!(unescape("bad\\xZZ\\x"), "bad\\xZZ\\x");
    }
}
