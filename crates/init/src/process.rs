//! Processes without libc: exit, fork, exec, running helper programs and reaping them.
//!
//! Hand-written here: `exit_group`, `fork` and `execve`. rustix keeps process start-up,
//! fork and exec in its `runtime` module, which is for libc implementations, outside semver
//! and since rustix 1.1 private by a hashed name; origin, which wraps it, does not build
//! against rustix 1.1 (see main.rs). They are three syscalls on x86_64; everything else
//! goes through rustix.

use alloc::ffi::CString;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::sys::{Errno, eprint, errstr, exists, strerror};

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("leanrd-init's raw syscalls are written for x86_64 and aarch64");

/// The directories searched for helper programs (cryptsetup, lvm, mdadm, sh), as a `PATH`.
pub const PATH: &str = {
    // SEARCH_PATH joined with ':' at compile time.
    const P: [&str; 4] = leanrd_contract::SEARCH_PATH;
    const LEN: usize = P[0].len() + P[1].len() + P[2].len() + P[3].len() + 3;
    const BYTES: [u8; LEN] = {
        let mut out = [b':'; LEN];
        let (mut i, mut at) = (0, 0);
        while i < P.len() {
            let p = P[i].as_bytes();
            let mut j = 0;
            while j < p.len() {
                out[at] = p[j];
                at += 1;
                j += 1;
            }
            at += 1;
            i += 1;
        }
        out
    };
    match core::str::from_utf8(&BYTES) {
        Ok(s) => s,
        Err(_) => panic!("SEARCH_PATH is ASCII"),
    }
};

/// A raw three-argument syscall; returns the kernel's value (negative errno on failure).
///
/// # Safety
/// The caller passes arguments valid for syscall `n`.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn syscall3(n: usize, a: usize, b: usize, c: usize) -> isize {
    let r: isize;
    // SAFETY: the x86_64 syscall ABI: number in rax, arguments in rdi/rsi/rdx; rcx and
    // r11 are clobbered by the instruction.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a, in("rsi") b, in("rdx") c,
            lateout("rcx") _, lateout("r11") _,
            options(nostack)
        );
    }
    r
}

/// A raw three-argument syscall; returns the kernel's value (negative errno on failure).
///
/// # Safety
/// The caller passes arguments valid for syscall `n`.
#[cfg(target_arch = "aarch64")]
pub(crate) unsafe fn syscall3(n: usize, a: usize, b: usize, c: usize) -> isize {
    let r: isize;
    // SAFETY: the aarch64 syscall ABI: number in x8, arguments in x0-x2, the result in x0.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => r,
            in("x1") b, in("x2") c,
            options(nostack)
        );
    }
    r
}

fn check(r: isize) -> Result<usize, Errno> {
    if (-4095..0).contains(&r) { Err(Errno::from_raw_os_error(-r as i32)) } else { Ok(r as usize) }
}

/// A raw five-argument syscall (add_key); the kernel's value (negative errno on failure).
///
/// # Safety
/// The caller passes arguments valid for syscall `n`.
#[cfg(target_arch = "x86_64")]
unsafe fn syscall5(n: usize, a: usize, b: usize, c: usize, d: usize, e: usize) -> isize {
    let r: isize;
    // SAFETY: the x86_64 syscall ABI: arguments in rdi/rsi/rdx/r10/r8; rcx and r11 clobbered.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d, in("r8") e,
            lateout("rcx") _, lateout("r11") _,
            options(nostack)
        );
    }
    r
}

/// A raw five-argument syscall (add_key); the kernel's value (negative errno on failure).
///
/// # Safety
/// The caller passes arguments valid for syscall `n`.
#[cfg(target_arch = "aarch64")]
unsafe fn syscall5(n: usize, a: usize, b: usize, c: usize, d: usize, e: usize) -> isize {
    let r: isize;
    // SAFETY: the aarch64 syscall ABI: number in x8, arguments in x0-x4, the result in x0.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => r,
            in("x1") b, in("x2") c, in("x3") d, in("x4") e,
            options(nostack)
        );
    }
    r
}

