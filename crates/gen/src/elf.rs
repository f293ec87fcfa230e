//! Shared-library resolution as glibc's ld.so does it, without running anything: the ELF
//! interpreter, DT_NEEDED through DT_RPATH (only without DT_RUNPATH; inherited from the
//! loading objects), DT_RUNPATH, `$ORIGIN`, /etc/ld.so.cache and the default directories.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::Path;

use goblin::elf::Elf;
use leanrd_archive::{Context, Result, bail};

use crate::plan::{Plan, clean, host_path};

/// Entries of /etc/ld.so.cache for this machine's ABI (x86-64: flags 0x0303).
#[derive(Debug, Default, Clone)]
pub struct LdCache {
    /// Library name (soname) → path of the file, the first entry for a name winning, as in ld.so.
    pub libs: HashMap<String, String>,
}

const CACHE_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const FLAGS_X86_64: i32 = 0x0303;

impl LdCache {
    /// Parse the `glibc-ld.so.cache1.1` format (the only one glibc ≥ 2.32 writes).
    /// Hand-written: no crate reads it; the layout is from glibc's dl-cache.h.
    pub fn parse(b: &[u8]) -> Result<LdCache> {
        if !b.starts_with(CACHE_MAGIC) || b.len() < 48 {
            bail!("not a glibc-ld.so.cache1.1 file");
        }
        let u32_at = |o: usize| -> Result<u32> {
            Ok(u32::from_le_bytes(b.get(o..o + 4).context("truncated ld.so.cache")?.try_into().unwrap()))
        };
        let n = u32_at(20)? as usize;
        let mut libs = HashMap::new();
        for i in 0..n {
            let e = 48 + i * 24;
            let flags = u32_at(e)? as i32;
            let key = u32_at(e + 4)? as usize;
            let value = u32_at(e + 8)? as usize;
            if flags != FLAGS_X86_64 {
                continue;
            }
            let s = |o: usize| -> Option<String> {
                let end = b.get(o..)?.iter().position(|&c| c == 0)?;
                Some(String::from_utf8_lossy(&b[o..o + end]).into_owned())
            };
            if let (Some(k), Some(v)) = (s(key), s(value)) {
                // The first entry for a name wins, as in ld.so.
                libs.entry(k).or_insert(v);
            }
        }
        Ok(LdCache { libs })
    }

    /// The cache of the system at `sysroot`; empty when it has none or it cannot be read.
    pub fn load(sysroot: &Path) -> LdCache {
        fs::read(host_path(sysroot, "/etc/ld.so.cache")).ok().and_then(|b| LdCache::parse(&b).ok()).unwrap_or_default()
    }
}

pub(crate) const DEFAULT_DIRS: &[&str] =
    &["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"];

/// Where ld.so finds the DT_NEEDED name `lib`: the DT_RPATH chain, DT_RUNPATH, ld.so.cache,
/// the default directories, in that order. `exists` says whether a path is there: in the
/// host's tree (the generator) or in an image (the boot proof).
pub(crate) fn search(
    lib: &str,
    rpath: &[String],
    runpath: &[String],
    cache: &LdCache,
    exists: impl Fn(&str) -> bool,
) -> Option<String> {
    if let Some(p) = rpath.iter().chain(runpath).map(|d| format!("{d}/{lib}")).find(|p| exists(p)) {
        return Some(p);
    }
    if let Some(p) = cache.libs.get(lib).filter(|p| exists(p)) {
        return Some(p.clone());
    }
    DEFAULT_DIRS.iter().map(|d| format!("{d}/{lib}")).find(|p| exists(p))
}

/// What ld.so reads of an ELF object.
pub(crate) struct Info {
    pub interp: Option<String>,
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
    pub soname: Option<String>,
    /// e_machine: the architecture it is built for.
    pub machine: u16,
}

/// An ELF file's e_machine (its architecture), from its header; None when it is no ELF.
pub(crate) fn machine_of(data: &[u8]) -> Option<u16> {
    (data.starts_with(b"\x7fELF") && data.len() >= 20).then(|| {
        // EI_DATA (byte 5): 1 little-endian, 2 big-endian.
        let b = [data[18], data[19]];
        if data[5] == 2 { u16::from_be_bytes(b) } else { u16::from_le_bytes(b) }
    })
}

