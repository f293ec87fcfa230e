//! Waiting for devices: an event loop that probes the block devices when they may have
//! changed and offers them to registered [`Waiter`]s (the root, /usr, a resume device, a LUKS
//! member...). The system is behind [`Platform`], so the timing rules run in unit tests
//! against a scripted fake:
//!
//! - probe at the start, after any uevent, after drivers were loaded or a layer was
//!   assembled and the device count changed, and once a second as a fallback — not on every
//!   idle 100 ms tick;
//! - walk sysfs for modaliases (coldplug) at the start, after uevents that carried one, and
//!   once a second; drivers load concurrently, and the walk returns as soon as a block device
//!   appears, the rest loading on (a slow controller's probe does not hold back a root that
//!   is already there);
//! - assemble layers (LUKS, LVM, md) when the devices changed, drivers were loaded, or every
//!   2 s;
//! - give up after the timeout unless `rootwait`; without a uevent source, poll every 100 ms.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use leanrd_contract::DeviceRef;

use crate::devices::{self, Dev};

/// What the loop needs from the system.
pub trait Platform {
    /// Milliseconds on the monotonic clock.
    fn now_ms(&self) -> u64;
    /// Sleep `ms` milliseconds (without a uevent source, between polls).
    fn sleep_ms(&mut self, ms: u64);
    /// Probe every block device.
    fn scan(&mut self) -> Vec<Dev>;
    /// How many block devices there are now (cheap: a directory listing).
    fn block_count(&self) -> usize;
    /// Load drivers for devices not seen before; how many modules were loaded. It may
    /// return while some still load (a block device appeared, which may be what the boot
    /// waits for): see [`Platform::loading`].
    fn coldplug(&mut self) -> usize;
    /// Whether driver loads (coldplug's, uevents') are still running.
    fn loading(&self) -> bool {
        false
    }
    /// Go on with them, as [`Platform::coldplug`] does; how many modules were loaded.
    fn settle(&mut self) -> usize {
        0
    }
    /// Unlock, activate and assemble what the image can for `wanted`; true when something
    /// was unlocked.
    fn assemble(&mut self, devs: &[Dev], wanted: &[&DeviceRef]) -> bool;
    /// Whether uevents can be waited for; without, the loop polls.
    fn has_events(&self) -> bool;
    /// Wait up to `ms` for uevents (queueing drivers for their modaliases): (any event came,
    /// any carried a modalias).
    fn events(&mut self, ms: u64) -> (bool, bool);
    /// The device number of a block device node.
    fn devno_of(&self, path: &str) -> Option<(u32, u32)>;
    /// A line for the step log.
    fn debug(&mut self, msg: &str);
}

/// Something the boot waits for.
pub trait Waiter {
    /// For messages: `root=UUID=...`.
    fn describe(&self) -> String;
    /// The device it names, so that layers holding it are opened (a LUKS container named by
    /// its UUID is unlocked).
    fn wants(&self) -> Option<&DeviceRef>;
    /// Look at the devices; true once satisfied.
    fn offer(&mut self, devs: &[Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool;
    /// For something the boot can go on without (a resume device): how long after the start
    /// it stops holding the loop. None: until satisfied or the timeout.
    fn gives_up_after_ms(&self) -> Option<u64> {
        None
    }
}

/// A waiter for one device, by reference. A LUKS container named so is not mounted but
/// holds the device: the waiter is satisfied by the device-mapper device on top of it once
/// it is unlocked.
///
/// A btrfs member whose file system lacks devices does not satisfy it either, unless
/// `degraded` (the mount option that accepts missing members).
pub struct DeviceWaiter {
    /// What the device is for, as messages name it before `=`: `root`, `mount.usr`, `resume`, ...
    pub role: &'static str,
    /// The device wanted.
    pub want: DeviceRef,
    /// The device that satisfied it (for a LUKS container, the unlocked device on top); None:
    /// not yet.
    pub found: Option<Dev>,
    /// Whether a btrfs member whose file system lacks devices satisfies it (`rootflags=degraded`).
    pub degraded: bool,
    /// The device was seen, but its btrfs file system had members missing.
    pub incomplete: Option<Dev>,
}

impl DeviceWaiter {
    /// A waiter for `want`, as `role`, with nothing found yet and not `degraded`.
    pub fn new(role: &'static str, want: DeviceRef) -> DeviceWaiter {
        DeviceWaiter { role, want, found: None, degraded: false, incomplete: None }
    }
}

impl Waiter for DeviceWaiter {
    fn describe(&self) -> String {
        match &self.incomplete {
            Some(d) => format!(
                "{}={} ({} is btrfs with members missing; rootflags=degraded mounts it without them)",
                self.role,
                self.want,
                d.path()
            ),
            None => format!("{}={}", self.role, self.want),
        }
    }
    fn wants(&self) -> Option<&DeviceRef> {
        Some(&self.want)
    }
    fn offer(&mut self, devs: &[Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        if self.found.is_none() {
            let d = devices::find(&self.want, devs, devno_of);
            // An open container: what it holds.
            let d = match d {
                Some(c) if c.is_luks() => devs.iter().find(|h| h.slaves.contains(&c.name)),
                d => d,
            };
            match d {
                Some(d) if d.complete == Some(false) && !self.degraded => self.incomplete = Some(d.clone()),
                d => self.found = d.cloned(),
            }
        }
        self.found.is_some()
    }
}

/// How long to wait.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// `rootwait`: no timeout.
    pub forever: bool,
    /// How long to wait, in milliseconds (ignored when `forever`).
    pub timeout_ms: u64,
}

/// The waiters that were not satisfied in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// The timeout that ran out, in whole seconds.
    pub seconds: u64,
    /// What was not found: each unsatisfied waiter's description (those that can be given up on
    /// left out).
    pub missing: Vec<String>,
}

impl core::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "waited {} s for {}", self.seconds, self.missing.join(" and "))
    }
}

