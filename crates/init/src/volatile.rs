//! `systemd.volatile=`, as systemd-volatile-root does it in systemd's initrd (src/volatile-root/
//! volatile-root.c) and systemd-fstab-generator for `state`:
//! - `overlay`: an overlayfs over the root, its upper layer on a tmpfs (in
//!   /run/systemd/overlay-sysroot, which moves into the root with /run): the root reads as it
//!   is, every write goes to memory and is gone at the next boot;
//! - `state`: a tmpfs on the root's /var;
//! - `yes`: a tmpfs root with the image's /usr bound into it read-only (and the merged-/usr links
//!   /bin, /sbin, /lib, /lib64 the root had).

use alloc::format;
use alloc::string::String;

use rustix::mount::MountFlags;

use crate::Init;
use crate::root::NEWROOT;
use crate::sys::{self, strerror};

/// What `systemd.volatile=` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Volatile {
    /// Nothing (`no`, the default).
    #[default]
    No,
    /// A tmpfs root, /usr from the image.
    Yes,
    /// A tmpfs /var.
    State,
    /// A tmpfs upper layer over the root.
    Overlay,
}

impl Volatile {
    /// The value as systemd reads it (a boolean, `state` or `overlay`); None: not one.
    pub fn parse(v: Option<&str>) -> Option<Volatile> {
        match v {
            None | Some("1" | "yes" | "true" | "on") => Some(Volatile::Yes),
            Some("0" | "no" | "false" | "off") => Some(Volatile::No),
            Some("state") => Some(Volatile::State),
            Some("overlay") => Some(Volatile::Overlay),
            Some(_) => None,
        }
    }
}

/// What to do before /usr is mounted (`overlay`, `state`): the overlay must be under /usr's
/// mount, not over it.
pub fn before_usr(init: &mut Init) -> Result<(), String> {
    match init.cmd.volatile {
        Volatile::Overlay => overlay(init),
        Volatile::State => {
            let var = format!("{NEWROOT}/var");
            if !sys::is_dir(&var) {
                return Err(format!("systemd.volatile=state: {var} is not a directory in the root"));
            }
            sys::mount("tmpfs", &var, "tmpfs", MountFlags::STRICTATIME, Some("mode=0755"))
                .map_err(|e| format!("systemd.volatile=state: a tmpfs on {var}: {}", strerror(e)))?;
            init.log.step("systemd.volatile=state: /var is a tmpfs");
            Ok(())
        }
        Volatile::No | Volatile::Yes => Ok(()),
    }
}

/// What to do once /usr is mounted (`yes`).
pub fn after_usr(init: &mut Init) -> Result<(), String> {
    if init.cmd.volatile != Volatile::Yes {
        return Ok(());
    }
    let what = |e: &str| format!("systemd.volatile=yes: {e}");
    let usr = format!("{NEWROOT}/usr");
    if !sys::is_dir(&format!("{usr}/bin")) {
        return Err(what(&format!("{usr} has no bin/: the root needs its /usr for a tmpfs root")));
    }
    let dir = "/run/systemd/volatile-sysroot";
    sys::mkdir_p(dir);
    sys::mount("tmpfs", dir, "tmpfs", MountFlags::STRICTATIME, Some("mode=0755"))
        .map_err(|e| what(&format!("a tmpfs on {dir}: {}", strerror(e))))?;
    let target = format!("{dir}/usr");
    sys::mkdir_p(&target);
    rustix::mount::mount_bind(usr.as_str(), target.as_str())
        .map_err(|e| what(&format!("binding {usr} to {target}: {}", strerror(e))))?;
    let _ = rustix::mount::mount_remount(target.as_str(), MountFlags::BIND | MountFlags::RDONLY, "");
    // The merged-/usr links the root had (/sbin -> usr/sbin), so that its init is found.
    for l in ["bin", "sbin", "lib", "lib64"] {
        if let Some(to) = sys::readlink(&format!("{NEWROOT}/{l}")) {
            let _ = rustix::fs::symlink(to.as_str(), format!("{dir}/{l}").as_str());
        }
    }
    for d in ["dev", "proc", "sys", "run", "tmp", "etc", "var"] {
        sys::mkdir_p(&format!("{dir}/{d}"));
    }
    rustix::mount::mount_move(dir, NEWROOT)
        .map_err(|e| what(&format!("moving {dir} to {NEWROOT}: {}", strerror(e))))?;
    init.log.step("systemd.volatile=yes: the root is a tmpfs, /usr the image's");
    Ok(())
}

/// An overlayfs over the mounted root, its upper layer on a tmpfs.
fn overlay(init: &mut Init) -> Result<(), String> {
    let what = |e: String| format!("systemd.volatile=overlay: {e}");
    let dir = "/run/systemd/overlay-sysroot";
    sys::mkdir_p(dir);
    sys::mount("tmpfs", dir, "tmpfs", MountFlags::STRICTATIME, Some("mode=0755"))
        .map_err(|e| what(format!("a tmpfs on {dir}: {}", strerror(e))))?;
    for d in ["upper", "work"] {
        sys::mkdir_p(&format!("{dir}/{d}"));
    }
    init.mods.load("overlay", &mut init.log);
    let opts: String = format!("lowerdir={NEWROOT},upperdir={dir}/upper,workdir={dir}/work");
    sys::mount("overlay", NEWROOT, "overlay", MountFlags::empty(), Some(&opts))
        .map_err(|e| what(format!("overlay on {NEWROOT} ({opts}): {}", strerror(e))))?;
    init.log.step("systemd.volatile=overlay: the root is an overlay, its writes in memory");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_systemd_reads_them() {
        assert_eq!(Volatile::parse(None), Some(Volatile::Yes));
        assert_eq!(Volatile::parse(Some("yes")), Some(Volatile::Yes));
        assert_eq!(Volatile::parse(Some("0")), Some(Volatile::No));
        assert_eq!(Volatile::parse(Some("state")), Some(Volatile::State));
        assert_eq!(Volatile::parse(Some("overlay")), Some(Volatile::Overlay));
        for bad in ["", "Overlay", "tmpfs", "\u{0}"] {
            assert_eq!(Volatile::parse(Some(bad)), None, "{bad:?}");
        }
    }
}
