//! Helpers shared by the integration tests: leanrd-testkit, and the leanrd binary.
#![allow(dead_code)]

pub mod prep;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub use leanrd_testkit::*;

pub fn leanrd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leanrd"));
    c.env_remove("SOURCE_DATE_EPOCH");
    c
}

/// Build the static /init once per test process (its own target dir: no lock contention
/// with the cargo running the tests).
pub fn init_binary() -> Option<PathBuf> {
    static INIT: OnceLock<Option<PathBuf>> = OnceLock::new();
    INIT.get_or_init(|| {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let target = ws.join("target/init-test");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .current_dir(&ws)
            .args(["build", "-q", "--profile", "init", "-p", "leanrd-init", "--features", "standalone"])
            .args(["--target", "x86_64-unknown-linux-gnu", "--target-dir"])
            .arg(&target)
            .status()
            .ok()?;
        if !st.success() {
            eprintln!("skipping: could not build leanrd-init");
            return None;
        }
        Some(target.join("x86_64-unknown-linux-gnu/init/leanrd-init"))
    })
    .clone()
}

pub fn kver_of(kernel: &Path) -> String {
    kernel.file_name().unwrap().to_string_lossy().trim_start_matches("vmlinuz-").to_string()
}

/// Run a shell command; fail the test with its stderr if it fails.
pub fn sh(cmd: &str) {
    let o = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Boot, answering the passphrase prompt on the serial console; returns the console output.
pub fn boot_typing(kernel: &Path, initrd: &Path, append: &str, extra: &[String], answer: &str, secs: u64) -> String {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut child = qemu_command(kernel, initrd, append, &extra, secs)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut log = Vec::new();
    let mut buf = [0u8; 4096];
    let mut answered = false;
    loop {
        let n = stdout.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        log.extend_from_slice(&buf[..n]);
        if !answered && String::from_utf8_lossy(&log).contains("Enter passphrase") {
            answered = true;
            std::thread::sleep(std::time::Duration::from_millis(300));
            let _ = stdin.write_all(format!("{answer}\r").as_bytes());
            let _ = stdin.flush();
        }
    }
    let _ = child.wait();
    String::from_utf8_lossy(&log).into_owned()
}

/// A root tree at `t/rootfs` with static busybox as /bin/busybox and /bin/sh, and these
/// directories; its /sbin/init is the caller's.
pub fn busybox_root(t: &TempDir, dirs: &[&str]) -> PathBuf {
    let r = t.join("rootfs");
    for d in ["sbin", "bin"].iter().chain(dirs) {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", r.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", r.join("bin/sh")).unwrap();
    r
}
