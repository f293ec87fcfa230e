//! The initramfs generator: configuration and host facts in, a [`plan::Plan`] of entries out.
//! The plan is plain data; `leanrd build` hands it to the archiver (or prints it as a
//! gen_init_cpio manifest). Nothing is staged: entries point at their source files.

pub mod elf;
pub mod features;
pub mod host;
pub mod modules;
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use leanrd_kmod::Resolved;

use crate::features::{Feature, When};
use crate::host::Facts;
use crate::modules::Kernel;
use crate::plan::{Item, Plan, host_path};

/// Where the generated /init configuration goes in the image.
pub const INIT_CONF: &str = "/etc/leanrd/init.conf";

#[derive(Debug, Clone)]
pub struct Options {
    /// Root of the system the image is for (binaries, libraries, modules, firmware).
    pub sysroot: PathBuf,
    /// Where proc/ and sys/ are read for host detection ("/" normally; a fixture in tests).
    pub host_root: PathBuf,
    pub kver: String,
    pub universal: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub features_dir: Option<PathBuf>,
    /// The /init executable on the build machine.
    pub init: PathBuf,
    /// For transformed files (decompressed modules, microcode bundles).
    pub tmp: PathBuf,
}

/// What the generator decided.
#[derive(Debug, Clone)]
pub struct Generated {
    pub main: Plan,
    /// The early uncompressed segment (CPU microcode), if any.
    pub early: Option<Plan>,
    pub features: Vec<String>,
    pub modules: BTreeSet<String>,
    pub warnings: Vec<String>,
    pub facts: Option<Facts>,
}

fn detected(f: &Feature, facts: &Facts, sysroot: &Path) -> bool {
    let fs_match =
        f.fstypes.iter().any(|t| *t == facts.root.fstype || facts.usr.as_ref().is_some_and(|u| u.fstype == *t));
    let stack_match = f.stack.iter().any(|s| facts.stack.contains(s));
    let ucode = f.microcode
        && ["/lib/firmware/intel-ucode", "/lib/firmware/amd-ucode"].iter().any(|d| host_path(sysroot, d).is_dir());
    fs_match || stack_match || ucode
}

/// Choose the features for this build, each with whether it is required (always, asked
/// for, or found on the host) or only there because the build is universal (then a missing
/// binary is a warning, not an error).
pub fn select(all: &BTreeMap<String, Feature>, o: &Options, facts: Option<&Facts>) -> Vec<(Feature, bool)> {
    all.values()
        .filter_map(|f| {
            if o.exclude.contains(&f.name) {
                return None;
            }
            if o.include.contains(&f.name) {
                return Some((f.clone(), true));
            }
            let required = match f.when {
                When::Always => Some(true),
                When::Detected if facts.is_some_and(|x| detected(f, x, &o.sysroot)) => Some(true),
                When::Detected | When::Universal if o.universal => Some(false),
                _ => None,
            };
            required.map(|r| (f.clone(), r))
        })
        .collect()
}

/// Find the root's UUID from /dev/disk/by-uuid under the host root, when it is there.
fn root_spec(host_root: &Path, facts: &Facts) -> String {
    let src = &facts.root.source;
    let dev_name = Path::new(src).file_name().map(|n| n.to_owned());
    if let (Ok(rd), Some(name)) = (fs::read_dir(host_root.join("dev/disk/by-uuid")), dev_name) {
        for e in rd.flatten() {
            if let Ok(t) = fs::read_link(e.path())
                && t.file_name() == Some(name.as_os_str())
            {
                return format!("UUID={}", e.file_name().to_string_lossy());
            }
        }
    }
    src.clone()
}

