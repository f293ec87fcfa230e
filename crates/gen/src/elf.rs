//! Shared-library resolution as glibc's ld.so does it, without running anything: the ELF
//! interpreter, DT_NEEDED through DT_RPATH (only without DT_RUNPATH; inherited from the
//! loading objects), DT_RUNPATH, `$ORIGIN`, /etc/ld.so.cache and the default directories.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use goblin::elf::Elf;
use leanrd_archive::{Context, Result, bail};

use crate::plan::{Plan, clean, host_path};

/// The ABIs leanrd resolves libraries for: each one's ld.so.cache flags and the directories
/// its ld.so searches last. The target's comes from its files (their ELF e_machine), never
/// from the build machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Abi {
    /// ELF e_machine.
    machine: u16,
    /// glibc's dl-cache.h: FLAG_ELF_LIBC6 with FLAG_X8664_LIB64 or FLAG_AARCH64_LIB64.
    cache_flags: i32,
    /// The system directories of Debian's multiarch ld.so for it, in its order.
    dirs: &'static [&'static str],
}

const ABIS: &[Abi] = &[
    Abi {
        machine: 62,
        cache_flags: 0x0303,
        dirs: &["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"],
    },
    Abi {
        machine: 183,
        cache_flags: 0x0a03,
        dirs: &["/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"],
    },
];

/// The ELF e_machine leanrd itself is built for.
pub(crate) const HOST_MACHINE: u16 = if cfg!(target_arch = "aarch64") { 183 } else { 62 };

/// Whether kernels of ELF machine `machine` load CPU microcode from an early initramfs
/// segment (the kernel's Documentation/arch/x86/microcode.rst): x86's (i386, x86-64) only.
pub(crate) fn early_microcode(machine: u16) -> bool {
    matches!(machine, 3 | 62)
}

fn abi(machine: u16) -> &'static Abi {
    ABIS.iter().find(|a| a.machine == machine).unwrap_or(&ABIS[0])
}

/// The directories ld.so searches last for objects of ELF machine `machine`.
pub(crate) fn default_dirs(machine: u16) -> &'static [&'static str] {
    abi(machine).dirs
}

/// Entries of /etc/ld.so.cache for one ABI (x86-64: flags 0x0303; aarch64: 0x0a03). A cache
/// lists the libraries of every architecture its system has, each with its flags.
#[derive(Debug, Default, Clone)]
pub struct LdCache {
    /// Library name (soname) → path of the file, the first entry for a name winning, as in ld.so.
    pub libs: HashMap<String, String>,
}

const CACHE_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";

impl LdCache {
    /// Parse the `glibc-ld.so.cache1.1` format (the only one glibc ≥ 2.32 writes): its x86-64
    /// entries. Hand-written: no crate reads it; the layout is from glibc's dl-cache.h.
    pub fn parse(b: &[u8]) -> Result<LdCache> {
        LdCache::parse_for(b, 62)
    }

