//! The boot harness: real roots (the cached Debian roots of tools/debian-root) made into disk
//! images, booted under QEMU TCG no more at once than the machine has cores (across every
//! test process: [`crate::vm_slot`]), each boot's serial console checked for what the root's
//! report unit prints. Every boot suite and the benchmarks' Rust side use this one harness;
//! [`crate::scenario`] describes a boot as data on top of it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::*;

/// The leanrd executable under test: the test crate names it once ([`use_leanrd`]), as only
/// it knows `CARGO_BIN_EXE_leanrd`.
static LEANRD: OnceLock<PathBuf> = OnceLock::new();

/// Name the leanrd executable the harness runs (inside the roots and on the host).
pub fn use_leanrd(path: &str) {
    let _ = LEANRD.set(PathBuf::from(path));
}

/// The leanrd executable: as [`use_leanrd`] named it, else the one cargo built beside the
/// running test (target/PROFILE/deps/TEST → target/PROFILE/leanrd).
pub fn leanrd_path() -> &'static Path {
    LEANRD.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's own path");
        exe.parent().and_then(Path::parent).map(|d| d.join("leanrd")).expect("target/PROFILE")
    })
}

/// `leanrd`, without SOURCE_DATE_EPOCH from the environment and without the cache of
/// decompressed modules (a test that wants it names its own with `LEANRD_CACHE_DIR`): the
/// tests' trees are fresh copies that no later run would find in it.
pub fn leanrd() -> Command {
    let mut c = Command::new(leanrd_path());
    c.env_remove("SOURCE_DATE_EPOCH").env("LEANRD_CACHE_DIR", "");
    c
}

/// The workspace's root directory.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Build the static /init once per test process (its own target dir: no lock contention
/// with the cargo running the tests).
pub fn init_binary() -> Option<PathBuf> {
    static INIT: OnceLock<Option<PathBuf>> = OnceLock::new();
    INIT.get_or_init(|| {
        let ws = workspace();
        let target = ws.join("target/init-test");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .current_dir(&ws)
            .args(["build", "-q", "--profile", "init", "-p", "leanrd-init", "--features", "standalone"])
            .args(["--target", "x86_64-unknown-linux-gnu", "--target-dir"])
            .arg(&target)
            .status()
            .ok()?;
        if !st.success() {
            return skip("could not build leanrd-init");
        }
        Some(target.join("x86_64-unknown-linux-gnu/init/leanrd-init"))
    })
    .clone()
}

/// The release of a kernel image named vmlinuz-RELEASE.
pub fn kver_of(kernel: &Path) -> String {
    kernel.file_name().unwrap().to_string_lossy().trim_start_matches("vmlinuz-").to_string()
}

/// Run a shell command; fail the test with its stderr if it fails.
pub fn sh(cmd: &str) {
    let o = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stderr));
}

/// [`sh`] in a mount namespace of its own: for a script that mounts a file system, writes to
/// it and unmounts it, so that the image is whole once the script is done.
///
/// The machine's mounts are private (no systemd makes them shared), and every mount namespace
/// copies the mounts there when it is made: a network test's servers and VMs (`ip netns exec`)
/// started while a disk is mounted in the machine's namespace keep a copy of that mount, the
/// script's `umount` then ends only the machine's, and the file system's last commit reaches
/// the image when those namespaces end. A CI run copied such a btrfs disk one transaction
/// short (an empty subvolume: "no init found in the new root"). A mount made here is seen by
/// no other namespace.
pub fn sh_private(cmd: &str) {
    let o = private_sh(cmd);
    assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stderr));
}

/// `sh -c cmd` in a mount namespace of its own ([`sh_private`] says why): its output.
fn private_sh(cmd: &str) -> std::process::Output {
    Command::new("unshare").args(["-m", "--propagation", "private", "sh", "-c", cmd]).output().unwrap()
}

/// Fail unless no loop device still has `image` attached: a file system on it still mounted
/// somewhere (another mount namespace) is not whole in the file yet.
/// (A detached device can take a moment to go: asked again for up to 5 s.)
pub fn assert_released(image: &Path) {
    let mut held = String::new();
    for _ in 0..50 {
        let o = Command::new("losetup").arg("-j").arg(image).output().unwrap();
        held = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if held.is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{}: a loop device still holds it after its script: {held}", image.display());
}

/// What a VM's console showed: the console, how long the VM ran, how long it waited for a
/// slot, and when each asked-for mark first showed (seconds from QEMU's start).
pub struct Console {
    /// Everything the serial console showed (lossy UTF-8), with a `[test: monitor ...]` line
    /// for each monitor command typed.
    pub console: String,
    /// How long the VM ran: from QEMU's start, once it had a slot, to its end.
    pub ran: std::time::Duration,
    /// How long it waited for a VM slot.
    pub waited: std::time::Duration,
    /// Each of the marks asked for that showed, with when it first did: seconds from QEMU's
    /// start.
    pub marks: std::collections::BTreeMap<String, f64>,
}

/// Boot, reading the serial console as it comes: `answer` is typed (with Enter) at the first
/// "Enter passphrase", and the VM is killed as soon as the console shows one of `stop` (a
/// boot that has failed: no need to wait for its timeout). The console, with the VM's own
/// time apart from its wait for a slot.
pub fn boot_console_timed(
    kernel: &Path,
    initrd: &Path,
    append: &str,
    extra: &[String],
    answer: Option<&str>,
    stop: &[String],
    secs: u64,
) -> Console {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    run_console(qemu_command(kernel, initrd, append, &extra, secs), answer, stop, &[])
}

/// Run a QEMU command line (a kernel boot's, or a firmware boot's) on a VM slot and read its
/// serial console: `answer` is typed at the first "Enter passphrase", the VM is killed as soon
/// as the console shows one of `stop`, and each of `marks` is timed from QEMU's start.
pub fn run_console(cmd: Command, answer: Option<&str>, stop: &[String], marks: &[String]) -> Console {
    run_console_acting(cmd, answer, stop, marks, None)
}

/// QEMU's human monitor on a unix socket, and what to type on it when the console shows what:
/// (console text, monitor command), each at most once.
pub struct Monitor<'a> {
    /// The monitor's unix socket.
    pub socket: &'a Path,
    /// (console text, monitor command) pairs, in order: each command is typed once the console
    /// shows its text, after the one before it was.
    pub on: &'a [(String, String)],
}

