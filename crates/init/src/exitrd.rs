//! The way down. At the switch to the root, [`leave`] puts /init itself in /run/initramfs as
//! `shutdown` with a record ([`Exitrd`]) of what the boot built, bottom-up; /run moves to the
//! root, so it is still there at shutdown. systemd-shutdown pivots into /run/initramfs (the old
//! root at /oldroot) and runs `/shutdown VERB` (systemd's docs/INITRD_INTERFACE.md):
//! [`shutdown_main`] unmounts everything under /oldroot deepest first, each unmount bounded,
//! then takes the record apart top-down — dm-crypt and LVM mappings removed by DM_DEV_REMOVE
//! (the kernel wipes a removed crypt target's key), md arrays stopped by STOP_ARRAY once clean,
//! loop devices detached, iSCSI sessions logged out (their SCSI devices removed first),
//! NVMe-oF controllers deleted — and ends in reboot(2) with the verb.
//! Every step is one line in /run/initramfs/leanrd.log (the boot's step log, appended to), on
//! the console with `leanrd.debug` or when it fails; nothing fails the way down: a step that
//! fails or times out is logged and the next one runs.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::exitrd::{self, Exitrd, Piece};
use leanrd_contract::{Capability, RootKind};
use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, UnmountFlags};

use crate::Init;
use crate::cmdline::Cmdline;
use crate::sys::{self, Errno, strerror};

/// How long each unmount has unless the image or the command line says (dracut's default).
pub const UMOUNT_TIMEOUT_S: u64 = 90;
/// How long a device-mapper device or md array may stay busy before it is given up (ms).
const BUSY_MS: u64 = 5_000;
/// How long an md array is waited for to be clean before it is stopped anyway (ms).
const CLEAN_MS: u64 = 5_000;

/// The name the teardown is run by (`argv[0]`'s last part).
pub fn is_shutdown(argv0: &str) -> bool {
    argv0.rsplit('/').next() == Some("shutdown")
}

// ---- At the switch: what the boot built ----

/// A block device of /sys/block, as the record needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The kernel's name (`dm-0`, `md127`, `loop0`).
    pub name: String,
    /// Its piece of the record; None: nothing to take apart (a disk, a partition).
    pub piece: Option<Piece>,
    /// The kernel names it sits on (/sys/block/NAME/slaves).
    pub under: Vec<String>,
}

/// A dm device's piece by its dm uuid (`CRYPT-LUKS2-...`, `LVM-...`) and name.
pub fn dm_piece(name: &str, uuid: &str) -> Piece {
    if uuid.starts_with("CRYPT-") {
        Piece::Crypt(name.to_string())
    } else if uuid.starts_with("LVM-") {
        Piece::Lvm(name.to_string())
    } else {
        Piece::Dm(name.to_string())
    }
}

/// The block devices' pieces bottom-up: each after everything it sits on (by depth, then
/// name, so the order does not depend on the directory's).
pub fn bottom_up(blocks: &[Block]) -> Vec<Piece> {
    fn depth(b: &Block, all: &[Block], seen: usize) -> usize {
        if seen > all.len() {
            return 0; // a cycle sysfs cannot have: no recursion without end either
        }
        b.under
            .iter()
            .filter_map(|u| all.iter().find(|x| &x.name == u))
            .map(|x| 1 + depth(x, all, seen + 1))
            .max()
            .unwrap_or(0)
    }
    let mut v: Vec<(usize, &Block)> = blocks.iter().map(|b| (depth(b, blocks, 0), b)).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    v.into_iter().filter_map(|(_, b)| b.piece.clone()).collect()
}

