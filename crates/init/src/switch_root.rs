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

/// The programs tried as the root's init, in order: `init=`, then the usual places.
fn candidates(init: &Init) -> Vec<String> {
    let mut c: Vec<String> = init.cmd.init.iter().cloned().collect();
    c.extend(["/sbin/init", "/etc/init", "/bin/init", "/bin/sh"].map(String::from));
    c
}

/// How much of a candidate is read before the switch (the whole of any usual init).
const READ_AHEAD: usize = 4 << 20;

/// Read `path` of the new root (its symbolic links resolved inside it, as they will be once
/// it is /) up to [`READ_AHEAD`] bytes. Err(NOENT): there is none; Err(NOSYS): the kernel
/// cannot resolve inside a root (openat2, Linux 5.6).
fn read_in_root(root: &rustix::fd::OwnedFd, path: &str) -> Result<(), sys::Errno> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let fd = rustix::fs::openat2(
        root,
        path.trim_start_matches('/'),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT,
    )?;
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0;
    while total < READ_AHEAD {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(sys::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Before anything that cannot be undone: an init the new root has and that can be read. A
/// root whose every init is missing or unreadable is refused while the boot can still be
/// tried again (the root is unmounted then, lazily if something holds it).
fn check_init(init: &mut Init) -> Result<(), String> {
    let Ok(root) = sys::open(NEWROOT) else { return Ok(()) };
    let mut unreadable = Vec::new();
    for c in candidates(init) {
        match read_in_root(&root, &c) {
            Ok(()) => return Ok(()),
            Err(sys::Errno::NOSYS) => return Ok(()),
            Err(sys::Errno::NOENT | sys::Errno::NOTDIR) => {}
            Err(e) => {
                init.log.step(&format!("{NEWROOT}{c}: {}", strerror(e)));
                unreadable.push(format!("{c}: {}", strerror(e)));
            }
        }
    }
    drop(root);
    let advice = advice(init, NEWROOT);
    let _ = rustix::mount::unmount(NEWROOT, rustix::mount::UnmountFlags::DETACH);
    init.log.step(&format!("{NEWROOT} unmounted"));
    Err(if unreadable.is_empty() {
        format!("no init found in the new root (tried {}){advice}", tried(init))
    } else {
        format!("the root's init cannot be read: {}{advice}", unreadable.join("; "))
    })
}

/// What was looked for, for messages.
fn tried(init: &Init) -> String {
    let mut t = Vec::from(["/sbin/init", "/etc/init", "/bin/init", "/bin/sh"]);
    if let Some(i) = &init.cmd.init {
        t.insert(0, i.as_str());
    }
    t.join(", ")
}

/// What may help when the root's init cannot be read or run, by the kind of root: for an NFS
/// root mounted at `target`, the protocol version the client and server agreed on (from
/// /proc/self/mountinfo) and a lower one to force. Empty: nothing to add.
fn advice(init: &Init, target: &str) -> String {
    if init.root_kind != Some(leanrd_contract::RootKind::Nfs) {
        return String::new();
    }
    let mountinfo = sys::read_string("/proc/self/mountinfo").unwrap_or_default();
    crate::nfs::exec_advice(crate::nfs::mounted(&mountinfo, target).as_ref())
}

/// Switch to the root mounted on /newroot. Returns only on failure.
pub fn switch_root(init: &mut Init) -> Result<(), String> {
    check_init(init)?;
    crate::stack::hand_over_to_udev(init);
    // PCR 11's leave-initrd: from here on, what only the initramfs may unseal stays sealed.
    crate::tpm::leave(init);
    // The way down's program and record, in /run/initramfs: /run moves to the root.
    crate::exitrd::leave(init);
    // plymouthd into the new root, before it moves: it goes on drawing in the booted system.
    crate::plymouth::newroot(init, NEWROOT);
    init.log.step(leanrd_contract::steplog::SWITCHING);
    init.log.save();
    // The point of no return: the API file systems leave the initramfs, which is deleted.
    init.switched = true;
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
    let mut failed = Vec::new();
    for c in candidates(init) {
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
        failed.push(format!("exec {c}: {}", strerror(e)));
    }
    // The root is / now: its mount is there.
    let advice = advice(init, "/");
    Err(if failed.is_empty() {
        format!("no init found in the new root (tried {}){advice}", tried(init))
    } else {
        format!("the root's init could not be run: {}{advice}", failed.join("; "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The init is looked for as it will be once the root is /: an absolute symbolic link
    /// resolves inside the new root, not in the initramfs.
    #[test]
    fn the_init_is_read_inside_the_new_root() {
        let dir = std::env::temp_dir().join(format!("leanrd-switch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sbin")).unwrap();
        std::fs::create_dir_all(dir.join("lib/leanrd-test")).unwrap();
        std::fs::write(dir.join("lib/leanrd-test/init"), b"\x7fELF").unwrap();
        std::os::unix::fs::symlink("/lib/leanrd-test/init", dir.join("sbin/init")).unwrap();
        std::os::unix::fs::symlink("/lib/leanrd-test/none", dir.join("sbin/dangling")).unwrap();
        let root = sys::open(dir.to_str().unwrap()).unwrap();
        let r = read_in_root(&root, "/sbin/init");
        if r != Err(sys::Errno::NOSYS) {
            assert_eq!(r, Ok(()));
            assert_eq!(read_in_root(&root, "/sbin/dangling"), Err(sys::Errno::NOENT));
            assert_eq!(read_in_root(&root, "/bin/sh"), Err(sys::Errno::NOENT));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