/// [`run_console`], also typing commands on QEMU's monitor as the console asks ([`Monitor`]).
pub fn run_console_acting(
    cmd: Command,
    answer: Option<&str>,
    stop: &[String],
    marks: &[String],
    monitor: Option<Monitor>,
) -> Console {
    let answers: Vec<(&str, &str)> = answer.map(|a| ("Enter passphrase", a)).into_iter().collect();
    run_console_answering(cmd, &answers, stop, marks, monitor)
}

/// [`run_console_acting`] answering several prompts on the serial console: each (prompt,
/// text) pair in order, `text` typed with Enter once `prompt` shows after the answer before
/// it was typed (the same prompt asked again is a new one).
pub fn run_console_answering(
    mut cmd: Command,
    answers: &[(&str, &str)],
    stop: &[String],
    marks: &[String],
    monitor: Option<Monitor>,
) -> Console {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let asked = std::time::Instant::now();
    let _slot = vm_slot();
    let started = std::time::Instant::now();
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run qemu");
    // QEMU's own complaints (a device it cannot open...), kept for the log: read aside so
    // that a full pipe never stops it.
    let mut stderr = child.stderr.take().unwrap();
    let complaints = std::thread::spawn(move || {
        let mut e = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut e);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        e
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut log = Vec::new();
    let mut buf = [0u8; 4096];
    let (mut answered, mut answered_at) = (0, 0);
    let mut seen = std::collections::BTreeMap::new();
    let mut acted = 0;
    loop {
        let n = stdout.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        log.extend_from_slice(&buf[..n]);
        // Only the tail can hold a new match.
        let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(n + 256)..]).into_owned();
        for m in marks {
            if !seen.contains_key(m) && tail.contains(m.as_str()) {
                seen.insert(m.clone(), started.elapsed().as_secs_f64());
            }
        }
        if let Some(m) = &monitor
            && let Some((when, what)) = m.on.get(acted)
            && tail.contains(when.as_str())
        {
            acted += 1;
            // The guest goes on meanwhile; its console is read again after the command.
            let said = monitor_command(m.socket, what);
            log.extend(format!("\n[test: monitor `{what}`: {}]\n", said.trim()).bytes());
        }
        if let Some((prompt, text)) = answers.get(answered)
            && String::from_utf8_lossy(&log[answered_at.min(log.len())..]).contains(prompt)
        {
            answered += 1;
            std::thread::sleep(std::time::Duration::from_millis(300));
            let _ = stdin.write_all(format!("{text}\r").as_bytes());
            let _ = stdin.flush();
            answered_at = log.len();
        }
        if stop.iter().any(|s| tail.contains(s.as_str())) {
            // Let the console finish its line, then end the VM (`timeout` runs QEMU: kill both)
            // and take what it wrote meanwhile. Not a read before the kill: a console that
            // stops at a prompt writes nothing more, and the read would wait out the timeout.
            std::thread::sleep(std::time::Duration::from_millis(500));
            let _ = Command::new("pkill").args(["-KILL", "-P", &child.id().to_string()]).status();
            let _ = child.kill();
            let _ = stdout.read_to_end(&mut log);
            break;
        }
    }
    let status = child.wait();
    let complaints = complaints.join().unwrap_or_default();
    if !status.as_ref().is_ok_and(|s| s.success()) && !complaints.is_empty() {
        log.extend(format!("\n[test: QEMU's stderr: {}]\n", String::from_utf8_lossy(&complaints).trim()).bytes());
    }
    Console {
        console: String::from_utf8_lossy(&log).into_owned(),
        ran: started.elapsed(),
        waited: started - asked,
        marks: seen,
    }
}