/// The block devices as sysfs shows them now.
fn scan_blocks() -> Vec<Block> {
    let Ok(names) = sys::list_dir("/sys/block") else { return Vec::new() };
    let mut out = Vec::new();
    for (name, _) in names {
        let at = |f: &str| sys::read_string(&format!("/sys/block/{name}/{f}")).map(|s| s.trim().to_string());
        let piece = if name.starts_with("dm-") {
            at("dm/name").map(|n| dm_piece(&n, &at("dm/uuid").unwrap_or_default()))
        } else if name.starts_with("md") && sys::exists(&format!("/sys/block/{name}/md")) {
            Some(Piece::Md(name.clone()))
        } else if name.starts_with("loop") && at("loop/backing_file").is_some() {
            Some(Piece::Loop(name.clone()))
        } else {
            None
        };
        let under = sys::list_dir(&format!("/sys/block/{name}/slaves"))
            .map(|s| s.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_default();
        out.push(Block { name, piece, under });
    }
    out
}

/// The transports under the block devices: iSCSI sessions and NVMe-oF controllers.
fn scan_transports() -> Vec<Piece> {
    let mut out = Vec::new();
    for (s, _) in sys::list_dir("/sys/class/iscsi_session").unwrap_or_default() {
        let t = sys::read_string(&format!("/sys/class/iscsi_session/{s}/targetname")).unwrap_or_default();
        out.push(Piece::Iscsi(s, t.trim().to_string()));
    }
    for (c, _) in sys::list_dir("/sys/class/nvme").unwrap_or_default() {
        let t = sys::read_string(&format!("/sys/class/nvme/{c}/transport")).unwrap_or_default();
        if matches!(t.trim(), "tcp" | "rdma" | "fc") {
            out.push(Piece::Nvmf(c));
        }
    }
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    out
}

/// Whether the exitrd is left: the command line's word, else the image's setting, else where
/// the boot built anything the root sits on (or the root is NFS or live).
pub fn wanted(cmd: Option<bool>, conf: Option<bool>, record: &Exitrd, kind: Option<RootKind>) -> bool {
    cmd.or(conf).unwrap_or(!record.pieces.is_empty() || matches!(kind, Some(RootKind::Nfs | RootKind::Live)))
}

/// At the switch, before /run moves: leave the exitrd in /run/initramfs when it is wanted.
/// A failure is logged; the boot goes on without it.
pub fn leave(init: &mut Init) {
    let mut record = Exitrd { pieces: scan_transports(), umount_timeout: None };
    if init.root_kind == Some(RootKind::Nfs) {
        let mountinfo = sys::read_string("/proc/self/mountinfo").unwrap_or_default();
        let src = crate::nfs::mounted(&mountinfo, crate::root::NEWROOT).map(|m| m.source).unwrap_or_default();
        record.pieces.push(Piece::Nfs(src));
    }
    record.pieces.extend(bottom_up(&scan_blocks()));
    // Ejected last, once its file system and loop device are gone: first in the record.
    if let Some(m) = init.live_medium.as_ref().filter(|m| m.starts_with("sr"))
        && init.cmd.live.eject
        && !init.cmd.live.noeject
    {
        record.pieces.insert(0, Piece::Eject(m.clone()));
    }
    record.umount_timeout = init.cmd.umount_timeout.or(init.conf.umount_timeout);
    if !wanted(init.cmd.exitrd, init.conf.exitrd, &record, init.root_kind) {
        init.log.step("exitrd: none (a plain root, or turned off)");
        return;
    }
    match put(&record, init.cmd.break_shutdown && init.conf.layer(Capability::Rescue).is_some()) {
        Ok(bytes) => {
            let what: Vec<String> = record.pieces.iter().map(describe).collect();
            init.log.step(&format!(
                "exitrd: {} KiB in {} for the way down: {}",
                bytes.div_ceil(1024),
                exitrd::DIR,
                if what.is_empty() { "nothing below the root".to_string() } else { what.join(", ") }
            ));
        }
        Err(e) => init.log.error(&format!("exitrd: {e}; the way down will not take the storage apart")),
    }
}

/// A piece as the log names it: its kind and values (`crypt root_crypt`, `iscsi SID TARGET`).
fn describe(p: &Piece) -> String {
    let mut words = alloc::vec![p.kind()];
    words.extend(p.values());
    words.join(" ")
}

/// Copy a file (whole) to `to` with `mode`; its size.
fn copy(from: &str, to: &str, mode: u32) -> Result<u64, String> {
    let data = sys::read(from).map_err(|e| format!("{from}: {}", strerror(e)))?;
    let fd = rustix::fs::open(
        to,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| format!("{to}: {}", strerror(e)))?;
    if !sys::write_all(&fd, &data) {
        return Err(format!("{to}: cannot write"));
    }
    Ok(data.len() as u64)
}

/// Fill /run/initramfs: the program, the record, the directories systemd moves the API file
/// systems to, and with `shell` the image's busybox for `rd.break=shutdown`. Its size in bytes.
fn put(record: &Exitrd, shell: bool) -> Result<u64, String> {
    sys::mkdir_p(exitrd::DIR);
    for d in ["dev", "proc", "sys", "run", "oldroot"] {
        sys::mkdir_p(&format!("{}/{d}", exitrd::DIR));
    }
    let mut bytes = copy("/init", exitrd::PROGRAM, 0o755)?;
    let text = record.encode();
    sys::write_file_mode(exitrd::RECORD, &text, 0o600).map_err(|e| format!("{}: {}", exitrd::RECORD, strerror(e)))?;
    bytes += text.len() as u64;
    if shell && let Some(bb) = ["/bin/busybox", "/usr/bin/busybox"].into_iter().find(|p| sys::exists(p)) {
        sys::mkdir_p(&format!("{}/bin", exitrd::DIR));
        bytes += copy(bb, &format!("{}/bin/busybox", exitrd::DIR), 0o755)?;
    }
    Ok(bytes)
}

// ---- The way down ----

/// The teardown's log: appended to the boot's step log, on the console when debugging or
/// when a step fails.
struct Down {
    file: Option<rustix::fd::OwnedFd>,
    debug: bool,
    failed: usize,
}

impl Down {
    fn line(&mut self, msg: &str, failed: bool) {
        let l = leanrd_contract::steplog::record_line(sys::now_ms(), &format!("shutdown: {msg}"));
        if let Some(f) = &self.file {
            sys::write_all(f, l.as_bytes());
        }
        if self.debug || failed {
            sys::eprint(&format!("leanrd: shutdown: {msg}\n"));
        }
        if failed {
            self.failed += 1;
        }
    }
    fn step(&mut self, msg: &str) {
        self.line(msg, false)
    }
    fn fail(&mut self, msg: &str) {
        self.line(msg, true)
    }
}

/// How a bounded step ended.
#[derive(Debug, PartialEq, Eq)]
enum Bounded {
    /// It returned, with its errno if it failed.
    Done(Result<(), Errno>),
    /// It did not return in time (the child doing it is left behind, killed if it can be).
    TimedOut,
}

/// Run `f` in a child and wait for it at most `ms` (0: without end). The child's errno comes
/// back as its exit status.
fn bounded(ms: u64, f: impl FnOnce() -> Result<(), Errno>) -> Bounded {
    let pid = match sys::fork() {
        Ok(0) => {
            let code = match f() {
                Ok(()) => 0,
                Err(e) => e.raw_os_error().clamp(1, 255),
            };
            sys::exit(code)
        }
        Ok(p) => p,
        Err(_) => return Bounded::Done(f()),
    };
    let Some(pid) = rustix::process::Pid::from_raw(pid) else { return Bounded::Done(Err(Errno::CHILD)) };
    let end = sys::now_ms().saturating_add(ms);
    // Most steps take a millisecond or two: looked at soon, then less often (at most every 20 ms).
    let mut pause = 1;
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG) {
            Ok(Some((_, st))) => {
                // Killed rather than ended: as an interrupted call.
                return Bounded::Done(match st.exit_status() {
                    Some(0) => Ok(()),
                    Some(code) => Err(Errno::from_raw_os_error(code)),
                    None => Err(Errno::INTR),
                });
            }
            Ok(None) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Bounded::Done(Err(e)),
        }
        if ms != 0 && sys::now_ms() >= end {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            return Bounded::TimedOut;
        }
        sys::sleep_ms(pause);
        pause = (pause * 2).min(20);
    }
}

