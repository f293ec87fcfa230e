//! The initramfs generator, as a pipeline of plain functions:
//!
//! request ([`request`]: command line and configuration merged once) → host facts
//! ([`host`]) → feature selection (`select`, over [`features`] registered from
//! features/*.toml) → resolution (`resolve`: modules; `elf`: libraries; firmware) → plan
//! (`compose`, into a [`plan::Plan`]) → image (`leanrd build` hands the plan to the
//! archiver). Nothing is staged: entries point at their source files. What /init is told
//! is one [`leanrd_contract::InitConfig`].
//!
//! ```no_run
//! use leanrd_gen::request::{Request, Settings};
//!
//! let tmp = tempfile::tempdir()?;
//! let s = Settings { kver: Some("6.1.0-28-amd64".into()), universal: Some(true), ..Settings::default() };
//! let g = leanrd_gen::generate(&Request::new(s, tmp.path())?)?;
//! println!("{} entries, features {}", g.main.items.len(), g.features.join(" "));
//! # Ok::<(), leanrd_archive::Error>(())
//! ```

#![deny(missing_docs)]

mod compose;
mod crypt;
mod digest;
mod elf;
pub mod features;
mod font;
pub mod gpu;
pub mod host;
mod kconfig;
mod keymap;
mod modcache;
mod modprobe;
mod modules;
pub mod plan;
mod plymouth;
pub mod proof;
pub mod request;
mod resolve;
mod select;
mod ssh;
mod stack;

use std::collections::BTreeSet;

use leanrd_archive::{Context, Result};

use crate::host::Facts;
use crate::plan::Plan;
// The surface: the stages' namespaces above (request, host, features, plan, proof) and, here,
// what the command line, the tests and the fuzz targets name from the private stages.
pub use crate::digest::{Inputs, SegmentInputs, digest_path, inputs};
pub use crate::elf::{LdCache, Resolver, runs_here, sysroot_command, sysroot_is_native, target_arch};
pub use crate::kconfig::{KernelConfig, Origin, check_image_compression};
pub use crate::modcache::{Hit, ModuleCache};
pub use crate::modules::{Kernel, MODULE_MAX, MODULE_SIG_STRING, ModuleFile, ModuleStrategy, modinfo};
pub use crate::request::{Request, Settings};
pub use crate::stack::{LAYERS, LayerDef, StackLayer};

/// What the generator decided.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The plan of the main segment: /init, its configuration, modules, programs and their files.
    pub main: Plan,
    /// The early uncompressed segment (CPU microcode), if any.
    pub early: Option<Plan>,
    /// The names of the features in the image, in the order they were selected.
    pub features: Vec<String>,
    /// Every kernel module in the image, by name.
    pub modules: BTreeSet<String>,
    /// What the user must hear about: features, programs, files or firmware left out, modules
    /// omitted, what host detection could not settle.
    pub warnings: Vec<String>,
    /// What the build decided or assumed that a user may want to know (how modules are
    /// stored, an unknown kernel configuration).
    pub notes: Vec<String>,
    /// What host detection found; None for a universal image.
    pub facts: Option<Facts>,
    /// The boot proof of the main segment (host-only: against the host's facts; universal:
    /// the classes its features promise), and what it took (see [`proof`]).
    pub proof: Option<(Result<proof::Proven, Vec<String>>, std::time::Duration)>,
    /// The cache this build may keep its module segment in.
    pub module_cache: Option<modcache::ModuleCache>,
}

/// Host facts: none for a universal image.
fn host_facts(r: &Request) -> Result<Option<Facts>> {
    if r.universal {
        return Ok(None);
    }
    let f = host::detect_all(&r.host_root, &r.sysroot)
        .context("host detection failed (use --universal to build an image for any machine)")?;
    Ok(Some(f))
}