/// Type `command` on the QEMU monitor listening at `socket`; what it answered (or why not).
fn monitor_command(socket: &Path, command: &str) -> String {
    use std::io::{Read, Write};
    let talk = || -> std::io::Result<String> {
        let mut s = std::os::unix::net::UnixStream::connect(socket)?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        // The banner and prompt, the command, its answer up to the next prompt.
        for send in [None, Some(command)] {
            if let Some(c) = send {
                s.write_all(format!("{c}\n").as_bytes())?;
            }
            let start = out.len();
            while !String::from_utf8_lossy(&out[start..]).contains("(qemu)") {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
        }
        let text = String::from_utf8_lossy(&out).into_owned();
        // The monitor echoes the line it reads with terminal escapes: keep its answer only.
        let answer = text.rsplit("\r\n").nth(1).unwrap_or_default();
        Ok(answer.to_string())
    };
    talk().unwrap_or_else(|e| format!("monitor {}: {e}", socket.display()))
}

/// The root's report, run by a unit once the boot has settled: the state, the mounts, module
/// parameters, the initramfs's step log, and `leanrd build` with `leanrd.test=selfbuild`.
/// Shared with bench/debian.py.
pub const REPORT: &str = include_str!("../../../tools/boot-report/leanrd-report");
/// The systemd unit that runs [`REPORT`] (as /usr/local/sbin/leanrd-report) in multi-user.target.
pub const UNIT: &str = include_str!("../../../tools/boot-report/leanrd-report.service");

/// What every Debian boot test starts from: root and the tools `need`, the kernel to boot,
/// the static /init, the kernel's version and a scratch directory. None (skipped, with a
/// message) when something is missing.
pub fn setup(tag: &str, need: &[&str]) -> Option<(PathBuf, PathBuf, String, TempDir)> {
    if !is_root() || need.iter().any(|t| !have(t)) {
        return skip(&format!("needs root and {need:?}"));
    }
    let kernel = kernel()?;
    let init = init_binary()?;
    let kver = kver_of(&kernel);
    Some((kernel, init, kver, TempDir::new(tag)))
}

/// [`setup`] for Debian 13: its kernel is the root's own (/boot/vmlinuz-KVER of the cached
/// trixie root, 6.12 with .ko.xz modules), not the host's.
pub fn setup_trixie(tag: &str, need: &[&str]) -> Option<(PathBuf, PathBuf, String, TempDir)> {
    if !is_root() || need.iter().any(|t| !have(t)) || !have("qemu-system-x86_64") {
        return skip(&format!("needs root, qemu-system-x86_64 and {need:?}"));
    }
    let root = debian_suite_root("trixie", "")?;
    let kernel = root_kernel(&root);
    let init = init_binary()?;
    let kver = kver_of(&kernel);
    Some((kernel, init, kver, TempDir::new(tag)))
}

/// The Debian root (`flavour` as tools/debian-root takes it: "" for the test root, or
/// "initramfs-tools"/"dracut" with a peer installed) with the kernel's modules and
/// configuration, leanrd, its /init and the report unit: the tree every disk is made from.
pub fn prepare(t: &TempDir, kver: &str, init: &Path, flavour: &str) -> Option<PathBuf> {
    let base = debian_root(flavour)?;
    let tree = if flavour.is_empty() { t.join("tree") } else { t.join(format!("tree-{flavour}")) };
    sh(&format!("cp -a {} {}", base.display(), tree.display()));
    fs::create_dir_all(tree.join("usr/lib/modules")).unwrap();
    sh(&format!("cp -a /lib/modules/{kver} {}/usr/lib/modules/", tree.display()));
    // The peers read the kernel's configuration (which compressions it unpacks).
    let _ = fs::copy(format!("/boot/config-{kver}"), tree.join(format!("boot/config-{kver}")));
    finish_tree(&tree, init);
    Some(tree)
}

/// The Debian 13 root as it is (its own kernel, modules and configuration; `flavour` as for
/// [`prepare`]), with leanrd, its /init and the report unit.
pub fn prepare_trixie(t: &TempDir, init: &Path, flavour: &str) -> Option<PathBuf> {
    let base = debian_suite_root("trixie", flavour)?;
    let tree = if flavour.is_empty() { t.join("trixie-tree") } else { t.join(format!("trixie-tree-{flavour}")) };
    sh(&format!("cp -a {} {}", base.display(), tree.display()));
    finish_tree(&tree, init);
    Some(tree)
}

/// What every test tree gets: an identity, a module option, the report unit, and leanrd with
/// its /init ([`add_tools`]).
fn finish_tree(tree: &Path, init: &Path) {
    let _ = finish_base(tree);
    add_tools(tree, init);
}

/// A root made a test system: an identity, a module option and the report unit (no leanrd:
/// disks made from it stay valid from one build of leanrd to the next). Returns what it
/// wrote (paths, contents, link targets), for cache keys.
pub fn finish_base(tree: &Path) -> Vec<u8> {
    finish_base_on(tree, "ttyS0")
}

/// [`finish_base`] for a machine whose serial console is `console` (ttyAMA0 on arm64's virt
/// board): the report is written there, and no login prompt is started on it.
pub fn finish_base_on(tree: &Path, console: &str) -> Vec<u8> {
    let report = REPORT.replace("/dev/ttyS0", &format!("/dev/{console}"));
    let getty = format!("etc/systemd/system/serial-getty@{console}.service");
    let files: [(&str, &str, u32); 5] = [
        // A system that has been installed: its machine id (no first-boot setup), its name.
        ("etc/machine-id", "6c65616e72642d746573742d726f6f74\n", 0o444),
        ("etc/hostname", "leanrd-test\n", 0o644),
        ("etc/modprobe.d/leanrd-test.conf", "options virtio_blk queue_depth=64\n", 0o644),
        ("usr/local/sbin/leanrd-report", &report, 0o755),
        ("etc/systemd/system/leanrd-report.service", UNIT, 0o644),
    ];
    let links = [
        (
            "etc/systemd/system/multi-user.target.wants/leanrd-report.service",
            "/etc/systemd/system/leanrd-report.service",
        ),
        // No login prompt on the serial console: agetty hangs the tty up when it starts, and
        // a report written to it after that is lost (Debian 13's systemd starts it late enough).
        (getty.as_str(), "/dev/null"),
        // Seconds under TCG each, before multi-user, and nothing to do with the initramfs:
        // ext4's stale-snapshot cleanup and the text-console logins.
        ("etc/systemd/system/e2scrub_reap.service", "/dev/null"),
        ("etc/systemd/system/getty-static.service", "/dev/null"),
        ("etc/systemd/system/getty@.service", "/dev/null"),
        // Together 3.5 s of the root's 11 s in systemd under TCG (Debian 12, measured): the
        // login records and /run/nologin, LVM's mirror and snapshot monitoring, foreign
        // binary formats. None sees the initramfs's work, which the units the root mounts and
        // activates with do.
        ("etc/systemd/system/systemd-update-utmp.service", "/dev/null"),
        ("etc/systemd/system/systemd-update-utmp-runlevel.service", "/dev/null"),
        ("etc/systemd/system/systemd-user-sessions.service", "/dev/null"),
        ("etc/systemd/system/lvm2-monitor.service", "/dev/null"),
        ("etc/systemd/system/systemd-binfmt.service", "/dev/null"),
        ("etc/systemd/system/proc-sys-fs-binfmt_misc.automount", "/dev/null"),
        // Modules for hardware and file systems no test VM has or mounts (the initramfs loads
        // what the root needs), LVM's shutdown ordering, the journal's copy from /run to /var
        // (it stays in /run, where journalctl reads it), the random seed's file, udev rules
        // from credentials (systemd 257), and the generators below: together 4 s of a 21.5 s
        // Debian 13 boot under TCG.
        ("etc/systemd/system/modprobe@drm.service", "/dev/null"),
        ("etc/systemd/system/modprobe@loop.service", "/dev/null"),
        ("etc/systemd/system/modprobe@dm_mod.service", "/dev/null"),
        ("etc/systemd/system/modprobe@efi_pstore.service", "/dev/null"),
        ("etc/systemd/system/modprobe@fuse.service", "/dev/null"),
        ("etc/systemd/system/modprobe@configfs.service", "/dev/null"),
        ("etc/systemd/system/blk-availability.service", "/dev/null"),
        ("etc/systemd/system/systemd-journal-flush.service", "/dev/null"),
        ("etc/systemd/system/systemd-random-seed.service", "/dev/null"),
        ("etc/systemd/system/systemd-udev-load-credentials.service", "/dev/null"),
        // Generators (each a program loading libsystemd-shared before any unit starts) for
        // what no test root has: SysV scripts, rc.local, ssh, offline updates, consoles, and
        // the kernel command line's systemd.mask=/systemd.run= (which no test passes). fstab,
        // gpt-auto, hibernate-resume and tpm2 stay.
        ("etc/systemd/system-generators/systemd-debug-generator", "/dev/null"),
        ("etc/systemd/system-generators/systemd-getty-generator", "/dev/null"),
        ("etc/systemd/system-generators/systemd-rc-local-generator", "/dev/null"),
        ("etc/systemd/system-generators/systemd-run-generator", "/dev/null"),
        ("etc/systemd/system-generators/systemd-ssh-generator", "/dev/null"),
        ("etc/systemd/system-generators/systemd-system-update-generator", "/dev/null"),
        ("etc/systemd/system-generators/systemd-sysv-generator", "/dev/null"),
    ];
    let mut wrote = Vec::new();
    for (path, content, mode) in files {
        let p = tree.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        fs::write(&p, content).unwrap();
        fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        wrote.extend(format!("{path} {mode:o}\n{content}\n").bytes());
    }
    for (path, target) in links {
        let p = tree.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        std::os::unix::fs::symlink(target, &p).unwrap();
        wrote.extend(format!("{path} -> {target}\n").bytes());
    }
    wrote
}

/// leanrd and its /init in a tree, for a root that builds its own image. Files already
/// there are replaced, not written through (the tree may hold hard links to a cached one).
pub fn add_tools(tree: &Path, init: &Path) {
    add_tools_from(tree, leanrd_path(), init);
}

/// [`add_tools`] with `leanrd` as the tree's leanrd (one built for another architecture).
pub fn add_tools_from(tree: &Path, leanrd: &Path, init: &Path) {
    fs::create_dir_all(tree.join("usr/lib/leanrd")).unwrap();
    let _ = fs::remove_file(tree.join("usr/bin/leanrd"));
    let _ = fs::remove_file(tree.join("usr/lib/leanrd/leanrd-init"));
    fs::copy(leanrd, tree.join("usr/bin/leanrd")).unwrap();
    fs::copy(init, tree.join("usr/lib/leanrd/leanrd-init")).unwrap();
    sh(&format!("chmod 755 {}/usr/bin/leanrd", tree.display()));
}

/// A disk controller, as QEMU attaches a disk.
#[derive(Clone, Copy, PartialEq, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bus {
    /// A virtio-blk disk (`-drive if=virtio`): /dev/vdX in the guest. The default.
    #[default]
    VirtioBlk,
    /// A SCSI disk on a virtio-scsi controller: /dev/sdX.
    VirtioScsi,
    /// An NVMe controller of its own (serial leanrdN): /dev/nvmeXn1.
    Nvme,
    /// A SATA disk on an ICH9 AHCI controller: /dev/sdX.
    Ahci,
    /// A virtio-blk disk on a virtio-mmio transport (`-device virtio-blk-device`): /dev/vdX.
    /// Only boards that have those transports in their device tree (arm64's `virt`) have it;
    /// `-drive if=virtio` there is a PCI device.
    VirtioMmio,
    /// One SCSI disk seen through two paths, as a SAN LUN through two HBAs: two virtio-scsi
    /// controllers, each with a scsi-hd on the same file (`share-rw=on`, no file locking), the
    /// same serial and the same WWN ([`MULTIPATH_WWN`]): /dev/sdX and /dev/sdY of one WWID.
    /// Never with QEMU's `snapshot=on` (each path would write to an overlay of its own).
    VirtioScsiTwoPaths,
}

