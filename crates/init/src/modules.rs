//! Kernel modules: the image's tables, loading (concurrently, in dependency order, with
//! options), coldplug (every device's modalias in sysfs) and the kernel's module helper.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use leanrd_kmod::{ModuleDb, Resolved, Tables};
use rustix::fs::FileType;

use crate::log::Log;
use crate::sys::{self, Errno, strerror};

/// The module tables in the image and what has been loaded.
pub struct Modules {
    dir: String,
    /// The image's module tables under /lib/modules/KVER (dependencies, aliases, soft
    /// dependencies); empty when they could not be read (see `table_error`).
    pub db: ModuleDb,
    /// Parameters by module name: the configuration's (modprobe.d), then the command line's.
    options: Vec<(String, String)>,
    /// Modules never loaded: modprobe.d's blacklist, `modprobe.blacklist=`, `rd.driver.blacklist=`.
    blacklist: Vec<String>,
    /// The modules in the kernel (normalised names): those /proc/modules listed at start, and
    /// each loaded since.
    pub loaded: BTreeSet<String>,
    /// Modules that did not load, with why (see [`load_error`]).
    pub failed: BTreeMap<String, String>,
    /// Every modalias offered so far (coldplug's and uevents'), each acted on once.
    pub seen_aliases: BTreeSet<String>,
    /// Load drivers for every device (`rd.leanrd.coldplug=all`), not only [`boot_device`]s.
    pub coldplug_all: bool,
    /// Load network drivers too: the root (or `rd.neednet=1`) needs the network.
    pub net: bool,
    /// Load optical drives' drivers too (a live root on a CD).
    pub optical: bool,
    /// Why the image's module tables could not be read, if they could not.
    pub table_error: Option<String>,
    /// The longest [`Modules::load_many`] waits (ms) before it goes on without the loads
    /// still running (a driver whose initialisation hangs); `u64::MAX`: as long as they take,
    /// as modprobe does (the kernel's module helper).
    pub wait_ms: u64,
    /// Modules a bounded wait went on without (their initialisation has not returned): not
    /// waited for again.
    given_up: BTreeSet<String>,
    /// Modules to load, waiting for a dependency to be done.
    queue: Vec<String>,
    /// Modules loading, each in a child (its pid).
    running: Vec<(i32, String)>,
    /// Drivers not started when the boot found what it waited for ([`Modules::defer`]):
    /// queued again by the next coldplug, else left to the system.
    deferred: Vec<String>,
    /// When each load in progress began (ms since boot): the step log gives each load's
    /// duration, so `leanrd analyze` can draw it as a bar in its lane.
    began: Vec<(String, u64)>,
}

impl Modules {
    /// The tables under /lib/modules/`kver`, with the modules already loaded. `options`:
    /// (module, `PARAM=VALUE`) pairs, passed in order when the module loads (a later value
    /// wins); `blacklist`: modules never to load. A table that cannot be read leaves the
    /// tables empty and says why in `table_error`.
    pub fn open(kver: &str, options: Vec<(String, String)>, blacklist: Vec<String>) -> Modules {
        let dir = format!("/lib/modules/{kver}");
        let tables = Tables::read(|f| match sys::read(&format!("{dir}/{f}")) {
            Ok(b) => Ok(b),
            Err(Errno::NOENT) => Ok(Vec::new()),
            Err(e) => Err(format!("{dir}/{f}: {}", strerror(e))),
        });
        let (db, table_error) = match tables.and_then(|t| ModuleDb::parse(&t).map_err(|e| format!("{dir}/{e}"))) {
            Ok(db) => (db, None),
            Err(e) => (ModuleDb::default(), Some(format!("{e}: no modules can be loaded"))),
        };
        // Inserted one by one: collecting into a set sorts first, and a sort is kilobytes of
        // /init.
        let mut loaded = BTreeSet::new();
        for l in sys::read_string("/proc/modules").unwrap_or_default().lines() {
            if let Some(m) = l.split_whitespace().next() {
                loaded.insert(m.to_string());
            }
        }
        let (failed, seen_aliases) = (BTreeMap::new(), BTreeSet::new());
        Modules {
            dir,
            db,
            options,
            blacklist,
            loaded,
            failed,
            seen_aliases,
            coldplug_all: false,
            net: false,
            optical: false,
            table_error,
            wait_ms: u64::MAX,
            given_up: BTreeSet::new(),
            queue: Vec::new(),
            running: Vec::new(),
            deferred: Vec::new(),
            began: Vec::new(),
        }
    }