/// The mount points of the exitrd to take down, deepest first: the old root and everything
/// under it, and whatever else the boot mounted in /run/initramfs (a live medium, at /live
/// once systemd pivoted) — all but / and the API file systems systemd brought along (/dev,
/// /proc, /sys, /run). The later a mount, the earlier it goes (a mount is always listed after
/// the one it is on).
pub fn mounts_to_take_down(mountinfo: &str) -> Vec<String> {
    let api = |m: &str| {
        ["/dev", "/proc", "/sys", "/run"]
            .iter()
            .any(|a| m == *a || m.strip_prefix(a).is_some_and(|r| r.starts_with('/')))
    };
    let mut v: Vec<String> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(leanrd_contract::unescape_octal)
        .filter(|m| m != "/" && !api(m))
        .collect();
    v.reverse();
    v
}

/// The verb systemd gave, as reboot(2)'s command; unknown: a reboot, as dracut does.
pub fn command(verb: &str) -> (rustix::system::RebootCommand, bool) {
    use rustix::system::RebootCommand as C;
    match verb {
        "reboot" => (C::Restart, true),
        "poweroff" => (C::PowerOff, true),
        "halt" => (C::Halt, true),
        "kexec" => (C::Kexec, true),
        _ => (C::Restart, false),
    }
}

