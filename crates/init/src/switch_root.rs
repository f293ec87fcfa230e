//! Leaving the initramfs: move the API mounts and the new root over /, delete what the
//! initramfs held (its memory is freed), and exec the root's init.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use rustix::fs::FileType;

use crate::Init;
use crate::root::NEWROOT;
use crate::sys::{self, strerror};

/// Delete the initramfs contents (not crossing into other mounts), as switch_root must.
fn delete_tree(dir: &str, dev: u64) {
    let Ok(rd) = sys::list_dir(dir) else { return };
    for (name, _) in rd {
        let p = format!("{}/{name}", dir.trim_end_matches('/'));
        let Ok(st) = rustix::fs::lstat(p.as_str()) else { continue };
        if st.st_dev != dev {
            continue;
        }
        let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
        if is_dir {
            delete_tree(&p, dev);
        }
        sys::remove(&p, is_dir);
    }
}

/// Switch to the root mounted on /newroot. Returns only on failure.
pub fn switch_root(init: &mut Init) -> Result<(), String> {
    crate::stack::hand_over_to_udev(init);
    // PCR 11's leave-initrd: from here on, what only the initramfs may unseal stays sealed.
    crate::tpm::leave(init);
    init.log.step(leanrd_contract::steplog::SWITCHING);
    init.log.save();
    for m in ["/dev", "/proc", "/sys", "/run"] {
        let target = format!("{NEWROOT}{m}");
        if sys::is_dir(&target) {
            let _ = rustix::mount::mount_move(m, target.as_str());
        }
    }
    let root_dev = rustix::fs::stat("/").map(|m| m.st_dev).map_err(|e| format!("stat /: {}", strerror(e)))?;
    rustix::process::chdir(NEWROOT).map_err(|e| format!("cannot chdir to the new root: {}", strerror(e)))?;
    delete_tree("/", root_dev);
    rustix::mount::mount_move(".", "/").map_err(|e| format!("cannot move the new root to /: {}", strerror(e)))?;
    rustix::process::chroot(".").map_err(|e| format!("chroot failed: {}", strerror(e)))?;
    let _ = rustix::process::chdir("/");
    // Give module loading back to the real system.
    let _ = sys::write_file("/proc/sys/kernel/modprobe", "/sbin/modprobe");
    let mut candidates: Vec<String> = init.cmd.init.iter().cloned().collect();
    candidates.extend(["/sbin/init", "/etc/init", "/bin/init", "/bin/sh"].map(String::from));
    for c in candidates {
        if !sys::exists(&c) {
            continue;
        }
        // The root's init gets what the kernel gave us, as with the kernel starting it.
        let mut argv = vec![c.as_str()];
        argv.extend(init.args.iter().skip(1).map(String::as_str));
        let env: Vec<&str> = if init.env.is_empty() {
            vec!["HOME=/", "TERM=linux"]
        } else {
            init.env.iter().map(String::as_str).collect()
        };
        let e = sys::Exec::new(&c, &argv, &env).exec();
        init.notes.push(format!("exec {c}: {}", strerror(e)));
    }
    Err("no init found in the new root (tried init=, /sbin/init, /etc/init, /bin/init, /bin/sh)".into())
}
