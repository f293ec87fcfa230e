//! leanrd's /init. As PID 1: mount the API file systems, load the modules the generator
//! listed, coldplug every device's modalias (and keep listening for uevents), find the root
//! by UUID/LABEL/PARTUUID/PARTLABEL/path, unlock/activate LUKS, LVM and md when the image has
//! them, mount the root and switch to it. On failure it says why, on one screen, and never
//! exits (PID 1 exiting panics the kernel without a word).
//!
//! As anything else it is the kernel's module helper (/proc/sys/kernel/modprobe points here):
//! `/init -q -- MODULE` loads MODULE with its dependencies.

mod config;
mod probe;

use std::collections::{BTreeMap, HashSet};
use std::ffi::CString;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use config::{Cmdline, Conf};
use leanrd_kmod::ModuleDb;

const CONF: &str = "/etc/leanrd/init.conf";

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn strerror(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// Log to the kernel log (timestamped by the kernel) when debugging, and to the console for
/// errors.
struct Log {
    debug: bool,
    kmsg: Option<File>,
}

impl Log {
    fn debug(&mut self, msg: &str) {
        if self.debug
            && let Some(k) = &mut self.kmsg
        {
            let _ = k.write_all(format!("<5>leanrd: {msg}\n").as_bytes());
        }
    }
    fn error(&mut self, msg: &str) {
        eprintln!("leanrd: {msg}");
    }
}

fn mount(src: &str, target: &str, fstype: &str, flags: libc::c_ulong, data: Option<&str>) -> Result<(), i32> {
    let _ = fs::create_dir_all(target);
    // Every CString is bound here so that it outlives the call.
    let (src, target, fstype, data) = (cstr(src), cstr(target), cstr(fstype), data.map(cstr));
    let fstype_ptr = if fstype.is_empty() { std::ptr::null() } else { fstype.as_ptr() };
    let data_ptr = data.as_ref().map(|c| c.as_ptr() as *const libc::c_void).unwrap_or(std::ptr::null());
    // SAFETY: all pointers are valid NUL-terminated strings (alive until the end of this
    // function) or null.
    let r = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype_ptr, flags, data_ptr) };
    if r == 0 { Ok(()) } else { Err(errno()) }
}

/// The module tables in the image and what has been loaded.
struct Modules {
    dir: String,
    db: ModuleDb,
    loaded: HashSet<String>,
    failed: BTreeMap<String, i32>,
    seen_aliases: HashSet<String>,
    /// Why the image's module tables could not be read, if they could not.
    table_error: Option<String>,
}

impl Modules {
    fn open(kver: &str) -> Modules {
        let dir = format!("/lib/modules/{kver}");
        let rd = |f: &str| fs::read_to_string(format!("{dir}/{f}")).unwrap_or_default();
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
        let loaded = fs::read_to_string("/proc/modules")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        Modules { dir, db, loaded, failed: BTreeMap::new(), seen_aliases: HashSet::new(), table_error }
    }

    /// Load a name, alias or modalias with everything it needs. Returns how many modules
    /// were newly loaded.
    fn load(&mut self, what: &str, log: &mut Log) -> usize {
        self.load_many(&[what.to_string()], log)
    }

    /// Load several names/aliases with everything they need, in waves: every module whose
    /// dependencies (and pre-softdeps) are loaded goes in the same wave, and a wave's modules
    /// are loaded concurrently (finit_module on threads).
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
        while !pending.is_empty() {
            let waits_for = |m: &String| -> Vec<String> {
                let mut v: Vec<String> = self.db.deps.get(m).cloned().unwrap_or_default();
                if let Some((pre, _)) = self.db.softdeps.get(m) {
                    v.extend(pre.iter().map(|s| leanrd_kmod::normalize(s)));
                }
                v
            };
            let mut wave: Vec<String> =
                pending.iter().filter(|m| waits_for(m).iter().all(|d| !pending.contains(d))).cloned().collect();
            if wave.is_empty() {
                wave.push(pending[0].clone()); // a cycle: break it in list order
            }
            pending.retain(|m| !wave.contains(m));
            let dir = &self.dir;
            let paths: Vec<(String, Option<String>)> =
                wave.iter().map(|m| (m.clone(), self.db.paths.get(m).map(|r| format!("{dir}/{r}")))).collect();
            let results: Vec<(String, i32)> = std::thread::scope(|s| {
                let hs: Vec<_> = paths
                    .iter()
                    .map(|(m, p)| s.spawn(move || (m.clone(), p.as_deref().map(finit).unwrap_or(libc::ENOENT))))
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap_or_default()).collect()
            });
            for (m, e) in results {
                if e == 0 {
                    log.debug(&format!("loaded {m}"));
                    self.loaded.insert(m);
                    n += 1;
                } else {
                    log.debug(&format!("{m}: {}", strerror(e)));
                    self.failed.insert(m, e);
                }
            }
        }
        n
    }

    /// Load drivers for every device in sysfs not seen before. Returns modules loaded.
    fn coldplug(&mut self, log: &mut Log) -> usize {
        let mut aliases = Vec::new();
        let mut stack = vec![PathBuf::from("/sys/devices")];
        while let Some(d) = stack.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(e.path());
                } else if e.file_name() == "modalias"
                    && let Ok(a) = fs::read_to_string(e.path())
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