/// Mount what the teardown needs when systemd did not bring it along.
fn api_filesystems() {
    let (nosuid, nodev, noexec) = (MountFlags::NOSUID, MountFlags::NODEV, MountFlags::NOEXEC);
    if !sys::exists("/proc/self") {
        let _ = sys::mount("proc", "/proc", "proc", nosuid | nodev | noexec, None);
    }
    if !sys::exists("/sys/block") {
        let _ = sys::mount("sysfs", "/sys", "sysfs", nosuid | nodev | noexec, None);
    }
    if !sys::exists("/dev/null") {
        let _ = sys::mount("devtmpfs", "/dev", "devtmpfs", nosuid, Some("mode=0755"));
    }
}

/// `/shutdown VERB`, run by systemd-shutdown as PID 1 in /run/initramfs: take apart what the
/// record lists, then reboot(2) with the verb. Never returns.
pub fn shutdown_main(args: &[String]) -> ! {
    if !rustix::process::getpid().is_init() {
        sys::eprint("leanrd shutdown: runs as PID 1, from systemd-shutdown\n");
        sys::exit(1);
    }
    api_filesystems();
    let cmd = Cmdline::parse(&sys::read_string("/proc/cmdline").unwrap_or_default());
    let file = rustix::fs::open(
        exitrd::LOG_INSIDE,
        OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .ok();
    let mut down = Down { file, debug: cmd.debug, failed: 0 };
    let verb = args.get(1).map(String::as_str).unwrap_or("");
    let (how, known) = command(verb);
    down.step(&format!("the way down: {verb}"));
    if !known {
        down.fail(&format!("unknown verb \"{verb}\": rebooting"));
    }
    let record = match sys::read_string(exitrd::RECORD_INSIDE).map(|t| Exitrd::decode(&t)) {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            down.fail(&format!("{}: {e}; only unmounting", exitrd::RECORD_INSIDE));
            Exitrd::default()
        }
        None => {
            down.fail(&format!("{}: missing; only unmounting", exitrd::RECORD_INSIDE));
            Exitrd::default()
        }
    };
    if cmd.break_shutdown {
        rescue(&mut down);
    }
    let timeout = cmd.umount_timeout.or(record.umount_timeout).unwrap_or(UMOUNT_TIMEOUT_S);
    let start = sys::now_ms();
    unmount_all(&mut down, timeout.saturating_mul(1000));
    for p in record.pieces.iter().rev() {
        take_apart(&mut down, p);
    }
    rustix::fs::sync();
    let took = sys::now_ms() - start;
    if down.failed == 0 {
        down.step(&format!("all taken apart in {took} ms: {verb}"));
    } else {
        down.fail(&format!("{} step(s) failed ({took} ms); going down all the same: {verb}", down.failed));
    }
    drop(down);
    let r = rustix::system::reboot(how);
    // Only kexec with no kernel loaded comes back: reboot then, as dracut does.
    sys::eprint(&format!(
        "leanrd: shutdown: reboot(2) {verb}: {}; rebooting\n",
        r.err().map(strerror).unwrap_or_default()
    ));
    let _ = rustix::system::reboot(rustix::system::RebootCommand::Restart);
    loop {
        sys::sleep_ms(3_600_000);
    }
}

/// `rd.break=shutdown`: the image's busybox left in the exitrd, else the root's own shell
/// (chrooted in /oldroot, still mounted), before the teardown.
fn rescue(down: &mut Down) {
    sys::eprint("leanrd: shutdown: rd.break=shutdown: a shell before the teardown; exit it to go on\n");
    let r = if sys::exists("/bin/busybox") {
        sys::run("/bin/busybox", &["sh"])
    } else {
        match sys::fork() {
            Ok(0) => {
                if rustix::process::chroot(exitrd::OLDROOT).is_ok() && rustix::process::chdir("/").is_ok() {
                    let e = sys::Exec::new("/bin/sh", &["sh"], &["HOME=/", "TERM=linux"]).exec();
                    sys::eprint(&format!("leanrd: shutdown: /oldroot/bin/sh: {}\n", strerror(e)));
                }
                sys::exit(127)
            }
            Ok(pid) => {
                let st = sys::wait(pid);
                sys::describe_status(st).map_err(|e| sys::RunError::Failed("/oldroot/bin/sh".into(), e))
            }
            Err(e) => Err(sys::RunError::Fork("/oldroot/bin/sh".into(), e)),
        }
    };
    match r {
        Ok(()) => down.step("rescue shell left"),
        Err(e) => down.fail(&format!("rescue shell: {e}")),
    }
}

