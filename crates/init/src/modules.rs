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
    pub db: ModuleDb,
    /// Parameters by module name: the configuration's (modprobe.d), then the command line's.
    options: Vec<(String, String)>,
    /// Modules never loaded: modprobe.d's blacklist, `modprobe.blacklist=`, `rd.driver.blacklist=`.
    blacklist: Vec<String>,
    pub loaded: BTreeSet<String>,
    pub failed: BTreeMap<String, Errno>,
    pub seen_aliases: BTreeSet<String>,
    /// Why the image's module tables could not be read, if they could not.
    pub table_error: Option<String>,
}

impl Modules {
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
        let loaded = sys::read_string("/proc/modules")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        let (failed, seen_aliases) = (BTreeMap::new(), BTreeSet::new());
        Modules { dir, db, options, blacklist, loaded, failed, seen_aliases, table_error }
    }

    /// Load a name, alias or modalias with everything it needs. Returns how many modules
    /// were newly loaded.
    pub fn load(&mut self, what: &str, log: &mut Log) -> usize {
        self.load_many(&[what.to_string()], log)
    }

    /// The modules `whats` resolve to that are neither loaded, known to fail, nor blacklisted.
    fn to_load(&self, whats: &[String]) -> Vec<String> {
        let mut pending: Vec<String> = Vec::new();
        for w in whats {
            if let Resolved::Modules(list) = self.db.resolve(w) {
                for m in list {
                    let skip = self.loaded.contains(&m) || self.failed.contains_key(&m) || self.blacklist.contains(&m);
                    if !skip && !pending.contains(&m) {
                        pending.push(m);
                    }
                }
            }
        }
        pending
    }

    /// Whether `m` must wait for one of `busy` (a dependency or a pre-softdep).
    fn waits(&self, m: &str, busy: &dyn Fn(&str) -> bool) -> bool {
        self.db.deps.get(m).is_some_and(|v| v.iter().any(|d| busy(d)))
            || self.db.softdeps.get(m).is_some_and(|(pre, _)| pre.iter().any(|s| busy(&leanrd_kmod::normalize(s))))
    }

    /// Load several names/aliases with everything they need, concurrently: each module
    /// starts (finit_module in a forked child) as soon as its dependencies and pre-softdeps
    /// are done, not when a whole "wave" is, so a slow module (ext4) does not hold back an
    /// unrelated chain (virtio_pci, then virtio_blk).
    pub fn load_many(&mut self, whats: &[String], log: &mut Log) -> usize {
        let mut pending = self.to_load(whats);
        let mut n = 0;
        let mut running: Vec<(i32, String)> = Vec::new();
        while !pending.is_empty() || !running.is_empty() {
            let busy = |d: &str| pending.iter().any(|p| p == d) || running.iter().any(|(_, r)| r == d);
            let mut ready: Vec<String> = pending.iter().filter(|m| !self.waits(m, &busy)).cloned().collect();
            if ready.is_empty() && running.is_empty() {
                ready.push(pending[0].clone()); // a cycle: break it in list order
            }
            pending.retain(|m| !ready.contains(m));
            let alone = ready.len() == 1 && running.is_empty();
            let mut done: Vec<(String, Result<(), Errno>)> = Vec::new();
            for m in ready {
                let Some(path) = self.db.paths.get(&m).map(|r| format!("{}/{r}", self.dir)) else {
                    done.push((m, Err(Errno::NOENT)));
                    continue;
                };
                let opts = self.options_for(&m);
                // One module with nothing else to overlap: no need for a child.
                match if alone { Err(Errno::AGAIN) } else { sys::fork() } {
                    Ok(0) => sys::exit(finit(&path, &opts).err().map_or(0, |e| e.raw_os_error())),
                    Ok(pid) => running.push((pid, m)),
                    Err(_) => done.push((m, finit(&path, &opts))),
                }
            }
            if done.is_empty() && !running.is_empty() {
                done.extend(reap_one(&mut running));
            }
            for (m, r) in done {
                match r {
                    Ok(()) => {
                        let opts = self.options_for(&m);
                        log.step(&if opts.is_empty() { format!("loaded {m}") } else { format!("loaded {m} {opts}") });
                        self.loaded.insert(m);
                        n += 1;
                    }
                    Err(e) => {
                        log.step(&format!("{m}: {}", strerror(e)));
                        self.failed.insert(m, e);
                    }
                }
            }
        }
        n
    }

    fn options_for(&self, module: &str) -> String {
        let norm = leanrd_kmod::normalize;
        self.options.iter().filter(|(m, _)| norm(m) == module).map(|(_, o)| o.as_str()).collect::<Vec<_>>().join(" ")
    }

    /// Load drivers for every device in sysfs not seen before. Returns modules loaded.
    pub fn coldplug(&mut self, log: &mut Log) -> usize {
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
                    let a = a.trim().to_string();
                    if !a.is_empty() && self.seen_aliases.insert(a.clone()) {
                        aliases.push(a);
                    }
                }
            }
        }
        self.load_many(&aliases, log)
    }

    /// Load drivers for modaliases that uevents brought, unless seen before.
    pub fn load_aliases(&mut self, aliases: Vec<String>, log: &mut Log) -> usize {
        let new: Vec<String> = aliases.into_iter().filter(|a| self.seen_aliases.insert(a.clone())).collect();
        self.load_many(&new, log)
    }
}

/// Wait for one of the `running` children; the module it loaded and how it went. Another
/// child (a helper's orphan, reparented to PID 1) is just reaped.
fn reap_one(running: &mut Vec<(i32, String)>) -> Vec<(String, Result<(), Errno>)> {
    match sys::wait_any() {
        Some((pid, st)) => match running.iter().position(|(p, _)| *p == pid) {
            Some(i) => {
                let (_, m) = running.swap_remove(i);
                // The child's exit status is the errno (0: loaded).
                let r = match sys::exit_code(st) {
                    Some(0) => Ok(()),
                    Some(e) => Err(Errno::from_raw_os_error(e)),
                    None => Err(Errno::CHILD),
                };
                vec![(m, r)]
            }
            None => Vec::new(),
        },
        None => running.drain(..).map(|(_, m)| (m, Err(Errno::CHILD))).collect(),
    }
}

/// Load one module file with its parameters (an already loaded module counts as loaded).
fn finit(path: &str, options: &str) -> Result<(), Errno> {
    let f = sys::open(path)?;
    let params = alloc::ffi::CString::new(options).map_err(|_| Errno::INVAL)?;
    match rustix::system::finit_module(&f, &params, 0) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The kernel's module helper: `/init -q -- MODULE...`. Exits 1, as modprobe does, when a
/// module is unknown or fails to load.
pub fn helper_main(args: &[String], options: Vec<(String, String)>, blacklist: Vec<String>) -> i32 {
    let names: Vec<String> = args.iter().skip(1).filter(|a| !a.starts_with('-')).cloned().collect();
    let kver = sys::read_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let mut mods = Modules::open(&kver, options, blacklist);
    let mut log = Log::quiet();
    let missing = names.iter().any(|n| matches!(mods.db.resolve(n), Resolved::Missing));
    mods.load_many(&names, &mut log);
    if mods.failed.is_empty() && !missing { 0 } else { 1 }
}