/// An e_machine's name, as the kernel's architectures are known.
pub(crate) fn machine_name(m: u16) -> String {
    match m {
        3 => "i386".into(),
        8 => "mips".into(),
        20 => "powerpc".into(),
        21 => "powerpc64".into(),
        22 => "s390".into(),
        40 => "arm".into(),
        62 => "x86-64".into(),
        183 => "aarch64".into(),
        243 => "riscv".into(),
        258 => "loongarch".into(),
        m => format!("ELF machine {m}"),
    }
}

/// None for a file that is not ELF (a script).
pub(crate) fn info(data: &[u8], path: &Path) -> Result<Option<Info>> {
    if !data.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    let elf = Elf::parse(data).with_context(|| format!("{}: bad ELF file", path.display()))?;
    let split = |v: &[&str]| -> Vec<String> {
        v.iter().flat_map(|s| s.split(':')).filter(|s| !s.is_empty()).map(str::to_string).collect()
    };
    Ok(Some(Info {
        interp: elf.interpreter.map(str::to_string),
        needed: elf.libraries.iter().map(|s| s.to_string()).collect(),
        rpath: split(&elf.rpaths),
        runpath: split(&elf.runpaths),
        soname: elf.soname.map(str::to_string),
        machine: elf.header.e_machine,
    }))
}

/// Resolves binaries and their libraries into a [`Plan`].
pub struct Resolver<'a> {
    /// The plan the binaries and libraries are added to.
    pub plan: &'a mut Plan,
    cache: LdCache,
    done: BTreeSet<String>,
}

/// Where binary `name` is in the system at `sysroot`: an absolute path as it is, else the
/// first of [`leanrd_contract::SEARCH_PATH`] that has it.
pub(crate) fn which(sysroot: &Path, name: &str) -> Option<String> {
    if name.starts_with('/') {
        return host_path(sysroot, name).exists().then(|| name.to_string());
    }
    leanrd_contract::SEARCH_PATH.iter().map(|d| format!("{d}/{name}")).find(|p| host_path(sysroot, p).is_file())
}

/// Where a library (a soname, or a path under a library directory such as
/// `cryptsetup/libcryptsetup-token-systemd-tpm2.so`) is in the system, as ld.so's cache and
/// default directories find it.
pub(crate) fn which_library(sysroot: &Path, lib: &str) -> Option<String> {
    let exists = |p: &str| host_path(sysroot, p).exists();
    if let Some(p) = LdCache::load(sysroot).libs.get(lib).filter(|p| exists(p)) {
        return Some(p.clone());
    }
    DEFAULT_DIRS.iter().map(|d| format!("{d}/{lib}")).find(|p| exists(p))
}