/// The WWN of a [`Bus::VirtioScsiTwoPaths`] disk (multipath-tools names it WWID 3 and these
/// digits: NAA type 5, from VPD page 0x83).
pub const MULTIPATH_WWN: &str = "5000c50015ea71ac";

/// One file system on a disk image: on one GPT partition from 1 MiB, or on the whole disk.
#[derive(Clone, Debug)]
pub struct Disk {
    /// The raw image file.
    pub path: PathBuf,
    /// Whether the file system is on the one GPT partition ([`PART_OFFSET`], [`PART_BYTES`] long)
    /// rather than the whole disk.
    pub gpt: bool,
    /// How QEMU attaches it.
    pub bus: Bus,
}

/// A disk image's size in bytes (2 GiB; the file is sparse).
pub const DISK_BYTES: u64 = 2 << 30;
/// Where the GPT partition starts, in bytes (1 MiB).
pub const PART_OFFSET: u64 = 1 << 20;
/// The partition: from 1 MiB, leaving 1 MiB at the end for the backup GPT.
pub const PART_BYTES: u64 = DISK_BYTES - 2 * PART_OFFSET;

impl Disk {
    /// The shell command that attaches the file system's part of the image to a free loop device
    /// (read-only when `readonly`) and prints the device's path.
    pub fn losetup(&self, readonly: bool) -> String {
        let ro = if readonly { "-r " } else { "" };
        if self.gpt {
            format!("losetup -f --show {ro}-o {PART_OFFSET} --sizelimit {PART_BYTES} {}", self.path.display())
        } else {
            format!("losetup -f --show {ro}{}", self.path.display())
        }
    }
}

/// Forget the btrfs devices nothing has mounted (a shell line; harmless without btrfs).
const FORGET_BTRFS: &str = "btrfs device scan --forget >/dev/null 2>&1 || true\n";

/// A file system to make: its type, UUID, and whether the tree goes in subvolume @.
pub struct Fs<'a> {
    /// The file system's type: `ext4`, `xfs` or `btrfs`.
    pub kind: &'a str,
    /// Its UUID.
    pub uuid: String,
    /// Whether the tree goes in subvolume @ (btrfs).
    pub subvol: bool,
}

/// The shell command that makes `fs` on `devs`: a device, or two separated by a space for a
/// btrfs raid1 (data and metadata). Panics for another type.
pub fn mkfs(fs: &Fs, devs: &str) -> String {
    let u = &fs.uuid;
    match fs.kind {
        "ext4" => format!("mkfs.ext4 -q -U {u} {devs}"),
        "xfs" => format!("mkfs.xfs -q -f -m uuid={u} {devs}"),
        "btrfs" if devs.contains(' ') => format!("mkfs.btrfs -q -f -d raid1 -m raid1 -U {u} {devs}"),
        "btrfs" => format!("mkfs.btrfs -q -f -U {u} {devs}"),
        k => panic!("no mkfs for {k}"),
    }
}

/// Disk images (one, or two for a btrfs raid1) holding `fs` with `tree`, and `fstab` as
/// its /etc/fstab when given. Made on loop devices, released whatever happens.
pub fn make(t: &TempDir, name: &str, gpt: bool, bus: Bus, fs: &Fs, tree: &Path, fstab: Option<&str>) -> Vec<Disk> {
    let n = if fs.kind == "btrfs" && name.contains("raid1") { 2 } else { 1 };
    make_in(t.path(), name, gpt, n, bus, fs, tree, fstab)
}