/// Decide what the image for `r` holds, and prove that its main segment boots (a failed proof
/// is [`Generated::proof`]'s result, not an error). An error when a feature file or a feature
/// named in `r` is invalid, the kernel's modules cannot be read, host detection fails, no
/// driver is found for the host's root, a required binary or the /init executable is missing,
/// or a file the plan needs cannot be read or written.
pub fn generate(r: &Request) -> Result<Generated> {
    let all = features::load(r.features_dir.as_deref())?;
    features::check_names(&all, &r.include)?;
    features::check_names(&all, &r.exclude)?;
    let mut kernel = Kernel::load(&r.sysroot, &r.kver)?;
    kernel.set_strategy(r.module_compression);
    let mut notes: Vec<String> = kernel.config.assumption(&r.kver).into_iter().collect();
    let facts = host_facts(r)?;
    // The system's configuration the image carries (modprobe.d, the console), for both kinds.
    let config = host::read_config(&r.sysroot, facts.as_ref())?;
    let mut warnings = Vec::new();
    let selected = select::available(select::select(&all, r, facts.as_ref()), &r.sysroot, &mut warnings);
    let luks = selected.iter().any(|s| s.feature.init == Some(leanrd_contract::Capability::Luks));
    let mut crypt = if luks { crypt::select(r, facts.as_ref()) } else { crypt::CryptSelection::default() };
    // The token plugins the containers need come in with LUKS (not excluded, not twice).
    let mut selected = selected;
    for name in &crypt.token_features {
        if r.exclude.contains(name) || selected.iter().any(|s| s.feature.name == *name) {
            continue;
        }
        let Some(f) = all.get(name) else { continue };
        let missing: Vec<&String> =
            f.libraries.iter().filter(|l| elf::which_library(&r.sysroot, l).is_none()).collect();
        if missing.is_empty() {
            selected.push(select::Selected { feature: f.clone(), required: true });
        } else {
            crypt.warnings.push(format!(
                "feature {name}: {} not found (install {}); those containers are asked for their passphrase",
                missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                f.package.as_deref().unwrap_or("them")
            ));
        }
    }
    // Unlocking over SSH: with LUKS, when keys are given (or host-only, found); the host keys
    // made now if missing, before anything is composed.
    let ssh = if luks && !r.exclude.iter().any(|e| e == "ssh-unlock") { ssh::select(r)? } else { None };
    if ssh.is_some()
        && !selected.iter().any(|s| s.feature.name == "ssh-unlock")
        && let Some(f) = all.get("ssh-unlock")
    {
        selected.extend(select::available(
            vec![select::Selected { feature: f.clone(), required: false }],
            &r.sysroot,
            &mut warnings,
        ));
    }
    let ssh = ssh.filter(|_| selected.iter().any(|s| s.feature.name == "ssh-unlock"));
    if let Some(s) = &ssh {
        notes.push(format!("SSH unlock on port {}: host keys {}", s.port, s.fingerprints.join(", ")));
    }
    // What those need (luks-tpm2: the TPM's drivers).
    select::with_requirements(&all, r, &mut selected);
    let mods = resolve::modules(r, &kernel, &selected, facts.as_ref(), &crypt.modules)?;
    if let Some(f) = &facts
        && f.nics.is_empty()
        && f.interfaces.is_empty()
        && selected.iter().any(|s| s.feature.name == "clevis" || s.feature.name == "ssh-unlock")
    {
        warnings.push(
            "no network interface is up with a device on this machine: the image has no network driver for a Tang \
             server or SSH (build with --universal, or with the interface up)"
                .into(),
        );
    }
    let module_cache = open_cache(r, &kernel, &mods.set, &mut warnings);
    crypt.ssh = ssh;
    // A container bound with clevis is to open unattended: the proof fails closed when the
    // image cannot (no token /init can use, or the feature left out).
    let has_clevis = selected.iter().any(|s| s.feature.init == Some(leanrd_contract::Capability::Clevis));
    let clevis_failures: Vec<String> = std::mem::take(&mut crypt.clevis)
        .into_iter()
        .filter_map(|(name, r)| match r {
            Err(why) => Some(format!("{name} is bound with clevis, and no token of it opens from this image ({why})")),
            Ok(()) if !has_clevis => {
                Some(format!("{name} is bound with clevis, and this image has no clevis feature (--exclude clevis?)"))
            }
            Ok(()) => None,
        })
        .collect();
    let (main, more) =
        compose::main_plan(r, &kernel, &selected, facts.as_ref(), &config, &mods, crypt, module_cache.as_ref())?;
    let microcode = selected.iter().any(|s| s.feature.microcode);
    let early = if microcode { compose::microcode(r, facts.as_ref())? } else { None };
    warnings.extend(mods.warnings);
    notes.extend(mods.notes);
    warnings.extend(facts.iter().flat_map(|f| f.notes.iter().cloned()));
    warnings.extend(more);
    let features = selected.iter().map(|s| s.feature.name.clone()).collect();
    let start = std::time::Instant::now();
    let proven = match &facts {
        Some(f) => proof::prove(&main, f, Some(&kernel), &r.kver),
        None => {
            let promise = proof::Promise {
                modules: selected.iter().flat_map(|s| resolve::feature_modules(&kernel, s, true)).collect(),
                fstypes: selected.iter().flat_map(|s| s.feature.fstypes.iter().cloned()).collect(),
                programs: selected.iter().flat_map(|s| s.feature.binaries.iter().cloned()).collect(),
            };
            proof::prove_universal(&main, &promise, &kernel)
        }
    };
    // The image's own compression: the kernel must unpack it.
    let mut proven = proven;
    if let Err(e) = kconfig::check_image_compression(&kernel.config, r.compress.format, &r.kver) {
        proof::also_missing(&mut proven, e);
    }
    for f in clevis_failures {
        proof::also_missing(&mut proven, f);
    }
    let proof = Some((proven, start.elapsed()));
    notes.extend(kernel.storage_note(&mods.set));
    Ok(Generated { main, early, features, modules: mods.set, warnings, notes, facts, proof, module_cache })
}

/// The cache of decompressed modules and compressed module segments ([`modcache`]), when the
/// image has modules and the cache can be used (a warning says why it cannot).
fn open_cache(
    r: &Request,
    kernel: &Kernel,
    set: &BTreeSet<String>,
    warnings: &mut Vec<String>,
) -> Option<modcache::ModuleCache> {
    let base = r.module_cache.as_deref()?;
    if set.is_empty() {
        return None;
    }
    modcache::ModuleCache::open(base, &kernel.kver)
        .map_err(|why| warnings.push(format!("cache not used ({why}): modules are decompressed and compressed anew")))
        .ok()
}