/// How many passes unmount what is under /oldroot before the rest is detached (a mount
/// that was busy because of one above it goes in the next).
const PASSES: usize = 4;

/// Unmount what [`mounts_to_take_down`] lists, deepest first, each within `ms`, in passes while one
/// makes progress; what still will not go is remounted read-only (within the bound too) and
/// detached.
fn unmount_all(down: &mut Down, ms: u64) {
    let under = || mounts_to_take_down(&sys::read_string("/proc/self/mountinfo").unwrap_or_default());
    let mut given_up: Vec<String> = Vec::new();
    for _ in 0..PASSES {
        let mut progress = false;
        for m in under() {
            if given_up.contains(&m) {
                continue;
            }
            let t0 = sys::now_ms();
            let target = m.clone();
            match bounded(ms, move || rustix::mount::unmount(target.as_str(), UnmountFlags::empty())) {
                Bounded::Done(Ok(())) => {
                    down.step(&format!("unmounted {m} ({} ms)", sys::now_ms() - t0));
                    progress = true;
                }
                Bounded::Done(Err(_)) => {}
                Bounded::TimedOut => {
                    down.fail(&format!("unmount {m}: no answer in {} s", ms / 1000));
                    given_up.push(m);
                }
            }
        }
        if !progress {
            break;
        }
    }
    let left = under();
    if left.is_empty() {
        return;
    }
    // Mounts that hold each other (a live root's overlay over layers mounted beneath it) or a
    // busy file system: each made read-only, then detached; the kernel lets it go once nothing
    // holds it. Lazily where it must: a step, unless a file system could not be made read-only.
    down.step(&format!("still mounted, detached lazily: {}", left.join(" ")));
    for m in left {
        if !under().contains(&m) {
            continue; // gone with one it was under
        }
        let target = m.clone();
        let ro = bounded(ms, move || rustix::mount::mount_remount(target.as_str(), MountFlags::RDONLY, ""));
        match (rustix::mount::unmount(m.as_str(), UnmountFlags::DETACH), ro) {
            (Ok(()), Bounded::Done(Ok(()))) => down.step(&format!("{m}: read-only, detached")),
            (Ok(()), Bounded::Done(Err(e))) => {
                down.fail(&format!("{m}: detached, not made read-only first: {}", strerror(e)))
            }
            (Ok(()), Bounded::TimedOut) => {
                down.fail(&format!("{m}: detached, no answer to read-only in {} s", ms / 1000))
            }
            (Err(Errno::INVAL | Errno::NOENT), _) => {}
            (Err(e), _) => down.fail(&format!("{m}: not detached: {}", strerror(e))),
        }
    }
}

/// Take one piece apart.
fn take_apart(down: &mut Down, p: &Piece) {
    let t0 = sys::now_ms();
    let ms = || sys::now_ms() - t0;
    match p {
        Piece::Crypt(n) | Piece::Lvm(n) | Piece::Dm(n) => match remove_dm(n, 0) {
            Ok(true) => {
                let what = match p {
                    Piece::Crypt(_) => "LUKS mapping closed, its key wiped",
                    Piece::Lvm(_) => "LVM volume deactivated",
                    _ => "device-mapper device removed",
                };
                down.step(&format!("{n}: {what} ({} ms)", ms()));
            }
            Ok(false) => down.step(&format!("{n}: already gone")),
            Err(e) => down.fail(&format!("{n}: {e}")),
        },
        Piece::Md(n) => match stop_md(n) {
            Ok(state) => down.step(&format!("{n}: stopped, {state} ({} ms)", ms())),
            Err(e) => down.fail(&format!("{n}: {e}")),
        },
        Piece::Loop(n) => match clear_loop(n) {
            Ok(true) => down.step(&format!("{n}: detached")),
            Ok(false) => down.step(&format!("{n}: already detached (autoclear, with its file system)")),
            Err(e) => down.fail(&format!("{n}: {e}")),
        },
        Piece::Nvmf(c) => match sys::write_file(&format!("/sys/class/nvme/{c}/delete_controller"), "1") {
            Ok(()) => down.step(&format!("{c}: NVMe-oF controller disconnected ({} ms)", ms())),
            Err(Errno::NOENT) => down.step(&format!("{c}: already gone")),
            Err(e) => down.fail(&format!("{c}: disconnect: {}", strerror(e))),
        },
        Piece::Iscsi(s, t) => logout_iscsi(down, s, t),
        // Unmounted with the rest of /oldroot, within the bound.
        Piece::Nfs(src) => down.step(&format!("NFS root {src}: unmounted above")),
        Piece::Eject(d) => match eject(d) {
            Ok(how) => down.step(&format!("{d}: {how}")),
            Err(e) => down.fail(&format!("{d}: not ejected: {e}")),
        },
    }
}