/// [`make`] in the directory `t`, with `n` disks (two for a btrfs raid1).
#[allow(clippy::too_many_arguments)]
pub fn make_in(
    t: &Path,
    name: &str,
    gpt: bool,
    n: usize,
    bus: Bus,
    fs: &Fs,
    tree: &Path,
    fstab: Option<&str>,
) -> Vec<Disk> {
    let disks: Vec<Disk> =
        (0..n).map(|i| Disk { path: t.join(format!("{name}-{i}.disk")), gpt: gpt && n == 1, bus }).collect();
    let mnt = t.join(format!("{name}.mnt"));
    fs::create_dir_all(&mnt).unwrap();
    let fstab_file = t.join(format!("{name}.fstab"));
    if let Some(f) = fstab {
        fs::write(&fstab_file, f).unwrap();
    }
    let mut script =
        String::from("set -e; ls=\"\"; trap 'umount @MNT@ 2>/dev/null || true; losetup -d $ls || true' EXIT\n");
    for d in &disks {
        script += &format!("truncate -s {DISK_BYTES} {}\n", d.path.display());
        if d.gpt {
            script += &format!(
                "printf 'label: gpt\\nstart=2048, size={}, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\\n' \
                 | sfdisk -q {}\n",
                PART_BYTES / 512,
                d.path.display()
            );
        }
        script += &format!("l=$({}); ls=\"$ls $l\"\n", d.losetup(false));
    }
    script += &format!("{}\n", mkfs(fs, "$ls"));
    // A multi-device btrfs is mounted naming its members.
    // The host's btrfs remembers the devices of every file system it has seen, by UUID, after
    // their loop devices are gone; disks are made again with the same UUIDs (they are cached
    // by content), and a raid1 then fails to mount ("File exists"): forget what is unmounted.
    script += FORGET_BTRFS;
    script += if n > 1 { "set -- $ls; mount -o device=$1,device=$2 $1 @MNT@\n" } else { "mount $ls @MNT@\n" };
    script += if fs.subvol { "btrfs subvolume create @MNT@/@ >/dev/null; d=@MNT@/@\n" } else { "d=@MNT@\n" };
    script += &format!("cp -a {}/. $d/\n", tree.display());
    if fstab.is_some() {
        script += &format!("cp {} $d/etc/fstab\n", fstab_file.display());
    }
    script += "umount @MNT@\n";
    script += FORGET_BTRFS;
    sh_private(&script.replace("@MNT@", &mnt.display().to_string()));
    for d in &disks {
        assert_released(&d.path);
    }
    disks
}

/// A file out of a disk's file system (after a boot wrote it), from subvolume @ when `subvol`.
pub fn take_file(t: &TempDir, disk: &Disk, subvol: bool, path: &str, out: &Path) {
    let within = if subvol { format!("@/{path}") } else { path.to_string() };
    take_file_maybe(t, disk, &within, out).unwrap_or_else(|| panic!("{path} is not on {}", disk.path.display()));
}

/// [`take_file`] for a file that may be missing: None then.
pub fn take_file_maybe(t: &TempDir, disk: &Disk, path: &str, out: &Path) -> Option<()> {
    let _ = fs::remove_file(out);
    let mnt = t.join("take.mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = mnt.display();
    sh_private(&format!(
        "set -e; l=$({}); trap 'umount {m} 2>/dev/null || true; losetup -d $l' EXIT; {FORGET_BTRFS} mount -o ro $l {m}; \
         if [ -e {m}/{path} ]; then cp {m}/{path} {}; fi; umount {m}",
        disk.losetup(true),
        out.display()
    ));
    out.exists().then_some(())
}

/// Run `cmd` in the chroot `tree` with /proc, /sys, /dev (and `apt_cache` as apt's package
/// cache) mounted, unmounted whatever happens; whether it succeeded, and its output.
pub fn in_chroot(tree: &Path, apt_cache: Option<&Path>, cmd: &str) -> (bool, String) {
    let cache =
        apt_cache.map(|c| format!(" && mount --bind {} $t/var/cache/apt/archives", c.display())).unwrap_or_default();
    let script = format!(
        "t={t}; trap 'for m in var/cache/apt/archives dev/pts dev proc sys; do umount $t/$m 2>/dev/null; done' EXIT; \
         mount --bind /dev $t/dev && mount -t devpts devpts $t/dev/pts && mount -t proc proc $t/proc && \
         mount -t sysfs sys $t/sys{cache} && chroot $t /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c '{cmd}' 2>&1",
        t = tree.display(),
    );
    let o = private_sh(&script);
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
}

/// QEMU arguments for 1 GiB of memory and `disks`, in order, each on its bus (with one
/// virtio-scsi or AHCI controller as needed); `snapshot`: writes are not kept.
pub fn qemu_args(disks: &[&Disk], snapshot: bool) -> Vec<String> {
    let mut a: Vec<String> = ["-m", "1024"].map(String::from).to_vec();
    let snap = if snapshot { ",snapshot=on" } else { "" };
    let buses: BTreeSet<u8> = disks.iter().map(|d| d.bus as u8).collect();
    if buses.contains(&(Bus::VirtioScsi as u8)) {
        a.extend(["-device", "virtio-scsi-pci,id=scsi0"].map(String::from));
    }
    if buses.contains(&(Bus::Ahci as u8)) {
        a.extend(["-device", "ich9-ahci,id=ahci0"].map(String::from));
    }
    for (i, d) in disks.iter().enumerate() {
        let file = format!("file={},format=raw{snap}", d.path.display());
        let dev = match d.bus {
            Bus::VirtioBlk => {
                a.extend(["-drive".into(), format!("{file},if=virtio")]);
                continue;
            }
            Bus::VirtioScsi => format!("scsi-hd,drive=d{i},bus=scsi0.0"),
            Bus::Nvme => format!("nvme,drive=d{i},serial=leanrd{i}"),
            Bus::Ahci => format!("ide-hd,drive=d{i},bus=ahci0.{i}"),
            Bus::VirtioMmio => format!("virtio-blk-device,drive=d{i}"),
            Bus::VirtioScsiTwoPaths => {
                assert!(!snapshot, "{}: two paths to one disk cannot each have a snapshot", d.path.display());
                for p in 0..2 {
                    a.extend([
                        "-device".into(),
                        format!("virtio-scsi-pci,id=mp{i}p{p}"),
                        "-drive".into(),
                        format!("file={},format=raw,if=none,id=d{i}p{p},file.locking=off", d.path.display()),
                        "-device".into(),
                        format!(
                            "scsi-hd,drive=d{i}p{p},bus=mp{i}p{p}.0,serial=leanrd-mp{i},wwn=0x{MULTIPATH_WWN},share-rw=on"
                        ),
                    ]);
                }
                continue;
            }
        };
        a.extend(["-drive".into(), format!("{file},if=none,id=d{i}"), "-device".into(), dev]);
    }
    a
}

/// One boot: its image, command line, disks, and what its console must and must not show.
pub struct Boot {
    /// Its name, in messages and in its console's file ([`console_path`]).
    pub name: String,
    /// The initramfs image QEMU loads (`-initrd`), with [`Start::Kernel`].
    pub image: PathBuf,
    /// The kernel command line, after `console=ttyS0 panic=-1` (with [`Start::Kernel`]; on
    /// arm64 `console=ttyAMA0`).
    pub append: String,
    /// More QEMU arguments: the disks ([`qemu_args`]), a NIC, ...
    pub qemu: Vec<String>,
    /// Texts the console must show.
    pub expect: Vec<String>,
    /// Texts the console must not show.
    pub reject: Vec<String>,
    /// A passphrase to type on the serial console when asked.
    pub answer: Option<&'static str>,
    /// Console text that ends the VM at once: the boot has failed.
    pub stop: Vec<String>,
    /// Seconds before the VM is killed.
    pub secs: u64,
    /// The network namespace QEMU runs in (a [`crate::netlab::NetLab`]'s), for network roots.
    pub netns: Option<String>,
    /// How the VM starts: the kernel and image given to QEMU, or the firmware from a disk.
    pub start: Start,
    /// Commands typed on QEMU's monitor when the console shows a text: (text, command), in
    /// order (a CD ejected once the guest says it may be).
    pub monitor: Vec<(String, String)>,
}

/// How a boot starts.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Start {
    /// QEMU loads the kernel and the image itself (`-kernel`, `-initrd`, `-append`).
    #[default]
    Kernel,
    /// SeaBIOS boots from the disks (a boot loader on them: `image` and `append` unused).
    Bios,
    /// OVMF boots from the disks, with a copy of the variable store at this path.
    Uefi(PathBuf),
    /// [`Start::Kernel`] on arm64: qemu-system-aarch64's `virt` board loads the kernel and
    /// the image, the console on ttyAMA0 ([`crate::aarch64_qemu_command`]).
    KernelAarch64,
    /// AAVMF (arm64 UEFI) boots from the disks, with a copy of the variable store at this path.
    Aavmf(PathBuf),
}

