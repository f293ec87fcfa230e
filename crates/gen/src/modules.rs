//! A target kernel's modules: its tables, its configuration, the files of a resolved module
//! set (stored decompressed at build time unless the strategy keeps them compressed and the
//! kernel decompresses that format), their firmware, and the filtered tables the image
//! carries for /init.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use goblin::elf::Elf;
use leanrd_archive::{Context, Result, bail};
use leanrd_compress::Format;
use leanrd_kmod::{ModuleCompression, ModuleDb, Resolved, Tables, split_compression};

use crate::gpu::FirmwareFilter;
use crate::kconfig::KernelConfig;
use crate::modcache::ModuleCache;
use crate::modprobe::ModprobeConf;
use crate::plan::{Item, Plan, host_path};

/// How compressed modules are stored in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModuleStrategy {
    /// Decompressed at build time, the whole image then compressed once: the kernel unpacks
    /// one stream (multi-threaded zstd at build, one fast decompression at boot).
    #[default]
    Decompress,
    /// As the distribution ships them, when the kernel decompresses that format itself (one
    /// module at a time, single-threaded, during the boot); decompressed otherwise.
    Keep,
}

impl ModuleStrategy {
    /// Every strategy, for parsing names and listing the known ones.
    pub const ALL: [ModuleStrategy; 2] = [ModuleStrategy::Decompress, ModuleStrategy::Keep];

    /// The strategy's name in leanrd.toml and on the command line (`decompress`, `keep`).
    pub fn name(self) -> &'static str {
        match self {
            ModuleStrategy::Decompress => "decompress",
            ModuleStrategy::Keep => "keep",
        }
    }
}

impl fmt::Display for ModuleStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModuleStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<ModuleStrategy, String> {
        ModuleStrategy::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = ModuleStrategy::ALL.iter().map(|m| m.name()).collect();
            format!("{s:?} is not a module strategy ({})", names.join(", "))
        })
    }
}

/// The target kernel.
pub struct Kernel {
    /// The kernel release (`6.1.0-28-amd64`).
    pub kver: String,
    /// Image (and host) path of its module directory, e.g. /lib/modules/6.1.0-56-amd64.
    pub dir: String,
    /// Its modules, aliases, dependencies and built-ins, from the module directory's modules.*
    /// tables.
    pub db: ModuleDb,
    /// Its configuration (unknown when none was found).
    pub config: KernelConfig,
    /// The module compression kept in the image (the kernel decompresses it and the strategy
    /// keeps it); every other compressed module is stored decompressed.
    pub kept: Option<ModuleCompression>,
    /// How its compressed modules are stored (see `Kernel::set_strategy`).
    pub strategy: ModuleStrategy,
}

fn read_opt(p: &Path) -> Result<Vec<u8>> {
    match fs::read(p) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("{}: cannot read", p.display())),
    }
}

/// The marker the kernel's sign-file appends after a module's signature
/// (include/linux/module_signature.h: MODULE_SIG_STRING).
pub const MODULE_SIG_STRING: &[u8] = b"~Module signature appended~\n";

/// The most a module may decompress to: far above any real one (the largest are tens of
/// MB), so a hostile image's module cannot fill memory.
pub const MODULE_MAX: u64 = 1 << 30;

/// What the boot proof needs to know of a module file as it is stored in an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleFile {
    /// The stored bytes' compression (by their magic; None: not compressed).
    pub compression: Option<Format>,
    /// Whether the (decompressed) content is an ELF object.
    pub elf: bool,
    /// The release in its `vermagic`, the first word.
    pub vermagic: Option<String>,
    /// Whether the (decompressed) content ends in a module signature.
    pub signed: bool,
    /// Why the stored bytes could not be decompressed, if they could not.
    pub corrupt: Option<String>,
    /// The firmware its `.modinfo` names.
    pub firmware: Vec<String>,
}

impl ModuleFile {
    /// Read a module's facts from its stored bytes and, when already at hand, its
    /// decompressed content.
    pub fn read(stored: &[u8], plain: Option<&[u8]>) -> ModuleFile {
        let compression = if stored.starts_with(b"\x7fELF") { None } else { Format::detect(stored) };
        let decompressed;
        let (plain, corrupt) = match (compression, plain) {
            (None, _) => (stored, None),
            (Some(_), Some(p)) => (p, None),
            (Some(f), None) => match leanrd_compress::decompress_vec_max(f, stored, MODULE_MAX) {
                Ok(d) => {
                    decompressed = d;
                    (&decompressed[..], None)
                }
                Err(e) => (&[][..], Some(format!("cannot decompress its {f}: {e}"))),
            },
        };
        ModuleFile::of_plain(compression, plain, corrupt)
    }

