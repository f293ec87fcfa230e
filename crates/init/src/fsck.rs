//! Checking a file system before the initramfs mounts it read-write (`rw` on the command
//! line), as initramfs-tools does. With `ro` (the usual) the root's own systemd-fsck checks
//! it once it runs, so nothing is done here. The checkers are the ones the generator put in
//! the image (`InitConfig::fsck`); `fsck.mode=` and `fsck.repair=` are systemd's.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::Init;
use crate::cmdline::{FsckMode, FsckRepair};
use crate::devices::Dev;
use crate::process::{self, exit_code};

/// What a checker's exit status (the fsck(8) bits) means for the boot.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No errors, or errors corrected: mount it.
    Mount,
    /// Corrected, and the system must reboot (a mounted file system was changed).
    Reboot,
    /// Errors left uncorrected: do not mount it; a person must run the checker.
    Uncorrected,
    /// The checker itself failed (usage, operational error, killed): mount anyway, as
    /// initramfs-tools does, and say so.
    CheckerFailed,
}

/// What a checker's wait status (as waitpid gives it; -1: lost) means: exit status 0 or 1
/// mounts, 2 or 3 reboots, another with the 4 bit set is uncorrected; anything else (8, 16,
/// killed, lost) is the checker's failure.
pub fn verdict(wait_status: i32) -> Verdict {
    match exit_code(wait_status) {
        Some(0 | 1) => Verdict::Mount,
        Some(c) if c & 4 != 0 => Verdict::Uncorrected,
        Some(2 | 3) => Verdict::Reboot,
        _ => Verdict::CheckerFailed,
    }
}

/// The checker's arguments: the fsck(8) conventions every checker (e2fsck, fsck.fat,
/// fsck.f2fs) takes; `-f` only where "check even if clean" exists.
pub fn arguments(prog: &str, mode: FsckMode, repair: FsckRepair, dev: &str) -> Vec<String> {
    let mut a = Vec::new();
    a.push(String::from(match repair {
        FsckRepair::Preen => "-a",
        FsckRepair::Yes => "-y",
        FsckRepair::No => "-n",
    }));
    if mode == FsckMode::Force && prog != "fsck.fat" && prog != "fsck.vfat" {
        a.push("-f".into());
    }
    a.push(dev.into());
    a
}

/// Check `dev` (of `fstype`) if it is about to be mounted read-write. An error when the
/// file system must not be mounted.
pub fn check(init: &mut Init, dev: &Dev, fstype: Option<&str>, read_write: bool) -> Result<(), String> {
    if !read_write || init.cmd.fsck_mode == FsckMode::Skip {
        return Ok(());
    }
    let Some(t) = fstype else { return Ok(()) };
    let Some(prog) = init.conf.fsck.iter().find(|(ft, _)| ft == t).map(|(_, p)| p.clone()) else {
        init.log.step(&format!("no checker for {t} in the image: {} not checked", dev.path()));
        return Ok(());
    };
    let path = dev.path();
    let args = arguments(&prog, init.cmd.fsck_mode, init.cmd.fsck_repair, &path);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    init.log.step(&format!("checking {path}: {prog} {}", argv.join(" ")));
    let st = match process::run_status(&prog, &argv) {
        Ok(st) => st,
        Err(e) => {
            init.log.error(&format!("{e}: {path} not checked"));
            return Ok(());
        }
    };
    match verdict(st) {
        Verdict::Mount => Ok(()),
        Verdict::CheckerFailed => {
            init.log.error(&format!("{prog} could not check {path} ({}); mounting it anyway", status(st)));
            Ok(())
        }
        Verdict::Reboot => {
            init.log.error(&format!("{prog} repaired {path}; rebooting"));
            rustix::fs::sync();
            let _ = rustix::system::reboot(rustix::system::RebootCommand::Restart);
            Err(format!("{prog} repaired {path} and the system must reboot"))
        }
        Verdict::Uncorrected => Err(format!(
            "{prog} found errors on {path} it did not correct ({}): run `{prog} {path}` by hand, then reboot",
            status(st)
        )),
    }
}

fn status(st: i32) -> String {
    process::describe_status(st).err().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_decide_the_mount() {
        let exit = |c: i32| c << 8;
        assert_eq!(verdict(exit(0)), Verdict::Mount);
        assert_eq!(verdict(exit(1)), Verdict::Mount);
        assert_eq!(verdict(exit(2)), Verdict::Reboot);
        assert_eq!(verdict(exit(3)), Verdict::Reboot);
        assert_eq!(verdict(exit(4)), Verdict::Uncorrected);
        assert_eq!(verdict(exit(12)), Verdict::Uncorrected);
        assert_eq!(verdict(exit(8)), Verdict::CheckerFailed);
        assert_eq!(verdict(exit(16)), Verdict::CheckerFailed);
        assert_eq!(verdict(9), Verdict::CheckerFailed); // killed
    }

    #[test]
    fn arguments_follow_mode_and_repair() {
        let a = arguments("e2fsck", FsckMode::Auto, FsckRepair::Preen, "/dev/vda1");
        assert_eq!(a, ["-a", "/dev/vda1"]);
        let a = arguments("e2fsck", FsckMode::Force, FsckRepair::Yes, "/dev/vda1");
        assert_eq!(a, ["-y", "-f", "/dev/vda1"]);
        let a = arguments("fsck.fat", FsckMode::Force, FsckRepair::No, "/dev/sda1");
        assert_eq!(a, ["-n", "/dev/sda1"]);
    }

    #[test]
    fn a_real_e2fsck_preens_a_clean_file_system() {
        if !std::path::Path::new("/sbin/e2fsck").exists() || !std::path::Path::new("/sbin/mkfs.ext4").exists() {
            return;
        }
        let img = format!("/tmp/leanrd-fsck-{}.img", std::process::id());
        let ok = |c: &mut std::process::Command| c.status().unwrap().success();
        assert!(ok(std::process::Command::new("truncate").args(["-s", "8M", &img])));
        assert!(ok(std::process::Command::new("mkfs.ext4").args(["-q", "-F", &img])));
        let args = arguments("e2fsck", FsckMode::Force, FsckRepair::Preen, &img);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let st = process::run_status("e2fsck", &argv).unwrap();
        // Corrupt the superblock's magic: preen must refuse to fix it silently.
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all_at(&[0, 0], 1024 + 0x38).unwrap();
        let bad = process::run_status("e2fsck", &argv).unwrap();
        std::fs::remove_file(&img).unwrap();
        assert_eq!(verdict(st), Verdict::Mount, "clean: {}", status(st));
        assert_ne!(verdict(bad), Verdict::Mount, "a broken superblock: {}", status(bad));
    }
}