/// Load one module file; 0 or the errno (an already loaded module counts as loaded).
fn finit(path: &str) -> i32 {
    match File::open(path) {
        Ok(f) => {
            // SAFETY: finit_module on an open descriptor with an empty parameter string.
            let r = unsafe { libc::syscall(libc::SYS_finit_module, f.as_raw_fd(), c"".as_ptr(), 0) };
            if r == 0 || errno() == libc::EEXIST { 0 } else { errno() }
        }
        Err(e) => e.raw_os_error().unwrap_or(libc::ENOENT),
    }
}

/// A netlink socket for kernel uevents: devices that appear later get their drivers.
fn uevent_socket() -> Option<OwnedFd> {
    // SAFETY: plain socket/bind syscalls; the fd is owned on success.
    unsafe {
        let fd = libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 15);
        if fd < 0 {
            return None;
        }
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = 1;
        if libc::bind(fd, &addr as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_nl>() as u32)
            != 0
        {
            libc::close(fd);
            return None;
        }
        Some(OwnedFd::from_raw_fd(fd))
    }
}

/// Wait up to `ms` for uevents; returns the MODALIAS values received.
fn uevents(fd: &OwnedFd, ms: i32) -> Vec<String> {
    let mut out = Vec::new();
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: valid pollfd array of length 1.
    if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
        return out;
    }
    let mut buf = vec![0u8; 8192];
    loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
        if n <= 0 {
            break;
        }
        for field in buf[..n as usize].split(|&b| b == 0) {
            if let Some(a) = field.strip_prefix(b"MODALIAS=") {
                out.push(String::from_utf8_lossy(a).into_owned());
            }
        }
    }
    out
}

/// A block device and what probing found.
#[derive(Debug, Clone)]
struct Dev {
    name: String,
    probe: probe::Probe,
}