    fn of_plain(compression: Option<Format>, plain: &[u8], corrupt: Option<String>) -> ModuleFile {
        // One parse of the ELF for every .modinfo record the image needs.
        let info = modinfo_records(plain);
        let values = |key: &'static str| info.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.clone());
        let vermagic = values("vermagic").next().and_then(|v| v.split_whitespace().next().map(str::to_string));
        ModuleFile {
            compression,
            elf: plain.starts_with(b"\x7fELF"),
            vermagic,
            signed: plain.ends_with(MODULE_SIG_STRING),
            corrupt,
            firmware: values("firmware").collect(),
        }
    }
}

/// One module as it goes into the image: where it is stored and what it is.
struct Prepared {
    image_path: String,
    item: Item,
    file: ModuleFile,
    /// Stored decompressed (its file is in the cache or the build's scratch directory).
    transformed: bool,
}

impl Kernel {
    /// Kernel `kver` of the system at `sysroot`, its modules under /lib/modules/KVER or
    /// /usr/lib/modules/KVER; modules are stored decompressed until `Kernel::set_strategy`. An
    /// error when there is no modules.dep for it, or its module tables cannot be read or parsed.
    pub fn load(sysroot: &Path, kver: &str) -> Result<Kernel> {
        let dir = ["/lib/modules", "/usr/lib/modules"]
            .iter()
            .map(|d| format!("{d}/{kver}"))
            .find(|d| host_path(sysroot, d).join("modules.dep").exists())
            .with_context(|| {
                format!(
                    "no modules.dep for kernel {kver} under {} (run depmod?)",
                    host_path(sysroot, "/lib/modules").display()
                )
            })?;
        // Where the modules really are (/lib -> usr/lib: /usr/lib/modules/KVER): every file the
        // image gets for them, copied or made, goes there, so no planned directory is later
        // shadowed by the sysroot's symlink.
        let dir = crate::plan::real_path(sysroot, &dir)?;
        let hd = host_path(sysroot, &dir);
        let tables = Tables::read(|f| read_opt(&hd.join(f)))?;
        let db = ModuleDb::parse(&tables).with_context(|| format!("{}: bad module table", hd.display()))?;
        let config = KernelConfig::find(sysroot, kver, &dir);
        Ok(Kernel { kver: kver.to_string(), dir, db, config, kept: None, strategy: ModuleStrategy::default() })
    }

    /// Follow a module strategy: keep the format the kernel decompresses, or none.
    pub(crate) fn set_strategy(&mut self, s: ModuleStrategy) {
        self.strategy = s;
        self.kept = match s {
            ModuleStrategy::Keep => self.config.module_decompression(),
            ModuleStrategy::Decompress => None,
        };
    }

