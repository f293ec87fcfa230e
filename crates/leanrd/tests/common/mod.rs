//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn leanrd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leanrd"));
    c.env_remove("SOURCE_DATE_EPOCH");
    c
}

/// Run and require success; returns stdout.
pub fn ok(c: &mut Command) -> Vec<u8> {
    let o = c.output().expect("spawn");
    assert!(o.status.success(), "{c:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

pub fn run_stdin(c: &mut Command, input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

pub fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success()).unwrap_or(false)
}

pub fn is_root() -> bool {
    rustix_euid() == 0
}

fn rustix_euid() -> u32 {
    fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1)
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let base = std::env::var_os("LEANRD_TEST_TMP").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
        let p = base.join(format!(
            "leanrd-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A loop-mounted file system of `kind` ("xfs" or "btrfs"), unmounted on drop. None when
/// not root or the mkfs tool is missing.
pub struct LoopFs {
    pub dir: TempDir,
    img: PathBuf,
    mounted: bool,
}

impl LoopFs {
    pub fn new(kind: &str, size: &str) -> Option<LoopFs> {
        if !is_root() || !have(&format!("mkfs.{kind}")) {
            eprintln!("skipping: needs root and mkfs.{kind}");
            return None;
        }
        let dir = TempDir::new(&format!("mnt-{kind}"));
        let img = dir.0.with_extension("img");
        let mnt = dir.join("mnt");
        fs::create_dir_all(&mnt).unwrap();
        assert!(Command::new("truncate").args(["-s", size]).arg(&img).status().unwrap().success());
        assert!(Command::new(format!("mkfs.{kind}")).arg("-q").arg(&img).status().unwrap().success(), "mkfs.{kind}");
        let st = Command::new("mount").args(["-o", "loop"]).arg(&img).arg(&mnt).status().unwrap();
        assert!(st.success(), "mount {kind}");
        Some(LoopFs { dir, img, mounted: true })
    }
    pub fn path(&self) -> PathBuf {
        self.dir.join("mnt")
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(self.path()).status();
        }
        let _ = fs::remove_file(&self.img);
    }
}

/// Deterministic pseudo-random bytes.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A comparable description of a tree: one line per path with kind, mode, size, content
/// hash or link target, and the other names of its hard-link set.
pub fn describe(root: &Path) -> Vec<String> {
    let mut all = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for de in fs::read_dir(root.join(&rel)).unwrap() {
            let r = rel.join(de.unwrap().file_name());
            let md = fs::symlink_metadata(root.join(&r)).unwrap();
            if md.is_dir() {
                stack.push(r.clone());
            }
            all.push((r, md));
        }
    }
    let mut groups: std::collections::HashMap<u64, Vec<String>> = std::collections::HashMap::new();
    for (r, md) in &all {
        if md.is_file() && md.nlink() > 1 {
            groups.entry(md.ino()).or_default().push(r.display().to_string());
        }
    }
    let mut out: Vec<String> = all
        .iter()
        .map(|(r, md)| {
            let p = root.join(r);
            let name = r.display().to_string();
            let ft = md.file_type();
            if ft.is_dir() {
                format!("{name} dir {:o}", md.mode() & 0o7777)
            } else if ft.is_symlink() {
                format!("{name} link {}", fs::read_link(&p).unwrap().display())
            } else if ft.is_file() {
                let data = fs::read(&p).unwrap();
                let mut g = groups.get(&md.ino()).cloned().unwrap_or_default();
                g.sort();
                if g.len() < 2 {
                    g.clear(); // a set whose other members are outside the tree
                }
                format!("{name} file {:o} {} {:x} links{g:?}", md.mode() & 0o7777, data.len(), hash(&data))
            } else {
                format!("{name} other {:o} {}", md.mode(), md.rdev())
            }
        })
        .collect();
    out.sort();
    out
}

/// FNV-1a, enough to compare contents in tests.
pub fn hash(d: &[u8]) -> u64 {
    d.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Assert two tree descriptions are equal, showing only the lines that differ.
pub fn assert_same_tree(got: &[String], want: &[String], what: &str) {
    let missing: Vec<_> = want.iter().filter(|l| !got.contains(l)).collect();
    let extra: Vec<_> = got.iter().filter(|l| !want.contains(l)).collect();
    assert!(missing.is_empty() && extra.is_empty(), "{what}: missing {missing:#?}\nunexpected {extra:#?}");
}

/// The kernel to boot: $LEANRD_TEST_KERNEL or the newest /boot/vmlinuz-*. None (test
/// skipped) without QEMU or a kernel.
pub fn kernel() -> Option<PathBuf> {
    if !have("qemu-system-x86_64") {
        eprintln!("skipping: qemu-system-x86_64 not installed");
        return None;
    }
    if let Some(k) = std::env::var_os("LEANRD_TEST_KERNEL") {
        return Some(PathBuf::from(k));
    }
    let mut ks: Vec<PathBuf> = fs::read_dir("/boot")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .collect();
    ks.sort();
    let k = ks.pop();
    if k.is_none() {
        eprintln!("skipping: no /boot/vmlinuz-*");
    }
    k
}

/// The QEMU (TCG) command line for a test boot, killed after `secs` seconds.
pub fn qemu_command(kernel: &Path, initrd: &Path, append: &str, extra: &[&str], secs: u64) -> Command {
    let mut c = Command::new("timeout");
    c.args(["--signal=KILL", &secs.to_string(), "qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-nographic"])
        .args(["-no-reboot", "-monitor", "none", "-kernel"])
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &format!("console=ttyS0 panic=-1 {append}")])
        .args(extra);
    c
}

/// Boot `kernel` with `initrd` under QEMU TCG; returns the serial console output. The VM is
/// killed after `secs` seconds.
pub fn qemu_boot(kernel: &Path, initrd: &Path, append: &str, extra: &[&str], secs: u64) -> String {
    let o = qemu_command(kernel, initrd, append, extra, secs).stdin(Stdio::null()).output().expect("run qemu");
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// sha256 of a file as `sha256sum` prints it.
pub fn sha256_line(path: &Path, name: &str) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    let h = String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().to_string();
    format!("{h}  {name}\n")
}