fn sys_block_names() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir("/sys/class/block")
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Probe every block device (file systems; partition tables of whole disks).
fn scan() -> Vec<Dev> {
    let names = sys_block_names();
    let mut devs: BTreeMap<String, Dev> = BTreeMap::new();
    for n in &names {
        let Ok(f) = File::open(format!("/dev/{n}")) else { continue };
        devs.insert(n.clone(), Dev { name: n.clone(), probe: probe::probe_fs(&f) });
    }
    // PARTUUID/PARTLABEL: from each disk's table, matched to its partitions by number.
    for n in &names {
        let sys = format!("/sys/class/block/{n}");
        if Path::new(&format!("{sys}/partition")).exists() {
            continue;
        }
        let Ok(f) = File::open(format!("/dev/{n}")) else { continue };
        let parts = probe::partitions(&f);
        if parts.is_empty() {
            continue;
        }
        for p in &names {
            let psys = format!("/sys/class/block/{p}");
            let parent = fs::canonicalize(&psys).ok().and_then(|x| x.parent().map(|y| y.to_path_buf()));
            if parent.and_then(|x| x.file_name().map(|s| s.to_string_lossy().into_owned())).as_deref() != Some(n) {
                continue;
            }
            let num: u32 =
                fs::read_to_string(format!("{psys}/partition")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
            if let (Some(e), Some(d)) = (parts.iter().find(|e| e.number == num), devs.get_mut(p)) {
                d.probe.partuuid = Some(e.partuuid.clone());
                d.probe.partlabel = e.partlabel.clone();
            }
        }
    }
    devs.into_values().collect()
}

fn dm_name(dev: &str) -> Option<String> {
    fs::read_to_string(format!("/sys/class/block/{dev}/dm/name")).ok().map(|s| s.trim().to_string())
}

/// Find the device a root= spec names.
fn find(spec: &str, devs: &[Dev]) -> Option<String> {
    let eq = |a: &Option<String>, b: &str| a.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(b));
    let by = |f: &dyn Fn(&Dev) -> bool| devs.iter().find(|d| f(d)).map(|d| format!("/dev/{}", d.name));
    if let Some(u) = spec.strip_prefix("UUID=").or_else(|| spec.strip_prefix("/dev/disk/by-uuid/")) {
        return by(&|d| eq(&d.probe.uuid, u));
    }
    if let Some(l) = spec.strip_prefix("LABEL=").or_else(|| spec.strip_prefix("/dev/disk/by-label/")) {
        return by(&|d| d.probe.label.as_deref() == Some(l));
    }
    if let Some(u) = spec.strip_prefix("PARTUUID=").or_else(|| spec.strip_prefix("/dev/disk/by-partuuid/")) {
        return by(&|d| eq(&d.probe.partuuid, u));
    }
    if let Some(l) = spec.strip_prefix("PARTLABEL=").or_else(|| spec.strip_prefix("/dev/disk/by-partlabel/")) {
        return by(&|d| d.probe.partlabel.as_deref() == Some(l));
    }
    if let Some(m) = spec.strip_prefix("/dev/mapper/") {
        return devs.iter().find(|d| dm_name(&d.name).as_deref() == Some(m)).map(|d| format!("/dev/{}", d.name));
    }
    // A major:minor number, as the kernel accepts.
    if let Some((a, b)) = spec.split_once(':')
        && let (Ok(ma), Ok(mi)) = (a.parse::<u32>(), b.parse::<u32>())
    {
        return devs
            .iter()
            .find(|d| {
                fs::read_to_string(format!("/sys/class/block/{}/dev", d.name))
                    .is_ok_and(|s| s.trim() == format!("{ma}:{mi}"))
            })
            .map(|d| format!("/dev/{}", d.name));
    }
    let name = spec.strip_prefix("/dev/").unwrap_or(spec);
    devs.iter().find(|d| d.name == name).map(|d| format!("/dev/{}", d.name))
}

fn has(path: &str) -> bool {
    Path::new(path).exists()
}