impl Boot {
    /// A boot of `image` with the command line `append` and the QEMU arguments `qemu`, QEMU
    /// loading the kernel: it must show the report's `LEANRD-STATE running` and `LEANRD-DONE`
    /// and no systemd start job left waiting, and is killed after 420 s.
    pub fn new(name: &str, image: &Path, append: &str, qemu: Vec<String>) -> Boot {
        Boot {
            name: name.into(),
            image: image.into(),
            append: append.into(),
            qemu,
            answer: None,
            expect: vec!["LEANRD-STATE running".into(), "LEANRD-DONE".into()],
            // systemd waiting on a device or a job (a dm device udev was not told about...).
            reject: vec!["A start job is running".into()],
            stop: Vec::new(),
            secs: 420,
            netns: None,
            start: Start::Kernel,
            monitor: Vec::new(),
        }
    }
    /// Also require `s` on the console.
    pub fn expect(mut self, s: &str) -> Boot {
        self.expect.push(s.into());
        self
    }
    /// Also refuse `s` on the console.
    pub fn reject(mut self, s: &str) -> Boot {
        self.reject.push(s.into());
        self
    }
    /// End the VM as soon as the console shows `s` (a failure it need not wait out).
    pub fn stop(mut self, s: &str) -> Boot {
        self.stop.push(s.into());
        self
    }
    /// Type `pass` when asked for a passphrase, and require the prompt for sda3_crypt.
    pub fn typing(mut self, pass: &'static str) -> Boot {
        self.answer = Some(pass);
        self.expect("Enter passphrase for sda3_crypt")
    }
}

/// A boot's console and whether it showed all that was expected and nothing rejected.
pub struct Outcome {
    /// The whole serial console.
    pub log: String,
    /// Whether it showed everything expected and nothing rejected.
    pub met: bool,
    /// The expected texts it did not show.
    pub missing: Vec<String>,
    /// The rejected texts it showed.
    pub unwanted: Vec<String>,
}

/// Run the boots two at a time (TCG takes a core each); each one's outcome, in order.
pub fn run_all(kernel: &Path, boots: &[Boot]) -> Vec<Outcome> {
    let next = Mutex::new(0usize);
    let done: Mutex<Vec<Option<Outcome>>> = Mutex::new(boots.iter().map(|_| None).collect());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(boots.len());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(b) = boots.get(i) else { break };
                    // One name per boot in the process (boots of other tests run beside this
                    // one: a name by the index in this call was removed by another's end).
                    static MONITORS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                    let n = MONITORS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let socket = std::env::temp_dir().join(format!("leanrd-monitor-{}-{n}", std::process::id()));
                    let mut extra: Vec<String> = b.qemu.clone();
                    if !b.monitor.is_empty() {
                        let _ = fs::remove_file(&socket);
                        extra.extend(["-monitor".into(), format!("unix:{},server=on,wait=off", socket.display())]);
                    }
                    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                    let mut cmd = match &b.start {
                        Start::Kernel => crate::qemu_command(kernel, &b.image, &b.append, &extra, b.secs),
                        Start::Bios => crate::bios_command(&extra, b.secs),
                        Start::Uefi(vars) => {
                            let _ = fs::copy(crate::OVMF_VARS, vars);
                            crate::firmware_command(vars, &extra, b.secs)
                        }
                        Start::KernelAarch64 => {
                            let append = format!("{} {}", crate::TEST_APPEND, b.append);
                            crate::aarch64_qemu_command(kernel, &b.image, &append, &extra, b.secs)
                        }
                        Start::Aavmf(vars) => crate::aavmf_command(vars, &extra, b.secs),
                    };
                    if let Some(ns) = &b.netns {
                        cmd = crate::netlab::in_netns(ns, &cmd);
                    }
                    let monitor = Some(Monitor { socket: &socket, on: &b.monitor }).filter(|m| !m.on.is_empty());
                    let Console { console: log, ran, waited, .. } =
                        run_console_acting(cmd, b.answer, &b.stop, &[], monitor);
                    if !b.monitor.is_empty() {
                        let _ = fs::remove_file(&socket);
                    }
                    let report: Vec<&str> = log
                        .lines()
                        .filter(|l| {
                            l.starts_with("LEANRD-")
                                && !l.starts_with("LEANRD-INITRD ")
                                && !l.starts_with("LEANRD-MODULES")
                        })
                        .collect();
                    let missing: Vec<String> = b.expect.iter().filter(|e| !log.contains(e.as_str())).cloned().collect();
                    let unwanted: Vec<String> = b.reject.iter().filter(|e| log.contains(e.as_str())).cloned().collect();
                    eprintln!(
                        "{}: VM {:.0} s (after {:.0} s for a slot)\n  {}",
                        b.name,
                        ran.as_secs_f64(),
                        waited.as_secs_f64(),
                        report.join("\n  ")
                    );
                    // Every console stays under target/boot-logs/, named by the boot (the
                    // last run's: a failure's, or a passing boot's for its timings).
                    let kept = console_path(&b.name);
                    let _ = fs::create_dir_all(kept.parent().expect("in a directory"))
                        .and_then(|()| fs::write(&kept, &log));
                    let met = missing.is_empty() && unwanted.is_empty();
                    done.lock().unwrap()[i] = Some(Outcome { log, met, missing, unwanted });
                }
            });
        }
    });
    done.into_inner().unwrap().into_iter().map(|o| o.expect("every boot ran")).collect()
}