    /// Resolve names/aliases into a module set (dependencies and soft dependencies
    /// included). Unknown names are returned separately.
    pub fn resolve<'a>(&self, wanted: impl IntoIterator<Item = &'a str>) -> (BTreeSet<String>, Vec<String>) {
        let mut set = BTreeSet::new();
        let mut missing = Vec::new();
        for w in wanted {
            match self.db.resolve(w) {
                Resolved::Modules(m) => set.extend(m),
                Resolved::Builtin => {}
                Resolved::Missing => missing.push(w.to_string()),
            }
        }
        (set, missing)
    }

    /// Whether a module path is stored as it is (plain, or in the kept compression).
    fn stored_as_is(&self, rel: &str) -> bool {
        match split_compression(rel).1 {
            None => true,
            Some(c) => self.kept == Some(c),
        }
    }

    /// Read (and, unless kept, decompress into the cache or `tmp`) one module file.
    fn prepare(&self, sysroot: &Path, rel: &str, tmp: &Path, cache: Option<&ModuleCache>) -> Result<Prepared> {
        let image_path = format!("{}/{rel}", self.dir);
        let hp = host_path(sysroot, &image_path);
        let Some(c) = split_compression(rel).1 else {
            let raw = fs::read(&hp).with_context(|| format!("{}: cannot read", hp.display()))?;
            let file = ModuleFile::read(&raw, None);
            return Ok(Prepared { image_path, item: Item::File { src: hp, mode: 0o644 }, file, transformed: false });
        };
        let f = Format::from_name(c.format).expect("module compressions are formats (kconfig tests)");
        let md = fs::metadata(&hp).with_context(|| format!("{}: cannot stat", hp.display()))?;
        let plain_path = image_path.strip_suffix(c.suffix).expect("split by this suffix").to_string();
        let (src, plain_file) = match cache.and_then(|k| k.get(&hp, &md, f)) {
            Some(hit) => (hit.data, hit.file),
            None => {
                let raw = fs::read(&hp).with_context(|| format!("{}: cannot read", hp.display()))?;
                let d = leanrd_compress::decompress_vec_max(f, &raw, MODULE_MAX)
                    .with_context(|| format!("{}: cannot decompress ({f})", hp.display()))?;
                let file = ModuleFile::of_plain(None, &d, None);
                let src = match cache.and_then(|k| k.put(&hp, &md, f, &d, &file)) {
                    Some(cached) => cached,
                    None => {
                        let dst = tmp.join(plain_path.trim_start_matches('/'));
                        fs::create_dir_all(dst.parent().expect("has parent"))?;
                        fs::write(&dst, &d).with_context(|| format!("{}: cannot write", dst.display()))?;
                        dst
                    }
                };
                (src, file)
            }
        };
        if self.stored_as_is(rel) {
            // Kept as the distribution ships it; its content was decompressed (now or when
            // it was cached) by the format its name gives.
            let file = ModuleFile { compression: Some(f), ..plain_file };
            return Ok(Prepared { image_path, item: Item::File { src: hp, mode: 0o644 }, file, transformed: false });
        }
        Ok(Prepared {
            image_path: plain_path,
            item: Item::File { src, mode: 0o644 },
            file: plain_file,
            transformed: true,
        })
    }

    /// Add the module files of `set` (and their firmware: what `firmware` keeps of it) to the
    /// plan, read and decompressed on `threads` threads. Compressed modules are taken
    /// decompressed from `cache`, else decompressed into it (or into `tmp` without one), unless
    /// kept. Returns warnings.
    #[allow(clippy::too_many_arguments)]
    pub fn add_to_plan(
        &self,
        plan: &mut Plan,
        set: &BTreeSet<String>,
        tmp: &Path,
        cache: Option<&ModuleCache>,
        conf: &ModprobeConf,
        threads: u32,
        firmware: &FirmwareFilter,
    ) -> Result<Vec<String>> {
        let rels: Vec<(&String, &String)> = set.iter().filter_map(|n| Some((n, self.db.paths.get(n)?))).collect();
        let sysroot: PathBuf = plan.sysroot.clone();
        let threads = (threads.max(1) as usize).min(rels.len().max(1));
        // Decompressing xz is the cost here: spread it over the cores, larger files first
        // would balance better but sizes are not known without a stat each; striding does.
        let prepared: Vec<(&str, Result<Prepared>)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let (rels, sysroot) = (&rels, &sysroot);
                    s.spawn(move || {
                        rels.iter()
                            .skip(t)
                            .step_by(threads)
                            .map(|(name, rel)| (name.as_str(), self.prepare(sysroot, rel, tmp, cache)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().expect("a module worker panicked")).collect()
        });
        let mut warnings = Vec::new();
        // Firmware → the modules that list it (the display drivers' filtered by `firmware`).
        let mut wanted: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        // The modules that list firmware at all.
        let mut listing: BTreeSet<&str> = BTreeSet::new();
        for (name, p) in prepared {
            let p = p?;
            if !p.file.firmware.is_empty() {
                listing.insert(name);
            }
            for fw in &p.file.firmware {
                if firmware.keeps(name, fw) {
                    wanted.entry(fw.clone()).or_default().push(name);
                }
            }
            let real = match p.item {
                Item::File { src, .. } if p.transformed => plan.put(&p.image_path, Item::File { src, mode: 0o644 }),
                _ => plan.add_host_path(&p.image_path)?,
            };
            plan.modules.insert(real, p.file);
        }
        // The bytes of the firmware of drivers whose display device the table does not know.
        let unknown = firmware.unknown();
        let mut whole: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
        for (fw, modules) in &wanted {
            let found = ["", ".zst", ".xz"].iter().map(|ext| format!("/lib/firmware/{fw}{ext}")).find(|p| {
                let h = host_path(&plan.sysroot, p);
                h.exists()
            });
            match found {
                Some(p) => {
                    for (drv, _) in unknown.iter().filter(|(d, _)| modules.contains(&d.as_str())) {
                        let e = whole.entry(drv.as_str()).or_default();
                        e.0 += 1;
                        e.1 += fs::metadata(host_path(&plan.sysroot, &p)).map_or(0, |m| m.len());
                    }
                    plan.add_host_path(&p)?;
                }
                None => warnings.push(format!("firmware {fw} not found under /lib/firmware")),
            }
        }
        // A driver that lists no firmware (bochs, virtio-gpu) costs nothing: no word of it.
        for (drv, id) in unknown.iter().filter(|(d, _)| listing.contains(d.as_str())) {
            let (n, bytes) = whole.get(drv.as_str()).copied().unwrap_or_default();
            warnings.push(format!(
                "feature drm: the boot display's GPU {id} ({drv}) is not in leanrd's GPU firmware table: all of \
                 {drv}'s firmware goes in, {n} files, {:.2} MB",
                bytes as f64 / 1e6
            ));
        }
        self.add_tables(plan, set, conf);
        // /init reads /lib/modules/KVER: the sysroot's way there (its /lib symlink), else a
        // symlink to where the modules are.
        let init_dir = format!("/lib/modules/{}", self.kver);
        if init_dir != self.dir {
            let sysroot = plan.sysroot.clone();
            match crate::plan::real_path(&sysroot, &init_dir) {
                Ok(real) if real == self.dir => {
                    plan.add_host_path(&init_dir)?;
                }
                _ => {
                    plan.put(&init_dir, Item::Symlink { target: self.dir.clone() });
                }
            }
        }
        Ok(warnings)
    }

    /// How the modules of `set` are stored, for the build's notes (None when none of them
    /// is compressed on the sysroot).
    pub(crate) fn storage_note(&self, set: &BTreeSet<String>) -> Option<String> {
        let (mut kept, mut unpacked) = (BTreeMap::<&str, usize>::new(), BTreeMap::<&str, usize>::new());
        for rel in set.iter().filter_map(|n| self.db.paths.get(n)) {
            if let Some(c) = split_compression(rel).1 {
                *if self.stored_as_is(rel) { &mut kept } else { &mut unpacked }.entry(c.suffix).or_default() += 1;
            }
        }
        if kept.is_empty() && unpacked.is_empty() {
            return None;
        }
        let by_kernel = match self.config.module_decompression() {
            Some(c) => format!("kernel {} decompresses {} modules", self.kver, c.suffix),
            None if self.config.known() => format!("kernel {} decompresses no modules", self.kver),
            None => format!("kernel {}'s configuration is unknown", self.kver),
        };
        let list =
            |m: &BTreeMap<&str, usize>| m.iter().map(|(s, n)| format!("{n} .ko{s}")).collect::<Vec<_>>().join(", ");
        let mut parts = Vec::new();
        if !kept.is_empty() {
            parts.push(format!("{} kept compressed", list(&kept)));
        }
        if !unpacked.is_empty() {
            parts.push(format!("{} stored decompressed", list(&unpacked)));
        }
        Some(format!("modules: {} ({by_kernel}; --module-compression {})", parts.join(", "), self.strategy))
    }

    /// The module tables /init uses, limited to the modules in the image, with the target's
    /// modprobe.d `softdep` and `alias` lines for them (the same line formats).
    fn add_tables(&self, plan: &mut Plan, set: &BTreeSet<String>, conf: &ModprobeConf) {
        let mut tables = self.db.subset(set, |n| self.image_rel(n));
        for l in &conf.softdeps {
            tables.softdep.extend(format!("{l}\n").bytes());
        }
        for (pattern, m) in &conf.aliases {
            tables.alias.extend(format!("alias {pattern} {m}\n").bytes());
        }
        for (f, data) in tables.files() {
            plan.put(&format!("{}/{f}", self.dir), Item::Inline { data: data.to_vec(), mode: 0o644 });
        }
    }

    /// A module's path relative to the module directory, as it is in the image.
    fn image_rel(&self, name: &str) -> String {
        let rel = &self.db.paths[name];
        if self.stored_as_is(rel) { rel.clone() } else { split_compression(rel).0.to_string() }
    }
}