struct Init {
    log: Log,
    cmd: Cmdline,
    conf: Conf,
    mods: Modules,
    cmdline_text: String,
    notes: Vec<String>,
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
            let mut c = Command::new("cryptsetup");
            c.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").args([
                "open",
                "--type",
                "luks",
                &format!("/dev/{}", d.name),
                &name,
            ]);
            if let Some(k) = &self.cmd.luks_key {
                c.args(["--key-file", k]);
            }
            for _ in 0..3 {
                match c.status() {
                    Ok(s) if s.success() => {
                        done = true;
                        break;
                    }
                    Ok(s) => self.notes.push(format!("cryptsetup open /dev/{} failed ({s})", d.name)),
                    Err(e) => {
                        self.notes.push(format!("cannot run cryptsetup: {e}"));
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
        let path = "/usr/sbin:/usr/bin:/sbin:/bin";
        if self.feature("mdraid") && !self.cmd.no_md {
            for m in ["md_mod", "raid1", "raid0", "raid10", "raid456"] {
                self.mods.load(m, &mut self.log);
            }
            let _ = Command::new("mdadm").env("PATH", path).args(["--assemble", "--scan", "--run"]).status();
        }
        if self.feature("lvm") && !self.cmd.no_lvm {
            self.mods.load("dm_mod", &mut self.log);
            // No udev here: lvm creates the device nodes itself.
            let cfg = "activation { udev_sync = 0 udev_rules = 0 } devices { obtain_device_list_from_udev = 0 }";
            let _ =
                Command::new("lvm").env("PATH", path).args(["vgchange", "-ay", "--sysinit", "--config", cfg]).status();
        }
    }

    /// Wait for the root device: coldplug, uevents, LUKS/LVM/md. Returns the device path.
    fn wait_for_root(&mut self, spec: &str) -> Result<String, String> {
        let start = Instant::now();
        let sock = uevent_socket();
        let forever = self.cmd.rootwait;
        let timeout = Duration::from_secs(self.cmd.timeout);
        let mut last_scan = 0usize;
        let mut last_stack = Instant::now() - Duration::from_secs(10);
        // Walk sysfs when devices may have appeared: at the start, after uevents, and every
        // second as a fallback (or always, without a uevent socket).
        let mut walk = true;
        let mut last_walk = Instant::now();
        loop {
            let loaded = if walk || sock.is_none() || last_walk.elapsed() > Duration::from_secs(1) {
                last_walk = Instant::now();
                self.mods.coldplug(&mut self.log)
            } else {
                0
            };
            walk = false;
            let devs = scan();
            if let Some(d) = find(spec, &devs) {
                // A LUKS container named as root: unlock it and use what is inside.
                let is_luks = devs
                    .iter()
                    .any(|x| format!("/dev/{}", x.name) == d && x.probe.fstype.as_deref() == Some("crypto_LUKS"));
                if !is_luks {
                    return Ok(d);
                }
            }
            if devs.len() != last_scan || loaded > 0 || last_stack.elapsed() > Duration::from_secs(2) {
                last_scan = devs.len();
                last_stack = Instant::now();
                let before = sys_block_names().len();
                if self.unlock(&devs, spec) {
                    continue;
                }
                self.activate_lvm_md();
                if sys_block_names().len() != before {
                    continue;
                }
            }
            if !forever && start.elapsed() > timeout {
                return Err(format!("waited {} s for root={spec}", self.cmd.timeout));
            }
            match &sock {
                Some(fd) => {
                    let events = uevents(fd, 100);
                    walk = !events.is_empty();
                    let new: Vec<String> =
                        events.into_iter().filter(|a| self.mods.seen_aliases.insert(a.clone())).collect();
                    self.mods.load_many(&new, &mut self.log);
                }
                None => std::thread::sleep(Duration::from_millis(100)),
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
                s += &format!("  {m}: {}\n", strerror(*e));
            }
        }
        s += &format!("leanrd: {} modules loaded\n", self.mods.loaded.len());
        if let Some(e) = &self.mods.table_error {
            s += &format!("leanrd: {e}\n");
        }
        for n in &self.notes {
            s += &format!("leanrd: {n}\n");
        }
        eprint!("{s}");
    }

    fn shell(&self) {
        for sh in ["/bin/sh", "/usr/bin/sh", "/bin/busybox"] {
            if has(sh) {
                eprintln!("leanrd: starting a rescue shell; exit it to try again");
                let mut c = Command::new(sh);
                if sh.ends_with("busybox") {
                    c.arg("sh");
                }
                let _ = c.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").status();
                return;
            }
        }
    }
}

/// Delete the initramfs contents (not crossing into other mounts), as switch_root must.
fn delete_tree(dir: &Path, dev: u64) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(md) = fs::symlink_metadata(&p) else { continue };
        if md.dev() != dev {
            continue;
        }
        if md.is_dir() {
            delete_tree(&p, dev);
            let _ = fs::remove_dir(&p);
        } else {
            let _ = fs::remove_file(&p);
        }
    }
}