/// Offer the devices to every waiter; true when each is satisfied or has given up
/// (`elapsed` ms after the start).
fn offer_all(waiters: &mut [&mut dyn Waiter], devs: &[Dev], p: &dyn Platform, elapsed: u64) -> bool {
    let devno_of = |path: &str| p.devno_of(path);
    let mut all = true;
    for w in waiters.iter_mut() {
        let done = w.offer(devs, &devno_of);
        all &= done || w.gives_up_after_ms().is_some_and(|ms| elapsed >= ms);
    }
    all
}

/// Wait until every waiter is satisfied, or the time is up.
pub fn run(p: &mut dyn Platform, waiters: &mut [&mut dyn Waiter], t: Timing) -> Result<(), TimedOut> {
    let start = p.now_ms();
    let polling = !p.has_events();
    let (mut walk, mut last_walk) = (true, start);
    let (mut rescan, mut scanned_at) = (true, start);
    let mut devs: Vec<Dev> = Vec::new();
    let mut last_count = 0usize;
    let mut last_stack: Option<u64> = None;
    loop {
        if rescan || polling || p.now_ms() - scanned_at >= 1000 {
            devs = p.scan();
            scanned_at = p.now_ms();
            rescan = false;
            if offer_all(waiters, &devs, p, scanned_at - start) {
                return Ok(());
            }
        }
        let loaded = if walk || polling || p.now_ms() - last_walk > 1000 {
            last_walk = p.now_ms();
            p.coldplug()
        } else if p.loading() {
            p.settle()
        } else {
            0
        };
        if walk {
            p.debug(&format!("coldplug: {loaded} modules"));
        }
        walk = false;
        if (loaded > 0 || p.loading()) && p.block_count() != devs.len() {
            rescan = true;
            continue; // new block devices: look again before anything else
        }
        if devs.len() != last_count || loaded > 0 || last_stack.is_none_or(|at| p.now_ms() - at > 2000) {
            last_count = devs.len();
            last_stack = Some(p.now_ms());
            let before = p.block_count();
            let wanted: Vec<&DeviceRef> = waiters.iter().filter_map(|w| w.wants()).collect();
            if p.assemble(&devs, &wanted) || p.block_count() != before {
                rescan = true;
                continue;
            }
        }
        if !t.forever && p.now_ms() - start > t.timeout_ms {
            let missing = waiters
                .iter_mut()
                .filter(|w| w.gives_up_after_ms().is_none())
                .filter_map(|w| (!w.offer(&devs, &|_| None)).then(|| w.describe()))
                .collect();
            return Err(TimedOut { seconds: t.timeout_ms / 1000, missing });
        }
        if polling {
            p.sleep_ms(100);
        } else {
            (rescan, walk) = p.events(100);
            // A storm of uevents (a flapping link, a driver reprobing in a loop): the events of
            // the next STORM_GAP_MS after a probe are taken together, so that probes and
            // coldplug walks come at most that often, whatever the rate of events.
            let mut since = p.now_ms().saturating_sub(scanned_at.max(last_walk));
            while (rescan || walk) && since < STORM_GAP_MS {
                let (r, w) = p.events(STORM_GAP_MS - since);
                (rescan, walk) = (rescan || r, walk || w);
                let now = p.now_ms().saturating_sub(scanned_at.max(last_walk));
                if now == since {
                    break; // a platform whose clock did not move: no busy wait
                }
                since = now;
            }
        }
    }
}

/// The shortest time between two probes that uevents bring (ms).
const STORM_GAP_MS: u64 = 20;

#[cfg(test)]
#[path = "wait_tests.rs"]
mod tests;
