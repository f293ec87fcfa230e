//! The wait loop's timing rules, against a scripted machine.

use super::*;
use crate::devices::tests::{dev, fs};
use alloc::string::ToString;
use alloc::vec;

/// A scripted machine: devices appear at given times (announced by a uevent, or not),
/// a clock that moves only when the loop sleeps or waits, and counters.
#[derive(Default)]
struct Fake {
    now: u64,
    /// (time, device, announced by a uevent).
    script: Vec<(u64, Dev, bool)>,
    /// A LUKS container's UUID and the device unlocking it makes.
    luks: Option<(String, Dev)>,
    unlocked: bool,
    events: bool,
    /// Members of the one btrfs file system in the script.
    btrfs_members: usize,
    scans: usize,
    walks: usize,
    assembles: usize,
    /// A uevent storm: an event every millisecond, none of them the root's.
    storm: bool,
    /// Drivers that coldplug starts load until then (ms): a slow controller's probe.
    loads_until: u64,
    settles: usize,
}

impl Fake {
    fn present(&self) -> Vec<Dev> {
        let mut v: Vec<Dev> = self.script.iter().filter(|(t, _, _)| *t <= self.now).map(|x| x.1.clone()).collect();
        if self.unlocked {
            v.push(self.luks.as_ref().unwrap().1.clone());
        }
        v
    }
}

impl Fake {
    /// Drivers load (the clock moves) until they are done, a block device appears, or a
    /// second has passed (the live Platform's bound).
    fn load_on(&mut self) -> usize {
        if self.now >= self.loads_until {
            return 0;
        }
        let next = self.script.iter().map(|x| x.0).filter(|t| *t > self.now).min();
        self.now = next.unwrap_or(u64::MAX).min(self.loads_until).min(self.now + 1_000);
        1
    }
}

impl Platform for Fake {
    fn now_ms(&self) -> u64 {
        self.now
    }
    fn sleep_ms(&mut self, ms: u64) {
        self.now += ms;
    }
    fn scan(&mut self) -> Vec<Dev> {
        self.scans += 1;
        let mut v = self.present();
        let here = v.iter().filter(|d| d.probe.fstype.as_deref() == Some("btrfs")).count();
        for d in v.iter_mut().filter(|d| d.probe.fstype.as_deref() == Some("btrfs")) {
            d.complete = Some(here == self.btrfs_members);
        }
        v
    }
    fn block_count(&self) -> usize {
        self.present().len()
    }
    fn coldplug(&mut self) -> usize {
        self.walks += 1;
        self.load_on()
    }
    fn loading(&self) -> bool {
        self.now < self.loads_until
    }
    fn settle(&mut self) -> usize {
        self.settles += 1;
        self.load_on()
    }
    fn assemble(&mut self, devs: &[Dev], wanted: &[&DeviceRef]) -> bool {
        self.assembles += 1;
        let Some((uuid, _)) = &self.luks else { return false };
        let here = devs.iter().any(|d| d.is_luks() && d.probe.uuid.as_deref() == Some(uuid));
        if here && !self.unlocked && wanted.iter().any(|w| w.is_uuid(uuid)) {
            self.unlocked = true;
            return true;
        }
        false
    }
    fn has_events(&self) -> bool {
        self.events
    }
    fn events(&mut self, ms: u64) -> (bool, bool) {
        let before = self.now;
        if self.storm {
            self.now += 1;
            return (true, true);
        }
        // The wait ends at the first event in the window.
        let next = self.script.iter().filter(|(t, _, ev)| *ev && *t > before && *t <= before + ms).map(|x| x.0).min();
        self.now = next.unwrap_or(before + ms);
        (next.is_some(), false)
    }
    fn devno_of(&self, _: &str) -> Option<(u32, u32)> {
        None
    }
    fn debug(&mut self, _: &str) {}
}

fn disk(name: &str, uuid: &str) -> Dev {
    dev(name, (254, 0), None, 0, fs("ext4", uuid, None, None, None))
}

fn root(uuid: &str) -> DeviceWaiter {
    DeviceWaiter::new("root", DeviceRef::Uuid(uuid.into()))
}

const T30: Timing = Timing { forever: false, timeout_ms: 30_000 };

#[test]
fn a_device_that_is_there_is_found_at_once() {
    let mut f = Fake { events: true, script: vec![(0, disk("vda", "r"), false)], ..Fake::default() };
    let mut w = root("r");
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert_eq!((f.now, f.scans, f.walks), (0, 1, 0));
    assert_eq!(w.found.unwrap().name, "vda");
}

