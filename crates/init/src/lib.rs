//! leanrd's /init. As PID 1: mount the API file systems, load the modules the generator
//! listed, coldplug every device's modalias (and keep listening for uevents), find the root
//! by UUID/LABEL/PARTUUID/PARTLABEL/path, unlock/activate LUKS, LVM and md when the image has
//! them, mount the root and switch to it. On failure it says why, on one screen, and never
//! exits (PID 1 exiting panics the kernel without a word).
//!
//! As anything else it is the kernel's module helper (/proc/sys/kernel/modprobe points here):
//! `/init -q -- MODULE` loads MODULE with its dependencies.
//!
//! One file per stage: [`cmdline`], [`log`], [`modules`] (and [`uevent`]), [`devices`] (with
//! [`probe`]), [`stack`], [`wait`] (the event loop and its waiters), [`root`], [`usr`],
//! [`switch_root`], [`diagnose`]; [`boot`] runs them in order. What the generator decided
//! comes in one typed [`leanrd_contract::InitConfig`].
//!
//! No libc: the binary (src/main.rs) starts the process itself and everything here runs on
//! rustix's raw syscalls ([`sys`]), with `alloc` for strings and tables. The library is
//! `no_std` so that its unit tests run on the host with std.

#![deny(missing_docs)]
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod bcache;
pub mod boot;
pub mod btrfs;
pub mod clevis;
pub mod cmdline;
pub mod devices;
pub mod dhcp;
pub mod diagnose;
pub mod dm;
pub mod exitrd;
pub mod font;
pub mod fsck;
pub mod http;
pub mod integrity;
pub mod iscsi;
pub mod isomd5;
pub mod keymap;
pub mod live;
pub mod log;
pub mod luks;
pub mod luks2;
pub mod modules;
pub mod multipath;
pub mod nbd;
pub mod net;
pub mod netblock;
pub mod netconf;
pub mod nfs;
pub mod nvmf;
pub mod params;
pub mod plymouth;
pub mod probe;
pub mod process;
pub mod prompt;
pub mod resume;
pub mod root;
pub mod ssh;
pub mod sss;
pub mod stack;
pub mod stub;
pub mod switch_root;
pub mod sys;
pub mod tang;
pub mod tpm;
pub mod tpm2pin;
pub mod uevent;
pub mod usr;
pub mod verity;
pub mod volatile;
pub mod wait;
pub mod zfs;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::{CONFIG_PATH, Capability, InitConfig};
use rustix::mount::{MountFlags, UnmountFlags};

use cmdline::Cmdline;
use log::Log;
use modules::Modules;
use sys::eprint;

/// The boot's state, handed from stage to stage.
pub struct Init {
    /// The step log.
    pub log: Log,
    /// The kernel command line's settings, parsed.
    pub cmd: Cmdline,
    /// What the generator decided, read from [`leanrd_contract::CONFIG_PATH`]; the default when
    /// that is missing or unreadable (a note says why).
    pub conf: InitConfig,
    /// Whether [`Init::conf`] was read (not the default put in place of a missing or unreadable
    /// one): only then does its lack of a capability say what the image was built without.
    pub conf_read: bool,
    /// The kind of the root this boot chose (None: not chosen yet).
    pub root_kind: Option<leanrd_contract::RootKind>,
    /// A live root's medium (its kernel name, `sr0`), for the way down to eject.
    pub live_medium: Option<alloc::string::String>,
    /// What the diagnosis says when it saw no block device; None: the root is not on a block
    /// device (an NFS export), and the block devices are listed only when there are some.
    pub no_disk_hint: Option<&'static str>,
    /// The console font was loaded, or tried and failed (see [`font::load`]).
    pub font_done: bool,
    /// The switch to the root went past the point of no return (the initramfs is deleted and
    /// the root is /): a failure then cannot be retried.
    pub switched: bool,
    /// The module tables and what has been loaded.
    pub mods: Modules,
    /// The kernel command line as shown (its secrets redacted).
    pub cmdline_text: String,
    /// What went wrong on the way, for the diagnosis.
    pub notes: Vec<String>,
    /// The arguments the kernel gave /init (`argv[0]`, then command-line words it did not
    /// know, such as `single`): handed on to the root's init, after its own name.
    pub args: Vec<String>,
    /// The environment the kernel gave /init (`HOME`, `TERM`, `x=y` words): handed on to the
    /// root's init; empty: `HOME=/` and `TERM=linux`.
    pub env: Vec<String>,
    /// What unlocking remembers between passes (the passphrase given, containers given up).
    pub luks: luks::State,
    /// The boot phases measured into PCR 11.
    pub phases: tpm::Phases,
}