    /// The entries of the cache `b` for objects of ELF machine `machine` (62 x86-64, 183
    /// aarch64).
    pub fn parse_for(b: &[u8], machine: u16) -> Result<LdCache> {
        let want = abi(machine).cache_flags;
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
            if flags != want {
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

    /// The cache of the system at `sysroot` for objects of ELF machine `machine`; empty when it
    /// has none or it cannot be read.
    pub fn load(sysroot: &Path, machine: u16) -> LdCache {
        fs::read(host_path(sysroot, "/etc/ld.so.cache"))
            .ok()
            .and_then(|b| LdCache::parse_for(&b, machine).ok())
            .unwrap_or_default()
    }
}

/// Whether the system at `sysroot` is of the architecture leanrd itself is built for (the
/// one whose /init leanrd carries): by [`target_machine`].
pub fn sysroot_is_native(sysroot: &Path, kver: Option<&str>) -> bool {
    target_machine(sysroot, kver) == HOST_MACHINE
}

/// The architecture of the system at `sysroot` ([`target_machine`]) as Rust's target
/// triples spell it (`x86_64`, `aarch64`); None for one leanrd builds no /init for.
pub fn target_arch(sysroot: &Path, kver: Option<&str>) -> Option<&'static str> {
    machine_arch(target_machine(sysroot, kver))
}

/// The ELF machine of the system at `sysroot`, which its /init must be built for: its
/// kernel's (the first module modules.dep lists for `kver`, else for any release there),
/// else its programs' ([`sysroot_machine`]). Never the build machine's, unless nothing in
/// the sysroot says.
pub(crate) fn target_machine(sysroot: &Path, kver: Option<&str>) -> u16 {
    let module_machine = |dir: &Path| -> Option<u16> {
        let dep = fs::read_to_string(dir.join("modules.dep")).ok()?;
        let first = dep.lines().find_map(|l| l.split(':').next().filter(|m| !m.is_empty()))?;
        let data = fs::read(dir.join(first)).ok()?;
        machine_of(&data).or_else(|| {
            let f = leanrd_compress::Format::detect(&data)?;
            machine_of(&leanrd_compress::decompress_vec_max(f, &data, crate::modules::MODULE_MAX).ok()?)
        })
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for base in ["usr/lib/modules", "lib/modules"] {
        let base = sysroot.join(base);
        match kver {
            Some(k) => dirs.push(base.join(k)),
            None => dirs.extend(fs::read_dir(&base).into_iter().flatten().flatten().map(|e| e.path())),
        }
    }
    dirs.iter().find_map(|d| module_machine(d)).unwrap_or_else(|| sysroot_machine(sysroot))
}

/// The ELF machine of the system at `sysroot`: its shell's (or init's), else leanrd's own.
pub(crate) fn sysroot_machine(sysroot: &Path) -> u16 {
    ["/bin/sh", "/usr/bin/sh", "/sbin/init", "/usr/lib/systemd/systemd", "/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .find_map(|p| {
            let mut head = [0u8; 20];
            let mut f = fs::File::open(host_path(sysroot, p)).ok()?;
            std::io::Read::read_exact(&mut f, &mut head).ok()?;
            machine_of(&head)
        })
        .unwrap_or(HOST_MACHINE)
}

/// Whether the program `program` of the system at `sysroot` is an ELF executable of this
/// machine's architecture (so that [`sysroot_command`] can run it here).
pub fn runs_here(sysroot: &Path, program: &str) -> bool {
    let Ok(real) = crate::plan::real_path(sysroot, program) else { return false };
    let mut head = [0u8; 20];
    fs::File::open(host_path(sysroot, &real))
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| machine_of(&head) == Some(HOST_MACHINE))
}