/// Values of `key` in an ELF module's .modinfo section.
pub fn modinfo(data: &[u8], key: &str) -> Vec<String> {
    modinfo_records(data).into_iter().filter(|(k, _)| k == key).map(|(_, v)| v).collect()
}

/// Every `key=value` record of an ELF module's .modinfo section.
fn modinfo_records(data: &[u8]) -> Vec<(String, String)> {
    let Ok(elf) = Elf::parse(data) else { return Vec::new() };
    let mut out = Vec::new();
    for sh in &elf.section_headers {
        if elf.shdr_strtab.get_at(sh.sh_name) != Some(".modinfo") {
            continue;
        }
        let (a, b) = (sh.sh_offset as usize, sh.sh_offset.saturating_add(sh.sh_size) as usize);
        let Some(sec) = data.get(a..b) else { continue };
        for rec in sec.split(|&c| c == 0) {
            if let Ok(s) = std::str::from_utf8(rec)
                && let Some((k, v)) = s.split_once('=')
            {
                out.push((k.to_string(), v.to_string()));
            }
        }
    }
    out
}

/// The running kernel's release (the default target).
pub(crate) fn running_kernel() -> Result<String> {
    let p = "/proc/sys/kernel/osrelease";
    let r = fs::read_to_string(p).with_context(|| format!("{p}: cannot read the running kernel's release (use -k)"))?;
    let r = r.trim().to_string();
    if r.is_empty() {
        bail!("{p} is empty: cannot tell the running kernel's release (use -k)");
    }
    Ok(r)
}