    /// Load a name, alias or modalias with everything it needs. Returns how many modules
    /// were newly loaded.
    pub fn load(&mut self, what: &str, log: &mut Log) -> usize {
        self.load_many(&[what.to_string()], log)
    }

    /// Queue the modules `whats` resolve to that are neither loaded, known to fail,
    /// blacklisted nor already on their way; returns every module they need that is not
    /// done yet (queued now or before, or loading).
    fn enqueue(&mut self, whats: &[String]) -> Vec<String> {
        let mut wanted: Vec<String> = Vec::new();
        for w in whats {
            if let Resolved::Modules(list) = self.db.resolve(w) {
                for m in list {
                    let skip = self.loaded.contains(&m) || self.failed.contains_key(&m) || self.blacklist.contains(&m);
                    if skip || wanted.contains(&m) {
                        continue;
                    }
                    if !self.in_progress(&m) {
                        self.deferred.retain(|d| *d != m);
                        self.queue.push(m.clone());
                    }
                    wanted.push(m);
                }
            }
        }
        wanted
    }

    /// Whether `m` is queued or loading.
    fn in_progress(&self, m: &str) -> bool {
        self.queue.iter().any(|q| q == m) || self.running.iter().any(|(_, r)| r == m)
    }

    /// Whether loads are queued or running (begun by [`Modules::coldplug`] or
    /// [`Modules::add_aliases`], which may return before they end).
    pub fn loading(&self) -> bool {
        !self.queue.is_empty() || !self.running.is_empty()
    }

    /// Whether `m` must wait for one in progress (a dependency or a pre-softdep).
    fn waits(&self, m: &str) -> bool {
        let busy = |d: &str| self.in_progress(d);
        self.db.deps.get(m).is_some_and(|v| v.iter().any(|d| busy(d)))
            || self.db.softdeps.get(m).is_some_and(|(pre, _)| pre.iter().any(|s| busy(&leanrd_kmod::normalize(s))))
    }

    /// Load several names/aliases with everything they need, and wait until those are done,
    /// or [`Modules::wait_ms`] have passed: then those still loading (a driver whose
    /// initialisation hangs) are named and go on in the background, and so do the modules
    /// that wait for them; the boot goes on, and its own timeout says what is missing.
    /// Loads run concurrently: each module starts (finit_module in a child) as soon as its
    /// dependencies and pre-softdeps are done, not when a whole "wave" is, so a slow module
    /// (ext4) does not hold back an unrelated chain (virtio_pci, then virtio_blk). Loads
    /// begun before (coldplug's) go on meanwhile, and may still be running on return.
    pub fn load_many(&mut self, whats: &[String], log: &mut Log) -> usize {
        let mut wanted = self.enqueue(whats);
        // One given up on before is not waited for again (its load goes on).
        wanted.retain(|m| !self.given_up.contains(m));
        let bounded = self.wait_ms != u64::MAX;
        let end = sys::now_ms().saturating_add(self.wait_ms);
        let mut n = 0;
        while wanted.iter().any(|m| self.in_progress(m)) {
            // A bounded wait never loads in this process: a finit_module that does not return
            // could not be left behind. It looks for ended loads every millisecond instead
            // (quiet children send no signal, and waitpid has no timeout).
            let (loaded, ended) = self.step(!bounded, log);
            n += loaded;
            if !bounded {
                continue;
            }
            if sys::now_ms() >= end {
                let late: Vec<String> = wanted.iter().filter(|m| self.in_progress(m)).cloned().collect();
                if !late.is_empty() {
                    log.step(&format!(
                        "still loading after {} s, going on without: {}",
                        self.wait_ms / 1000,
                        late.join(" ")
                    ));
                    self.given_up.extend(late);
                }
                break;
            }
            if !ended {
                sys::sleep_ms(1);
            }
        }
        n
    }

    /// The modules still loading (started and not ended): named in a diagnosis.
    pub fn still_loading(&self) -> Vec<&str> {
        self.running.iter().map(|(_, m)| m.as_str()).collect()
    }

    /// The modules queued and not started, each waiting for one in progress (a dependency).
    pub fn waiting(&self) -> Vec<&str> {
        self.queue.iter().map(String::as_str).collect()
    }