/// An ioctl whose argument is an integer passed by value (the CD-ROM calls), its result the
/// call's return value.
struct IntArg(rustix::ioctl::Opcode, usize);

// SAFETY: the argument is a number in the pointer's place; the kernel reads and writes no
// memory through it for the calls made with it (CDROMEJECT, CDROM_LOCKDOOR,
// CDROM_DRIVE_STATUS).
unsafe impl rustix::ioctl::Ioctl for IntArg {
    type Output = i32;
    const IS_MUTATING: bool = false;
    fn opcode(&self) -> rustix::ioctl::Opcode {
        self.0
    }
    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        self.1 as *mut core::ffi::c_void
    }
    unsafe fn output_from_ptr(out: rustix::ioctl::IoctlOutput, _: *mut core::ffi::c_void) -> rustix::io::Result<i32> {
        Ok(out)
    }
}

/// Eject the medium of optical drive `name` (CDROMEJECT, after unlocking the door as eject(1)
/// does), then ask the drive how its tray is.
fn eject(name: &str) -> Result<String, String> {
    // linux/cdrom.h: CDROMEJECT, CDROM_LOCKDOOR, CDROM_DRIVE_STATUS (CDSL_CURRENT), CDS_TRAY_OPEN.
    const EJECT: rustix::ioctl::Opcode = 0x5309;
    const LOCKDOOR: rustix::ioctl::Opcode = 0x5329;
    const DRIVE_STATUS: rustix::ioctl::Opcode = 0x5326;
    const TRAY_OPEN: i32 = 2;
    let path = format!("/dev/{name}");
    let fd = rustix::fs::open(path.as_str(), OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("{path}: {}", strerror(e)))?;
    let call = |op, arg| unsafe { rustix::ioctl::ioctl(&fd, IntArg(op, arg)) };
    let _ = call(LOCKDOOR, 0);
    call(EJECT, 0).map_err(|e| format!("CDROMEJECT: {}", strerror(e)))?;
    Ok(match call(DRIVE_STATUS, i32::MAX as usize) {
        Ok(TRAY_OPEN) => "live medium ejected (the tray is open)".into(),
        Ok(s) => format!("live medium ejected (the drive's status: {s})"),
        Err(_) => "live medium ejected".into(),
    })
}

/// How long a SCSI device of an iSCSI session may take to go (its cache written back).
const SCSI_DELETE_MS: u64 = 10_000;

/// An iSCSI session: its devices removed (each within [`SCSI_DELETE_MS`]: a dead target
/// would hold the cache flush), then logged out.
fn logout_iscsi(down: &mut Down, s: &str, t: &str) {
    let t0 = sys::now_ms();
    if !sys::exists(&format!("/sys/class/iscsi_session/{s}")) {
        return down.step(&format!("{s} ({t}): already gone"));
    }
    for d in crate::iscsi::session_devices(s) {
        let name = d.rsplit('/').next().unwrap_or_default().to_string();
        match bounded(SCSI_DELETE_MS, || sys::write_file(&format!("{d}/delete"), "1")) {
            Bounded::Done(Ok(())) => {}
            Bounded::Done(Err(e)) => down.fail(&format!("{s}: removing SCSI device {name}: {}", strerror(e))),
            Bounded::TimedOut => down.fail(&format!(
                "{s}: SCSI device {name} still not removed after {} s (its cache not written back?)",
                SCSI_DELETE_MS / 1000
            )),
        }
    }
    match crate::iscsi::logout(s) {
        Ok(how) => down.step(&format!("{s} ({t}): {how} ({} ms)", sys::now_ms() - t0)),
        Err(e) => down.fail(&format!("{s} ({t}): logout: {e}")),
    }
}

/// The kernel name (`dm-3`) of the dm device named `name`.
fn dm_kernel_name(name: &str) -> Option<String> {
    sys::list_dir("/sys/block").ok()?.into_iter().map(|(n, _)| n).find(|n| {
        n.starts_with("dm-") && sys::read_string(&format!("/sys/block/{n}/dm/name")).is_some_and(|s| s.trim() == name)
    })
}