/// The calling thread's keyring (KEY_SPEC_THREAD_KEYRING): what request_key searches first in
/// the kernel code this thread calls, and gone with the thread.
const THREAD_KEYRING: i32 = -1;
/// keyctl's KEYCTL_UNLINK.
const KEYCTL_UNLINK: usize = 9;
#[cfg(target_arch = "x86_64")]
const SYS_ADD_KEY: usize = 248;
#[cfg(target_arch = "x86_64")]
const SYS_KEYCTL: usize = 250;
#[cfg(target_arch = "aarch64")]
const SYS_ADD_KEY: usize = 217;
#[cfg(target_arch = "aarch64")]
const SYS_KEYCTL: usize = 219;

/// add_key(2) of a `user` key `desc` holding `payload`, in this thread's keyring (as
/// cryptsetup hands dm-verity a root hash's signature): the key's serial. Hand-written: rustix
/// has no keyring calls.
pub fn add_user_key(desc: &str, payload: &[u8]) -> Result<i32, Errno> {
    let ty = c"user";
    let desc = CString::new(desc).map_err(|_| Errno::INVAL)?;
    // SAFETY: add_key reads the NUL-terminated type and description and `payload.len()` bytes
    // of the payload, all of which live until it returns.
    let r = unsafe {
        syscall5(
            SYS_ADD_KEY,
            ty.as_ptr() as usize,
            desc.as_ptr() as usize,
            payload.as_ptr() as usize,
            payload.len(),
            THREAD_KEYRING as isize as usize,
        )
    };
    check(r).map(|k| k as i32)
}

/// Take key `serial` out of this thread's keyring (keyctl unlink): the kernel has read it.
pub fn unlink_key(serial: i32) {
    // SAFETY: KEYCTL_UNLINK takes two integers.
    let _ = unsafe { syscall3(SYS_KEYCTL, KEYCTL_UNLINK, serial as isize as usize, THREAD_KEYRING as isize as usize) };
}

// The system call numbers (arch/x86/entry/syscalls/syscall_64.tbl; aarch64 has the
// generic table, include/uapi/asm-generic/unistd.h, and no fork: clone does it).
#[cfg(target_arch = "x86_64")]
const SYS_CLONE: usize = 56;
#[cfg(target_arch = "x86_64")]
const SYS_EXECVE: usize = 59;
#[cfg(target_arch = "x86_64")]
const SYS_EXIT_GROUP: usize = 231;
#[cfg(target_arch = "aarch64")]
const SYS_CLONE: usize = 220;
#[cfg(target_arch = "aarch64")]
const SYS_EXECVE: usize = 221;
#[cfg(target_arch = "aarch64")]
const SYS_EXIT_GROUP: usize = 94;

/// SIGCHLD: the signal a forked child sends its parent when it ends.
const SIGCHLD: usize = 17;

/// End the process (all of it).
pub fn exit(code: i32) -> ! {
    // SAFETY: exit_group takes a plain integer and does not return.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!("syscall", in("rax") SYS_EXIT_GROUP, in("rdi") code as isize, options(noreturn, nostack));
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!("svc 0", in("x8") SYS_EXIT_GROUP, in("x0") code as isize, options(noreturn, nostack));
    }
}

/// fork(2), as clone(2) with SIGCHLD and nothing shared (what glibc's fork does, and the
/// only way on aarch64): `Ok(0)` in the child, the child's pid in the parent. /init is
/// single-threaded, so the child may use everything the parent had (the allocator too).
pub fn fork() -> Result<i32, Errno> {
    // SAFETY: clone with only an exit signal (no stack, thread ids or TLS read: their
    // argument order differs between architectures, and none is used) copies the process;
    // both continue from here.
    check(unsafe { syscall3(SYS_CLONE, SIGCHLD, 0, 0) }).map(|p| p as i32)
}