impl<'a> Resolver<'a> {
    /// A resolver adding to `plan`, with the ld.so cache of the plan's sysroot.
    pub fn new(plan: &'a mut Plan) -> Resolver<'a> {
        let cache = LdCache::load(&plan.sysroot);
        Resolver { plan, cache, done: BTreeSet::new() }
    }

    /// Find a binary by name in the usual directories (or take an absolute path).
    pub fn which(&self, name: &str) -> Option<String> {
        which(&self.plan.sysroot, name)
    }

    /// Add a binary (image path as on the host) with everything it loads.
    pub fn add_binary(&mut self, path: &str) -> Result<()> {
        self.add_object(path, &[], &mut BTreeSet::new())
    }

    /// `names`: what the process has loaded so far, by soname and by the name it was asked
    /// for; ld.so does not search again for a DT_NEEDED it already has (systemd's
    /// libsystemd-core needs libsystemd-shared, found only through the executable's RUNPATH).
    fn add_object(&mut self, path: &str, inherited_rpath: &[String], names: &mut BTreeSet<String>) -> Result<()> {
        let real = self.plan.add_host_path(path)?;
        if !self.done.insert(real.clone()) {
            return Ok(());
        }
        let hp = host_path(&self.plan.sysroot, &real);
        let data = fs::read(&hp).with_context(|| format!("{}: cannot read", hp.display()))?;
        let Some(inf) = info(&data, &hp)? else { return Ok(()) };
        names.extend(inf.soname.clone());
        let origin = real.rsplit_once('/').map(|(d, _)| if d.is_empty() { "/" } else { d }).unwrap_or("/").to_string();
        let expand = |dirs: &[String]| -> Vec<String> {
            dirs.iter().map(|d| clean(&d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin))).collect()
        };
        if let Some(interp) = &inf.interp {
            names.insert(interp.rsplit('/').next().unwrap_or(interp).to_string());
            self.add_object(interp, &[], names)?;
        }
        // DT_RPATH applies only when there is no DT_RUNPATH, and is inherited by what this
        // object loads; DT_RUNPATH applies to this object's own DT_NEEDED only.
        let mut rpath: Vec<String> = Vec::new();
        if inf.runpath.is_empty() {
            rpath.extend(expand(&inf.rpath));
            rpath.extend(inherited_rpath.iter().cloned());
        }
        let runpath = expand(&inf.runpath);
        // This object's needs are found before what they need in turn (ld.so goes breadth
        // first).
        let mut next = Vec::new();
        for lib in &inf.needed {
            if names.contains(lib) {
                continue;
            }
            let found = if lib.contains('/') { Some(lib.clone()) } else { self.find(lib, &rpath, &runpath) };
            match found {
                Some(p) => next.push(p),
                None => bail!("{}: needs {lib}, which is not found", hp.display()),
            }
            names.insert(lib.clone());
        }
        for p in next {
            self.add_object(&p, if inf.runpath.is_empty() { &rpath } else { &[] }, names)?;
        }
        Ok(())
    }

    fn find(&self, lib: &str, rpath: &[String], runpath: &[String]) -> Option<String> {
        search(lib, rpath, runpath, &self.cache, |p| host_path(&self.plan.sysroot, p).exists())
    }

    /// The interpreter and libraries of a file that is not itself placed at its host path
    /// (e.g. /init).
    pub(crate) fn add_dependencies_of(&mut self, file: &Path) -> Result<()> {
        let data = fs::read(file).with_context(|| format!("{}: cannot read", file.display()))?;
        let Some(inf) = info(&data, file)? else { return Ok(()) };
        let mut names = BTreeSet::new();
        if let Some(interp) = &inf.interp {
            self.add_object(interp, &[], &mut names)?;
        }
        for lib in &inf.needed {
            match self.find(lib, &[], &[]) {
                Some(p) => self.add_object(&p, &[], &mut names)?,
                None => bail!("{}: needs {lib}, which is not found", file.display()),
            }
        }
        Ok(())
    }

    /// Libraries loaded with dlopen that a binary needs but does not list (e.g. libgcc_s
    /// for pthread_cancel): add them if present.
    pub fn add_library_if_present(&mut self, lib: &str) -> Result<()> {
        if let Some(p) = self.find(lib, &[], &[]) {
            self.add_object(&p, &[], &mut BTreeSet::new())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_an_elf_file_is_built_for() {
        let this = fs::read("/proc/self/exe").unwrap();
        let want = if cfg!(target_arch = "x86_64") { 62 } else { 183 };
        assert_eq!(machine_of(&this), Some(want));
        assert_eq!(info(&this, Path::new("self")).unwrap().unwrap().machine, want);
        let mut arm = this[..64].to_vec();
        arm[18..20].copy_from_slice(&183u16.to_le_bytes());
        assert_eq!(machine_of(&arm).map(machine_name).as_deref(), Some("aarch64"));
        assert_eq!(machine_of(b"#!/bin/sh\n"), None);
        assert_eq!(machine_of(b"\x7fELF"), None, "too short for a header");
    }

    #[test]
    fn reads_this_machines_cache() {
        let b = match fs::read("/etc/ld.so.cache") {
            Ok(b) => b,
            Err(_) => return,
        };
        let c = LdCache::parse(&b).unwrap();
        assert!(c.libs.get("libc.so.6").is_some_and(|p| p.ends_with("/libc.so.6")), "{:?}", c.libs.get("libc.so.6"));
    }

    #[test]
    fn rejects_other_files() {
        assert!(LdCache::parse(b"ld.so-1.7.0\0").is_err());
        assert!(LdCache::parse(b"glibc-ld.so.cache1.1").is_err());
    }
}