#[test]
fn the_root_is_found_while_slow_drivers_still_load() {
    // Coldplug's drivers take 5 s (a controller probing empty ports); the root's disk,
    // another driver's, appears after 300 ms, announced by a uevent.
    let mut f =
        Fake { events: true, script: vec![(300, disk("vda", "r"), true)], loads_until: 5_000, ..Fake::default() };
    let mut w = root("r");
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert_eq!(f.now, 300, "found when it appeared, not when every driver was loaded");
    assert_eq!(w.found.unwrap().name, "vda");
}

#[test]
fn a_driver_that_never_finishes_loading_does_not_hold_back_the_timeout() {
    let mut f = Fake { events: true, loads_until: u64::MAX, ..Fake::default() };
    let mut w = root("r");
    let e = run(&mut f, &mut [&mut w], Timing { forever: false, timeout_ms: 5_000 }).unwrap_err();
    assert_eq!(e.to_string(), "waited 5 s for root=UUID=r");
    assert!((5_000..=6_200).contains(&f.now), "{}", f.now);
    assert!(f.walks + f.settles >= 3, "the loads went on between looks at the clock: {}", f.walks + f.settles);
}

#[test]
fn a_uevent_brings_a_probe_and_idle_ticks_do_not() {
    let mut f = Fake { events: true, script: vec![(2_450, disk("vda", "r"), true)], ..Fake::default() };
    let mut w = root("r");
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert_eq!(f.now, 2_450, "found when the uevent came");
    // The start, the once-a-second fallback at 1 s and 2 s, the uevent: not 25 ticks.
    assert_eq!(f.scans, 4);
    assert!(f.walks <= 3, "{}", f.walks);
}

#[test]
fn a_device_without_a_uevent_is_found_by_the_fallback_probe() {
    let mut f = Fake { events: true, script: vec![(1_500, disk("vda", "r"), false)], ..Fake::default() };
    let mut w = root("r");
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert!((2_000..=2_100).contains(&f.now), "{}", f.now);
}

#[test]
fn the_timeout_ends_the_wait_and_names_what_was_missing() {
    let mut f = Fake { events: true, script: vec![(0, disk("vda", "other"), false)], ..Fake::default() };
    let mut w = root("r");
    let e = run(&mut f, &mut [&mut w], Timing { forever: false, timeout_ms: 5_000 }).unwrap_err();
    assert_eq!(e.to_string(), "waited 5 s for root=UUID=r");
    assert!((5_000..=5_200).contains(&f.now), "{}", f.now);
    assert!(f.scans <= 7, "about one probe a second: {}", f.scans);
}

/// A uevent storm (a flapping device, a driver reprobing in a loop): every event is answered,
/// and the wait still ends at its timeout with the diagnosis, never spinning past it.
#[test]
fn a_uevent_storm_still_ends_at_the_timeout() {
    let mut f = Fake { events: true, storm: true, script: vec![(0, disk("vda", "other"), false)], ..Fake::default() };
    let mut w = root("r");
    let e = run(&mut f, &mut [&mut w], Timing { forever: false, timeout_ms: 5_000 }).unwrap_err();
    assert_eq!(e.to_string(), "waited 5 s for root=UUID=r");
    assert!((5_000..=5_200).contains(&f.now), "{}", f.now);
    // One probe and one coldplug walk per 20 ms at most, not one per event (5,000 before).
    assert!(f.scans <= 260 && f.walks <= 260, "{} probes, {} walks in 5 s", f.scans, f.walks);
    // And the root that comes in the middle of it is found.
    let mut f = Fake { events: true, storm: true, script: vec![(2_000, disk("vda", "r"), false)], ..Fake::default() };
    let mut w = root("r");
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert!((2_000..=3_100).contains(&f.now), "{}", f.now);
    assert_eq!(w.found.unwrap().name, "vda");
}

#[test]
fn rootwait_waits_past_the_timeout() {
    let mut f = Fake { events: true, script: vec![(45_000, disk("vda", "r"), true)], ..Fake::default() };
    let mut w = root("r");
    run(&mut f, &mut [&mut w], Timing { forever: true, timeout_ms: 30_000 }).unwrap();
    assert_eq!(f.now, 45_000);
}

#[test]
fn without_uevents_the_loop_polls() {
    let mut f = Fake { events: false, script: vec![(350, disk("vda", "r"), false)], ..Fake::default() };
    let mut w = root("r");
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert_eq!(f.now, 400);
    assert_eq!(f.scans, 5);
}

#[test]
fn a_luks_container_named_as_root_is_unlocked_and_what_it_holds_is_the_root() {
    let mut c = disk("vda", "L");
    c.probe.fstype = Some(crate::probe::LUKS.into());
    let mut inner = dev("dm-0", (253, 0), None, 0, fs("ext4", "inner", None, None, None));
    inner.slaves = vec!["vda".into()];
    let mut f = Fake { events: true, script: vec![(0, c, false)], luks: Some(("L".into(), inner)), ..Fake::default() };
    let mut w = root("L");
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert!(f.unlocked);
    assert_eq!(w.found.unwrap().name, "dm-0");
    assert_eq!(f.scans, 2, "probed again right after the unlock");
}

