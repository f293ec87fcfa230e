//! Feature selection: which features this image gets, and whether each is required (always,
//! asked for, or found on the host) or only there because the build is universal (then a
//! missing binary is a warning, not an error).

use std::collections::BTreeMap;
use std::path::Path;

use crate::features::{Feature, When};
use crate::host::Facts;
use crate::plan::host_path;
use crate::request::Request;

/// A feature in the image.
#[derive(Debug, Clone)]
pub struct Selected {
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
    fs_match || stack_match || ucode
}

pub fn select(all: &BTreeMap<String, Feature>, r: &Request, facts: Option<&Facts>) -> Vec<Selected> {
    all.values()
        .filter_map(|f| {
            if r.exclude.contains(&f.name) {
                return None;
            }
            if r.include.contains(&f.name) {
                return Some(Selected { feature: f.clone(), required: true });
            }
            let required = match f.when {
                When::Always => Some(true),
                When::Detected if facts.is_some_and(|x| detected(f, x, &r.sysroot)) => Some(true),
                When::Detected | When::Universal if r.universal => Some(false),
                _ => None,
            };
            required.map(|required| Selected { feature: f.clone(), required })
        })
        .collect()
}
