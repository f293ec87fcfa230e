//! Module resolution: from the selected features and the host's devices to the set of
//! modules in the image, and the list /init loads before looking for the root.

use std::collections::{BTreeMap, BTreeSet};

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
    /// What the user may want to know: modules this machine's CPU cannot run, left out.
    pub notes: Vec<String>,
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
        let mut alias = format!("fs-{fsname}");
        // A module that registers its file system without the `fs-` alias (zfs): by its name.
        if matches!(kernel.db.resolve(&alias), Resolved::Missing)
            && !matches!(kernel.db.resolve(fsname), Resolved::Missing)
        {
            alias = fsname.clone();
        }
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
        // The network for something other than the root (clevis's Tang, SSH): the drivers of
        // the machine's interfaces, for /init to load when it brings the network up.
        // The display's driver, for the splash (the drm feature; universal images list theirs).
        if selected.iter().any(|s| s.feature.name == "drm") {
            wanted.extend(
                x.display_modules.iter().filter(|a| !matches!(kernel.db.resolve(a), Resolved::Missing)).cloned(),
            );
        }
        if selected.iter().any(|s| s.feature.name == "net") {
            for l in &x.nics {
                wanted.extend(
                    l.modalias
                        .iter()
                        .chain(&l.driver)
                        .filter(|a| !matches!(kernel.db.resolve(a), Resolved::Missing))
                        .cloned(),
                );
            }
        }
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
    let mut notes = Vec::new();
    // The CPU's modalias numbers its features as the running kernel does, which the target's
    // module aliases need not: only for the running kernel's release.
    if let Some(x) = facts
        && let Some(cpu) = x.cpu_modalias.as_deref()
        && x.running_kernel.as_deref() == Some(r.kver.as_str())
    {
        // What the machine's devices and the running kernel name stays, as udev would load it.
        let mut keep: BTreeSet<String> = BTreeSet::new();
        for a in x.modaliases.iter().chain(&x.keyboard_modules) {
            keep.extend(kernel.db.match_alias(a));
        }
        keep.extend(x.drivers.iter().chain(&x.modules).map(|m| leanrd_kmod::normalize(m)));
        let gone = not_for_this_cpu(&mut set, cpu, &keep, &kernel.db);
        if !gone.is_empty() {
            notes.push(format!("left out, as this CPU lacks what they need: {}", gone.join(", ")));
        }
        load.retain(|m| !gone.contains(&leanrd_kmod::normalize(m)));
    }
    let mut seen = BTreeSet::new();
    load.retain(|m| seen.insert(m.clone()));
    Ok(Modules { set, load, warnings, notes })
}

/// Host-only: take out of `set` the modules bound to CPU features (they have
/// `cpu:type:...:feature:...` aliases: crc32c_intel needs SSE4.2, sha256_ssse3 one of SSSE3, AVX,
/// AVX2 or SHA-NI) of which none matches this CPU's modalias `cpu`. Their init checks the CPU
/// and fails with ENODEV, after the kernel has read and checked the module; a soft dependency's alias (`crc32c`) brings both them and
/// the generic module, which stays. One in `keep` (a device of the machine's asks for it)
/// stays, and so does one that a module kept depends on. Returns those taken out.
fn not_for_this_cpu(
    set: &mut BTreeSet<String>,
    cpu: &str,
    keep: &BTreeSet<String>,
    db: &leanrd_kmod::ModuleDb,
) -> Vec<String> {
    let mut cpu_aliases: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pat, m) in db.aliases.iter().filter(|(p, m)| p.starts_with("cpu:") && set.contains(m) && !keep.contains(m)) {
        cpu_aliases.entry(m).or_default().push(pat);
    }
    let mut gone: BTreeSet<String> = cpu_aliases
        .iter()
        .filter(|(_, pats)| !pats.iter().any(|p| leanrd_kmod::fnmatch(p.as_bytes(), cpu.as_bytes())))
        .map(|(m, _)| m.to_string())
        .collect();
    let needed: BTreeSet<String> =
        set.iter().filter(|m| !gone.contains(*m)).flat_map(|m| db.deps.get(m).into_iter().flatten().cloned()).collect();
    gone.retain(|m| !needed.contains(m));
    set.retain(|m| !gone.contains(m));
    gone.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use leanrd_kmod::{ModuleDb, Tables};

    /// A CPU without SSE4.2 (feature 0094) but with SSSE3 (0089): crc32c_intel cannot run, and
    /// goes unless a module kept depends on it; sha256_ssse3 can, and stays; a module with no
    /// CPU alias is never touched.
    #[test]
    fn modules_this_cpu_cannot_run_are_left_out() {
        let t = Tables {
            dep: b"kernel/crypto/crc32c_generic.ko:\nkernel/arch/x86/crypto/crc32c-intel.ko:\n\
                   kernel/arch/x86/crypto/sha256-ssse3.ko:\nkernel/fs/jbd2/jbd2.ko:\n\
                   kernel/x/needs-intel.ko: kernel/arch/x86/crypto/crc32c-intel.ko\n"
                .to_vec(),
            alias: b"alias crc32c crc32c_intel\nalias cpu:type:x86,ven*fam*mod*:feature:*0094* crc32c_intel\n\
                     alias crc32c crc32c_generic\nalias cpu:type:x86,ven*fam*mod*:feature:*0089* sha256_ssse3\n\
                     alias cpu:type:x86,ven*fam*mod*:feature:*013D* sha256_ssse3\n"
                .to_vec(),
            ..Tables::default()
        };
        let db = ModuleDb::parse(&t).unwrap();
        let cpu = "cpu:type:x86,ven0000fam0006mod0055:feature:,0000,0001,0089,0093,0095";
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let mut set = names(&["crc32c_generic", "crc32c_intel", "sha256_ssse3", "jbd2"]);
        let none = BTreeSet::new();
        assert_eq!(not_for_this_cpu(&mut set, cpu, &none, &db), ["crc32c_intel"]);
        assert_eq!(set, names(&["crc32c_generic", "sha256_ssse3", "jbd2"]));
        // With SSE4.2, nothing goes.
        let mut all = names(&["crc32c_generic", "crc32c_intel", "sha256_ssse3", "jbd2"]);
        assert!(not_for_this_cpu(&mut all, &format!("{cpu},0094"), &none, &db).is_empty());
        // One a device of the machine's asks for stays.
        let mut set = names(&["crc32c_intel"]);
        assert!(not_for_this_cpu(&mut set, cpu, &names(&["crc32c_intel"]), &db).is_empty());
        // A module kept that depends on it keeps it.
        let mut set = names(&["crc32c_intel", "needs_intel"]);
        assert!(not_for_this_cpu(&mut set, cpu, &none, &db).is_empty());
        assert_eq!(set.len(), 2);
    }
}
