//! Feature selection: which features this image gets, and whether each is required (always,
//! asked for, or found on the host) or only there because the build is universal (then a
//! missing binary is a warning, not an error).

use std::collections::BTreeMap;
use std::path::Path;

use crate::elf::which;
use crate::features::{Feature, When};
use crate::host::Facts;
use crate::plan::host_path;
use crate::request::Request;

/// A feature in the image.
#[derive(Debug, Clone)]
pub(crate) struct Selected {
    pub feature: Feature,
    pub required: bool,
}

/// Whether host detection finds what the feature is for.
fn detected(f: &Feature, facts: &Facts, sysroot: &Path) -> bool {
    let fs_match =
        f.fstypes.iter().any(|t| *t == facts.root.fstype || facts.usr.as_ref().is_some_and(|u| u.fstype == *t));
    let stack_match = f.stack.iter().any(|s| facts.stack.contains(s));
    let ucode = f.microcode
        && ["/lib/firmware/intel-ucode", "/lib/firmware/amd-ucode"].iter().any(|d| host_path(sysroot, d).is_dir());
    let cmdline = !f.cmdline.is_empty()
        && f.cmdline.iter().any(|w| facts.cmdline.split_whitespace().any(|x| x == w))
        && f.binaries.iter().all(|b| which(sysroot, b).is_some());
    fs_match || stack_match || ucode || cmdline
}

/// Features that are only there because the build is universal and whose binaries the
/// system lacks are left out (with a warning naming what to install): an image must not
/// offer /init a capability it cannot use.
pub(crate) fn available(selected: Vec<Selected>, sysroot: &Path, warnings: &mut Vec<String>) -> Vec<Selected> {
    selected
        .into_iter()
        .filter(|s| {
            let missing: Vec<&str> =
                s.feature.binaries.iter().filter(|b| which(sysroot, b).is_none()).map(String::as_str).collect();
            if s.required || missing.is_empty() {
                return true;
            }
            let install = s.feature.package.as_deref().map(|p| format!(" (install {p})")).unwrap_or_default();
            warnings.push(format!("feature {} left out: {} not found{install}", s.feature.name, missing.join(", ")));
            false
        })
        .collect()
}

pub(crate) fn select(all: &BTreeMap<String, Feature>, r: &Request, facts: Option<&Facts>) -> Vec<Selected> {
    let mut out = chosen(all, r, facts);
    with_requirements(all, r, &mut out);
    out
}

/// What the selected need, as required as what needs it (load() checked the names), until
/// nothing changes: a requirement made required passes that on. Sorted by name. Also for the
/// features added after selection (a container's token plugin).
pub(crate) fn with_requirements(all: &BTreeMap<String, Feature>, r: &Request, out: &mut Vec<Selected>) {
    loop {
        let mut changed = false;
        for i in 0..out.len() {
            let (needs, required) = (out[i].feature.requires.clone(), out[i].required);
            for n in needs {
                match out.iter_mut().find(|s| s.feature.name == n) {
                    Some(s) if required && !s.required => {
                        s.required = true;
                        changed = true;
                    }
                    Some(_) => {}
                    None => {
                        if let Some(f) = all.get(&n).filter(|_| !r.exclude.contains(&n)) {
                            out.push(Selected { feature: f.clone(), required });
                            changed = true;
                        }
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    out.sort_by(|a, b| a.feature.name.cmp(&b.feature.name));
}

fn chosen(all: &BTreeMap<String, Feature>, r: &Request, facts: Option<&Facts>) -> Vec<Selected> {
    all.values()
        .filter_map(|f| {
            if r.exclude.contains(&f.name) {
                return None;
            }
            if r.include.contains(&f.name) {
                return Some(Selected { feature: f.clone(), required: true });
            }
            // CPU microcode is loaded early by x86 kernels only: a universal image for another
            // architecture (arm64) has none to carry, and does not name the feature.
            if f.microcode && !crate::elf::early_microcode(r.machine) {
                return None;
            }
            let required = match f.when {
                When::Always => Some(true),
                When::Detected | When::Needed if facts.is_some_and(|x| detected(f, x, &r.sysroot)) => Some(true),
                When::Detected | When::Universal if r.universal => Some(false),
                _ => None,
            };
            required.map(|required| Selected { feature: f.clone(), required })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request for a sysroot (and /init) at `dir`.
    fn request(dir: &std::path::Path, universal: bool) -> crate::request::Request {
        let s = crate::request::Settings {
            kver: Some("x".into()),
            sysroot: Some(dir.into()),
            init: Some(dir.into()),
            universal: Some(universal),
            ..Default::default()
        };
        crate::request::Request::new(s, dir).unwrap()
    }

    #[test]
    fn universal_features_without_their_binaries_are_left_out() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("usr/sbin")).unwrap();
        std::fs::write(t.path().join("usr/sbin/cryptsetup"), b"").unwrap();
        let all = crate::features::load(None).unwrap();
        let pick = |n: &str, required| Selected { feature: all[n].clone(), required };
        let mut w = Vec::new();
        let kept = available(vec![pick("luks", false), pick("lvm", false), pick("mdraid", true)], t.path(), &mut w);
        let names: Vec<&str> = kept.iter().map(|s| s.feature.name.as_str()).collect();
        assert_eq!(names, ["luks", "mdraid"], "a required feature stays (its missing binary is an error later)");
        assert_eq!(w, ["feature lvm left out: lvm not found (install lvm2)"]);
    }

    #[test]
    fn microcode_is_for_x86_kernels_only() {
        let t = tempfile::tempdir().unwrap();
        let all = crate::features::load(None).unwrap();
        let mut r = request(t.path(), true);
        let names = |r: &crate::request::Request| -> Vec<String> {
            select(&all, r, None).into_iter().map(|s| s.feature.name).collect()
        };
        r.machine = 62;
        assert!(names(&r).contains(&"microcode".to_string()), "x86-64: {:?}", names(&r));
        r.machine = 183;
        assert!(!names(&r).contains(&"microcode".to_string()), "aarch64: {:?}", names(&r));
    }

    /// A feature added after selection (a container's token plugin) brings what it requires:
    /// luks-tpm2 the TPM's drivers, as required as itself; not when excluded.
    #[test]
    fn late_features_bring_their_requirements() {
        let t = tempfile::tempdir().unwrap();
        let all = crate::features::load(None).unwrap();
        let mut r = request(t.path(), false);
        let mut out = vec![Selected { feature: all["luks-tpm2"].clone(), required: true }];
        with_requirements(&all, &r, &mut out);
        let got: Vec<(&str, bool)> = out.iter().map(|s| (s.feature.name.as_str(), s.required)).collect();
        assert_eq!(got, [("luks-tpm2", true), ("tpm", true)]);
        r.exclude.push("tpm".into());
        let mut out = vec![Selected { feature: all["luks-tpm2"].clone(), required: true }];
        with_requirements(&all, &r, &mut out);
        assert_eq!(out.len(), 1);
    }
}
