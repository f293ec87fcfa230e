//! The boot proof: from the files inside an image alone — its module tables and modules, its
//! binaries and libraries, /init's configuration — and the host's facts (the devices under the
//! root, /usr and the resume device, their drivers, the file system types, the block stack,
//! the keyboard a LUKS prompt needs), replay what /init will do and name the first link that
//! is missing. `leanrd build` runs it before a host-only image replaces the old one;
//! `leanrd verify` runs it on any image, leanrd's or a peer's.
//!
//! The image is seen through [`ImageView`]: a [`Plan`] (before it is written) or an image read
//! back ([`MemImage`]). Module names and aliases are resolved with the image's own tables, by
//! the same code /init uses (`leanrd_kmod`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::Path;
use std::rc::Rc;

use leanrd_contract::{CONFIG_PATH, Capability, InitConfig, NOT_BLOCK_FSTYPES, Root, RootKind, SEARCH_PATH};
use leanrd_kmod::{ModuleDb, Resolved, Tables};

use crate::elf::{Info, LdCache};
use crate::host::Facts;
use crate::kconfig::{KernelConfig, module_compress_symbol};
use crate::modules::{Kernel, ModuleFile};
use crate::plan::{Item, Plan, walk_path};
use crate::stack::StackLayer;

/// What a path is in an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link, with its target.
    Symlink(String),
    /// Anything else (a device node, a fifo).
    Other,
}

/// An image's entries, as the proof reads them.
pub trait ImageView {
    /// The entry at exactly this path (symlinks not followed).
    fn node(&self, path: &str) -> Option<Node>;
    /// A regular file's content.
    fn data(&self, path: &str) -> Option<Vec<u8>>;
    /// The entries directly under a directory (names).
    fn children(&self, dir: &str) -> Vec<String>;
    /// What a module file is, as stored (read from its data unless the view knows).
    fn module(&self, path: &str) -> Option<ModuleFile> {
        self.data(path).map(|d| ModuleFile::read(&d, None))
    }
}

impl ImageView for Plan {
    fn node(&self, path: &str) -> Option<Node> {
        Some(match self.items.get(path)? {
            Item::Dir { .. } => Node::Dir,
            Item::File { .. } | Item::Inline { .. } => Node::File,
            Item::Symlink { target } => Node::Symlink(target.clone()),
            Item::Node { .. } => Node::Other,
        })
    }
    fn data(&self, path: &str) -> Option<Vec<u8>> {
        match self.items.get(path)? {
            Item::File { src, .. } => fs::read(src).ok(),
            Item::Inline { data, .. } => Some(data.clone()),
            _ => None,
        }
    }
    fn children(&self, dir: &str) -> Vec<String> {
        children_of(self.items.keys(), dir)
    }
    /// The generator read each module as it planned it: its facts, not a second read.
    fn module(&self, path: &str) -> Option<ModuleFile> {
        match self.modules.get(path) {
            Some(m) => Some(m.clone()),
            None => self.data(path).map(|d| ModuleFile::read(&d, None)),
        }
    }
}

fn children_of<'a>(paths: impl Iterator<Item = &'a String>, dir: &str) -> Vec<String> {
    let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
    paths
        .filter_map(|p| p.strip_prefix(&prefix))
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .map(str::to_string)
        .collect()
}

/// An image read back into memory (`leanrd verify`): every entry, with the content of the
/// files the proof reads (module tables and modules, configuration, programs and libraries;
/// not firmware or microcode, whose presence is enough).
#[derive(Debug, Default)]
pub struct MemImage {
    /// Image path → what is there, and its content when the proof reads it (see
    /// [`MemImage::wants_data`]).
    pub nodes: BTreeMap<String, (Node, Option<Vec<u8>>)>,
}

impl MemImage {
    /// Whether the proof reads a file's content.
    pub fn wants_data(path: &str) -> bool {
        leanrd_kmod::is_module_file(path)
            || !(path.starts_with("/lib/firmware/")
                || path.starts_with("/usr/lib/firmware/")
                || path.starts_with("/kernel/x86/microcode/"))
    }
}

impl ImageView for MemImage {
    fn node(&self, path: &str) -> Option<Node> {
        self.nodes.get(path).map(|(n, _)| n.clone())
    }
    fn data(&self, path: &str) -> Option<Vec<u8>> {
        self.nodes.get(path).and_then(|(_, d)| d.clone())
    }
    fn children(&self, dir: &str) -> Vec<String> {
        children_of(self.nodes.keys(), dir)
    }
}

/// A path with every symlink on the way followed inside the image (absolute targets are the
/// image's own root); None when something on the way is missing.
pub fn resolve(v: &dyn ImageView, path: &str) -> Option<String> {
    walk_path(
        path,
        |_| (),
        |p, _| match v.node(p) {
            None => Err(()),
            Some(Node::Symlink(t)) => Ok(Some(t)),
            Some(_) => Ok(None),
        },
    )
    .ok()
}

fn is_file(v: &dyn ImageView, path: &str) -> bool {
    resolve(v, path).is_some_and(|p| v.node(&p) == Some(Node::File))
}

/// Add a missing link found outside the proof proper (the image's compression) to its result.
pub fn also_missing(result: &mut Result<Proven, Vec<String>>, why: String) {
    match result {
        Ok(_) => *result = Err(vec![why]),
        Err(m) if !m.contains(&why) => m.push(why),
        Err(_) => {}
    }
}

/// What the proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    /// The kernel release the image was proven for.
    pub kver: String,
    /// Facts checked (drivers, file systems, programs, libraries).
    pub checks: usize,
}

/// The image's module tables and where they are.
struct Mods {
    dir: String,
    db: ModuleDb,
}

fn image_modules(v: &dyn ImageView, kver: &str) -> Result<Mods, String> {
    for base in ["/lib/modules", "/usr/lib/modules"] {
        let dir = format!("{base}/{kver}");
        let Some(real) = resolve(v, &dir) else { continue };
        if !is_file(v, &format!("{real}/modules.dep")) {
            continue;
        }
        let tables = Tables::read(|f| -> Result<Vec<u8>, String> {
            Ok(resolve(v, &format!("{real}/{f}")).and_then(|p| v.data(&p)).unwrap_or_default())
        })?;
        let db = ModuleDb::parse(&tables).map_err(|e| format!("{dir}/{e}"))?;
        return Ok(Mods { dir: real, db });
    }
    Err(format!("no modules.dep for kernel {kver} in the image (/lib/modules/{kver})"))
}