/// fork(2) for a child that sends no signal when it ends (clone(2) with exit signal 0: a
/// "clone" child). Only [`wait_quiet`] takes its end; [`reap`] and [`wait`] never see it,
/// so code that reaps stray children cannot take the exit status of a module load still
/// running in the background.
pub fn fork_quiet() -> Result<i32, Errno> {
    // SAFETY: clone with no flags (and so no stack, thread ids or TLS read) copies the
    // process as fork does; both continue from here.
    check(unsafe { syscall3(SYS_CLONE, 0, 0, 0) }).map(|p| p as i32)
}

/// Take the end of one [`fork_quiet`] child: its pid and wait status. `Ok(None)`: none has
/// ended yet (only when not `hang`); `Err(ECHILD)`: there are none.
pub fn wait_quiet(hang: bool) -> Result<Option<(i32, i32)>, Errno> {
    use rustix::process::WaitOptions;
    // __WCLONE (include/uapi/linux/wait.h): wait for "clone" children only. Not named by rustix.
    let clone_only = WaitOptions::from_bits_retain(0x8000_0000);
    let opts = if hang { clone_only } else { clone_only | WaitOptions::NOHANG };
    loop {
        match rustix::process::waitpid(None, opts) {
            Ok(Some((pid, st))) => return Ok(Some((pid.as_raw_nonzero().get(), st.as_raw()))),
            Ok(None) => return Ok(None),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A program with its arguments and environment, ready for execve(2): everything is
/// allocated before a fork, so the child allocates nothing.
pub struct Exec {
    _strings: Vec<CString>,
    path: *const u8,
    argv: Vec<*const u8>,
    envp: Vec<*const u8>,
}

impl Exec {
    /// `path` to run with the argument vector `args` (`argv[0]` first) and the environment `env`
    /// (`NAME=VALUE` strings); a string with a NUL byte in it is passed empty.
    pub fn new(path: &str, args: &[&str], env: &[&str]) -> Exec {
        let c = |s: &str| CString::new(s).unwrap_or_default();
        let mut strings: Vec<CString> = alloc::vec![c(path)];
        strings.extend(args.iter().chain(env).map(|s| c(s)));
        let ptrs: Vec<*const u8> = strings.iter().map(|s| s.as_ptr() as *const u8).collect();
        let mut argv = ptrs[1..1 + args.len()].to_vec();
        argv.push(core::ptr::null());
        let mut envp = ptrs[1 + args.len()..].to_vec();
        envp.push(core::ptr::null());
        Exec { path: ptrs[0], _strings: strings, argv, envp }
    }

    /// execve(2); returns only on failure, with the errno. Allocates nothing.
    pub fn exec(&self) -> Errno {
        // SAFETY: path, argv and envp point into `_strings` (NUL-terminated, alive as long as
        // self) and the arrays end with NULL.
        let r = unsafe {
            syscall3(SYS_EXECVE, self.path as usize, self.argv.as_ptr() as usize, self.envp.as_ptr() as usize)
        };
        check(r).err().unwrap_or(Errno::INVAL)
    }
}

/// Find a program in [`PATH`] (or take a path as it is).
pub fn which(prog: &str) -> Option<String> {
    if prog.contains('/') {
        return exists(prog).then(|| prog.to_string());
    }
    PATH.split(':').map(|d| alloc::format!("{d}/{prog}")).find(|p| exists(p))
}

/// Why a helper program did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// Not in [`PATH`].
    NotFound(String),
    /// fork failed.
    Fork(String, Errno),
    /// It ran and failed: how it ended.
    Failed(String, String),
}

impl core::fmt::Display for RunError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RunError::NotFound(p) => write!(f, "cannot run {p}: not found in {PATH}"),
            RunError::Fork(p, e) => write!(f, "cannot run {p}: fork: {}", strerror(*e)),
            RunError::Failed(p, how) => write!(f, "{p} failed ({how})"),
        }
    }
}

/// Run a program with `PATH` set, on the console, and wait for it.
pub fn run(prog: &str, args: &[&str]) -> Result<(), RunError> {
    describe_status(run_status(prog, args)?).map_err(|how| RunError::Failed(prog.to_string(), how))
}