fn switch_root(init: &mut Init) -> Result<(), String> {
    let new = "/newroot";
    for m in ["/dev", "/proc", "/sys", "/run"] {
        let target = format!("{new}{m}");
        if Path::new(&target).is_dir() {
            let _ = mount(m, &target, "", libc::MS_MOVE, None);
        }
    }
    let root_dev = fs::metadata("/").map(|m| m.dev()).map_err(|e| e.to_string())?;
    if std::env::set_current_dir(new).is_err() {
        return Err("cannot chdir to the new root".into());
    }
    delete_tree(Path::new("/"), root_dev);
    mount(".", "/", "", libc::MS_MOVE, None).map_err(|e| format!("cannot move the new root to /: {}", strerror(e)))?;
    // SAFETY: chroot/chdir with valid strings.
    if unsafe { libc::chroot(c".".as_ptr()) } != 0 {
        return Err(format!("chroot failed: {}", strerror(errno())));
    }
    let _ = std::env::set_current_dir("/");
    // Give module loading back to the real system.
    let _ = fs::write("/proc/sys/kernel/modprobe", "/sbin/modprobe");
    let mut candidates: Vec<String> = init.cmd.init.iter().cloned().collect();
    candidates.extend(["/sbin/init", "/etc/init", "/bin/init", "/bin/sh"].map(String::from));
    init.log.debug("switch_root done; exec init");
    for c in candidates {
        if !has(&c) {
            continue;
        }
        let prog = cstr(&c);
        let argv = [prog.as_ptr(), std::ptr::null()];
        // SAFETY: argv is NULL-terminated; on success execv does not return.
        unsafe { libc::execv(prog.as_ptr(), argv.as_ptr()) };
        init.notes.push(format!("exec {c}: {}", strerror(errno())));
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
        std::thread::sleep(Duration::from_secs(init.cmd.rootdelay));
    }
    let dev = init.wait_for_root(&spec)?;
    init.log.debug(&format!("root is {dev}"));
    let probed = File::open(&dev).ok().map(|f| probe::probe_fs(&f)).unwrap_or_default();
    let fstype = init.cmd.rootfstype.clone().or(probed.fstype.clone()).or(init.conf.rootfstype.clone());
    if let Some(t) = &fstype {
        init.mods.load(&format!("fs-{t}"), &mut init.log);
    }
    let flags = if init.cmd.rw { 0 } else { libc::MS_RDONLY };
    let types: Vec<String> = match &fstype {
        Some(t) => vec![t.clone()],
        None => fs::read_to_string("/proc/filesystems")
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with("nodev"))
            .map(|l| l.trim().to_string())
            .collect(),
    };
    let mut last = 0;
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
                std::thread::sleep(Duration::from_secs(n as u64));
            }
            // SAFETY: reboot(2) as PID 1.
            unsafe {
                libc::sync();
                libc::reboot(libc::RB_AUTOBOOT);
            }
        }
        _ => {}
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The kernel's module helper: `/init -q -- MODULE...`.
fn modprobe_mode(args: &[String]) -> i32 {
    let names: Vec<&String> = args.iter().skip(1).filter(|a| !a.starts_with('-')).collect();
    let kver = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let mut mods = Modules::open(&kver);
    let mut log = Log { debug: false, kmsg: None };
    let names: Vec<String> = names.into_iter().cloned().collect();
    mods.load_many(&names, &mut log);
    if mods.failed.is_empty() { 0 } else { 1 }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if std::process::id() != 1 {
        if args.len() > 1 {
            std::process::exit(modprobe_mode(&args));
        }
        eprintln!("leanrd-init: this is an initramfs /init and must run as PID 1");
        std::process::exit(1);
    }
    let _ = mount("devtmpfs", "/dev", "devtmpfs", libc::MS_NOSUID, Some("mode=0755"));
    let _ = mount("proc", "/proc", "proc", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None);
    let _ = mount("sysfs", "/sys", "sysfs", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None);
    let _ = mount("tmpfs", "/run", "tmpfs", libc::MS_NOSUID | libc::MS_NODEV, Some("mode=0755"));
    let cmdline_text = fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let cmd = Cmdline::parse(&cmdline_text);
    let conf = Conf::parse(&fs::read_to_string(CONF).unwrap_or_default());
    let kver = conf
        .kver
        .clone()
        .unwrap_or_else(|| fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string());
    // The kernel asks for modules (crypto-crc32c, fs-*) through its helper: us.
    let _ = fs::write("/proc/sys/kernel/modprobe", "/init");
    let kmsg = fs::OpenOptions::new().write(true).open("/dev/kmsg").ok();
    let mut init = Init {
        log: Log { debug: cmd.debug, kmsg },
        mods: Modules::open(&kver),
        cmd,
        conf,
        cmdline_text,
        notes: Vec::new(),
    };
    init.log.debug("started");
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
            let _ = nix_umount("/newroot");
            continue;
        }
        init.log.error("no rescue shell in this image (add --include rescue)");
        reboot_or_wait(&init.cmd);
    }
}

fn nix_umount(p: &str) -> i32 {
    // SAFETY: umount2 with a valid path.
    unsafe { libc::umount2(cstr(p).as_ptr(), libc::MNT_DETACH) }
}
