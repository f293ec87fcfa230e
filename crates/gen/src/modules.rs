//! A target kernel's modules: its tables, the files of a resolved module set (decompressed
//! at build time when the kernel cannot do it), their firmware, and the filtered tables the
//! image carries for /init.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::Path;

use goblin::elf::Elf;
use leanrd_archive::error::{Context, Result, bail};
use leanrd_compress::Format;
use leanrd_kmod::{ModuleDb, Resolved, Tables, split_compression};

use crate::modprobe::ModprobeConf;
use crate::plan::{Item, Plan, host_path};

/// The target kernel.
pub struct Kernel {
    pub kver: String,
    /// Image (and host) path of its module directory, e.g. /lib/modules/6.1.0-56-amd64.
    pub dir: String,
    pub db: ModuleDb,
    /// CONFIG_MODULE_DECOMPRESS: the kernel loads .ko.xz/.ko.zst/.ko.gz itself.
    pub decompresses: bool,
}

fn read_opt(p: &Path) -> Result<Vec<u8>> {
    match fs::read(p) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("{}: cannot read", p.display())),
    }
}

impl Kernel {
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
        let hd = host_path(sysroot, &dir);
        let tables = Tables::read(|f| read_opt(&hd.join(f)))?;
        let db = ModuleDb::parse(&tables).with_context(|| format!("{}: bad module table", hd.display()))?;
        let config = [format!("/boot/config-{kver}"), format!("{dir}/build/.config"), format!("{dir}/config")]
            .iter()
            .find_map(|p| fs::read_to_string(host_path(sysroot, p)).ok())
            .unwrap_or_default();
        let decompresses = config.lines().any(|l| l.trim() == "CONFIG_MODULE_DECOMPRESS=y");
        Ok(Kernel { kver: kver.to_string(), dir, db, decompresses })
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

    /// Add the module files of `set` (and their firmware) to the plan. Compressed modules
    /// are decompressed into `tmp` unless the kernel does it. Returns warnings.
    pub fn add_to_plan(
        &self,
        plan: &mut Plan,
        set: &BTreeSet<String>,
        tmp: &Path,
        conf: &ModprobeConf,
    ) -> Result<Vec<String>> {
        let mut warnings = Vec::new();
        let mut firmware = BTreeSet::new();
        for name in set {
            let Some(rel) = self.db.paths.get(name) else { continue };
            let image_path = format!("{}/{rel}", self.dir);
            let hp = host_path(&plan.sysroot, &image_path);
            let compressed = match split_compression(rel).1 {
                Some(".xz") => Some((".xz", Format::Xz)),
                Some(".zst") => Some((".zst", Format::Zstd)),
                Some(ext) => Some((ext, Format::Gzip)),
                None => None,
            };
            let data = match compressed {
                Some((ext, fmt)) if !self.decompresses => {
                    let raw = fs::read(&hp).with_context(|| format!("{}: cannot read", hp.display()))?;
                    let mut out = Vec::new();
                    leanrd_compress::decoder(fmt, &raw[..])?
                        .read_to_end(&mut out)
                        .with_context(|| format!("{}: cannot decompress", hp.display()))?;
                    let plain = image_path.trim_end_matches(ext).to_string();
                    let dst = tmp.join(plain.trim_start_matches('/'));
                    fs::create_dir_all(dst.parent().expect("has parent"))?;
                    fs::write(&dst, &out).with_context(|| format!("{}: cannot write", dst.display()))?;
                    plan.put(&plain, Item::File { src: dst, mode: 0o644 });
                    out
                }
                _ => {
                    plan.add_host_path(&image_path)?;
                    let raw = fs::read(&hp).with_context(|| format!("{}: cannot read", hp.display()))?;
                    match compressed {
                        // Kept compressed for the kernel; decompressed here only for its modinfo.
                        Some((_, fmt)) => {
                            let mut out = Vec::new();
                            leanrd_compress::decoder(fmt, &raw[..])?.read_to_end(&mut out)?;
                            out
                        }
                        None => raw,
                    }
                }
            };
            for fw in modinfo(&data, "firmware") {
                firmware.insert(fw);
            }
        }
        for fw in firmware {
            let found = ["", ".zst", ".xz"].iter().map(|ext| format!("/lib/firmware/{fw}{ext}")).find(|p| {
                let h = host_path(&plan.sysroot, p);
                h.exists()
            });
            match found {
                Some(p) => {
                    plan.add_host_path(&p)?;
                }
                None => warnings.push(format!("firmware {fw} not found under /lib/firmware")),
            }
        }
        self.add_tables(plan, set, conf);
        Ok(warnings)
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
        if self.decompresses { rel.clone() } else { split_compression(rel).0.to_string() }
    }
}

/// Values of `key` in an ELF module's .modinfo section.
pub fn modinfo(data: &[u8], key: &str) -> Vec<String> {
    let Ok(elf) = Elf::parse(data) else { return Vec::new() };
    let mut out = Vec::new();
    for sh in &elf.section_headers {
        if elf.shdr_strtab.get_at(sh.sh_name) != Some(".modinfo") {
            continue;
        }
        let (a, b) = (sh.sh_offset as usize, (sh.sh_offset + sh.sh_size) as usize);
        let Some(sec) = data.get(a..b) else { continue };
        let prefix = format!("{key}=");
        for rec in sec.split(|&c| c == 0) {
            if let Ok(s) = std::str::from_utf8(rec)
                && let Some(v) = s.strip_prefix(&prefix)
            {
                out.push(v.to_string());
            }
        }
    }
    out
}

/// The running kernel's release (the default target).
pub fn running_kernel() -> Result<String> {
    let p = "/proc/sys/kernel/osrelease";
    let r = fs::read_to_string(p).with_context(|| format!("{p}: cannot read the running kernel's release (use -k)"))?;
    let r = r.trim().to_string();
    if r.is_empty() {
        bail!("{p} is empty: cannot tell the running kernel's release (use -k)");
    }
    Ok(r)
}