    /// Go on with the loads in progress until they are done, `ms` have passed, or `stop`
    /// (asked after each load that ends) says to look again: a block device appeared, which
    /// may be the root. So a slow driver of no use to the boot (an IDE controller probing
    /// its ports) does not hold the root back, and one whose initialisation hangs does not
    /// hold the boot's timeout back: they go on loading in the background. Returns how many
    /// modules were loaded meanwhile.
    pub fn settle(&mut self, ms: u64, log: &mut Log, stop: &mut dyn FnMut() -> bool) -> usize {
        let end = sys::now_ms().saturating_add(ms);
        let mut n = 0;
        while self.loading() {
            let (loaded, ended) = self.step(false, log);
            n += loaded;
            if (ended && stop()) || sys::now_ms() >= end {
                break;
            }
            if !ended {
                // Quiet children send no signal, and waitpid has no timeout: a short poll.
                sys::sleep_ms(2);
            }
        }
        n
    }

    /// The boot has what it waited for: drivers queued but not started (coldplug's, for
    /// devices the boot turned out not to need: a second controller, a card reader) are not
    /// started now, so that the root's own modules (its file system's) have the CPU. The
    /// next coldplug queues them again (a /usr the root's fstab names may need one); the
    /// root's udev loads them otherwise. Those running go on.
    pub fn defer(&mut self, log: &mut Log) {
        if self.queue.is_empty() {
            return;
        }
        log.step(&format!("found what the boot waited for; drivers not started yet: {}", self.queue.join(" ")));
        self.deferred.append(&mut self.queue);
    }

    /// Before leaving the initramfs: wait for the loads still running, up to `ms`. One that
    /// has not ended by then (a driver whose initialisation hangs) is named and left to the
    /// kernel: the boot goes on without it.
    pub fn finish(&mut self, ms: u64, log: &mut Log) {
        self.settle(ms, log, &mut || false);
        if self.loading() {
            let names: Vec<&str> =
                self.running.iter().map(|(_, m)| m.as_str()).chain(self.queue.iter().map(|m| m.as_str())).collect();
            log.step(&format!("still loading after {} s, left to the kernel: {}", ms / 1000, names.join(" ")));
            self.queue.clear();
        }
        if !self.deferred.is_empty() {
            log.step(&format!("left to the system: {}", self.deferred.join(" ")));
            self.deferred.clear();
        }
    }

    /// Start every queued module whose dependencies are done, then take the end of a load:
    /// waiting for one when `hang`, else one that has ended if any. Returns how many modules
    /// were loaded, and whether any load ended (or failed to start).
    fn step(&mut self, hang: bool, log: &mut Log) -> (usize, bool) {
        let mut ready: Vec<String> = self.queue.iter().filter(|m| !self.waits(m)).cloned().collect();
        if ready.is_empty() && self.running.is_empty() && !self.queue.is_empty() {
            ready.push(self.queue[0].clone()); // a cycle: break it in list order
        }
        self.queue.retain(|m| !ready.contains(m));
        // One module with nothing else to overlap, and the caller waits: no need for a child.
        let alone = hang && ready.len() == 1 && self.running.is_empty();
        let mut done: Vec<(String, Result<(), String>)> = Vec::new();
        for m in ready {
            let Some(path) = self.path_of(&m) else {
                done.push((m, Err(String::from("not in the image's modules.dep"))));
                continue;
            };
            let opts = self.options_for(&m);
            self.began.push((m.clone(), sys::now_ms()));
            match if alone { Err(Errno::AGAIN) } else { sys::fork_quiet() } {
                Ok(0) => sys::exit(finit(&path, &opts).err().map_or(0, |e| e.raw_os_error())),
                Ok(pid) => self.running.push((pid, m)),
                // A wait that must end loads in no other process than a child.
                Err(e) if !hang => done.push((m, Err(format!("its load could not start: fork: {}", sys::strerror(e))))),
                Err(_) => done.push((m, finit(&path, &opts).map_err(|e| load_error(&path, e)))),
            }
        }
        if done.is_empty() {
            done = self.reap(hang);
        }
        let ended = !done.is_empty();
        let mut n = 0;
        for (m, r) in done {
            let took = match self.began.iter().position(|(b, _)| *b == m) {
                Some(i) => sys::now_ms().saturating_sub(self.began.swap_remove(i).1),
                None => 0,
            };
            match r {
                Ok(()) => {
                    let opts = self.options_for(&m);
                    log.step(&leanrd_contract::steplog::module_loaded(&m, &opts, took));
                    self.loaded.insert(m);
                    n += 1;
                }
                Err(why) => {
                    log.step(&format!("{m}: {why}"));
                    self.failed.insert(m, why);
                }
            }
        }
        (n, ended)
    }

