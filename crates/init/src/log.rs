//! Messages: debug lines to the kernel log (timestamped there) with `leanrd.debug`, errors
//! to the console.

use alloc::format;
use rustix::fd::OwnedFd;

use crate::sys;

pub struct Log {
    debug: bool,
    kmsg: Option<OwnedFd>,
}

impl Log {
    /// A log that writes debug lines to /dev/kmsg when `debug` is on.
    pub fn open(debug: bool) -> Log {
        // /dev/kmsg drops a writer's lines after a burst of 10 unless told otherwise: every
        // step is wanted when debugging.
        if debug {
            let _ = sys::write_file("/proc/sys/kernel/printk_devkmsg", "on\n");
        }
        Log { debug, kmsg: if debug { sys::open_write("/dev/kmsg").ok() } else { None } }
    }

    /// A log that says nothing but errors (the module helper's).
    pub fn quiet() -> Log {
        Log { debug: false, kmsg: None }
    }

    pub fn debug(&mut self, msg: &str) {
        if self.debug
            && let Some(k) = &self.kmsg
        {
            sys::write_all(k, format!("<5>leanrd: {msg}\n").as_bytes());
        }
    }

    pub fn error(&self, msg: &str) {
        sys::eprint(&format!("leanrd: {msg}\n"));
    }
}