/// [`run`], giving the wait status (see [`exit_code`]) however the program ended.
pub fn run_status(prog: &str, args: &[&str]) -> Result<i32, RunError> {
    let path = which(prog).ok_or_else(|| RunError::NotFound(prog.to_string()))?;
    let mut argv = alloc::vec![prog];
    argv.extend_from_slice(args);
    let env = alloc::format!("PATH={PATH}");
    let x = Exec::new(&path, &argv, &[&env, "TERM=linux"]);
    match fork() {
        Err(e) => Err(RunError::Fork(prog.to_string(), e)),
        Ok(0) => {
            let e = x.exec();
            for part in ["leanrd: exec ", &path, ": ", errstr(e), "\n"] {
                eprint(part);
            }
            exit(127)
        }
        Ok(pid) => Ok(wait(pid)),
    }
}

/// Which of a program's standard streams [`spawn_piped`] connects to the pipe.
enum Piped {
    /// Its standard input: the caller writes.
    Stdin,
    /// Its standard error: the caller reads.
    Stderr,
    /// Its standard output: the caller reads.
    Stdout,
}

/// Start `prog` with one standard stream on a pipe; its pid and the caller's end of the pipe.
fn spawn_piped(prog: &str, args: &[&str], piped: Piped) -> Result<(i32, rustix::fd::OwnedFd), RunError> {
    let path = which(prog).ok_or_else(|| RunError::NotFound(prog.to_string()))?;
    let mut argv = alloc::vec![prog];
    argv.extend_from_slice(args);
    let env = alloc::format!("PATH={PATH}");
    let x = Exec::new(&path, &argv, &[&env, "TERM=linux"]);
    let (r, w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| RunError::Fork(prog.to_string(), e))?;
    match fork() {
        Err(e) => Err(RunError::Fork(prog.to_string(), e)),
        Ok(0) => {
            // dup2 clears close-on-exec on the copy; the pipe's own ends close at exec.
            let dup = match piped {
                Piped::Stdin => rustix::stdio::dup2_stdin(&r),
                Piped::Stderr => rustix::stdio::dup2_stderr(&w),
                Piped::Stdout => rustix::stdio::dup2_stdout(&w),
            };
            if dup.is_err() {
                exit(126);
            }
            let e = x.exec();
            for part in ["leanrd: exec ", &path, ": ", errstr(e), "\n"] {
                eprint(part);
            }
            exit(127)
        }
        Ok(pid) => Ok((pid, if matches!(piped, Piped::Stdin) { w } else { r })),
    }
}

/// [`run_status`] with `input` on the program's standard input (a pipe; a passphrase for
/// `cryptsetup --key-file=-`). The input never touches a file.
pub fn run_input(prog: &str, args: &[&str], input: &[u8]) -> Result<i32, RunError> {
    let (pid, w) = spawn_piped(prog, args, Piped::Stdin)?;
    // A program that exits without reading all of it: EPIPE (SIGPIPE is ignored by PID 1 by
    // default), not a failure here.
    let _ = crate::sys::write_all(&w, input);
    drop(w);
    Ok(wait(pid))
}

/// [`run_status`] with the program's standard error through a pipe: shown on the console as
/// it comes, and its first `keep` bytes returned with the wait status (for a diagnosis that
/// names what the program said). Reads until every writer (the program's children too) has
/// closed the pipe.
pub fn run_capture(prog: &str, args: &[&str], keep: usize) -> Result<(i32, Vec<u8>), RunError> {
    read_piped(prog, args, keep, Piped::Stderr, true)
}

/// [`run_status`] with the program's standard output through a pipe, its first `keep` bytes
/// returned (not shown) with the wait status: what `zpool get -H` prints.
pub fn run_output(prog: &str, args: &[&str], keep: usize) -> Result<(i32, Vec<u8>), RunError> {
    read_piped(prog, args, keep, Piped::Stdout, false)
}