    /// The image's file for module `m`.
    fn path_of(&self, m: &str) -> Option<String> {
        self.db.paths.get(m).map(|r| format!("{}/{r}", self.dir))
    }

    /// The loads that ended: one, waiting for it, when `hang`; none when none has ended
    /// (and not `hang`). The child's exit status is the errno (0: loaded).
    fn reap(&mut self, hang: bool) -> Vec<(String, Result<(), String>)> {
        if self.running.is_empty() {
            return Vec::new();
        }
        match sys::wait_quiet(hang) {
            Ok(Some((pid, st))) => {
                let Some(i) = self.running.iter().position(|(p, _)| *p == pid) else { return Vec::new() };
                let (_, m) = self.running.swap_remove(i);
                let path = self.path_of(&m).unwrap_or_default();
                let r = match sys::exit_code(st) {
                    Some(0) => Ok(()),
                    Some(e) => Err(load_error(&path, Errno::from_raw_os_error(e))),
                    None => Err(load_error(&path, Errno::CHILD)),
                };
                vec![(m, r)]
            }
            Ok(None) => Vec::new(),
            Err(_) => {
                let lost: Vec<(i32, String)> = self.running.drain(..).collect();
                lost.into_iter()
                    .map(|(_, m)| (m, Err(String::from("its load was lost (no child to wait for)"))))
                    .collect()
            }
        }
    }

    fn options_for(&self, module: &str) -> String {
        let norm = leanrd_kmod::normalize;
        self.options.iter().filter(|(m, _)| norm(m) == module).map(|(_, o)| o.as_str()).collect::<Vec<_>>().join(" ")
    }

    /// Load drivers for every device in sysfs not seen before, as [`Modules::settle`] does.
    /// Returns modules loaded.
    pub fn coldplug(&mut self, ms: u64, log: &mut Log, stop: &mut dyn FnMut() -> bool) -> usize {
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
                    aliases.push(a.trim().to_string());
                }
            }
        }
        let deferred = core::mem::take(&mut self.deferred);
        self.enqueue(&deferred);
        self.add_aliases(aliases, log);
        self.settle(ms, log, stop)
    }

    /// Queue drivers for devices' modaliases (coldplug's, or uevents'), each once, for the
    /// devices the boot may need (all with `rd.leanrd.coldplug=all`); [`Modules::settle`]
    /// loads them.
    pub fn add_aliases(&mut self, aliases: Vec<String>, log: &mut Log) {
        let mut new = Vec::new();
        for a in aliases {
            if a.is_empty() || !self.seen_aliases.insert(a.clone()) {
                continue;
            }
            if self.coldplug_all
                || boot_device(&a)
                || self.net && network_device(&a)
                || self.optical && optical_device(&a)
            {
                new.push(a);
            } else if matches!(self.db.resolve(&a), Resolved::Modules(_)) {
                log.step(&format!("left to the system: {a}"));
            }
        }
        self.enqueue(&new);
    }
}

/// The value of `key` (two hex digits) in a modalias such as `pci:v..d..bc01sc08i02`.
fn field<'a>(alias: &'a str, key: &str) -> Option<&'a str> {
    let i = alias.find(key)? + key.len();
    alias.get(i..i + 2)
}

/// Whether a device, by its modalias, is one the boot may need: storage (with the buses and
/// controllers it sits on) or input (a keyboard for a passphrase). Optical drives, tapes,
/// enclosures, network, display, sound, cameras are left to the real root's udev, which
/// loads their drivers anyway: time in the initramfs spent on them is spent for nothing.
/// A deny list, not an allow list: a device of a class not named here is loaded, so an
/// unusual storage path is never left out.
pub fn boot_device(alias: &str) -> bool {
    if let Some(rest) = alias.strip_prefix("scsi:t-0x") {
        // Disks, optical memory (MO), reduced-command-set disks, zoned disks.
        return matches!(rest.get(..2), Some("00" | "07" | "0e" | "14"));
    }
    if alias.starts_with("pci:") {
        // Network, display, multimedia, communication, wireless, satellite, encryption,
        // signal processing, accelerators, instrumentation.
        let not = ["02", "03", "04", "07", "0d", "0f", "10", "11", "12", "13"];
        return !field(alias, "bc").is_some_and(|c| not.iter().any(|n| c.eq_ignore_ascii_case(n)));
    }
    if alias.starts_with("usb:") {
        // Interface classes: audio, communication, still image, printer, CDC data, smart
        // card, content security, video, healthcare, audio/video, billboard, diagnostic,
        // wireless.
        let not = ["01", "02", "06", "07", "0a", "0b", "0d", "0e", "0f", "10", "11", "dc", "e0"];
        return !field(alias, "ic").is_some_and(|c| not.iter().any(|n| c.eq_ignore_ascii_case(n)));
    }
    !["sound:", "snd:", "hdaudio:", "ac97:", "video4linux:", "ieee80211:", "bluetooth:", "net:"]
        .iter()
        .any(|p| alias.starts_with(p))
}