/// Remove the dm device `name`, after any dm device built on it (the root's system may have
/// made one); busy, it is retried for [`BUSY_MS`]. Ok(false): there was none.
fn remove_dm(name: &str, depth: usize) -> Result<bool, String> {
    let Some(kernel) = dm_kernel_name(name) else { return Ok(false) };
    if depth < 16 {
        for (h, _) in sys::list_dir(&format!("/sys/block/{kernel}/holders")).unwrap_or_default() {
            if let Some(hn) = sys::read_string(&format!("/sys/block/{h}/dm/name")) {
                remove_dm(hn.trim(), depth + 1)?;
            }
        }
    }
    let end = sys::now_ms() + BUSY_MS;
    loop {
        match crate::dm::remove(name) {
            Ok(()) => return Ok(true),
            Err(Errno::NXIO) => return Ok(false),
            Err(Errno::BUSY) if sys::now_ms() < end => sys::sleep_ms(100),
            Err(e) => return Err(format!("DM_DEV_REMOVE: {}", strerror(e))),
        }
    }
}

/// STOP_ARRAY: `_IO(MD_MAJOR, 0x32)` (linux/raid/md_u.h).
const STOP_ARRAY: rustix::ioctl::Opcode = rustix::ioctl::opcode::none(9, 0x32);

/// Stop md array `name` once clean (its superblocks then say so): what it was before.
fn stop_md(name: &str) -> Result<String, String> {
    let md = format!("/sys/block/{name}/md");
    if !sys::exists(&md) {
        return Ok("already gone".into());
    }
    // As mdadm --wait-clean: a short safe-mode delay, then the state until it is clean.
    let _ = sys::write_file(&format!("{md}/safe_mode_delay"), "0.050");
    let end = sys::now_ms() + CLEAN_MS;
    let state = loop {
        let s = sys::read_string(&format!("{md}/array_state")).unwrap_or_default().trim().to_string();
        if !matches!(s.as_str(), "active" | "write-pending" | "active-idle") || sys::now_ms() >= end {
            break s;
        }
        sys::sleep_ms(20);
    };
    let fd = sys::open_node(&format!("/dev/{name}"), OFlags::RDONLY | OFlags::NONBLOCK)
        .map_err(|e| format!("/dev/{name}: {}", strerror(e)))?;
    let end = sys::now_ms() + BUSY_MS;
    loop {
        // SAFETY: STOP_ARRAY takes no argument.
        let r = unsafe { rustix::ioctl::ioctl(&fd, rustix::ioctl::NoArg::<STOP_ARRAY>::new()) };
        match r {
            Ok(()) => return Ok(format!("was {state}")),
            Err(Errno::BUSY) if sys::now_ms() < end => sys::sleep_ms(100),
            Err(e) => return Err(format!("STOP_ARRAY ({state}): {}", strerror(e))),
        }
    }
}

/// LOOP_CLR_FD.
const LOOP_CLR_FD: rustix::ioctl::Opcode = 0x4C01;