#[test]
fn a_locked_container_is_not_the_root() {
    let mut c = disk("vda", "L");
    c.probe.fstype = Some(crate::probe::LUKS.into());
    let mut f = Fake { events: true, script: vec![(0, c, false)], ..Fake::default() };
    let mut w = root("L");
    run(&mut f, &mut [&mut w], Timing { forever: false, timeout_ms: 2_000 }).unwrap_err();
    assert!(w.found.is_none());
}

fn btrfs_member(name: &str) -> Dev {
    dev(name, (254, 0), None, 0, fs("btrfs", "B", None, None, None))
}

#[test]
fn a_btrfs_root_waits_for_all_its_members_unless_degraded() {
    let script = vec![(0, btrfs_member("vda"), false), (1_300, btrfs_member("vdb"), true)];
    let mut f = Fake { events: true, script: script.clone(), btrfs_members: 2, ..Fake::default() };
    let mut w = root("B");
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert_eq!(f.now, 1_300, "found when the second member came");
    // It never comes: the timeout says what is missing.
    let mut f = Fake { events: true, script: script[..1].to_vec(), btrfs_members: 2, ..Fake::default() };
    let mut w = root("B");
    let e = run(&mut f, &mut [&mut w], Timing { forever: false, timeout_ms: 2_000 }).unwrap_err();
    assert!(e.to_string().contains("/dev/vda is btrfs with members missing"), "{e}");
    // rootflags=degraded: the member that is there will do.
    let mut f = Fake { events: true, script: script[..1].to_vec(), btrfs_members: 2, ..Fake::default() };
    let mut w = root("B");
    w.degraded = true;
    run(&mut f, &mut [&mut w], T30).unwrap();
    assert_eq!((f.now, w.found.unwrap().name.as_str()), (0, "vda"));
}

#[test]
fn every_waiter_must_be_satisfied() {
    let mut f = Fake {
        events: true,
        script: vec![(0, disk("vda", "r"), false), (700, disk("vdb", "u"), true)],
        ..Fake::default()
    };
    let (mut r, mut u) = (root("r"), DeviceWaiter::new("usr", DeviceRef::Uuid("u".into())));
    run(&mut f, &mut [&mut r, &mut u], T30).unwrap();
    assert_eq!(f.now, 700);
    assert_eq!((r.found.unwrap().name, u.found.unwrap().name), ("vda".to_string(), "vdb".to_string()));
}

/// A waiter that gives up after 5 s (a resume device).
struct Optional(DeviceWaiter);

impl Waiter for Optional {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn wants(&self) -> Option<&DeviceRef> {
        self.0.wants()
    }
    fn offer(&mut self, devs: &[Dev], devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
        self.0.offer(devs, devno_of)
    }
    fn gives_up_after_ms(&self) -> Option<u64> {
        Some(5_000)
    }
}

#[test]
fn a_waiter_that_gives_up_holds_the_boot_only_so_long() {
    // There at once with the root: no wait at all.
    let script = vec![(0, disk("vda", "r"), false), (0, disk("vdb", "s"), false)];
    let mut f = Fake { events: true, script, ..Fake::default() };
    let (mut r, mut s) = (root("r"), Optional(DeviceWaiter::new("resume", DeviceRef::Uuid("s".into()))));
    run(&mut f, &mut [&mut r, &mut s], T30).unwrap();
    assert_eq!(f.now, 0);
    assert!(s.0.found.is_some());
    // Never there: the boot goes on after about 5 s, not the 30 s timeout, and is not an error.
    let mut f = Fake { events: true, script: vec![(0, disk("vda", "r"), false)], ..Fake::default() };
    let (mut r, mut s) = (root("r"), Optional(DeviceWaiter::new("resume", DeviceRef::Uuid("s".into()))));
    run(&mut f, &mut [&mut r, &mut s], T30).unwrap();
    assert!((5_000..=6_100).contains(&f.now), "{}", f.now);
    assert!(s.0.found.is_none() && r.found.is_some());
    // A root that never comes still times out, naming only the root.
    let mut f = Fake { events: true, ..Fake::default() };
    let (mut r, mut s) = (root("r"), Optional(DeviceWaiter::new("resume", DeviceRef::Uuid("s".into()))));
    let e = run(&mut f, &mut [&mut r, &mut s], Timing { forever: false, timeout_ms: 8_000 }).unwrap_err();
    assert_eq!(e.to_string(), "waited 8 s for root=UUID=r");
}