/// Where a boot's whole console is kept: target/boot-logs/NAME.log.
pub fn console_path(name: &str) -> PathBuf {
    let slug: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    workspace().join("target/boot-logs").join(format!("{slug}.log"))
}

/// The tail of a console, for a failure message.
pub fn tail(log: &str) -> &str {
    &log[log.floor_char_boundary(log.len().saturating_sub(8000))..]
}

/// Run the boots; returns the names of those whose console lacks what was expected (or shows
/// what was rejected), printing their consoles.
pub fn run(kernel: &Path, boots: &[Boot]) -> Vec<String> {
    run_keep(kernel, boots).0
}

/// [`run`], also giving every boot's outcome.
pub fn run_keep(kernel: &Path, boots: &[Boot]) -> (Vec<String>, Vec<Outcome>) {
    let mut failed = Vec::new();
    let outcomes = run_all(kernel, boots);
    for (b, o) in boots.iter().zip(&outcomes) {
        if !o.met {
            let kept = console_path(&b.name);
            eprintln!(
                "==== {} FAILED: missing {:?}, unwanted {:?} (whole console: {}) ====\n{}",
                b.name,
                o.missing,
                o.unwanted,
                kept.display(),
                tail(&o.log)
            );
            failed.push(b.name.clone());
        }
    }
    (failed, outcomes)
}

/// The disks of a boot with a separate /usr: the root's, then /usr's.
pub fn with_usr<'a>(root: &'a [Disk], usr: &'a [Disk]) -> Vec<&'a Disk> {
    root.iter().chain(usr).collect()
}

/// A UUID for a test file system: `n` in the first field, this process's ID in the last.
pub fn uuid(n: u32) -> String {
    format!("{n:08x}-dead-beef-0000-{:012x}", std::process::id())
}

/// An ext4 image of `tree`, `fstab` as its /etc/fstab, made without mounting (to be copied
/// onto a device-mapper volume inside a VM).
pub fn ext4_image(t: &TempDir, name: &str, megs: u64, uuid: &str, tree: &Path, fstab: Option<&str>) -> PathBuf {
    ext4_image_with(t, name, megs, uuid, tree, &[("fstab", fstab.unwrap_or_default())])
}

/// [`ext4_image`] with files of its own under /etc (an empty content leaves the tree's).
pub fn ext4_image_with(t: &TempDir, name: &str, megs: u64, uuid: &str, tree: &Path, etc: &[(&str, &str)]) -> PathBuf {
    let (img, case) = (t.join(format!("{name}.ext4")), t.join(format!("{name}.tree")));
    sh(&format!("cp -al {} {}", tree.display(), case.display()));
    for (f, content) in etc.iter().filter(|(_, c)| !c.is_empty()) {
        let _ = fs::remove_file(case.join("etc").join(f));
        fs::write(case.join("etc").join(f), content).unwrap();
    }
    sh(&format!("truncate -s {megs}M {i} && mkfs.ext4 -q -U {uuid} -d {c} {i}", i = img.display(), c = case.display()));
    sh(&format!("rm -rf {}", case.display()));
    img
}

/// The stacked root: LUKS2 (`md_crypt` in crypttab) on LVM (vg0/root) on md RAID1 (metadata
/// 1.2, `md0`) over the two whole disks `members`, made in a prep VM from an ext4 image of
/// `tree` made here. Returns the prep image, its disks (the members first) and the LUKS
/// header's UUID.
pub fn md_lvm_luks_prep(
    t: &TempDir,
    kver: &str,
    tree: &Path,
    members: [&Path; 2],
) -> Option<(PathBuf, Vec<Disk>, String)> {
    let (luks_uuid, root_uuid) = (uuid(41), uuid(42));
    let crypttab = format!("md_crypt UUID={luks_uuid} none luks,discard\n");
    let fstab = "/dev/mapper/md_crypt / ext4 errors=remount-ro 0 1\n";
    let root = ext4_image_with(t, "stack-root", 2048, &root_uuid, tree, &[("fstab", fstab), ("crypttab", &crypttab)]);
    for m in members {
        sh(&format!("truncate -s {}M {}", 2048 + 64, m.display()));
    }
    // --assume-clean: no initial resync (the members are blank alike); what the test checks is
    // that the way down leaves them clean.
    let body = format!(
        "printf %s '{PASS}' > /tmp/pass && \
         $mdadm --create /dev/md0 --run --level=1 --raid-devices=2 --metadata=1.2 --assume-clean \
           --homehost=any /dev/vda /dev/vdb && \
         $lvm pvcreate -y --config \"$C\" /dev/md0 && $lvm vgcreate --config \"$C\" vg0 /dev/md0 && \
         $lvm lvcreate -y --config \"$C\" -L 2080M -n root vg0 && \
         $cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
           --uuid {luks_uuid} --key-file /tmp/pass /dev/mapper/vg0-root && \
         $cryptsetup open --key-file /tmp/pass /dev/mapper/vg0-root prep && $e2image -ra /dev/vdc /dev/mapper/prep && \
         $cryptsetup close prep && $lvm vgchange -an --config \"$C\" vg0 && $mdadm --stop /dev/md0 && sync && \
         echo PREP-DONE"
    );
    let dir = t.join("stack-prep");
    let tools = ["mdadm", "lvm", "cryptsetup", "e2image"];
    let img = crate::prep::image(&dir, kver, &tools, crate::prep::STACK_MODULES, "vdc", &body, None)?;
    let disks = members
        .into_iter()
        .map(Path::to_path_buf)
        .chain([root])
        .map(|path| Disk { path, gpt: false, bus: Bus::VirtioBlk })
        .collect();
    Some((img, disks, luks_uuid))
}