/// A program of the system at `sysroot` as a command this machine runs with that system's
/// own dynamic loader and libraries, so that a tool of that system's version (systemd-measure)
/// runs without a chroot: its ld.so, without this machine's ld.so.cache (`--inhibit-cache`),
/// with `--library-path` naming the directories ld.so finds each of its libraries in, in the
/// order it finds them, then the system's default directories (for what it opens with
/// dlopen). What it opens with dlopen and the system lacks is still looked for in this
/// machine's default directories: ld.so has no option against that. The program as it is
/// where `sysroot` is `/`. An error where the program is not there, is no ELF executable
/// (a script would run this machine's interpreter), is not for this machine's architecture,
/// or needs a library the system lacks.
pub fn sysroot_command(sysroot: &Path, program: &str) -> Result<std::process::Command> {
    let root = fs::canonicalize(sysroot).with_context(|| format!("{}: cannot open", sysroot.display()))?;
    if root == Path::new("/") {
        return Ok(std::process::Command::new(program));
    }
    let shown = root.display().to_string();
    if shown.contains([':', ';']) {
        bail!("{shown}: ld.so's --library-path cannot name directories under a path with ':' or ';'");
    }
    let real = crate::plan::real_path(&root, program)?;
    let file = host_path(&root, &real);
    let data = fs::read(&file).with_context(|| format!("{}: cannot read", file.display()))?;
    let Some(inf) = info(&data, &file)? else {
        bail!("{}: no ELF executable (a script would run this machine's interpreter, not the system's)", file.display())
    };
    if inf.machine != HOST_MACHINE {
        bail!(
            "{}: built for {}, and this machine is {}: it cannot run here",
            file.display(),
            machine_name(inf.machine),
            machine_name(HOST_MACHINE)
        );
    }
    let Some(interp) = &inf.interp else { return Ok(std::process::Command::new(file)) };
    let mut plan = Plan::new(&root);
    let mut r = Resolver::new(&mut plan);
    r.add_binary(&real)?;
    let mut dirs: Vec<String> = Vec::new();
    let found = r.found.iter().filter(|f| **f != real && *f != interp).filter_map(|f| f.rsplit_once('/'));
    for d in found.map(|(d, _)| d).chain(default_dirs(inf.machine).iter().copied()) {
        if !dirs.iter().any(|x| x == d) {
            dirs.push(d.to_string());
        }
    }
    let paths: Vec<String> = dirs.iter().map(|d| host_path(&root, d).display().to_string()).collect();
    let mut c = std::process::Command::new(host_path(&root, &crate::plan::real_path(&root, interp)?));
    c.arg("--inhibit-cache").arg("--library-path").arg(paths.join(":")).arg(file);
    Ok(c)
}

/// Where ld.so finds the DT_NEEDED name `lib` of an object of ELF machine `machine`: the
/// DT_RPATH chain, DT_RUNPATH, ld.so.cache (`cache`: its entries for that machine), the
/// default directories, in that order. `exists` says whether a path is there: in the host's
/// tree (the generator) or in an image (the boot proof).
pub(crate) fn search(
    lib: &str,
    rpath: &[String],
    runpath: &[String],
    cache: &LdCache,
    machine: u16,
    exists: impl Fn(&str) -> bool,
) -> Option<String> {
    if let Some(p) = rpath.iter().chain(runpath).map(|d| format!("{d}/{lib}")).find(|p| exists(p)) {
        return Some(p);
    }
    if let Some(p) = cache.libs.get(lib).filter(|p| exists(p)) {
        return Some(p.clone());
    }
    default_dirs(machine).iter().map(|d| format!("{d}/{lib}")).find(|p| exists(p))
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
/// The architecture of ELF machine `m` as Rust's target triples spell it (`x86_64`,
/// `aarch64`): the ones leanrd's /init is built for; None for the others.
pub(crate) fn machine_arch(m: u16) -> Option<&'static str> {
    match m {
        62 => Some("x86_64"),
        183 => Some("aarch64"),
        _ => None,
    }
}

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
    /// The sysroot's ld.so.cache entries, by the ELF machine they are for (read when an
    /// object of that machine first needs them).
    caches: Vec<(u16, LdCache)>,
    done: BTreeSet<String>,
    /// Each object as it was found (before its symbolic links are followed: the name ld.so
    /// opens), in the order found.
    found: Vec<String>,
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
    let machine = sysroot_machine(sysroot);
    if let Some(p) = LdCache::load(sysroot, machine).libs.get(lib).filter(|p| exists(p)) {
        return Some(p.clone());
    }
    default_dirs(machine).iter().map(|d| format!("{d}/{lib}")).find(|p| exists(p))
}