/// The kernel the image is for: its configuration's, else the only module directory it has.
pub fn image_kver(v: &dyn ImageView) -> Option<String> {
    if let Some(c) = config(v).and_then(|c| c.kver) {
        return Some(c);
    }
    let mut all: Vec<String> = ["/lib/modules", "/usr/lib/modules"]
        .iter()
        .filter_map(|d| resolve(v, d))
        .flat_map(|d| v.children(&d))
        .collect();
    all.sort();
    all.dedup();
    match all.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

fn config(v: &dyn ImageView) -> Option<InitConfig> {
    let text = v.data(&resolve(v, CONFIG_PATH)?)?;
    InitConfig::decode(&String::from_utf8_lossy(&text)).ok()
}

struct Check<'a> {
    /// The kernel's architecture (ELF e_machine), from the image's modules: every program
    /// in the image must be built for it. None: not known yet; Some(None): no module says.
    machine: Option<Option<u16>>,
    v: &'a dyn ImageView,
    mods: Mods,
    kernel: Option<&'a Kernel>,
    conf: Option<InitConfig>,
    checks: usize,
    elf_done: BTreeSet<String>,
    objects: BTreeMap<String, Object>,
    /// The image's ld.so.cache entries for the machine last asked about.
    ldcache: Option<(u16, LdCache)>,
}

/// A file exec is asked to run: ELF (what ld.so reads of it), or a script with the
/// interpreter its `#!` line names (None: no `#!` line, so not runnable).
#[derive(Clone)]
enum Object {
    Elf(Rc<Info>),
    Script(Option<String>),
}

impl<'a> Check<'a> {
    fn new(v: &'a dyn ImageView, mods: Mods, kernel: Option<&'a Kernel>, conf: Option<InitConfig>) -> Check<'a> {
        Check {
            v,
            mods,
            kernel,
            conf,
            checks: 0,
            elf_done: BTreeSet::new(),
            objects: BTreeMap::new(),
            ldcache: None,
            machine: None,
        }
    }
}