fn read_piped(prog: &str, args: &[&str], keep: usize, piped: Piped, show: bool) -> Result<(i32, Vec<u8>), RunError> {
    let (pid, r) = spawn_piped(prog, args, piped)?;
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(&r, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if show {
                    // SAFETY: fd 2 is the console the kernel opened for init (as in eprint).
                    let fd2 = unsafe { rustix::fd::BorrowedFd::borrow_raw(2) };
                    crate::sys::write_all(fd2, &buf[..n]);
                }
                let room = keep.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
            }
            Err(Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    Ok((wait(pid), kept))
}

/// Wait for one child; its wait status (or -1).
pub fn wait(pid: i32) -> i32 {
    let pid = rustix::process::Pid::from_raw(pid);
    loop {
        match rustix::process::waitpid(pid, rustix::process::WaitOptions::empty()) {
            Ok(Some((_, st))) => return st.as_raw(),
            Err(Errno::INTR) => continue,
            _ => return -1,
        }
    }
}

/// The exit status of a child that exited (rather than was killed), from its wait status.
pub fn exit_code(st: i32) -> Option<i32> {
    (st != -1 && st & 0x7f == 0).then_some((st >> 8) & 0xff)
}

/// `Ok(())` for exit status 0, otherwise how the process ended.
pub fn describe_status(st: i32) -> Result<(), String> {
    match exit_code(st) {
        Some(0) => Ok(()),
        Some(c) => Err(alloc::format!("exit status {c}")),
        None if st == -1 => Err("lost".into()),
        None => Err(alloc::format!("killed by signal {}", st & 0x7f)),
    }
}

/// Reap children that ended without anyone waiting for them (daemons started by helpers).
pub fn reap() {
    while let Ok(Some(_)) = rustix::process::waitpid(None, rustix::process::WaitOptions::NOHANG) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{read_string, remove};

    #[test]
    fn a_quiet_child_is_taken_only_by_wait_quiet() {
        let pid = fork_quiet().unwrap();
        if pid == 0 {
            exit(3);
        }
        // Waiting for it by its pid, as for any other child, does not take it: only
        // wait_quiet does (reap() would be the same, but would take other tests' children).
        let by_pid =
            rustix::process::waitpid(rustix::process::Pid::from_raw(pid), rustix::process::WaitOptions::NOHANG);
        assert_eq!(by_pid.err(), Some(Errno::CHILD));
        let (got, st) = loop {
            match wait_quiet(false) {
                Ok(Some(x)) => break x,
                Ok(None) => crate::sys::sleep_ms(1),
                Err(e) => panic!("the quiet child was lost: {e}"),
            }
        };
        assert_eq!((got, exit_code(st)), (pid, Some(3)));
        assert_eq!(wait_quiet(true), Err(Errno::CHILD), "no quiet children left");
    }

    #[test]
    fn runs_programs_and_reports_how_they_ended() {
        assert_eq!(run("true", &[]), Ok(()));
        assert_eq!(run("sh", &["-c", "exit 3"]), Err(RunError::Failed("sh".into(), "exit status 3".into())));
        let e = run("sh", &["-c", "kill -9 $$"]).unwrap_err();
        assert_eq!(e.to_string(), "sh failed (killed by signal 9)");
        assert!(run("no-such-program-leanrd", &[]).unwrap_err().to_string().contains("not found"));
        // PATH is what the helper sees.
        let out = "/tmp/leanrd-init-sys-test";
        assert_eq!(run("sh", &["-c", &alloc::format!("echo \"$PATH\" > {out}")]), Ok(()));
        assert_eq!(read_string(out).unwrap().trim(), PATH);
        remove(out, false);
    }

    #[test]
    fn gives_a_program_its_input() {
        let out = "/tmp/leanrd-init-input-test";
        let st = run_input("sh", &["-c", &alloc::format!("cat > {out}; exit 4")], b"pass\nphrase").unwrap();
        assert_eq!(exit_code(st), Some(4));
        assert_eq!(read_string(out).unwrap(), "pass\nphrase");
        remove(out, false);
        // A program that does not read: no hang, no failure.
        assert_eq!(exit_code(run_input("true", &[], &[b'x'; 1 << 20]).unwrap()), Some(0));
    }
}