/// Detach loop device `name`; Ok(false): it was not attached any more.
fn clear_loop(name: &str) -> Result<bool, String> {
    let fd =
        sys::open_node(&format!("/dev/{name}"), OFlags::RDONLY).map_err(|e| format!("/dev/{name}: {}", strerror(e)))?;
    // SAFETY: LOOP_CLR_FD takes no argument.
    match unsafe { rustix::ioctl::ioctl(&fd, rustix::ioctl::NoArg::<LOOP_CLR_FD>::new()) } {
        Ok(()) => Ok(true),
        Err(Errno::NXIO) => Ok(false),
        Err(e) => Err(format!("LOOP_CLR_FD: {}", strerror(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn b(name: &str, piece: Option<Piece>, under: &[&str]) -> Block {
        Block { name: name.into(), piece, under: under.iter().map(|s| s.to_string()).collect() }
    }

    /// LUKS on LVM on md RAID1 on two disks: recorded md, then LVM, then LUKS, whatever
    /// order /sys/block lists them in; the disks are not pieces.
    #[test]
    fn the_record_is_bottom_up() {
        let blocks = [
            b("dm-1", Some(dm_piece("root_crypt", "CRYPT-LUKS2-0a1b-root_crypt")), &["dm-0"]),
            b("vdb", None, &[]),
            b("dm-0", Some(dm_piece("vg0-root", "LVM-abcdef")), &["md0"]),
            b("md0", Some(Piece::Md("md0".into())), &["vda1", "vdb"]),
            b("vda", None, &[]),
            b("dm-2", Some(dm_piece("other", "")), &[]),
        ];
        assert_eq!(
            bottom_up(&blocks),
            [
                Piece::Dm("other".into()),
                Piece::Md("md0".into()),
                Piece::Lvm("vg0-root".into()),
                Piece::Crypt("root_crypt".into()),
            ]
        );
        // A cycle (not something sysfs shows) still ends.
        let cyc =
            [b("dm-0", Some(Piece::Dm("a".into())), &["dm-1"]), b("dm-1", Some(Piece::Dm("b".into())), &["dm-0"])];
        assert_eq!(bottom_up(&cyc).len(), 2);
    }

    #[test]
    fn left_only_where_the_root_needs_it_unless_told() {
        let plain = Exitrd::default();
        let stacked = Exitrd { pieces: vec![Piece::Crypt("c".into())], umount_timeout: None };
        assert!(!wanted(None, None, &plain, Some(RootKind::Block)));
        assert!(wanted(None, None, &stacked, Some(RootKind::Block)));
        assert!(wanted(None, None, &plain, Some(RootKind::Nfs)));
        assert!(wanted(None, None, &plain, Some(RootKind::Live)));
        assert!(!wanted(None, Some(false), &stacked, None));
        assert!(wanted(None, Some(true), &plain, None));
        assert!(!wanted(Some(false), Some(true), &stacked, None));
        assert!(wanted(Some(true), Some(false), &plain, None));
    }

    #[test]
    fn the_parameters_of_the_way_down() {
        let c = Cmdline::parse("rd.leanrd.exitrd=0 rd.shutdown.timeout.umount=7 rd.break=shutdown");
        assert_eq!((c.exitrd, c.umount_timeout, c.break_shutdown), (Some(false), Some(7), true));
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let c = Cmdline::parse("rd.leanrd.exitrd rd.break=pre-mount rd.shutdown.timeout.umount=90s");
        assert_eq!((c.exitrd, c.umount_timeout, c.break_shutdown), (Some(true), None, false));
        assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
    }

    #[test]
    fn the_old_root_and_a_live_medium_go_deepest_first_and_the_api_file_systems_stay() {
        let mi = "1 0 8:1 / / rw - tmpfs tmpfs rw\n\
                  20 1 0:5 / /oldroot rw - ext4 /dev/mapper/root rw\n\
                  21 20 0:6 / /oldroot/boot rw - ext4 /dev/vda2 rw\n\
                  22 20 0:7 / /oldroot/my\\040data rw - xfs /dev/vdc rw\n\
                  23 21 0:8 / /oldroot/boot/efi rw - vfat /dev/vda3 rw\n\
                  24 1 0:9 / /live rw - iso9660 /dev/sr0 ro\n\
                  25 1 0:10 / /proc rw - proc proc rw\n\
                  26 1 0:11 / /dev rw - devtmpfs devtmpfs rw\n\
                  27 26 0:12 / /dev/pts rw - devpts devpts rw\n\
                  28 1 0:13 / /run rw - tmpfs tmpfs rw\n\
                  29 1 0:14 / /sys rw - sysfs sysfs rw\n\
                  30 1 0:15 / /devices rw - tmpfs tmpfs rw\n";
        assert_eq!(
            mounts_to_take_down(mi),
            ["/devices", "/live", "/oldroot/boot/efi", "/oldroot/my data", "/oldroot/boot", "/oldroot"]
        );
        assert!(mounts_to_take_down("").is_empty());
    }

    #[test]
    fn verbs() {
        use rustix::system::RebootCommand as C;
        assert_eq!(command("poweroff"), (C::PowerOff, true));
        assert_eq!(command("reboot"), (C::Restart, true));
        assert_eq!(command("halt"), (C::Halt, true));
        assert_eq!(command("kexec"), (C::Kexec, true));
        assert_eq!(command("suspend"), (C::Restart, false));
        assert!(is_shutdown("/shutdown") && is_shutdown("shutdown") && !is_shutdown("/init"));
        // _IO(9, 0x32), as linux/raid/md_u.h's STOP_ARRAY.
        assert_eq!(STOP_ARRAY, 0x932);
    }

    #[test]
    fn a_bounded_step_that_hangs_is_given_up() {
        let t0 = sys::now_ms();
        assert_eq!(
            bounded(200, || {
                sys::sleep_ms(10_000);
                Ok(())
            }),
            Bounded::TimedOut
        );
        assert!(sys::now_ms() - t0 < 5_000);
        assert_eq!(bounded(5_000, || Err(Errno::BUSY)), Bounded::Done(Err(Errno::BUSY)));
        assert_eq!(bounded(5_000, || Ok(())), Bounded::Done(Ok(())));
    }
}