impl Check<'_> {
    /// What /init's configuration names for the console is in the image: the font (a PSF the
    /// kernel takes) and the keymap.
    fn console(&mut self) -> Vec<String> {
        let Some(conf) = &self.conf else { return Vec::new() };
        let mut missing = Vec::new();
        if let Some(name) = &conf.font {
            self.checks += 1;
            let path = format!("{}/{name}.psf", leanrd_contract::FONT_DIR);
            let data = resolve(self.v, &path).filter(|p| is_file(self.v, p)).and_then(|p| self.v.data(&p));
            let why = match &data {
                None => Some("is not in the image".to_string()),
                Some(d) => match leanrd_contract::Psf::parse(d) {
                    Ok(f) => f.kernel_refuses().map(|e| format!("is refused by the kernel: {e}")),
                    Err(e) => Some(format!("is not a font the kernel takes: {e}")),
                },
            };
            if let Some(why) = why {
                missing.push(format!("the console font {name} /init's configuration names: {path} {why}"));
            }
        }
        if let Some(name) = &conf.keymap {
            self.checks += 1;
            let path = format!("{}/{name}.bmap", leanrd_contract::KEYMAP_DIR);
            if !is_file(self.v, &path) {
                missing.push(format!("the keymap {name} /init's configuration names: {path} is not in the image"));
            }
        }
        missing
    }

    /// A module name or alias loads from the image: the image's tables resolve it, and every
    /// module file with its dependencies is there.
    fn loadable(&mut self, what: &str) -> Result<(), String> {
        self.checks += 1;
        match self.mods.db.resolve(what) {
            Resolved::Builtin => Ok(()),
            Resolved::Missing => Err(format!("no module in the image's tables matches {what}")),
            Resolved::Modules(ms) => {
                for m in ms {
                    let rel = &self.mods.db.paths[&m];
                    if !is_file(self.v, &format!("{}/{rel}", self.mods.dir)) {
                        return Err(format!(
                            "{m} is in the image's modules.dep but {}/{rel} is not in the image",
                            self.mods.dir
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// Every module file in the image's tables loads, as stored, into kernel `kver`: an ELF
    /// object or a compressed file in the one format the kernel decompresses (by the name
    /// /init goes by), its vermagic the kernel's release, signed where signatures are forced.
    /// Failures are grouped by reason, a few modules named for each.
    fn module_files(&mut self, kver: &str) -> Vec<String> {
        let mut bad: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let unknown = KernelConfig::unknown();
        let config = self.kernel.map_or(&unknown, |k| &k.config);
        for rel in self.mods.db.paths.values() {
            let path = format!("{}/{rel}", self.mods.dir);
            // A missing file is reported by `loadable`, for what needs it.
            let Some(real) = resolve(self.v, &path) else { continue };
            let Some(f) = self.v.module(&real) else { continue };
            self.checks += 1;
            if let Some(why) = unloadable(&f, rel, kver, config) {
                bad.entry(why).or_default().push(path);
            }
        }
        bad.into_iter()
            .map(|(why, paths)| {
                let shown = paths.iter().take(3).map(String::as_str).collect::<Vec<_>>().join(", ");
                let more = if paths.len() > 3 { format!(" and {} more", paths.len() - 3) } else { String::new() };
                let n = paths.len();
                format!(
                    "{n} module{} kernel {kver} cannot load as stored: {why}: {shown}{more}",
                    if n == 1 { "" } else { "s" }
                )
            })
            .collect()
    }

    /// The kernel's architecture: the ELF machine of the image's modules (the first one
    /// that can be read, decompressed if need be).
    fn kernel_machine(&mut self) -> Option<u16> {
        if let Some(m) = self.machine {
            return m;
        }
        let mut found = None;
        for rel in self.mods.db.paths.values() {
            let Some(real) = resolve(self.v, &format!("{}/{rel}", self.mods.dir)) else { continue };
            let Some(data) = self.v.data(&real) else { continue };
            found = crate::elf::machine_of(&data).or_else(|| {
                let f = leanrd_compress::Format::detect(&data)?;
                let plain = leanrd_compress::decompress_vec_max(f, &data, crate::modules::MODULE_MAX).ok()?;
                crate::elf::machine_of(&plain)
            });
            if found.is_some() {
                break;
            }
        }
        self.machine = Some(found);
        found
    }

    /// Whether the target kernel has `what` as a module (None: no kernel to ask).
    fn kernel_module(&self, what: &str) -> Option<bool> {
        self.kernel.map(|k| matches!(k.db.resolve(what), Resolved::Modules(_)))
    }

    /// A device's driver: loaded by /init (listed, or by its modalias through the image's alias
    /// table) from files in the image. Drivers built into the kernel need nothing.
    fn driver(&mut self, l: &crate::host::Link) -> Result<(), String> {
        let Some(driver) = &l.driver else { return Ok(()) };
        if self.kernel_module(driver) == Some(false) {
            return Ok(()); // built in, or a driver name that is no module (usb, pcieport)
        }
        let listed = self.conf.as_ref().is_some_and(|c| {
            c.load.iter().any(|x| leanrd_kmod::normalize(x) == *driver)
                || c.layers.iter().any(|y| y.modules.iter().any(|x| leanrd_kmod::normalize(x) == *driver))
        });
        let by_alias = l.modalias.as_ref().is_some_and(|a| self.mods.db.match_alias(a).iter().any(|m| m == driver));
        let what = format!(
            "{} {} sits on {} ({}) driven by {driver}",
            l.role,
            l.serves,
            l.device,
            l.modalias.as_deref().unwrap_or("no modalias")
        );
        if !listed && !by_alias {
            let has = if self.kernel_module(driver) == Some(true) {
                format!("; the kernel has {driver}")
            } else {
                String::new()
            };
            return Err(format!("{what}: no module in the image matches{has}"));
        }
        self.loadable(driver).map_err(|e| format!("{what}: {e}"))
    }

    /// A program in the image's PATH, with its ELF interpreter and libraries.
    fn program(&mut self, name: &str) -> Result<(), String> {
        let found = SEARCH_PATH.iter().map(|d| format!("{d}/{name}")).find(|p| is_file(self.v, p));
        let path = found.ok_or_else(|| format!("{name} is not in the image ({})", SEARCH_PATH.join(", ")))?;
        self.elf(&path, name)
    }

    /// An object of the image as exec and ld.so read it, read and parsed once.
    fn object(&mut self, real: &str, who: &str) -> Result<Object, String> {
        if let Some(o) = self.objects.get(real) {
            return Ok(o.clone());
        }
        let data = self.v.data(real).ok_or_else(|| format!("{who}: {real} cannot be read"))?;
        let o = match crate::elf::info(&data, Path::new(real)).map_err(|e| format!("{who}: {e}"))? {
            Some(info) => Object::Elf(Rc::new(info)),
            // A script: the first word of its `#!` line.
            None => Object::Script(data.strip_prefix(b"#!").and_then(|l| {
                let l = &l[..l.iter().position(|&c| c == b'\n').unwrap_or(l.len())];
                String::from_utf8_lossy(l).split_whitespace().next().map(str::to_string)
            })),
        };
        self.objects.insert(real.to_string(), o.clone());
        Ok(o)
    }

    /// Where ld.so finds a DT_NEEDED name in the image (the image's own /etc/ld.so.cache).
    fn find_library(&mut self, lib: &str, rpath: &[String], runpath: &[String], machine: u16) -> Option<String> {
        let v = self.v;
        if self.ldcache.as_ref().is_none_or(|(m, _)| *m != machine) {
            let cache = resolve(v, "/etc/ld.so.cache")
                .and_then(|p| v.data(&p))
                .and_then(|b| LdCache::parse_for(&b, machine).ok())
                .unwrap_or_default();
            self.ldcache = Some((machine, cache));
        }
        let (_, cache) = self.ldcache.as_ref().expect("just set");
        crate::elf::search(lib, rpath, runpath, cache, machine, |p| is_file(v, p))
    }

    /// A program starts: its ELF interpreter and every library it loads are in the image.
    /// Replays glibc's ld.so: breadth first, a DT_NEEDED name already loaded (by its soname or
    /// the name it was loaded by) is not searched again — systemd's libsystemd-core needs
    /// libsystemd-shared, found only through the executable's RUNPATH — DT_RPATH (without
    /// DT_RUNPATH) is inherited by what an object loads, `$ORIGIN` expanded.
    fn elf(&mut self, path: &str, who: &str) -> Result<(), String> {
        let real = resolve(self.v, path).ok_or_else(|| format!("{who}: {path} is not in the image"))?;
        if !self.elf_done.insert(real.clone()) {
            return Ok(());
        }
        self.checks += 1;
        let exe = match self.object(&real, who)? {
            Object::Elf(info) => info,
            // A script runs with its interpreter (`#!/bin/sh` → busybox or dash, with its
            // libraries).
            Object::Script(None) => return Err(format!("{who}: {path} is neither an ELF executable nor a #! script")),
            Object::Script(Some(interp)) => {
                if resolve(self.v, &interp).as_deref() == Some(real.as_str()) {
                    return Err(format!("{who}: {path} names itself as its interpreter"));
                }
                return self.elf(&interp, &format!("{who} (a script run by {interp})"));
            }
        };
        let mut names: BTreeSet<String> = BTreeSet::new();
        if let Some(interp) = &exe.interp {
            if !is_file(self.v, interp) {
                return Err(format!("{who}: its ELF interpreter {interp} is not in the image"));
            }
            names.insert(interp.rsplit('/').next().unwrap_or(interp).to_string());
        }
        let kernel = self.kernel_machine();
        let foreign = |obj: &Info, path: &str| -> Option<String> {
            let k = kernel.filter(|k| *k != obj.machine)?;
            Some(format!(
                "{who}: {path} is built for {}, and the kernel (its modules) for {}",
                crate::elf::machine_name(obj.machine),
                crate::elf::machine_name(k)
            ))
        };
        if let Some(e) = foreign(&exe, &real) {
            return Err(e);
        }
        let mut loaded: BTreeSet<String> = BTreeSet::from([real.clone()]);
        let mut queue: VecDeque<(String, Rc<Info>, Vec<String>)> = VecDeque::from([(real, exe, Vec::new())]);
        while let Some((at, obj, inherited)) = queue.pop_front() {
            let origin = at.rsplit_once('/').map(|(d, _)| if d.is_empty() { "/" } else { d }).unwrap_or("/");
            let expand = |dirs: &[String]| -> Vec<String> {
                dirs.iter().map(|d| d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)).collect()
            };
            // The loaders' DT_RPATH chain: this object's own (ignored when it has DT_RUNPATH),
            // then its loader's, up to the executable's.
            let own = if obj.runpath.is_empty() { expand(&obj.rpath) } else { Vec::new() };
            let chain: Vec<String> = own.into_iter().chain(inherited).collect();
            let rpath = if obj.runpath.is_empty() { chain.clone() } else { Vec::new() };
            let runpath = expand(&obj.runpath);
            for lib in &obj.needed {
                if names.contains(lib) {
                    continue;
                }
                let found = if lib.contains('/') {
                    Some(lib.clone()).filter(|p| is_file(self.v, p))
                } else {
                    self.find_library(lib, &rpath, &runpath, obj.machine)
                };
                let p = found.ok_or_else(|| format!("{who}: library {lib} (needed by {at}) is not in the image"))?;
                let p = resolve(self.v, &p).unwrap_or(p);
                names.insert(lib.clone());
                if !loaded.insert(p.clone()) {
                    continue;
                }
                self.checks += 1;
                if let Object::Elf(o) = self.object(&p, who)? {
                    if let Some(e) = foreign(&o, &p) {
                        return Err(e);
                    }
                    if let Some(so) = &o.soname {
                        names.insert(so.clone());
                    }
                    queue.push_back((p, o, chain.clone()));
                }
            }
        }
        Ok(())
    }
}

/// Why kernel `kver` (with `config`, when known) would refuse a module stored as `f` under
/// the name `rel` (/init passes MODULE_INIT_COMPRESSED_FILE by the name); None: it loads.
pub(crate) fn unloadable(f: &ModuleFile, rel: &str, kver: &str, config: &KernelConfig) -> Option<String> {
    if let Some(e) = &f.corrupt {
        return Some(e.clone());
    }
    let named = leanrd_kmod::split_compression(rel).1;
    match (named, f.compression) {
        (None, None) if !f.elf => return Some("not an ELF object".into()),
        (None, None) => {}
        (None, Some(c)) => return Some(format!("named .ko but compressed with {c}: loaded as ELF, it fails")),
        (Some(n), None) => return Some(format!("named {} but not compressed", n.suffix)),
        (Some(n), Some(c)) if c.name() != n.format => {
            return Some(format!("named {} but compressed with {c}", n.suffix));
        }
        (Some(n), Some(_)) => {
            let symbol = module_compress_symbol(&n);
            match config.module_decompression() {
                Some(k) if k == n => {}
                Some(k) => {
                    return Some(format!(
                        "compressed with {}, and the kernel decompresses only {} modules (CONFIG_{symbol} is not set \
                         in {})",
                        n.format,
                        k.format,
                        config.shown()
                    ));
                }
                None if config.known() => {
                    return Some(format!(
                        "compressed with {}, and the kernel decompresses no modules (CONFIG_MODULE_DECOMPRESS with \
                         CONFIG_{symbol} is not set in {})",
                        n.format,
                        config.shown()
                    ));
                }
                None => {
                    return Some(format!(
                        "compressed with {}, and the kernel's configuration is unknown (no /boot/config-{kver}): it \
                         may not decompress them",
                        n.format
                    ));
                }
            }
        }
    }
    if !f.elf {
        return Some("not an ELF object once decompressed".into());
    }
    match &f.vermagic {
        None => return Some("no vermagic in its .modinfo".into()),
        Some(v) if v != kver => return Some(format!("built for kernel {v} (vermagic), not {kver}")),
        Some(_) => {}
    }
    if config.sig_force() && !f.signed {
        return Some("not signed, and the kernel forces module signatures (CONFIG_MODULE_SIG_FORCE)".into());
    }
    None
}

/// Prove that the image boots the machine the facts describe; Err lists what is missing,
/// the first link first.
pub fn prove(v: &dyn ImageView, facts: &Facts, kernel: Option<&Kernel>, kver: &str) -> Result<Proven, Vec<String>> {
    let mut missing = Vec::new();
    if !is_file(v, "/init") {
        missing.push("/init is not in the image".to_string());
    }
    let conf = config(v);
    let mods = match image_modules(v, kver) {
        Ok(m) => m,
        Err(e) => {
            missing.push(e);
            return Err(missing);
        }
    };
    let mut c = Check::new(v, mods, kernel, conf);
    if let Some(init) = resolve(v, "/init")
        && let Err(e) = c.elf(&init, "/init")
    {
        missing.push(e);
    }
    missing.extend(c.module_files(kver));
    missing.extend(c.console());
    let luks_prompt = facts.stack.contains(&StackLayer::Crypt);
    // In the order the boot meets them: a controller's driver before the disk's behind it
    // (a parent device's path is a prefix of its children's).
    let mut links: Vec<&crate::host::Link> = facts.links.iter().collect();
    links.sort_by_key(|l| l.device.matches('/').count());
    for l in links {
        if l.role == "keyboard" && !luks_prompt {
            continue;
        }
        if let Err(e) = c.driver(l) {
            missing.push(if l.role == "keyboard" { format!("the passphrase prompt has no keyboard: {e}") } else { e });
        }
    }
    // The root by its kind: each kind names what /init needs for it, and a kind the proof
    // does not know is a failure, never a pass.
    match &facts.root_source {
        None | Some(Root::Block(_)) => {}
        Some(Root::Nfs(n)) => missing.extend(nfs_root(&mut c, facts, n)),
        Some(Root::Zfs(z)) => missing.extend(zfs_root(&mut c, facts, z)),
        Some(Root::Live(_)) => {
            // The medium's drivers are among the links; its file system and the loop device,
            // the image's squashfs and the overlay are in the stack's modules (proven below).
            if !matches!(c.conf.as_ref().and_then(|conf| conf.mounts.root.as_ref()), Some(Root::Live(_))) {
                missing.push(format!("the live root on {}: /init's configuration does not name it", facts.root.source));
            }
        }
    }
    // /init mounts a root of a kind that needs a feature only when its configuration turns the
    // feature's capability on (it says so before it waits for anything).
    if let Some(f) = facts.root_kind().feature()
        && let Some(conf) = &c.conf
        && conf.layer(f.capability()).is_none()
    {
        missing.push(format!(
            "the {} root {}: /init's configuration does not turn on {} (the {} feature)",
            facts.root_kind().name(),
            facts.root.source,
            f.capability().name(),
            f.feature()
        ));
    }
    let mounts = [Some(("root", &facts.root)), facts.usr.as_ref().map(|u| ("/usr", u))];
    for (role, m) in mounts.into_iter().flatten() {
        // A ZFS root's file system (and a /usr dataset under it) is proven with the root.
        if (role == "root" && facts.root_kind() != RootKind::Block) || m.fstype == "zfs" {
            continue;
        }
        if NOT_BLOCK_FSTYPES.contains(&m.fstype.as_str()) {
            if role == "root" {
                missing.push(format!(
                    "the root {} is {}: leanrd's /init cannot mount a root of that kind",
                    m.source, m.fstype
                ));
            }
            continue;
        }
        let alias = format!("fs-{}", m.fstype);
        if c.kernel.is_some_and(|k| matches!(k.db.resolve(&alias), Resolved::Builtin)) {
            continue;
        }
        if let Err(e) = c.loadable(&alias) {
            missing.push(format!("{role} {} is {}: {e}", m.source, m.fstype));
        }
    }
    // What the block stack implies: dm_mod, dm_crypt, md_mod, the RAID level's module.
    for m in &facts.modules {
        if c.kernel_module(m) != Some(false)
            && let Err(e) = c.loadable(m)
        {
            missing.push(format!("the block stack under the root needs {m}: {e}"));
        }
    }
    missing.extend(verity(&mut c, facts));
    if facts.stack.contains(&StackLayer::Iscsi) {
        missing.extend(iscsi_root(&mut c, facts));
    }
    if facts.stack.contains(&StackLayer::Nvmf) {
        missing.extend(nvmf_root(&mut c, facts));
    }
    // NBD: the network and nbd; /init's capability is checked with the other layers'.
    if facts.stack.contains(&StackLayer::Nbd) {
        missing.extend(network_root(&mut c, facts, "the root's NBD device", &["nbd"]));
    }
    for layer in &facts.stack {
        let def = layer.def();
        if let Some(prog) = def.program
            && let Err(e) = c.program(prog)
        {
            missing.push(format!("the {layer} layer under the root: {e}"));
        }
        // leanrd's /init opens a layer only when its configuration has it.
        if let Some(cap) = def.capability
            && let Some(conf) = &c.conf
            && conf.layer(cap).is_none()
        {
            missing.push(format!(
                "the {layer} layer under the root: /init's configuration does not turn on {}",
                cap.name()
            ));
        }
    }
    if missing.is_empty() { Ok(Proven { kver: kver.to_string(), checks: c.checks }) } else { Err(missing) }
}

/// The dm-verity devices a command line names (`roothash=`, `usrhash=`), and why /init would
/// refuse what it says of them (a hash or options it cannot read).
pub fn verity_words(cmdline: &str) -> (Vec<String>, Vec<String>) {
    let (mut named, mut bad) = (Vec::new(), Vec::new());
    for w in cmdline.split_whitespace() {
        let Some((k, v)) = w.split_once('=') else { continue };
        match k {
            "roothash" | "usrhash" => match leanrd_contract::verity::parse_root_hash(v) {
                Ok(_) => named.push(w.to_string()),
                Err(e) => bad.push(format!("{k}=: {e}")),
            },
            "systemd.verity_root_options" | "systemd.verity_usr_options" => {
                if let Err(e) = leanrd_contract::verity::VerityOptions::parse(v) {
                    bad.push(format!("{k}=: {e}"));
                }
            }
            _ => {}
        }
    }
    (named, bad)
}

/// What the verity devices need: the command line's (the one the image is built for) and the
/// host's stack's. /init sets them up itself (no veritysetup), with dm_mod and dm_verity; a
/// verified root must be recorded as /dev/mapper/root, never as its data's file system.
fn verity(c: &mut Check, facts: &Facts) -> Vec<String> {
    let (named, bad) = verity_words(&facts.cmdline);
    let mut missing: Vec<String> = bad.into_iter().map(|b| format!("the kernel command line's {b}")).collect();
    if named.is_empty() && !facts.stack.contains(&StackLayer::Verity) {
        return missing;
    }
    let what = if named.is_empty() { format!("the verity root {}", facts.root.source) } else { named.join(" ") };
    for m in ["dm_mod", "dm_verity"] {
        if c.kernel_module(m) != Some(false)
            && let Err(e) = c.loadable(m)
        {
            missing.push(format!("{what}: {e}"));
        }
    }
    if facts.stack.contains(&StackLayer::Verity)
        && facts.root.source.trim_start_matches("/dev/mapper/") == "root"
        && let Some(conf) = &c.conf
        && conf.mounts.root != Some(Root::Block(leanrd_contract::DeviceRef::Mapper("root".into())))
    {
        missing.push(format!(
            "the verity root {}: /init's configuration records {} instead of /dev/mapper/root",
            facts.root.source,
            conf.mounts.root.as_ref().map(|r| r.to_string()).unwrap_or_else(|| "no root".into())
        ));
    }
    missing
}

/// What an NFS root needs: the NFS client for the version it was mounted with, the packet
/// socket /init's DHCP client uses, a driver for a network interface (the interfaces' links
/// are proven with the other devices), and /init told where the root is.
fn nfs_root(c: &mut Check, facts: &Facts, n: &leanrd_contract::NfsRoot) -> Vec<String> {
    let v4 = n.version == leanrd_contract::NfsVersion::V4;
    let what = format!("the NFS root {}", facts.root.source);
    let mut missing = network_root(c, facts, &what, &["fs-nfs", if v4 { "nfsv4" } else { "nfsv3" }]);
    match c.conf.as_ref().and_then(|conf| conf.mounts.root.as_ref()) {
        Some(leanrd_contract::Root::Nfs(_)) => {}
        other => missing.push(format!(
            "the NFS root {}: /init's configuration names {} as the root",
            facts.root.source,
            other.map(|r| r.to_string()).unwrap_or_else(|| "nothing".into())
        )),
    }
    missing
}

/// What a ZFS root needs besides its pool's disks (proven with the other links): zfs (and
/// spl), zpool and zfs, the host's hostid (without it the pool, last imported by this host,
/// is refused as another system's), and /init's configuration naming the dataset.
fn zfs_root(c: &mut Check, facts: &Facts, z: &leanrd_contract::ZfsRoot) -> Vec<String> {
    let what = format!("the ZFS root {}", facts.root.source);
    let mut missing = Vec::new();
    if let Err(e) = c.loadable("zfs") {
        missing.push(format!("{what} needs zfs: {e}"));
    }
    for prog in ["zpool", "zfs"] {
        if let Err(e) = c.program(prog) {
            missing.push(format!("{what}: {e}"));
        }
    }
    if facts.zfs_hostid && !is_file(c.v, "/etc/hostid") {
        missing.push(format!(
            "{what}: /etc/hostid is not in the image, and this host has one: its pool would be refused as in use \
             by another system"
        ));
    }
    match c.conf.as_ref().and_then(|conf| conf.mounts.root.as_ref()) {
        Some(Root::Zfs(got)) if got == z => {}
        other => missing.push(format!(
            "{what}: /init's configuration names {} as the root",
            other.map(|r| r.to_string()).unwrap_or_else(|| "nothing".into())
        )),
    }
    missing
}

/// What any root over the network needs: these modules (or the kernel's own drivers), the
/// packet socket /init's DHCP client sends on, and an interface to reach it (the interfaces'
/// links are proven with the other devices).
fn network_root(c: &mut Check, facts: &Facts, what: &str, modules: &[&str]) -> Vec<String> {
    let mut missing = Vec::new();
    for m in modules.iter().chain(&["af_packet"]) {
        let r = match c.kernel.map(|k| k.db.resolve(m)) {
            Some(Resolved::Builtin) => Ok(()),
            Some(Resolved::Missing) => Err("the kernel has neither the module nor the driver".to_string()),
            _ => c.loadable(m),
        };
        if let Err(e) = r {
            missing.push(format!("{what} needs {m}: {e}"));
        }
    }
    if !facts.links.iter().any(|l| l.role == "root" && facts.interfaces.contains(&l.serves)) {
        missing.push(format!("{what}: no network interface to reach it"));
    }
    missing
}

/// What a root on iSCSI needs besides its layer (iscsistart, turned on in /init's
/// configuration, checked with the other layers): the network, and the targets to log in to.
fn iscsi_root(c: &mut Check, facts: &Facts) -> Vec<String> {
    let names: Vec<&str> = facts.iscsi.iter().map(|t| t.name.as_str()).collect();
    let what = format!("the root's iSCSI target {}", names.join(", "));
    let mut missing = network_root(c, facts, &what, &["iscsi_tcp"]);
    let told = c.conf.as_ref().map(|conf| conf.iscsi.iter().map(|t| t.name.as_str()).collect::<Vec<_>>());
    if let Some(told) = told
        && let Some(n) = names.iter().find(|n| !told.contains(n))
    {
        missing.push(format!("the root's iSCSI target {n}: /init's configuration does not name it"));
    }
    missing
}

/// What a root on NVMe over TCP needs: the network, nvme-tcp, /init able to connect (no
/// program: /dev/nvme-fabrics) and told the subsystems.
fn nvmf_root(c: &mut Check, facts: &Facts) -> Vec<String> {
    let names: Vec<&str> = facts.nvmf.iter().filter_map(|t| t.nqn.as_deref()).collect();
    let what = format!("the root's NVMe/TCP subsystem {}", names.join(", "));
    let mut missing = network_root(c, facts, &what, &["nvme_tcp"]);
    if let Some(conf) = &c.conf {
        if conf.layer(Capability::Nvmf).is_none() {
            missing.push(format!("{what}: /init's configuration does not turn on nvmf"));
        }
        if let Some(n) = names.iter().find(|n| !conf.nvmf.iter().any(|t| t.nqn.as_deref() == Some(**n))) {
            missing.push(format!("the root's NVMe/TCP subsystem {n}: /init's configuration does not name it"));
        }
    }
    missing
}

/// What a universal image promises, by class: every module its features name (globs over the
/// kernel's module tree expanded: every storage controller, every cipher...), the file system
/// of every feature that mounts one, and every program a feature brings, with its libraries.
pub struct Promise {
    /// Module names and aliases the features name (globs already expanded), each to be loadable
    /// from the image when the kernel has it as a module.
    pub modules: Vec<String>,
    /// File system types the features mount, each with its driver (`fs-TYPE`) loadable from the
    /// image unless built in.
    pub fstypes: Vec<String>,
    /// Programs the features bring, each to be in a `SEARCH_PATH` directory of the image with its
    /// libraries and interpreter.
    pub programs: Vec<String>,
}

/// Prove a universal image keeps its promise; Err lists what is missing.
pub(crate) fn prove_universal(v: &dyn ImageView, p: &Promise, kernel: &Kernel) -> Result<Proven, Vec<String>> {
    let mut missing = Vec::new();
    if !is_file(v, "/init") {
        missing.push("/init is not in the image".to_string());
    }
    let mods = match image_modules(v, &kernel.kver) {
        Ok(m) => m,
        Err(e) => return Err(vec![e]),
    };
    let mut c = Check::new(v, mods, Some(kernel), config(v));
    if is_file(v, "/init")
        && let Err(e) = c.elf("/init", "/init")
    {
        missing.push(e);
    }
    missing.extend(c.module_files(&kernel.kver));
    missing.extend(c.console());
    let mut seen = BTreeSet::new();
    for m in p.modules.iter().filter(|m| seen.insert(leanrd_kmod::normalize(m))) {
        if c.kernel_module(m) == Some(true)
            && let Err(e) = c.loadable(m)
        {
            missing.push(format!("a universal image promises {m}: {e}"));
        }
    }
    for t in &p.fstypes {
        let alias = format!("fs-{t}");
        if c.kernel_module(&alias) == Some(true)
            && let Err(e) = c.loadable(&alias)
        {
            missing.push(format!("a universal image mounts {t}: {e}"));
        }
    }
    for prog in &p.programs {
        if let Err(e) = c.program(prog) {
            missing.push(e);
        }
    }
    if missing.is_empty() { Ok(Proven { kver: kernel.kver.clone(), checks: c.checks }) } else { Err(missing) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(entries: &[(&str, Node, &[u8])]) -> MemImage {
        let mut m = MemImage::default();
        for (p, n, d) in entries {
            m.nodes.insert(p.to_string(), (n.clone(), Some(d.to_vec())));
        }
        m
    }

    /// The proof's refusals of module files, each named with its reason: a vermagic of
    /// another kernel, a compression the kernel does not decompress (and a name that lies
    /// about it), an unsigned module where signatures are forced; the same image passes
    /// for the kernel it was made for.
    #[test]
    fn modules_the_kernel_cannot_load_are_refused_with_the_reason() {
        use crate::kconfig::Origin;
        use leanrd_compress::{Format, Spec, compress_vec};
        use leanrd_testkit::module_elf;
        let k = "6.12.1-test";
        let conf = |t: &str| KernelConfig::parse(t, Origin::File("/boot/config-6.12.1-test".into()));
        let xz_kernel = conf("CONFIG_MODULE_DECOMPRESS=y\nCONFIG_MODULE_COMPRESS_XZ=y\n");
        let elf = module_elf(k, "a", b"code", true);
        let z = |f: Format, d: &[u8]| compress_vec(Spec::new(f), 1, d).unwrap();
        let read = |d: &[u8]| ModuleFile::read(d, None);
        assert_eq!(unloadable(&read(&elf), "a.ko", k, &xz_kernel), None);
        assert_eq!(unloadable(&read(&z(Format::Xz, &elf)), "a.ko.xz", k, &xz_kernel), None);
        let why = unloadable(&read(&module_elf("6.1.0-56-amd64", "a", b"", true)), "a.ko", k, &xz_kernel).unwrap();
        assert_eq!(why, "built for kernel 6.1.0-56-amd64 (vermagic), not 6.12.1-test");
        let why = unloadable(&read(&z(Format::Zstd, &elf)), "a.ko.zst", k, &xz_kernel).unwrap();
        assert!(why.starts_with("compressed with zstd, and the kernel decompresses only xz modules"), "{why}");
        assert!(why.contains("CONFIG_MODULE_COMPRESS_ZSTD is not set in /boot/config-6.12.1-test"), "{why}");
        let none = conf("# CONFIG_MODULE_DECOMPRESS is not set\n");
        let why = unloadable(&read(&z(Format::Xz, &elf)), "a.ko.xz", k, &none).unwrap();
        assert!(why.contains("decompresses no modules"), "{why}");
        let why = unloadable(&read(&z(Format::Xz, &elf)), "a.ko.xz", k, &KernelConfig::unknown()).unwrap();
        assert!(why.contains("configuration is unknown"), "{why}");
        let why = unloadable(&read(&z(Format::Zstd, &elf)), "a.ko.xz", k, &xz_kernel).unwrap();
        assert_eq!(why, "named .xz but compressed with zstd");
        assert_eq!(
            unloadable(&read(&z(Format::Xz, &elf)), "a.ko", k, &xz_kernel).unwrap(),
            "named .ko but compressed with xz: loaded as ELF, it fails"
        );
        assert_eq!(unloadable(&read(b"not a module"), "a.ko", k, &xz_kernel).unwrap(), "not an ELF object");
        let corrupt = unloadable(&read(b"\xfd7zXZ\0garbage"), "a.ko.xz", k, &xz_kernel).unwrap();
        assert!(corrupt.starts_with("cannot decompress its xz"), "{corrupt}");
        let forced = conf("CONFIG_MODULE_SIG_FORCE=y\n");
        let unsigned = read(&module_elf(k, "a", b"", false));
        assert!(unloadable(&unsigned, "a.ko", k, &forced).unwrap().contains("CONFIG_MODULE_SIG_FORCE"));
        assert_eq!(unloadable(&unsigned, "a.ko", k, &xz_kernel), None);
        assert_eq!(unloadable(&read(&elf), "a.ko", k, &forced), None);

        // In an image: grouped by reason, the modules named.
        let dep = "kernel/a.ko:\nkernel/b.ko:\nkernel/c.ko:\nkernel/d.ko:\nkernel/e.ko:\nkernel/f.ko.zst:\n";
        let old = module_elf("6.1.0-56-amd64", "x", b"", false);
        let zst = z(Format::Zstd, &elf);
        let mut files: Vec<(String, Vec<u8>)> = vec![
            (format!("/lib/modules/{k}/modules.dep"), dep.as_bytes().to_vec()),
            (format!("/lib/modules/{k}/kernel/a.ko"), elf.clone()),
            (format!("/lib/modules/{k}/kernel/f.ko.zst"), zst),
        ];
        for m in ["b", "c", "d", "e"] {
            files.push((format!("/lib/modules/{k}/kernel/{m}.ko"), old.clone()));
        }
        let mut v = MemImage::default();
        for (p, d) in files {
            v.nodes.insert(p, (Node::File, Some(d)));
        }
        for d in ["/lib", "/lib/modules", &format!("/lib/modules/{k}"), &format!("/lib/modules/{k}/kernel")] {
            v.nodes.insert(d.to_string(), (Node::Dir, None));
        }
        let mods = image_modules(&v, k).unwrap();
        let mut c = Check::new(&v, mods, None, None);
        let out = c.module_files(k);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(
            out[0].starts_with("4 modules kernel 6.12.1-test cannot load as stored: built for kernel 6.1.0-56-amd64"),
            "{out:?}"
        );
        assert!(
            out[0].ends_with(
                "/kernel/b.ko, /lib/modules/6.12.1-test/kernel/c.ko, /lib/modules/6.12.1-test/kernel/d.ko and 1 more"
            ),
            "{out:?}"
        );
        assert!(out[1].starts_with("1 module kernel 6.12.1-test cannot load as stored: compressed with zstd, and the kernel's configuration is unknown"), "{out:?}");
        assert_eq!(c.checks, 6);
    }

    #[test]
    fn the_verity_devices_a_command_line_names_are_read_as_init_reads_them() {
        let h = "0123456789abcdef0123456789abcdeffedcba9876543210fedcba9876543210";
        let (named, bad) = verity_words(&format!(
            "quiet roothash={h} usrhash=xyz systemd.verity_root_options=panic-on-corruption \
             systemd.verity_usr_options=frobnicate root=/dev/mapper/root"
        ));
        assert_eq!(named, [format!("roothash={h}")]);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].starts_with("usrhash=") && bad[1].contains("frobnicate"), "{bad:?}");
        assert_eq!(verity_words("root=UUID=1 ro"), (Vec::new(), Vec::new()));
    }

    #[test]
    fn verify_reads_every_module_but_not_firmware() {
        for p in ["/usr/lib/modules/6.1/kernel/drivers/firmware/qemu_fw_cfg.ko", "/lib/modules/k/a.ko.xz", "/init"] {
            assert!(MemImage::wants_data(p), "{p}");
        }
        for p in [
            "/lib/firmware/rtl_nic/rtl8168h-2.fw",
            "/usr/lib/firmware/i915/x.bin.zst",
            "/kernel/x86/microcode/GenuineIntel.bin",
        ] {
            assert!(!MemImage::wants_data(p), "{p}");
        }
    }

    /// The font and keymap /init's configuration names must be in the image, the font one
    /// the kernel takes.
    #[test]
    fn the_console_font_and_keymap_named_are_in_the_image() {
        let conf =
            InitConfig { font: Some("Uni2-Terminus32x16".into()), keymap: Some("de".into()), ..Default::default() };
        let mut v = MemImage::default();
        for d in ["/etc", "/etc/leanrd", leanrd_contract::FONT_DIR, leanrd_contract::KEYMAP_DIR] {
            v.nodes.insert(d.to_string(), (Node::Dir, None));
        }
        let check = |v: &MemImage| {
            let mods = Mods { dir: "/lib/modules/x".into(), db: ModuleDb::default() };
            Check::new(v, mods, None, Some(conf.clone())).console()
        };
        let out = check(&v);
        assert_eq!(
            out,
            [
                "the console font Uni2-Terminus32x16 /init's configuration names: \
                 /etc/leanrd/fonts/Uni2-Terminus32x16.psf is not in the image",
                "the keymap de /init's configuration names: /etc/leanrd/keymaps/de.bmap is not in the image",
            ]
        );
        let font = "/etc/leanrd/fonts/Uni2-Terminus32x16.psf".to_string();
        v.nodes.insert(font.clone(), (Node::File, Some(b"garbage".to_vec())));
        v.nodes.insert("/etc/leanrd/keymaps/de.bmap".into(), (Node::File, Some(Vec::new())));
        assert_eq!(
            check(&v),
            ["the console font Uni2-Terminus32x16 /init's configuration names: \
              /etc/leanrd/fonts/Uni2-Terminus32x16.psf is not a font the kernel takes: not a PSF font (no PSF1 or PSF2 magic)"]
        );
        let mut psf = vec![0x36, 0x04, 0, 16];
        psf.extend([0u8; 256 * 16]);
        v.nodes.insert(font, (Node::File, Some(psf)));
        assert!(check(&v).is_empty());
    }

    /// Whether program `path` runs in the image (and how many objects that took).
    fn check_program(v: &dyn ImageView, path: &str) -> (Result<(), String>, usize) {
        let mods = Mods { dir: "/lib/modules/x".into(), db: ModuleDb::default() };
        let mut c = Check::new(v, mods, None, None);
        (c.elf(path, path), c.checks)
    }

    fn check_init(v: &dyn ImageView) -> Result<(), String> {
        check_program(v, "/init").0
    }

    /// A script runs only with its interpreter; a file that is neither ELF nor a script, or a
    /// script that names itself, does not run at all.
    #[test]
    fn init_scripts_need_their_interpreter() {
        let script = mem(&[("/init", Node::File, b"#!/bin/sh\nexec /sbin/init\n")]);
        let e = check_init(&script).unwrap_err();
        assert!(e.contains("/bin/sh is not in the image") && e.contains("a script run by /bin/sh"), "{e}");
        let text = mem(&[("/init", Node::File, b"just text\n")]);
        assert!(check_init(&text).unwrap_err().contains("neither an ELF executable nor a #! script"));
        let selfish = mem(&[("/init", Node::File, b"#!/init\n")]);
        assert!(check_init(&selfish).unwrap_err().contains("names itself"));
        // Through a symlink to a script whose interpreter is a script of its own.
        let chain = mem(&[
            ("/init", Node::Symlink("bin/run".into()), b""),
            ("/bin", Node::Dir, b""),
            ("/bin/run", Node::File, b"#!/bin/sh -e\n"),
            ("/bin/sh", Node::File, b"#!/bin/missing\n"),
        ]);
        let e = check_init(&chain).unwrap_err();
        assert!(e.contains("/bin/missing is not in the image"), "{e}");
    }

    /// systemd (dracut's /init): libsystemd-core needs libsystemd-shared, which only the
    /// executable's RUNPATH finds; ld.so has loaded it by then. The generator adds it and the
    /// proof accepts it; without it, the proof names it.
    #[test]
    fn a_library_already_loaded_satisfies_a_later_need() {
        let systemd = "/lib/systemd/systemd";
        if !Path::new(systemd).exists() {
            leanrd_testkit::skip::<()>(&format!("no {systemd} on this host"));
            return;
        }
        let mut plan = Plan::new(Path::new("/"));
        crate::elf::Resolver::new(&mut plan).add_binary(systemd).unwrap();
        let shared = plan.items.keys().find(|k| k.contains("libsystemd-shared")).cloned();
        let shared = shared.expect("libsystemd-shared in the plan");
        let check = |plan: &Plan| check_program(plan, systemd);
        let (r, checks) = check(&plan);
        assert_eq!(r, Ok(()));
        assert!(checks > 5, "{checks} objects checked");
        plan.items.remove(&shared);
        let e = check(&plan).0.unwrap_err();
        assert!(e.contains("libsystemd-shared"), "{e}");
    }

    #[test]
    fn symlinks_resolve_inside_the_image() {
        let m = mem(&[
            ("/lib", Node::Symlink("usr/lib".into()), b""),
            ("/usr", Node::Dir, b""),
            ("/usr/lib", Node::Dir, b""),
            ("/usr/lib/x.so", Node::File, b""),
            ("/usr/lib/abs", Node::Symlink("/usr/lib/x.so".into()), b""),
            ("/loop", Node::Symlink("/loop".into()), b""),
        ]);
        assert_eq!(resolve(&m, "/lib/x.so").as_deref(), Some("/usr/lib/x.so"));
        assert_eq!(resolve(&m, "/lib/abs").as_deref(), Some("/usr/lib/x.so"));
        assert_eq!(resolve(&m, "/lib/none"), None);
        assert_eq!(resolve(&m, "/loop/x"), None);
        assert!(is_file(&m, "/lib/../lib/x.so"));
        assert_eq!(children_of(m.nodes.keys(), "/usr/lib"), ["abs", "x.so"]);
    }
}