/// Whether a device, by its modalias, is a network interface: PCI class 02, and USB CDC
/// (communication and data) and RNDIS (wireless controller) interfaces; virtio network
/// devices and vendor-specific USB adapters pass [`boot_device`] already.
pub fn network_device(alias: &str) -> bool {
    let is = |key: &str, classes: &[&str]| {
        field(alias, key).is_some_and(|c| classes.iter().any(|n| c.eq_ignore_ascii_case(n)))
    };
    if alias.starts_with("pci:") {
        return is("bc", &["02"]);
    }
    if alias.starts_with("usb:") {
        return is("ic", &["02", "0a", "e0"]);
    }
    alias.starts_with("net:")
}

/// Whether a device, by its modalias, is an optical drive (SCSI type 05: sr_mod), which a
/// live root on a CD needs.
pub fn optical_device(alias: &str) -> bool {
    alias.strip_prefix("scsi:t-0x").is_some_and(|r| r.get(..2) == Some("05"))
}

/// `finit_module`'s flag for a compressed file, decompressed by the kernel (include/uapi/
/// linux/module.h; Linux 5.17+ with CONFIG_MODULE_DECOMPRESS). Not in rustix or linux-raw-sys.
const MODULE_INIT_COMPRESSED_FILE: i32 = 4;

