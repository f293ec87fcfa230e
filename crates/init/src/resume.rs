//! Resuming from hibernation. The resume device (the command line's `resume=`, else the one
//! the host-only image was built with) is waited for with the root, briefly: a machine
//! without it boots normally after [`WAIT_MS`] (`resumewait`: as long as it takes). Once the
//! block stack is assembled and before anything is mounted — a read-only ext4 mount replays
//! its journal, which would corrupt the hibernated system's view of it — its offset goes to
//! /sys/power/resume_offset and its number to /sys/power/resume: the kernel restores the
//! image and never returns, or finds none and the boot goes on.

use alloc::format;
use alloc::string::String;

use leanrd_contract::DeviceRef;

use crate::Init;
use crate::devices::Dev;
use crate::probe::HIBERNATED;
use crate::sys;
use crate::wait::{DeviceWaiter, Waiter};

/// How long the boot waits for a resume device that is not there.
pub const WAIT_MS: u64 = 5_000;

/// Where the hibernation image is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The swap device (or the device holding the swap file).
    pub device: DeviceRef,
    /// In pages: where a swap file's header is on its device.
    pub offset: Option<u64>,
}

/// The resume device this boot uses, if any: the command line's, else the configuration's.
pub fn given(init: &Init) -> Option<Resume> {
    match &init.cmd.resume {
        Some(d) => Some(Resume { device: d.clone(), offset: init.cmd.resume_offset }),
        None => init
            .conf
            .resume
            .clone()
            .map(|d| Resume { device: d, offset: init.cmd.resume_offset.or(init.conf.resume_offset) }),
    }
}

/// Waits for the resume device, giving up after a while.
pub struct ResumeWaiter {
    /// The waiter for the device itself; it holds the device once found.
    pub dev: DeviceWaiter,
    give_up_ms: Option<u64>,
}

impl ResumeWaiter {
    /// `noresume`: never holds the boot (the device is still noted if seen); `resumewait`:
    /// holds it until the device comes (or the boot's timeout).
    pub fn new(r: &Resume, noresume: bool, resumewait: bool) -> ResumeWaiter {
        let give_up_ms = if noresume {
            Some(0)
        } else if resumewait {
            None
        } else {
            Some(WAIT_MS)
        };
        ResumeWaiter { dev: DeviceWaiter::new("resume", r.device.clone()), give_up_ms }
    }
}

impl Waiter for ResumeWaiter {
    fn describe(&self) -> String {
        self.dev.describe()
    }
    /// Nothing for the block stack: a resume device named by UUID must not change which LUKS
    /// containers are opened (with no container named, all are; the swap's is among them, or
    /// `rd.luks.uuid=` names it).
    fn wants(&self) -> Option<&DeviceRef> {
        None
    }
    fn offer(&mut self, devs: &[Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        self.dev.offer(devs, devno_of)
    }
    fn gives_up_after_ms(&self) -> Option<u64> {
        self.give_up_ms
    }
}

/// What there is to do with the resume device found (or not).
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Write these to /sys/power/resume_offset (if any) and /sys/power/resume.
    Resume {
        /// The device's number (major, minor), written as `MAJOR:MINOR`.
        devno: (u32, u32),
        /// Where the swap file's header is on it, in pages; None: none written (a swap partition).
        offset: Option<u64>,
    },
    /// Nothing; why, for the log and the diagnosis.
    Skip(String),
}

/// Decide. A swap partition that holds no hibernation image is still handed to the kernel
/// (it checks the image itself, and a signature this prober does not know must not cost a
/// session); only `noresume` or a missing device skip it.
pub fn action(r: &Resume, found: Option<&Dev>, noresume: bool) -> Action {
    let Some(d) = found else {
        return Action::Skip(format!("resume={}: not found; booting normally", r.device));
    };
    let image = d.probe.fstype.as_deref() == Some(HIBERNATED);
    if noresume {
        return Action::Skip(if image {
            format!(
                "resume={}: hibernation image found on {} but resume was skipped (noresume)",
                r.device,
                d.mount_source()
            )
        } else {
            format!("resume={}: {} found, noresume", r.device, d.mount_source())
        });
    }
    Action::Resume { devno: d.devno, offset: r.offset }
}

/// Resume if there is an image; returns when there is none (or nothing to do).
pub fn attempt(init: &mut Init, r: &Resume, w: &ResumeWaiter) {
    let found = w.dev.found.as_ref();
    match action(r, found, init.cmd.noresume) {
        Action::Skip(why) => {
            init.log.step(&why);
            init.notes.push(why);
        }
        Action::Resume { devno: (major, minor), offset } => {
            let path = found.map(|d| d.mount_source()).unwrap_or_default();
            let image = found.is_some_and(|d| d.probe.fstype.as_deref() == Some(HIBERNATED));
            if let Some(o) = offset
                && let Err(e) = sys::write_file("/sys/power/resume_offset", &format!("{o}\n"))
            {
                init.log.error(&format!("resume_offset={o}: {}", sys::strerror(e)));
            }
            let what = if image { "a hibernation image" } else { "no hibernation image signature" };
            init.log.step(&format!("resume: {path} ({major}:{minor}) has {what}; handing it to the kernel"));
            // The kernel restores the image now and never returns, when there is one.
            let why = match sys::write_file("/sys/power/resume", &format!("{major}:{minor}\n")) {
                Ok(()) => format!("resume={}: {path} holds no hibernation image; booting normally", r.device),
                Err(e) => format!("resume={}: the kernel did not resume from {path}: {}", r.device, sys::strerror(e)),
            };
            if image {
                init.log.error(&why);
            } else {
                init.log.step(&why);
            }
            init.notes.push(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::tests::{dev, fs};

    fn swap(t: &str) -> Dev {
        dev("vda2", (254, 2), Some("vda"), 2, fs(t, "5a-1", None, None, None))
    }

    #[test]
    fn decides_from_what_was_found() {
        let r = Resume { device: DeviceRef::Uuid("5a-1".into()), offset: None };
        assert_eq!(action(&r, Some(&swap(HIBERNATED)), false), Action::Resume { devno: (254, 2), offset: None });
        // No signature of an image: the kernel still gets it (it checks for itself).
        assert_eq!(action(&r, Some(&swap("swap")), false), Action::Resume { devno: (254, 2), offset: None });
        let Action::Skip(why) = action(&r, Some(&swap(HIBERNATED)), true) else { panic!() };
        assert_eq!(why, "resume=UUID=5a-1: hibernation image found on /dev/vda2 but resume was skipped (noresume)");
        let Action::Skip(why) = action(&r, None, false) else { panic!() };
        assert_eq!(why, "resume=UUID=5a-1: not found; booting normally");
        let file = Resume { device: DeviceRef::Uuid("5a-1".into()), offset: Some(34816) };
        assert_eq!(action(&file, Some(&swap("ext4")), false), Action::Resume { devno: (254, 2), offset: Some(34816) });
    }
}