pub fn generate(o: &Options) -> Result<Generated> {
    let all = features::load(o.features_dir.as_deref())?;
    features::check_names(&all, &o.include)?;
    features::check_names(&all, &o.exclude)?;
    let kernel = Kernel::load(&o.sysroot, &o.kver)?;
    let facts = if o.universal {
        None
    } else {
        Some(
            host::detect(&o.host_root)
                .context("host detection failed (use --universal to build an image for any machine)")?,
        )
    };
    let selected = select(&all, o, facts.as_ref());
    let chosen: Vec<Feature> = selected.iter().map(|(f, _)| f.clone()).collect();
    let mut warnings = Vec::new();

    // Modules: from features, then from the host's devices. `load` is what /init loads
    // before looking for root: what required features and the host's devices need.
    // Modules a feature has only because the build is universal are left to coldplug and
    // to the root probe (which loads fs-<type>).
    let mut wanted: Vec<String> = Vec::new();
    let mut load: Vec<String> = Vec::new();
    for (f, required) in &selected {
        let list = f.modules.iter().chain(if o.universal { f.universal_modules.iter() } else { [].iter() });
        for m in list {
            let names: Vec<String> =
                if m.contains('/') { kernel.db.glob(m).into_iter().collect() } else { vec![m.clone()] };
            if *required {
                load.extend(names.iter().cloned());
            }
            wanted.extend(names);
        }
    }
    if let Some(x) = &facts {
        for fsname in [Some(&x.root), x.usr.as_ref()].into_iter().flatten().map(|m| &m.fstype) {
            match kernel.db.resolve(&format!("fs-{fsname}")) {
                Resolved::Missing if !["nfs", "tmpfs", "overlay", "virtiofs", "9p"].contains(&fsname.as_str()) => {
                    bail!("root file system type {fsname}: kernel {} has no module or built-in driver for it", o.kver)
                }
                _ => {
                    wanted.push(format!("fs-{fsname}"));
                    load.push(format!("fs-{fsname}"));
                }
            }
        }
        // Every modalias on the device chain; drivers bound on the running kernel too (a
        // driver built into this kernel may be a module in the target).
        let mut found_driver = x.root.dev.0 == 0;
        for a in &x.modaliases {
            match kernel.db.resolve(a) {
                Resolved::Modules(_) | Resolved::Builtin => {
                    found_driver = true;
                    wanted.push(a.clone());
                    load.push(a.clone());
                }
                Resolved::Missing => {}
            }
        }
        for d in x.drivers.iter().chain(&x.modules) {
            match kernel.db.resolve(d) {
                Resolved::Missing => {}
                _ => {
                    found_driver = true;
                    wanted.push(d.clone());
                    load.push(d.clone());
                }
            }
        }
        if !found_driver {
            bail!(
                "no driver found for the root device {} (devices walked: {}; modaliases: {}): the image would not \
                 boot; use --universal",
                x.root.source,
                x.devices.join(", "),
                x.modaliases.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    let (set, missing) = kernel.resolve(wanted.iter().map(String::as_str));
    for m in missing {
        // Feature lists name modules some kernels lack (e.g. crc32c_intel); only say so.
        warnings.push(format!("module {m} not found in kernel {}", o.kver));
    }

    let mut plan = Plan::new(&o.sysroot);
    plan.add_console();
    let init_md =
        fs::metadata(&o.init).with_context(|| format!("{}: the /init binary is missing", o.init.display()))?;
    if !init_md.is_file() {
        bail!("{}: the /init binary is not a file", o.init.display());
    }
    plan.put("/init", Item::File { src: o.init.clone(), mode: 0o755 });
    for f in &chosen {
        for d in &f.dirs {
            plan.put(d, Item::Dir { mode: 0o755 });
        }
    }
    {
        let mut r = elf::Resolver::new(&mut plan);
        // /init itself may be dynamic (a development build): give it its libraries.
        r.add_dependencies_of(&o.init)?;
        for (f, required) in &selected {
            for b in &f.binaries {
                match r.which(b) {
                    Some(path) => r.add_binary(&path).with_context(|| format!("feature {}", f.name))?,
                    None if *required => bail!("feature {}: binary {b} not found (install it)", f.name),
                    None => warnings.push(format!("feature {}: binary {b} not found, left out", f.name)),
                }
            }
            for l in &f.libraries {
                r.add_library_if_present(l)?;
            }
        }
    }
    for f in &chosen {
        for file in &f.files {
            if host_path(&o.sysroot, file).exists() {
                plan.add_host_path(file)?;
            } else {
                warnings.push(format!("feature {}: {file} not found, skipped", f.name));
            }
        }
        for fw in &f.firmware {
            match plan.add_host_path(&format!("/lib/firmware/{fw}")) {
                Ok(_) => {}
                Err(_) => warnings.push(format!("feature {}: firmware {fw} not found", f.name)),
            }
        }
    }
    warnings.extend(kernel.add_to_plan(&mut plan, &set, &o.tmp)?);

    let names: Vec<String> = chosen.iter().map(|f| f.name.clone()).collect();
    let mut conf = format!("# leanrd /init configuration, generated\nkver {}\n", o.kver);
    // What to load before looking for root (the /init resolves these with the image's tables).
    let mut seen = BTreeSet::new();
    load.retain(|m| seen.insert(m.clone()));
    conf += &format!("load {}\n", load.join(" "));
    if let Some(x) = &facts {
        conf += &format!("root {}\nrootfstype {}\n", root_spec(&o.host_root, x), x.root.fstype);
    }
    conf += &format!("features {}\n", names.join(" "));
    plan.put(INIT_CONF, Item::Inline { data: conf.into_bytes(), mode: 0o644 });

    let early = if chosen.iter().any(|f| f.microcode) { microcode(o, facts.is_some())? } else { None };
    Ok(Generated { main: plan, early, features: names, modules: set, warnings, facts })
}

/// The early microcode segment: every microcode file of the vendor concatenated into the
/// one file the kernel's early loader reads (host-only: only this CPU's vendor).
fn microcode(o: &Options, host_only: bool) -> Result<Option<Plan>> {
    let vendor = if host_only {
        fs::read_to_string(o.host_root.join("proc/cpuinfo")).ok().and_then(|c| {
            c.lines().find(|l| l.starts_with("vendor_id")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
    } else {
        None
    };
    let mut plan = Plan::new(&o.sysroot);
    for (v, dir, name) in [
        ("GenuineIntel", "/lib/firmware/intel-ucode", "GenuineIntel.bin"),
        ("AuthenticAMD", "/lib/firmware/amd-ucode", "AuthenticAMD.bin"),
    ] {
        if vendor.as_deref().is_some_and(|x| x != v) {
            continue;
        }
        let Ok(rd) = fs::read_dir(host_path(&o.sysroot, dir)) else { continue };
        let mut files: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
        if files.is_empty() {
            continue;
        }
        let mut blob = Vec::new();
        for f in files {
            blob.extend(fs::read(&f).with_context(|| format!("{}: cannot read", f.display()))?);
        }
        let dst = o.tmp.join(name);
        fs::write(&dst, blob).with_context(|| format!("{}: cannot write", dst.display()))?;
        // The early loader wants exactly this name, without "./" and with no symlinks.
        plan.put(&format!("/kernel/x86/microcode/{name}"), Item::File { src: dst, mode: 0o644 });
    }
    Ok(if plan.items.is_empty() { None } else { Some(plan) })
}
