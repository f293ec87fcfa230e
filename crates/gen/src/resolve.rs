//! Module resolution: from the selected features and the host's devices to the set of
//! modules in the image, and the list /init loads before looking for the root.

use std::collections::BTreeSet;

use leanrd_archive::{Result, bail};
use leanrd_kmod::Resolved;

use crate::host::Facts;
use crate::modules::Kernel;
use crate::request::Request;
use crate::select::Selected;
use leanrd_contract::NOT_BLOCK_FSTYPES;

/// What resolution decided.
#[derive(Debug, Default)]
pub(crate) struct Modules {
    /// Every module in the image (dependencies and soft dependencies included).
    pub set: BTreeSet<String>,
    /// Names, aliases and modaliases /init loads before looking for the root, in order.
    pub load: Vec<String>,
    pub warnings: Vec<String>,
}

/// A feature's module entries, globs (containing `/`) expanded over the module tree.
pub(crate) fn feature_modules(kernel: &Kernel, s: &Selected, universal: bool) -> Vec<String> {
    let f = &s.feature;
    let extra = if universal { f.universal_modules.as_slice() } else { &[] };
    let mut out = Vec::new();
    for m in f.modules.iter().chain(extra) {
        if m.contains('/') {
            out.extend(kernel.db.glob(m));
        } else {
            out.push(m.clone());
        }
    }
    out
}

/// The host's root and /usr file systems and the drivers of their devices. Fails when the
/// image could not find the root's device.
fn host_modules(kernel: &Kernel, x: &Facts, wanted: &mut Vec<String>, load: &mut Vec<String>) -> Result<()> {
    for fsname in [Some(&x.root), x.usr.as_ref()].into_iter().flatten().map(|m| &m.fstype) {
        let alias = format!("fs-{fsname}");
        if matches!(kernel.db.resolve(&alias), Resolved::Missing) && !NOT_BLOCK_FSTYPES.contains(&fsname.as_str()) {
            bail!("root file system type {fsname}: kernel {} has no module or built-in driver for it", kernel.kver)
        }
        wanted.push(alias.clone());
        load.push(alias);
    }
    // Every modalias on the device chain; drivers bound on the running kernel too (a driver
    // built into this kernel may be a module in the target).
    // Only a root with no block device at all (detection walked none) needs no driver.
    let mut found_driver = x.devices.is_empty();
    for a in x.modaliases.iter().chain(&x.drivers).chain(&x.modules) {
        if !matches!(kernel.db.resolve(a), Resolved::Missing) {
            found_driver = true;
            wanted.push(a.clone());
            load.push(a.clone());
        }
    }
    if !found_driver {
        bail!(
            "no driver found for the root device {} (devices walked: {}; modaliases: {}): the image would not boot; \
             use --universal",
            x.root.source,
            x.devices.join(", "),
            x.modaliases.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}

/// Take the omitted modules out of the set, and every module that depends on one of them
/// (it could not load without it); what was taken out, sorted.
fn omit(set: &mut BTreeSet<String>, omitted: &[String], db: &leanrd_kmod::ModuleDb) -> Vec<String> {
    let mut gone: BTreeSet<String> = omitted.iter().filter(|m| set.contains(*m)).cloned().collect();
    loop {
        let more: Vec<String> = set
            .iter()
            .filter(|m| !gone.contains(*m))
            .filter(|m| db.deps.get(*m).is_some_and(|d| d.iter().any(|x| gone.contains(x))))
            .cloned()
            .collect();
        if more.is_empty() {
            break;
        }
        gone.extend(more);
    }
    set.retain(|m| !gone.contains(m));
    gone.into_iter().collect()
}

/// Modules from features, then from the host's devices. Modules a feature has only because
/// the build is universal are left to coldplug and to the root probe (which loads
/// fs-<type>); required features' modules are loaded up front.
/// `extra`: modules, aliases or modaliases for the image that /init loads itself when it
/// needs them (keyboards, a key file's device); those the kernel has no module for are left.
pub(crate) fn modules(
    r: &Request,
    kernel: &Kernel,
    selected: &[Selected],
    facts: Option<&Facts>,
    extra: &[String],
) -> Result<Modules> {
    let mut wanted: Vec<String> = Vec::new();
    let mut load: Vec<String> = Vec::new();
    for s in selected {
        // A required feature's own modules load up front; the drivers a universal build adds
        // (globs over the module tree) are for coldplug to pick from, not to load all at once.
        let own = feature_modules(kernel, s, false);
        if s.required {
            load.extend(own.iter().cloned());
        }
        wanted.extend(if r.universal { feature_modules(kernel, s, true) } else { own });
    }
    if let Some(x) = facts {
        host_modules(kernel, x, &mut wanted, &mut load)?;
    }
    wanted.extend(extra.iter().filter(|a| matches!(kernel.db.resolve(a), Resolved::Modules(_))).cloned());
    let (mut set, missing) = kernel.resolve(wanted.iter().map(String::as_str));
    // Feature lists name modules some kernels lack (e.g. crc32c_intel); only say so.
    let mut warnings: Vec<String> =
        missing.into_iter().map(|m| format!("module {m} not found in kernel {}", r.kver)).collect();
    if !r.omit_modules.is_empty() {
        let gone = omit(&mut set, &r.omit_modules, &kernel.db);
        if !gone.is_empty() {
            warnings.push(format!("modules omitted (omit_modules): {}", gone.join(", ")));
        }
        load.retain(|m| !gone.contains(&leanrd_kmod::normalize(m)));
    }
    let mut seen = BTreeSet::new();
    load.retain(|m| seen.insert(m.clone()));
    Ok(Modules { set, load, warnings })
}