/// The volume key of the LUKS container at byte `offset` of `disk`, read from its header with
/// [`PASS`] by the host's cryptsetup (through a read-only loop device).
pub fn luks_volume_key(disk: &Path, offset: u64) -> Result<Vec<u8>, String> {
    let out = Command::new("losetup")
        .args(["-r", "-f", "--show", "-o", &offset.to_string()])
        .arg(disk)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("losetup {}: {}", disk.display(), String::from_utf8_lossy(&out.stderr)));
    }
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut c = Command::new("cryptsetup");
    c.args(["luksDump", "--dump-volume-key", "--batch-mode", "--key-file", "-", &dev]);
    let dumped = c
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut ch| {
            use std::io::Write;
            ch.stdin.take().unwrap().write_all(PASS.as_bytes())?;
            ch.wait_with_output()
        });
    let _ = Command::new("losetup").args(["-d", &dev]).status();
    let dumped = dumped.map_err(|e| format!("cryptsetup: {e}"))?;
    let text = String::from_utf8_lossy(&dumped.stdout).into_owned();
    // "MK dump:\t00 11 ...", continued on the following lines up to an empty one.
    let start = text.find("MK dump:").ok_or_else(|| {
        format!("cryptsetup luksDump --dump-volume-key: no key in {text}{}", String::from_utf8_lossy(&dumped.stderr))
    })?;
    let key: Vec<u8> = text[start + "MK dump:".len()..]
        .lines()
        .take_while(|l| !l.trim().is_empty() && !l.contains(':'))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|b| u8::from_str_radix(b, 16).ok())
        .collect();
    if key.len() < 32 {
        return Err(format!("a volume key of {} bytes from {text}", key.len()));
    }
    Ok(key)
}

/// How many copies of each 32-byte half of a volume `key` lie in `ram` (a guest's memory
/// dump): an XTS key's two halves are what the AES key schedules keep, the whole key never
/// appears.
pub fn key_halves_in(ram: &[u8], key: &[u8]) -> Vec<usize> {
    key.chunks(32).map(|half| ram.windows(half.len()).filter(|w| *w == half).count()).collect()
}

/// What `mdadm --examine` says of an md member's state (`clean`, `active`...), read from a copy
/// of the disk through a read-only loop device; Err: why it could not be read.
pub fn md_member_state(disk: &Path) -> Result<String, String> {
    let out = Command::new("losetup").args(["-r", "-f", "--show"]).arg(disk).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("losetup {}: {}", disk.display(), String::from_utf8_lossy(&out.stderr)));
    }
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let ex = Command::new("mdadm").args(["--examine", &dev]).output();
    let _ = Command::new("losetup").args(["-d", &dev]).status();
    let ex = ex.map_err(|e| format!("mdadm: {e}"))?;
    let text = String::from_utf8_lossy(&ex.stdout).into_owned();
    text.lines().find_map(|l| l.trim().strip_prefix("State : ")).map(|s| s.trim().to_string()).ok_or_else(|| {
        format!("mdadm --examine {}: no state in {text}{}", disk.display(), String::from_utf8_lossy(&ex.stderr))
    })
}

/// The passphrase of the encrypted root.
pub const PASS: &str = "leanrd-debian-passphrase";
/// The encrypted disk as Debian's installer lays it out: GPT, an ESP, /boot (ext4, not
/// encrypted), and LUKS2 holding the ext4 root, named sda3_crypt by /etc/crypttab.
pub const LUKS_DISK_MB: u64 = 2400;
/// Where /boot's partition starts on that disk, in MiB (after a 16 MiB ESP at 1 MiB).
pub const BOOT_START_MB: u64 = 17;
/// The size of /boot's partition (and its ext4 image), in MiB; LUKS takes the rest of the disk.
pub const BOOT_MB: u64 = 96;

/// The encrypted root disk, made in a prep VM (the container) from ext4 images made here:
/// the root (with crypttab and an fstab naming /dev/mapper/sda3_crypt and /boot) and /boot.
/// The LUKS disk is made at `disk`. Returns the prep image, its disks (the LUKS disk first),
/// /boot's UUID and the LUKS header's.
pub fn luks_prep(t: &TempDir, kver: &str, tree: &Path, disk: &Path) -> Option<(PathBuf, Vec<Disk>, String, String)> {
    let (luks_uuid, root_uuid, boot_uuid) = (uuid(31), uuid(32), uuid(33));
    let crypttab = format!("sda3_crypt UUID={luks_uuid} none luks,discard\n");
    let fstab =
        format!("/dev/mapper/sda3_crypt / ext4 errors=remount-ro 0 1\nUUID={boot_uuid} /boot ext4 defaults 0 2\n");
    let root = ext4_image_with(t, "luks-root", 2048, &root_uuid, tree, &[("fstab", &fstab), ("crypttab", &crypttab)]);
    let empty = t.join("empty-boot");
    fs::create_dir_all(&empty).unwrap();
    let boot = t.join("luks-boot.ext4");
    sh(&format!(
        "truncate -s {BOOT_MB}M {b} && mkfs.ext4 -q -U {boot_uuid} -d {e} {b}",
        b = boot.display(),
        e = empty.display()
    ));
    sh(&format!(
        "truncate -s {LUKS_DISK_MB}M {d} && printf 'label: gpt\\nstart=1M, size=16M, type=U\\n\
         start={BOOT_START_MB}M, size={BOOT_MB}M\\nstart={s}M\\n' | sfdisk -q {d} && \
         dd if={b} of={d} bs=1M seek={BOOT_START_MB} conv=notrunc,sparse status=none",
        d = disk.display(),
        b = boot.display(),
        s = BOOT_START_MB + BOOT_MB,
    ));
    let body = format!(
        "printf %s '{PASS}' > /tmp/pass && \
         $cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 \
           --uuid {luks_uuid} --key-file /tmp/pass /dev/vda3 && \
         $cryptsetup open --key-file /tmp/pass /dev/vda3 prep && $e2image -ra /dev/vdb /dev/mapper/prep && \
         $cryptsetup close prep && sync && echo PREP-DONE"
    );
    let modules =
        ["virtio_pci", "virtio_blk", "dm_mod", "dm_crypt", "xts", "aes_generic", "sha256_generic", "cbc", "ecb"];
    let dir = t.join("luks-prep");
    let img = crate::prep::image(&dir, kver, &["cryptsetup", "e2image"], &modules, "vdb", &body, None)?;
    let disks =
        [disk.to_path_buf(), root].into_iter().map(|path| Disk { path, gpt: false, bus: Bus::VirtioBlk }).collect();
    Some((img, disks, boot_uuid, luks_uuid))
}
