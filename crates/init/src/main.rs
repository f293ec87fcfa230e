//! leanrd's /init executable: the process start-up that libc would otherwise provide, around
//! [`leanrd_init::main`].
//!
//! Hand-written, because no libc is linked (a static glibc alone is ~0.8 MB; this whole binary
//! is a fraction of that): the entry point `_start`, the few memory functions the compiler
//! emits calls to (memcpy, memmove, memset, memcmp, bcmp, strlen), and the panic handler.
//! The allocator is rustix-dlmalloc; system calls go through rustix.
//!
//! Why not origin (re-checked 2026-11 with origin 0.26.2): origin calls rustix's `runtime`
//! module, which rustix keeps outside semver for libc implementations; rustix 1.1 made it
//! private (`pub(crate) use runtime_<hash> as runtime`), so origin 0.26 fails to compile
//! against the rustix 1.1 this crate uses ("module `runtime` is private",
//! origin/src/program/linux_raw.rs). Pinned to rustix =1.0.8 it compiles, but a minimal
//! static `origin-start` program built that way crashed at start on this machine. For
//! the same reason rustix's own `runtime` feature (fork, execve, exit_group) is not used:
//! its name changes to keep non-libc users out. The start-up here is six instructions.
//!
//! build.rs links it with `-nostartfiles -nostdlib -static -no-pie`.

#![no_std]
#![no_main]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;

#[global_allocator]
static ALLOC: rustix_dlmalloc::GlobalDlmalloc = rustix_dlmalloc::GlobalDlmalloc;

// The kernel starts a process with the stack pointer on argc, then argv[], NULL, envp[],
// NULL, the auxiliary vector. `start` gets that pointer, on a 16-byte-aligned stack.
#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {start}",
    "ud2",
    start = sym start,
);

// The same on aarch64: no frame, the stack pointer (16-byte aligned by the kernel) as the
// argument.
#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, xzr",
    "mov x30, xzr",
    "mov x0, sp",
    "bl {start}",
    "brk #0",
    start = sym start,
);

/// # Safety
/// Called once, by `_start`, with the initial stack pointer.
unsafe extern "C" fn start(sp: *const usize) -> ! {
    let s = |p: *const core::ffi::c_char| {
        // SAFETY: the kernel's strings are NUL-terminated.
        unsafe { core::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    // SAFETY: the kernel's initial stack layout (see above): argc pointers, NULL, then the
    // environment up to a NULL.
    let (args, env): (Vec<String>, Vec<String>) = unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const *const core::ffi::c_char;
        let args = (0..argc).map(|i| s(*argv.add(i))).collect();
        let mut env = Vec::new();
        let mut e = argv.add(argc + 1);
        while !(*e).is_null() {
            env.push(s(*e));
            e = e.add(1);
        }
        (args, env)
    };
    leanrd_init::main(args, env)
}

/// A bug in /init: say so on the console. PID 1 must not exit (the kernel would panic
/// without the message on screen), so it stays; the module helper exits with an error.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    leanrd_init::sys::eprint(&alloc::format!("leanrd: internal error: {info}\n"));
    if rustix::process::getpid().is_init() {
        loop {
            leanrd_init::sys::sleep_ms(3_600_000);
        }
    }
    leanrd_init::sys::exit(101)
}

// The precompiled core library refers to these unwinding symbols even with panic=abort;
// nothing can call them, since nothing unwinds.
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() {}

#[unsafe(no_mangle)]
extern "C" fn _Unwind_Resume() -> ! {
    leanrd_init::sys::exit(134)
}

// Memory functions. String instructions keep the compiler from turning the loops back into
// calls to themselves; the comparisons use volatile reads for the same reason.

/// # Safety
/// As C's memcpy.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's memcpy contract.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!("rep movsb", inout("rcx") n => _, inout("rdi") d => _, inout("rsi") s => _,
            options(nostack, preserves_flags));
    }
    // Elsewhere a byte loop, volatile so that it is not made a call to memcpy.
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..n {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(d.add(i), core::ptr::read_volatile(s.add(i))) }
    }
    d
}

/// # Safety
/// As C's memmove.
#[unsafe(no_mangle)]
unsafe extern "C" fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    if (d as usize).wrapping_sub(s as usize) >= n {
        // SAFETY: forward copy is safe when d is before s or the ranges do not overlap.
        unsafe { memcpy(d, s, n) }
    } else {
        // SAFETY: copy backwards (direction flag set, then cleared as the ABI requires).
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::asm!("std", "rep movsb", "cld", inout("rcx") n => _,
                inout("rdi") d.wrapping_add(n).wrapping_sub(1) => _,
                inout("rsi") s.wrapping_add(n).wrapping_sub(1) => _, options(nostack));
        }
        #[cfg(not(target_arch = "x86_64"))]
        for i in (0..n).rev() {
            // SAFETY: the ranges overlap with d after s: the last byte first.
            unsafe { core::ptr::write_volatile(d.add(i), core::ptr::read_volatile(s.add(i))) }
        }
        d
    }
}

/// # Safety
/// As C's memset.
#[unsafe(no_mangle)]
unsafe extern "C" fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller's memset contract.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!("rep stosb", inout("rcx") n => _, inout("rdi") d => _, in("al") c as u8,
            options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..n {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(d.add(i), c as u8) }
    }
    d
}

/// # Safety
/// As C's memcmp.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: both ranges are n bytes long.
        let (x, y) = unsafe { (core::ptr::read_volatile(a.add(i)), core::ptr::read_volatile(b.add(i))) };
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// # Safety
/// As C's bcmp.
#[unsafe(no_mangle)]
unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract.
    unsafe { memcmp(a, b, n) }
}

/// # Safety
/// As C's strlen.
#[unsafe(no_mangle)]
unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: s is NUL-terminated.
    while unsafe { core::ptr::read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}