/// Load one module file with its parameters (an already loaded module counts as loaded). A
/// compressed file (`.ko.xz`, `.ko.zst`, `.ko.gz`) is handed to the kernel to decompress.
fn finit(path: &str, options: &str) -> Result<(), Errno> {
    let f = sys::open(path)?;
    let params = alloc::ffi::CString::new(options).map_err(|_| Errno::INVAL)?;
    let flags = if leanrd_kmod::split_compression(path).1.is_some() { MODULE_INIT_COMPRESSED_FILE } else { 0 };
    match rustix::system::finit_module(&f, &params, flags) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Why a module file did not load, in words: the C library's message and errno, and what it
/// means for a module (the kernel's log says more; this is what a user can act on).
pub fn load_error(path: &str, e: Errno) -> String {
    let base = format!("{} (errno {})", strerror(e), e.raw_os_error());
    let why = match (leanrd_kmod::split_compression(path).1, e) {
        // Without CONFIG_MODULE_DECOMPRESS the kernel answers EOPNOTSUPP; before 5.17 the
        // flag is unknown (EINVAL); a format other than the configured one is EINVAL too.
        (Some(c), Errno::OPNOTSUPP | Errno::INVAL) => format!(
            "this kernel cannot decompress {} modules (CONFIG_MODULE_DECOMPRESS with CONFIG_MODULE_COMPRESS_{}): \
             rebuild the image, leanrd then stores them decompressed",
            c.suffix,
            c.format.to_ascii_uppercase()
        ),
        (_, Errno::NOEXEC) => String::from("not a module this kernel can load (not ELF, or built for another kernel)"),
        (_, Errno::KEYREJECTED | Errno::NOKEY | Errno::BADMSG) => {
            String::from("its signature is missing or not trusted, and this kernel enforces module signatures")
        }
        (_, Errno::NOENT) => String::from("the file is not in the image"),
        _ => return base,
    };
    format!("{base}: {why}")
}

/// The kernel's module helper: `/init -q -- MODULE...`. Exits 1, as modprobe does, when a
/// module is unknown or fails to load, or (after `wait_ms`) has not finished loading.
pub fn helper_main(args: &[String], options: Vec<(String, String)>, blacklist: Vec<String>, wait_ms: u64) -> i32 {
    let names: Vec<String> = args.iter().skip(1).filter(|a| !a.starts_with('-')).cloned().collect();
    let kver = sys::read_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let mut mods = Modules::open(&kver, options, blacklist);
    mods.wait_ms = wait_ms;
    let mut log = Log::quiet();
    let missing = names.iter().any(|n| matches!(mods.db.resolve(n), Resolved::Missing));
    mods.load_many(&names, &mut log);
    if mods.failed.is_empty() && !missing && !mods.loading() { 0 } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::{Errno, Modules, boot_device, load_error};
    use crate::log::Log;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    #[test]
    fn drivers_not_started_when_the_root_is_found_are_deferred_not_lost() {
        let mut m = Modules::open("leanrd-no-such-kernel", Vec::new(), Vec::new());
        for n in ["ata_piix", "libata", "ext4"] {
            m.db.paths.insert(n.to_string(), format!("kernel/{n}.ko"));
        }
        m.db.deps.insert("ata_piix".to_string(), alloc::vec!["libata".to_string()]);
        let mut log = Log::quiet();
        m.enqueue(&["ata_piix".to_string()]);
        assert!(m.loading());
        m.defer(&mut log);
        assert!(!m.loading(), "nothing started after the root was found");
        // The root's file system's module is loaded; a deferred one asked for again is too.
        m.load_many(&["ext4".to_string(), "libata".to_string()], &mut log);
        assert!(m.failed.contains_key("ext4") && m.failed.contains_key("libata"), "{:?}", m.failed);
        assert_eq!(m.deferred, ["ata_piix"]);
        // Leaving the initramfs: what is left goes to the system, not loaded.
        m.finish(1_000, &mut log);
        assert!(m.deferred.is_empty() && !m.loading());
        assert!(!m.failed.contains_key("ata_piix"));
    }

    #[test]
    fn a_failed_load_says_what_to_do() {
        let zst = load_error("/lib/modules/k/kernel/fs/ext4/ext4.ko.zst", Errno::OPNOTSUPP);
        assert!(zst.contains("cannot decompress .zst modules") && zst.contains("CONFIG_MODULE_COMPRESS_ZSTD"), "{zst}");
        assert!(load_error("/m/ext4.ko.xz", Errno::INVAL).contains("CONFIG_MODULE_COMPRESS_XZ"));
        let elf = load_error("/m/ext4.ko", Errno::NOEXEC);
        assert!(elf.starts_with("Exec format error (errno 8): not a module"), "{elf}");
        assert!(load_error("/m/ext4.ko.xz", Errno::KEYREJECTED).contains("enforces module signatures"));
        assert_eq!(load_error("/m/ext4.ko", Errno::NOMEM), "Cannot allocate memory (errno 12)");
    }

    #[test]
    fn storage_and_input_devices_are_loaded_at_boot_others_left_to_the_system() {
        let boot = [
            "scsi:t-0x00",                                           // a disk
            "scsi:t-0x0e",                                           // RBC
            "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00", // virtio-blk
            "pci:v00008086d00007010sv00001AF4sd00001100bc01sc01i80", // PIIX IDE
            "pci:v00001B36d0000000Dsv00001AF4sd00001100bc0Csc03i30", // xHCI
            "pci:v00008086d00009D2Fsv00001028sd000007E6bc08sc05i01", // SD host controller
            "usb:v0781p5581d0100dc00dsc00dp00ic08isc06ip50in00",     // USB mass storage
            "usb:v046DpC31Cd6400dc00dsc00dp00ic03isc01ip01in00",     // USB keyboard
            "hid:b0003g0001v0000046Dp0000C31C",                      // HID
            "virtio:d00000002v00001AF4",                             // virtio block
            "platform:i8042",                                        // PS/2 keyboard
            "acpi:PNP0303:",                                         // keyboard controller
            "nvme:unknown",
        ];
        for a in boot {
            assert!(boot_device(a), "{a} must be loaded at boot");
        }
        let left = [
            "scsi:t-0x05",                                           // CD-ROM (sr_mod)
            "scsi:t-0x01",                                           // tape
            "scsi:t-0x0d",                                           // enclosure
            "pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00", // e1000
            "pci:v00001234d00001111sv00001AF4sd00001100bc03sc00i00", // VGA
            "pci:v00008086d00002668sv00001AF4sd00001100bc04sc03i00", // HD audio
            "usb:v046Dp0825d0012dcEFdsc02dp01ic0Eisc01ip00in00",     // webcam
            "usb:v0BDAp8153d3000dc00dsc00dp00ic02isc06ip00in00",     // USB network (CDC)
            "sound:card0",
        ];
        for a in left {
            assert!(!boot_device(a), "{a} must be left to the system");
        }
    }
}