impl Init {
    /// Everything useful about a failure, on one screen.
    fn diagnose(&mut self, why: &str) {
        font::load(self);
        let mut devs = devices::scan();
        btrfs::mark(self, &mut devs);
        let mut notes: Vec<String> = self.mods.table_error.iter().cloned().collect();
        notes.extend(self.notes.iter().cloned());
        notes.extend(bcache::waiting());
        notes.extend(multipath::problems());
        let late = self.mods.still_loading();
        if !late.is_empty() {
            notes.push(format!("still loading (their initialisation has not returned): {}", late.join(" ")));
            let behind = self.mods.waiting();
            if !behind.is_empty() {
                notes.push(format!("not started, waiting for those: {}", behind.join(" ")));
            }
        }
        let r = diagnose::Report {
            why,
            cmdline: &self.cmdline_text,
            devs: &devs,
            no_disk_hint: self.no_disk_hint,
            failed: &self.mods.failed,
            loaded: self.mods.loaded.len(),
            notes: &notes,
        };
        let text = r.text();
        // The diagnosis on the splash in one line, then the screen is the console's again.
        crate::plymouth::message(&format!("cannot boot: {why}"));
        crate::plymouth::quit(self);
        prompt::say_everywhere(&text);
    }

    fn shell(&mut self) {
        crate::plymouth::quit(self);
        for sh in ["/bin/sh", "/usr/bin/sh", "/bin/busybox"] {
            if sys::exists(sh) {
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

/// The configuration the generator wrote; a problem with it is a note for the diagnosis
/// (the command line may still be enough to boot).
fn read_config(notes: &mut Vec<String>) -> Option<InitConfig> {
    let Some(text) = sys::read_string(CONFIG_PATH) else {
        notes.push(format!("{CONFIG_PATH}: missing"));
        return None;
    };
    InitConfig::decode(&text)
        .map_err(|e| {
            notes.push(format!("{CONFIG_PATH}: {e}"));
        })
        .ok()
}

/// Module parameters (modprobe.d's, then the command line's, which win) and the blacklist.
fn module_settings(conf: &InitConfig, cmd: &Cmdline) -> (Vec<(String, String)>, Vec<String>) {
    let options = conf.options.iter().chain(&cmd.module_options).cloned().collect();
    let blacklist = conf.blacklist.iter().chain(&cmd.blacklist).cloned().collect();
    (options, blacklist)
}

fn reboot_or_wait(cmd: &Cmdline) -> ! {
    match cmd.panic {
        Some(n) if n != 0 => {
            // At once (negative) still leaves the consoles a moment to send the diagnosis
            // (a serial line at 115200 baud sends it in about 0.2 s).
            sys::sleep_ms(if n > 0 { (n as u64).saturating_mul(1000) } else { 500 });
            rustix::fs::sync();
            let _ = rustix::system::reboot(rustix::system::RebootCommand::Restart);
        }
        _ => {}
    }
    loop {
        sys::sleep_ms(3_600_000);
    }
}

fn mount_api_filesystems() {
    let (nosuid, nodev, noexec) = (MountFlags::NOSUID, MountFlags::NODEV, MountFlags::NOEXEC);
    let _ = sys::mount("devtmpfs", "/dev", "devtmpfs", nosuid, Some("mode=0755"));
    let _ = sys::mount("proc", "/proc", "proc", nosuid | nodev | noexec, None);
    let _ = sys::mount("sysfs", "/sys", "sysfs", nosuid | nodev | noexec, None);
    let _ = sys::mount("tmpfs", "/run", "tmpfs", nosuid | nodev, Some("mode=0755"));
}

/// How long a module load is waited for (ms): no longer than the root would be
/// (`leanrd.timeout`, at least a second), without end with `rootwait`. The kernel's module
/// helper waits as long: a `mount` in PID 1 that asks for a file system's module whose load
/// hangs then fails, rather than waiting with it.
fn load_wait_ms(cmd: &Cmdline) -> u64 {
    if cmd.rootwait { u64::MAX } else { cmd.timeout.max(1).saturating_mul(1000) }
}

/// The program: /init as PID 1, the module helper otherwise, with the arguments and
/// environment the kernel passed. Never returns.
pub fn main(args: Vec<String>, env: Vec<String>) -> ! {
    if args.first().is_some_and(|a| ssh::is_client(a)) {
        ssh::client_main();
    }
    if args.first().is_some_and(|a| exitrd::is_shutdown(a)) {
        exitrd::shutdown_main(&args);
    }
    if !rustix::process::getpid().is_init() {
        if args.len() > 1 {
            let conf = read_config(&mut Vec::new()).unwrap_or_default();
            let cmd = Cmdline::parse(&sys::read_string("/proc/cmdline").unwrap_or_default());
            let (options, blacklist) = module_settings(&conf, &cmd);
            sys::exit(modules::helper_main(&args, options, blacklist, load_wait_ms(&cmd)));
        }
        eprint("leanrd-init: this is an initramfs /init and must run as PID 1\n");
        sys::exit(1);
    }
    mount_api_filesystems();
    let cmdline_text = sys::read_string("/proc/cmdline").unwrap_or_default();
    let cmd = Cmdline::parse(&cmdline_text);
    // What the log and a diagnosis show of it: without its secrets (iSCSI passwords).
    let cmdline_text = leanrd_contract::redact_secrets(cmdline_text.trim());
    let mut notes = cmd.problems.clone();
    let conf = read_config(&mut notes);
    let conf_read = conf.is_some();
    let conf = conf.unwrap_or_default();
    let kver = conf
        .kver
        .clone()
        .unwrap_or_else(|| sys::read_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string());
    // The kernel asks for modules (crypto-crc32c, fs-*) through its helper: us.
    let _ = sys::write_file("/proc/sys/kernel/modprobe", "/init");
    let mut log = Log::open(cmd.debug);
    log.step(&format!(
        "{}{} for {kver}: {}",
        leanrd_contract::steplog::STARTED,
        env!("CARGO_PKG_VERSION"),
        cmdline_text.trim()
    ));
    let (options, blacklist) = module_settings(&conf, &cmd);
    let mut mods = Modules::open(&kver, options, blacklist);
    mods.coldplug_all = cmd.coldplug_all;
    mods.wait_ms = load_wait_ms(&cmd);
    // Network drivers by coldplug only when the boot needs the network (a network root is
    // known once the root is chosen: root::source turns this on too).
    mods.net = cmd.neednet;
    log.step(&format!("module tables read: {} modules, {} loaded", mods.db.paths.len(), mods.loaded.len()));
    let mut init = Init {
        log,
        mods,
        cmd,
        conf,
        conf_read,
        root_kind: None,
        live_medium: None,
        no_disk_hint: Some(diagnose::NO_DISK_CONTROLLER),
        switched: false,
        font_done: false,
        cmdline_text,
        notes,
        args,
        env,
        luks: luks::State::default(),
        phases: tpm::Phases::default(),
    };
    loop {
        let err = match boot::boot(&mut init) {
            Ok(()) => "switch_root returned".to_string(),
            Err(e) => e,
        };
        init.diagnose(&err);
        if init.conf.layer(Capability::Rescue).is_some() || sys::exists("/bin/sh") {
            init.shell();
            // After the shell, try once more (the user may have fixed things): from scratch,
            // the root taken down (lazily, should something still hold it). Not once the switch
            // went past its point of no return: the initramfs is gone, and / is the root.
            if !init.switched {
                let _ = rustix::mount::unmount(root::NEWROOT, UnmountFlags::DETACH);
                continue;
            }
        }
        init.log.error("no rescue shell in this image (add --include rescue)");
        reboot_or_wait(&init.cmd);
    }
}