impl<'a> Resolver<'a> {
    /// A resolver adding to `plan`, with the ld.so cache of the plan's sysroot.
    pub fn new(plan: &'a mut Plan) -> Resolver<'a> {
        Resolver { plan, caches: Vec::new(), done: BTreeSet::new(), found: Vec::new() }
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
        if !self.found.iter().any(|f| f == path) {
            self.found.push(path.to_string());
        }
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
            let found =
                if lib.contains('/') { Some(lib.clone()) } else { self.find(lib, &rpath, &runpath, inf.machine) };
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

    fn find(&mut self, lib: &str, rpath: &[String], runpath: &[String], machine: u16) -> Option<String> {
        let i = match self.caches.iter().position(|(m, _)| *m == machine) {
            Some(i) => i,
            None => {
                self.caches.push((machine, LdCache::load(&self.plan.sysroot, machine)));
                self.caches.len() - 1
            }
        };
        let sysroot = &self.plan.sysroot;
        search(lib, rpath, runpath, &self.caches[i].1, machine, |p| host_path(sysroot, p).exists())
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
            match self.find(lib, &[], &[], inf.machine) {
                Some(p) => self.add_object(&p, &[], &mut names)?,
                None => bail!("{}: needs {lib}, which is not found", file.display()),
            }
        }
        Ok(())
    }

    /// Libraries loaded with dlopen that a binary needs but does not list (e.g. libgcc_s
    /// for pthread_cancel): add them if present.
    pub fn add_library_if_present(&mut self, lib: &str) -> Result<()> {
        let machine = sysroot_machine(&self.plan.sysroot);
        if let Some(p) = self.find(lib, &[], &[], machine) {
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

    /// A program of another root runs with that root's loader and libraries, none of this
    /// machine's: /bin/true with its loader and libraries copied under a directory, run, and
    /// traced by its loader (every object it loads is the copy's). A path that is / runs the
    /// program as it is; a script and another architecture's program are refused.
    #[test]
    fn a_sysroots_program_runs_with_its_own_loader() {
        let t = tempfile::tempdir().unwrap();
        let link = t.path().join("slash");
        std::os::unix::fs::symlink("/", &link).unwrap();
        assert_eq!(sysroot_command(&link, "/bin/true").unwrap().get_program(), "/bin/true");
        let sys = fs::canonicalize(t.path()).unwrap().join("copy");
        let mut plan = Plan::new(Path::new("/"));
        Resolver::new(&mut plan).add_binary("/bin/true").unwrap();
        for (path, item) in &plan.items {
            let dst = host_path(&sys, path);
            match item {
                crate::plan::Item::Dir { .. } => fs::create_dir_all(&dst).unwrap(),
                crate::plan::Item::File { src, .. } => {
                    fs::create_dir_all(dst.parent().unwrap()).unwrap();
                    fs::copy(src, &dst).unwrap();
                }
                crate::plan::Item::Symlink { target } => {
                    fs::create_dir_all(dst.parent().unwrap()).unwrap();
                    std::os::unix::fs::symlink(target, &dst).unwrap();
                }
                _ => {}
            }
        }
        let mut c = sysroot_command(&sys, "/bin/true").unwrap();
        assert!(c.get_program().to_string_lossy().starts_with(&*sys.to_string_lossy()), "{c:?}");
        assert!(c.status().unwrap().success(), "{c:?}");
        let o = c.env("LD_TRACE_LOADED_OBJECTS", "1").output().unwrap();
        let trace = String::from_utf8_lossy(&o.stdout).into_owned();
        let loaded: Vec<&str> = trace.lines().filter_map(|l| l.split(" => ").nth(1)).collect();
        assert!(!loaded.is_empty(), "{trace}");
        for l in loaded {
            assert!(l.trim_start().starts_with(&*sys.to_string_lossy()), "loaded from this machine: {l}\n{trace}");
        }
        assert!(sysroot_command(&sys, "/bin/nothere").is_err());
        fs::write(sys.join("script"), "#!/bin/sh\n").unwrap();
        assert!(sysroot_command(&sys, "/script").unwrap_err().to_string().contains("no ELF executable"));
        let mut arm = fs::read("/bin/true").unwrap();
        arm[18..20].copy_from_slice(&(if HOST_MACHINE == 183 { 62u16 } else { 183u16 }).to_le_bytes());
        fs::write(sys.join("arm"), arm).unwrap();
        assert!(!runs_here(&sys, "/arm") && runs_here(&sys, "/bin/true"));
        let e = sysroot_command(&sys, "/arm").unwrap_err().to_string();
        assert!(e.contains("cannot run here"), "{e}");
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

    /// A glibc-ld.so.cache1.1 file with `entries` (flags, soname, path).
    fn cache_file(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let mut head = CACHE_MAGIC.to_vec();
        head.extend((entries.len() as u32).to_le_bytes());
        head.resize(48, 0);
        let mut strings = Vec::new();
        let base = 48 + entries.len() * 24;
        let mut table = Vec::new();
        for (flags, name, path) in entries {
            let key = base + strings.len();
            strings.extend(name.as_bytes());
            strings.push(0);
            let value = base + strings.len();
            strings.extend(path.as_bytes());
            strings.push(0);
            table.extend(flags.to_le_bytes());
            table.extend((key as u32).to_le_bytes());
            table.extend((value as u32).to_le_bytes());
            table.extend([0u8; 12]);
        }
        [head, table, strings].concat()
    }

    /// A system with both architectures' libraries (multiarch): each ABI sees its own entries
    /// and searches its own directories last; the sysroot's machine is its shell's.
    #[test]
    fn each_abi_has_its_own_cache_entries_and_directories() {
        let b = cache_file(&[
            (0x0a03, "libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"),
            (0x0303, "libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
            (0x0003, "libc.so.6", "/lib/i386-linux-gnu/libc.so.6"),
        ]);
        let x86 = LdCache::parse_for(&b, 62).unwrap();
        let arm = LdCache::parse_for(&b, 183).unwrap();
        assert_eq!(x86.libs["libc.so.6"], "/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(arm.libs["libc.so.6"], "/lib/aarch64-linux-gnu/libc.so.6");
        assert_eq!(LdCache::parse(&b).unwrap().libs, x86.libs);
        // Not in the cache: the ABI's own directories.
        let there = |p: &str| p == "/usr/lib/aarch64-linux-gnu/libz.so.1" || p == "/usr/lib/x86_64-linux-gnu/libz.so.1";
        let empty = LdCache::default();
        assert_eq!(search("libz.so.1", &[], &[], &empty, 183, there).unwrap(), "/usr/lib/aarch64-linux-gnu/libz.so.1");
        assert_eq!(search("libz.so.1", &[], &[], &empty, 62, there).unwrap(), "/usr/lib/x86_64-linux-gnu/libz.so.1");
        // A sysroot whose shell is aarch64.
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("bin")).unwrap();
        let mut sh = fs::read("/proc/self/exe").unwrap()[..64].to_vec();
        sh[18..20].copy_from_slice(&183u16.to_le_bytes());
        fs::write(t.path().join("bin/sh"), &sh).unwrap();
        assert_eq!(sysroot_machine(t.path()), 183);
        assert_eq!(sysroot_machine(&t.path().join("none")), HOST_MACHINE);
        // The kernel says first: a module of the release asked for, or of any release there.
        let m = t.path().join("usr/lib/modules/9.9-arm64");
        fs::create_dir_all(m.join("kernel")).unwrap();
        fs::write(m.join("modules.dep"), "kernel/a.ko:\n").unwrap();
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[18..20].copy_from_slice(&62u16.to_le_bytes());
        fs::write(m.join("kernel/a.ko"), &elf).unwrap();
        assert_eq!(target_machine(t.path(), Some("9.9-arm64")), 62, "the module's machine, not the programs'");
        assert_eq!(target_machine(t.path(), None), 62);
        assert_eq!(target_machine(t.path(), Some("other")), 183, "no such release: the programs say");
    }

    #[test]
    fn rejects_other_files() {
        assert!(LdCache::parse(b"ld.so-1.7.0\0").is_err());
        assert!(LdCache::parse(b"glibc-ld.so.cache1.1").is_err());
    }
}
