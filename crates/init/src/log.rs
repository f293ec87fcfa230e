//! The step log: every step /init takes, timestamped (seconds since boot, as the kernel log
//! counts). Kept in memory and handed to the real system as /run/initramfs/leanrd.log (for
//! `journalctl`-era inspection after the boot); also sent to the kernel log as it happens
//! with `leanrd.debug`. Errors go to the console too.

use alloc::format;
use alloc::string::String;
use rustix::fd::OwnedFd;

use crate::sys;

use leanrd_contract::steplog;
/// Where the real system finds the step log.
pub use leanrd_contract::steplog::SAVED;

/// A bound on the record: a storm of failing module loads must not eat the memory the boot
/// needs (the kernel log still gets every line with `leanrd.debug`).
const RECORD_MAX: usize = 256 * 1024;

/// The step log: timestamped lines kept in memory (at most 256 KiB) for
/// /run/initramfs/leanrd.log, and written to /dev/kmsg as well with `leanrd.debug`.
pub struct Log {
    kmsg: Option<OwnedFd>,
    record: String,
    keep: bool,
}

impl Log {
    /// A log that records steps, and writes them to /dev/kmsg too when `debug` is on.
    pub fn open(debug: bool) -> Log {
        // /dev/kmsg drops a writer's lines after a burst of 10 unless told otherwise: every
        // step is wanted when debugging.
        if debug {
            let _ = sys::write_file("/proc/sys/kernel/printk_devkmsg", "on\n");
        }
        Log { kmsg: if debug { sys::open_write("/dev/kmsg").ok() } else { None }, record: String::new(), keep: true }
    }

    /// A log that records nothing and says nothing but errors (the module helper's).
    pub fn quiet() -> Log {
        Log { kmsg: None, record: String::new(), keep: false }
    }

    fn keep(&mut self, msg: &str) {
        if self.keep && self.record.len() + msg.len() < RECORD_MAX {
            self.record.push_str(&steplog::record_line(sys::now_ms(), msg));
        }
    }

    /// One step of the boot.
    pub fn step(&mut self, msg: &str) {
        self.keep(msg);
        if let Some(k) = &self.kmsg {
            sys::write_all(k, format!("<5>{}{msg}\n", steplog::KMSG_PREFIX).as_bytes());
        }
    }

    /// A failure: on the console, and in the record.
    pub fn error(&mut self, msg: &str) {
        self.keep(&format!("error: {msg}"));
        sys::eprint(&format!("leanrd: {msg}\n"));
    }

    /// Write the record to /run/initramfs/leanrd.log (readable by root only: it holds the
    /// command line, its secrets redacted, and device names: nobody else needs it).
    pub fn save(&self) {
        let _ = rustix::fs::mkdir("/run/initramfs", rustix::fs::Mode::from_raw_mode(0o755));
        let _ = sys::write_file_mode(SAVED, &self.record, 0o600);
    }
}
