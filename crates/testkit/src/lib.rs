//! Helpers for leanrd's integration and boot tests, shared by the crates' tests/ (not
//! published): temporary directories, loop-mounted file systems, tree descriptions, the
//! installed kernel and QEMU, and fixture proc/sys trees for host detection.

#![deny(missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub mod boot;
pub mod clevis;
pub mod cli;
pub mod netlab;
pub mod prep;
pub mod scenario;

pub use libtest_mimic::Trial;

/// Run and require success; returns stdout.
pub fn ok(c: &mut Command) -> Vec<u8> {
    let o = c.output().expect("spawn");
    assert!(o.status.success(), "{c:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// Run `c` with `input` on its standard input, capturing its output; panics when it cannot be
/// started.
pub fn run_stdin(c: &mut Command, input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// Whether the shell finds `tool` (`command -v`).
pub fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Whether this process runs as root (by the owner of /proc/self: the effective uid).
pub fn is_root() -> bool {
    rustix_euid() == 0
}

fn rustix_euid() -> u32 {
    fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1)
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory leanrd-TAG-PID-N in $LEANRD_TEST_TMP, else the system's temporary
    /// directory ([`remove_temp_dirs`] removes it too if it is never dropped).
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
        LIVE.lock().unwrap().insert(p.clone());
        TempDir(p)
    }
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
    /// `p` inside it.
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
        LIVE.lock().unwrap().remove(&self.0);
    }
}

/// The temporary directories not yet dropped: those a test binary shares among its tests
/// in statics, which are never dropped.
static LIVE: std::sync::Mutex<BTreeSet<PathBuf>> = std::sync::Mutex::new(BTreeSet::new());

/// Remove every temporary directory still there: a test binary's main calls it when its
/// tests are done (a directory a static holds would outlive the process).
pub fn remove_temp_dirs() {
    for p in std::mem::take(&mut *LIVE.lock().unwrap()) {
        let _ = fs::remove_dir_all(p);
    }
}

/// A loop-mounted file system of `kind` ("xfs" or "btrfs"), unmounted on drop. None when
/// not root or the mkfs tool is missing.
pub struct LoopFs {
    /// The directory holding the mount point (`mnt`); the image file is beside it (DIR.img).
    pub dir: TempDir,
    img: PathBuf,
    mounted: bool,
}

impl LoopFs {
    /// Make a `size` image (truncate's form: `300M`), `mkfs.KIND` it and loop-mount it; None
    /// ([`skip`]) when not root or `mkfs.KIND` is missing.
    pub fn new(kind: &str, size: &str) -> Option<LoopFs> {
        if !is_root() || !have(&format!("mkfs.{kind}")) {
            return skip(&format!("needs root and mkfs.{kind}"));
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
    /// The mount point: DIR/mnt.
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

/// A kernel module as the boot proof reads one: a relocatable x86-64 ELF object whose
/// `.modinfo` holds `name=` and `vermagic=KVER SMP mod_unload modversions`, then `pad`, and
/// the signature marker when `signed` (a real module's appended signature ends with it).
pub fn module_elf(kver: &str, name: &str, pad: &[u8], signed: bool) -> Vec<u8> {
    let modinfo = format!("name={name}\0vermagic={kver} SMP mod_unload modversions \0");
    let shstrtab = b"\0.modinfo\0.shstrtab\0";
    let mut body = Vec::new();
    let modinfo_off = 64u64;
    body.extend_from_slice(modinfo.as_bytes());
    let shstr_off = modinfo_off + body.len() as u64;
    body.extend_from_slice(shstrtab);
    body.extend_from_slice(pad);
    while (64 + body.len()) % 8 != 0 {
        body.push(0);
    }
    let shoff = 64 + body.len() as u64;
    let mut elf = Vec::new();
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    let h16 = |v: &mut Vec<u8>, x: u16| v.extend_from_slice(&x.to_le_bytes());
    h16(&mut elf, 1); // ET_REL
    h16(&mut elf, 62); // EM_X86_64
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&0u64.to_le_bytes()); // entry
    elf.extend_from_slice(&0u64.to_le_bytes()); // phoff
    elf.extend_from_slice(&shoff.to_le_bytes());
    elf.extend_from_slice(&0u32.to_le_bytes()); // flags
    for x in [64u16, 0, 0, 64, 3, 2] {
        h16(&mut elf, x); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    }
    elf.extend_from_slice(&body);
    let section = |v: &mut Vec<u8>, name: u32, kind: u32, off: u64, size: u64| {
        v.extend_from_slice(&name.to_le_bytes());
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(&0u64.to_le_bytes()); // flags
        v.extend_from_slice(&0u64.to_le_bytes()); // addr
        v.extend_from_slice(&off.to_le_bytes());
        v.extend_from_slice(&size.to_le_bytes());
        v.extend_from_slice(&[0u8; 8]); // link, info
        v.extend_from_slice(&1u64.to_le_bytes()); // addralign
        v.extend_from_slice(&0u64.to_le_bytes()); // entsize
    };
    section(&mut elf, 0, 0, 0, 0);
    section(&mut elf, 1, 1, modinfo_off, modinfo.len() as u64); // PROGBITS
    section(&mut elf, 10, 3, shstr_off, shstrtab.len() as u64); // STRTAB
    if signed {
        elf.extend_from_slice(&noise(7, 256));
        elf.extend_from_slice(&[0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0]); // struct module_signature
        elf.extend_from_slice(b"~Module signature appended~\n");
    }
    elf
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

/// A flattened device tree as `dtc` writes one (header, an empty reservation map, the
/// structure, the strings) whose root holds `props` (name, value) and nothing else: for the
/// UKI's device-tree sections.
pub fn device_tree(props: &[(&str, &[u8])]) -> Vec<u8> {
    let mut names = Vec::new();
    let mut st = Vec::new();
    st.extend_from_slice(&1u32.to_be_bytes()); // FDT_BEGIN_NODE, the root's empty name
    st.extend_from_slice(&[0; 4]);
    for (n, v) in props {
        st.extend_from_slice(&3u32.to_be_bytes()); // FDT_PROP
        st.extend_from_slice(&(v.len() as u32).to_be_bytes());
        st.extend_from_slice(&(names.len() as u32).to_be_bytes());
        names.extend_from_slice(n.as_bytes());
        names.push(0);
        st.extend_from_slice(v);
        st.resize(st.len().next_multiple_of(4), 0);
    }
    st.extend_from_slice(&2u32.to_be_bytes()); // FDT_END_NODE
    st.extend_from_slice(&9u32.to_be_bytes()); // FDT_END
    let mut b = vec![0u8; 56];
    b.extend_from_slice(&st);
    let strings = b.len();
    b.extend_from_slice(&names);
    let total = b.len();
    for (at, v) in [(0, 0xd00d_feed), (4, total), (8, 56), (12, strings), (16, 40), (20, 17), (24, 16)]
        .into_iter()
        .chain([(32, names.len()), (36, st.len())])
    {
        b[at..at + 4].copy_from_slice(&(v as u32).to_be_bytes());
    }
    b
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

/// A test that cannot run here: None, with why, on a developer's partial machine; a
/// failure under `LEANRD_TEST_STRICT=1` (CI sets it), where every tool and root must be there.
pub fn skip<T>(why: &str) -> Option<T> {
    if std::env::var_os("LEANRD_TEST_STRICT").is_some_and(|v| v == "1") {
        panic!("LEANRD_TEST_STRICT=1 and this test cannot run: {why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// Run a test body; a panic is an Err with the panic's message (for libtest-mimic trials).
pub fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into())
    })
}

/// A test of a `harness = false` test binary (libtest-mimic: each runnable alone by name).
/// `body`'s Err is the test's failure, and so is a panic, with its message.
pub fn test(name: impl Into<String>, body: impl FnOnce() -> Result<(), String> + Send + 'static) -> Trial {
    Trial::test(name, move || Ok(caught(body)??))
}

/// The main of a `harness = false` test binary: run `trials` as the command line asks, with
/// `threads` test threads unless it says otherwise, then remove the temporary directories the
/// tests shared.
pub fn run_tests(trials: Vec<Trial>, threads: usize) -> std::process::ExitCode {
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads = args.test_threads.or(Some(threads));
    let conclusion = libtest_mimic::run(&args, trials);
    remove_temp_dirs();
    conclusion.exit_code()
}

/// The machine's cores (2 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// What several tests share, made once by the first that needs it. A panic while making it
/// is every caller's failure, with its message: it is not made again for each.
pub fn once<T>(cell: &'static std::sync::OnceLock<Result<T, String>>, make: impl FnOnce() -> T) -> &'static T {
    match cell.get_or_init(|| caught(make)) {
        Ok(v) => v,
        Err(e) => panic!("what these tests share failed to be made: {e}"),
    }
}

/// Sort key of a kernel release as versions sort (6.9 before 6.10), not as text.
pub fn version_key(release: &str) -> Vec<(u64, String)> {
    let mut key = Vec::new();
    let mut rest = release;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (num, tail) = rest.split_at(digits);
        let text = tail.find(|c: char| c.is_ascii_digit()).unwrap_or(tail.len());
        key.push((num.parse().unwrap_or(0), tail[..text].to_string()));
        rest = &tail[text..];
    }
    key
}

/// The kernel to boot: $LEANRD_TEST_KERNEL or the newest /boot/vmlinuz-* (by version).
/// None (test skipped) without QEMU or a kernel.
pub fn kernel() -> Option<PathBuf> {
    if !have("qemu-system-x86_64") {
        return skip("qemu-system-x86_64 not installed");
    }
    if let Some(k) = std::env::var_os("LEANRD_TEST_KERNEL") {
        return Some(PathBuf::from(k));
    }
    let mut ks: Vec<PathBuf> = fs::read_dir("/boot")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .collect();
    ks.sort_by_key(|p| version_key(&p.file_name().unwrap_or_default().to_string_lossy()["vmlinuz-".len()..]));
    match ks.pop() {
        Some(k) => Some(k),
        None => skip("no /boot/vmlinuz-*"),
    }
}

/// The newest kernel in a root's /boot (by version): Debian 13's roots boot their own.
pub fn root_kernel(root: &Path) -> PathBuf {
    let mut ks: Vec<PathBuf> = fs::read_dir(root.join("boot"))
        .unwrap_or_else(|e| panic!("{}/boot: {e}", root.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .collect();
    ks.sort_by_key(|p| version_key(&p.file_name().unwrap_or_default().to_string_lossy()["vmlinuz-".len()..]));
    ks.pop().unwrap_or_else(|| panic!("no vmlinuz-* in {}/boot", root.display()))
}

/// The QEMU (TCG) command line for a test boot, killed after `secs` seconds: the kernel
/// started at its PVH entry where it has one ([`entry_kernel`]), except on a machine with a
/// TPM.
pub fn qemu_command(kernel: &Path, initrd: &Path, append: &str, extra: &[&str], secs: u64) -> Command {
    qemu_command_as_is(&kernel_for(kernel, extra), initrd, &format!("{TEST_APPEND} {append}"), extra, secs)
}

/// What a test VM's kernel command line has before the test's own words (not the
/// benchmarks': they boot as users' machines do): no self-test of each crypto algorithm the
/// kernel registers (SHA-2, HMAC, CRC32C, AES...), which checks the kernel, not the
/// initramfs, and takes 0.7 s of a Debian 13 kernel's 4.2 s to /init under TCG; and no check
/// that the timer interrupt comes through the IO-APIC (`no_timer_check`): under TCG on a loaded
/// host the check can miss its window and the kernel panics ("IO-APIC + timer doesn't work!",
/// seen here in a prep VM with a CI run beside it).
pub const TEST_APPEND: &str = "cryptomgr.notests no_timer_check";

/// The kernel a test VM with these QEMU arguments starts: [`entry_kernel`], or `vmlinuz` itself
/// on a machine with a TPM (see there) or with UEFI firmware (OVMF as pflash: it starts the
/// kernel's EFI stub).
pub fn kernel_for(vmlinuz: &Path, qemu_args: &[&str]) -> PathBuf {
    let uefi = qemu_args.iter().any(|a| a.contains("if=pflash"));
    if uefi || qemu_args.contains(&"-tpmdev") { vmlinuz.to_path_buf() } else { entry_kernel(vmlinuz) }
}

/// [`qemu_command`] with the kernel image as given: QEMU runs its boot-protocol stub, which
/// decompresses it (the benchmarks' boots, timed as users' machines boot).
pub fn qemu_command_as_is(kernel: &Path, initrd: &Path, append: &str, extra: &[&str], secs: u64) -> Command {
    let mut c = vm_command(secs);
    c.arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &format!("console=ttyS0 panic=-1 {append}")])
        .args(extra);
    c
}

/// The kernel a test VM starts: the ELF inside `vmlinuz` (an x86 bzImage) where it has a PVH
/// entry (Debian's kernels do: CONFIG_PVH), which QEMU starts directly, else `vmlinuz` itself.
/// The bzImage's own stub decompresses the kernel first: 3.5 s of every boot under TCG for
/// Debian 12's XZ kernel, 1.1 s for Debian 13's zstd one. The initramfs is handed over the
/// same way (the kernel unpacks it from memory either way), and nothing a test checks comes
/// before. Not on a machine with a TPM: started at its PVH entry, Debian 12's kernel reads the
/// ACPI tables wrongly once QEMU adds the TPM's ("ACPI Error: Resize of Root Table Array is not
/// allowed", then "Unable to enable ACPI"), and finds no TPM and no way to power off.
/// Extracted once per kernel file's content, into the test cache's `kernels/`.
pub fn entry_kernel(vmlinuz: &Path) -> PathBuf {
    static MADE: std::sync::Mutex<BTreeMap<PathBuf, PathBuf>> = std::sync::Mutex::new(BTreeMap::new());
    if let Some(p) = MADE.lock().unwrap().get(vmlinuz) {
        return p.clone();
    }
    let Ok(bz) = fs::read(vmlinuz) else { return vmlinuz.to_path_buf() };
    let key = scenario::key_of(&[b"pvh-1", &bz]);
    let dir = scenario::cached("kernels", &key, |d| {
        if let Some(elf) = pvh_elf(&bz) {
            fs::write(d.join("vmlinux"), elf).unwrap();
        }
    });
    let elf = dir.join("vmlinux");
    let p = if elf.exists() { elf } else { vmlinuz.to_path_buf() };
    MADE.lock().unwrap().insert(vmlinuz.to_path_buf(), p.clone());
    p
}

/// The ELF a bzImage carries (its payload, decompressed), if it has a PVH entry note
/// (XEN_ELFNOTE_PHYS32_ENTRY, 18). The setup header (boot protocol 2.08 and later) says where
/// the payload is: `payload_offset` (0x248) and `payload_length` (0x24c), from the protected-mode
/// code, which starts after the `setup_sects` (0x1f1; 0 means 4) sectors and the boot sector.
fn pvh_elf(bz: &[u8]) -> Option<Vec<u8>> {
    let u32_at = |o: usize| bz.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    if bz.get(0x202..0x206) != Some(b"HdrS") || bz.get(0x206..0x208).map(|v| u16::from_le_bytes([v[0], v[1]]))? < 0x208
    {
        return None;
    }
    let setup = match *bz.get(0x1f1)? {
        0 => 4,
        n => n as usize,
    };
    let start = (setup + 1) * 512 + u32_at(0x248)? as usize;
    let payload = bz.get(start..start.checked_add(u32_at(0x24c)? as usize)?)?;
    let format = leanrd_compress::Format::detect(payload)?;
    let elf = leanrd_compress::decompress_vec_max(format, payload, 1 << 30).ok()?;
    let parsed = goblin::elf::Elf::parse(&elf).ok()?;
    let pvh = parsed.iter_note_headers(&elf)?.flatten().any(|n| n.n_type == 18 && n.name == "Xen");
    pvh.then_some(elf)
}

/// UEFI firmware for x86-64 guests (Debian's ovmf): its code, mapped read-only.
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
/// OVMF's variable store, the one every firmware boot starts from: boots use a copy (the
/// firmware writes to it).
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// The QEMU (TCG) command line of a UEFI boot: OVMF with `vars` as its variable store, no
/// kernel given (the firmware starts what the disks in `extra` hold), killed after `secs`.
pub fn firmware_command(vars: &Path, extra: &[&str], secs: u64) -> Command {
    let mut c = vm_command(secs);
    c.arg("-drive")
        .arg(format!("if=pflash,format=raw,readonly=on,file={OVMF_CODE}"))
        .arg("-drive")
        .arg(format!("if=pflash,format=raw,file={}", vars.display()))
        .args(extra);
    c
}

/// A software TPM for one VM (swtpm ends when the VM does): QEMU's arguments for it.
pub struct Swtpm {
    child: std::process::Child,
    /// QEMU's arguments: the TPM as a TIS device.
    pub args: Vec<String>,
}

impl Swtpm {
    /// Start one keeping its state in `state` (a TPM that persists across boots).
    pub fn start(state: &Path) -> Swtpm {
        fs::create_dir_all(state).unwrap();
        let sock = state.join("sock");
        let _ = fs::remove_file(&sock);
        let child = std::process::Command::new("swtpm")
            .args(["socket", "--tpm2", "--flags", "startup-clear", "--tpmstate"])
            .arg(format!("dir={}", state.display()))
            .args(["--ctrl"])
            .arg(format!("type=unixio,path={}", sock.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        // Seconds on a loaded machine (four test binaries and a build beside it).
        while !sock.exists() && start.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let args = format!(
            "-chardev socket,id=chrtpm,path={} -tpmdev emulator,id=tpm0,chardev=chrtpm -device tpm-tis,tpmdev=tpm0",
            sock.display()
        );
        Swtpm { child, args: args.split(' ').map(String::from).collect() }
    }
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// OVMF built for Secure Boot (its variables behind SMM): with a store whose keys are enrolled
/// and Secure Boot on, it starts only what db allows.
pub const OVMF_CODE_SECURE: &str = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd";

/// [`firmware_command`] with [`OVMF_CODE_SECURE`] on a q35 machine with SMM (what it needs to
/// keep its variables from the guest).
pub fn secure_firmware_command(vars: &Path, extra: &[&str], secs: u64) -> Command {
    let mut c = vm_command(secs);
    c.args(["-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on", "-drive"])
        .arg(format!("if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE_SECURE}"))
        .arg("-drive")
        .arg(format!("if=pflash,format=raw,unit=1,file={}", vars.display()))
        .args(extra);
    c
}

/// The QEMU (TCG) command line of a BIOS boot (SeaBIOS): no kernel given, the firmware starts
/// what the disks in `extra` hold (`-boot d` for a CD), killed after `secs`.
pub fn bios_command(extra: &[&str], secs: u64) -> Command {
    let mut c = vm_command(secs);
    c.args(extra);
    c
}

/// What every test VM's command line starts with: QEMU under TCG with 512 MiB (a later `-m`
/// in the extra arguments wins), its serial console on stdio, no monitor (a test that needs one
/// adds its own), no network but what the test gives it (`-nic none`: QEMU's default is a NIC
/// on user-mode networking, a route out of the machine), exiting instead of rebooting, killed
/// after `secs`.
pub fn vm_command(secs: u64) -> Command {
    qemu_vm("qemu-system-x86_64", &["-m", "512"], secs)
}

/// `qemu` under TCG with `machine`'s arguments, its serial console on stdio and [`VM_ARGS`],
/// killed after `secs`: what [`vm_command`] and [`aarch64_vm_command`] share.
fn qemu_vm(qemu: &str, machine: &[&str], secs: u64) -> Command {
    let mut c = Command::new("timeout");
    c.args(["--signal=KILL", &secs.to_string(), qemu, "-accel", "tcg"]).args(machine).arg("-nographic").args(VM_ARGS);
    c
}

/// The arguments every test VM gets after the memory and the display ([`vm_command`]).
pub const VM_ARGS: [&str; 5] = ["-no-reboot", "-monitor", "none", "-nic", "none"];

/// The arm64 test machine: QEMU's `virt` board (virtio-mmio devices in its device tree, and
/// PCIe) with a Cortex-A57, the cheapest CPU TCG emulates that Debian's arm64 kernel runs on.
pub const AARCH64_MACHINE: [&str; 6] = ["-M", "virt", "-cpu", "cortex-a57", "-m", "1024"];

/// The arm64 test machine's serial console (the virt board's PL011 UART).
pub const AARCH64_CONSOLE: &str = "ttyAMA0";

/// The AAVMF firmware image and its variable store's template (qemu-efi-aarch64): the arm64
/// UEFI firmware.
pub const AAVMF: [&str; 2] = ["/usr/share/AAVMF/AAVMF_CODE.fd", "/usr/share/AAVMF/AAVMF_VARS.fd"];

/// [`vm_command`] for arm64 ([`AARCH64_MACHINE`], qemu-system-aarch64 under TCG).
pub fn aarch64_vm_command(secs: u64) -> Command {
    qemu_vm("qemu-system-aarch64", &AARCH64_MACHINE, secs)
}

/// [`qemu_command_as_is`] for arm64: the kernel (Debian's arm64 vmlinuz, which QEMU loads as
/// it is) and the image given to the `virt` board, the console on [`AARCH64_CONSOLE`].
pub fn aarch64_qemu_command(kernel: &Path, initrd: &Path, append: &str, extra: &[&str], secs: u64) -> Command {
    let mut c = aarch64_vm_command(secs);
    c.arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &format!("console={AARCH64_CONSOLE} panic=-1 {append}")])
        .args(extra);
    c
}

/// [`firmware_command`] for arm64: AAVMF with `vars` as its variable store (a copy of the
/// template is put there), no kernel given.
pub fn aavmf_command(vars: &Path, extra: &[&str], secs: u64) -> Command {
    let _ = fs::copy(AAVMF[1], vars);
    let mut c = aarch64_vm_command(secs);
    c.arg("-drive")
        .arg(format!("if=pflash,format=raw,readonly=on,file={}", AAVMF[0]))
        .arg("-drive")
        .arg(format!("if=pflash,format=raw,file={}", vars.display()))
        .args(extra);
    c
}

/// A right to run one VM: held while it runs. TCG takes a core per VM, so at most as many
/// VMs run at once as the machine has cores ($LEANRD_VM_SLOTS overrides), across every test
/// thread and every test process (suites run side by side share them): a slot is an `flock`
/// on /tmp/leanrd-vm-slots/N, released by the kernel when its holder exits, however it exits.
pub struct VmSlot {
    _held: fs::File,
    asked: std::time::Instant,
    since: std::time::Instant,
}

/// Each slot's use, one JSON line when it is given back, to $LEANRD_VM_LOG (tools/test sets
/// it and sums it up: how busy the cores were with VMs, and which suites kept them so).
impl Drop for VmSlot {
    fn drop(&mut self) {
        let Some(log) = std::env::var_os("LEANRD_VM_LOG") else { return };
        let exe = std::env::current_exe().ok();
        let bin = exe.as_deref().and_then(Path::file_name).and_then(|n| n.to_str()).unwrap_or("?");
        // Cargo names test executables NAME-HASH.
        let bin = bin.rsplit_once('-').map_or(bin, |(b, _)| b);
        let end = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let line = serde_json::json!({
            "bin": bin,
            "thread": std::thread::current().name().unwrap_or(""),
            "end": end.as_secs_f64(),
            "held": self.since.elapsed().as_secs_f64(),
            "waited": (self.since - self.asked).as_secs_f64(),
        });
        if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(log) {
            let _ = std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes());
        }
    }
}

/// Whether this process's VMs go first ([`vm_priority`]).
static PRIORITY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Give this process's VMs the first free slot: a suite that is one long chain of boots (each
/// waiting on the last) calls it, so that the chain, the run's longest path, does not queue
/// behind suites whose boots are independent. While it waits for a slot it holds an `flock`
/// on /tmp/leanrd-vm-slots/wait-PID, and other processes leave free slots to it.
pub fn vm_priority() {
    PRIORITY.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a live priority process is waiting for a slot (stale markers are removed).
fn priority_waiting(dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(dir) else { return false };
    let mut waiting = false;
    for e in entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("wait-")) {
        match fs::File::open(e.path()) {
            Ok(f) if f.try_lock().is_err() => waiting = true,
            Ok(_) => {
                let _ = fs::remove_file(e.path());
            }
            Err(_) => {}
        }
    }
    waiting
}

/// Take a VM slot (see [`VmSlot`]), waiting for one: free slots go to processes that called
/// [`vm_priority`] first. Panics after two hours without one.
pub fn vm_slot() -> VmSlot {
    let asked = std::time::Instant::now();
    let n = std::env::var("LEANRD_VM_SLOTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let dir = Path::new("/tmp/leanrd-vm-slots");
    let _ = fs::create_dir_all(dir);
    let priority = PRIORITY.load(std::sync::atomic::Ordering::Relaxed);
    // Made under a private name, locked, then renamed into view: a marker is never seen unlocked.
    let marker = priority.then(|| {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let id = format!("{}-{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let (tmp, path) = (dir.join(format!(".making-{id}")), dir.join(format!("wait-{id}")));
        let f = fs::File::create(&tmp).ok()?;
        f.lock().ok()?;
        fs::rename(&tmp, &path).ok()?;
        Some((f, path))
    });
    // Bounded: a slot is never held longer than a VM's timeout; two hours is a hung test.
    for _ in 0..(2 * 3600 * 5) {
        if priority || !priority_waiting(dir) {
            for i in 0..n {
                let Ok(f) =
                    fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(i.to_string()))
                else {
                    continue;
                };
                if f.try_lock().is_ok() {
                    if let Some(Some((_, path))) = &marker {
                        let _ = fs::remove_file(path);
                    }
                    return VmSlot { _held: f, asked, since: std::time::Instant::now() };
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("no VM slot in {} free for two hours", dir.display());
}

/// Boot `kernel` with `initrd` under QEMU TCG; returns the serial console output. The VM is
/// killed after `secs` seconds.
pub fn qemu_boot(kernel: &Path, initrd: &Path, append: &str, extra: &[&str], secs: u64) -> String {
    let _slot = vm_slot();
    let o = qemu_command(kernel, initrd, append, extra, secs).stdin(Stdio::null()).output().expect("run qemu");
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// sha256 of a file as `sha256sum` prints it.
pub fn sha256_line(path: &Path, name: &str) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    let h = String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().to_string();
    format!("{h}  {name}\n")
}

/// The installed kernel with a module tree, if any.
pub fn kver() -> Option<String> {
    let mut v: Vec<String> = fs::read_dir("/lib/modules")
        .ok()?
        .flatten()
        .filter(|e| e.path().join("modules.dep").exists() && e.path().join("kernel").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort_by_key(|r| version_key(r));
    match v.pop() {
        Some(k) => Some(k),
        None => skip("no kernel module tree in /lib/modules (apt install linux-image-amd64)"),
    }
}

/// The modules `modprobe -S KVER --show-depends WHAT` would load, by name: `what` (a module
/// or an alias), its dependencies, and its own soft dependencies.
pub fn modprobe_set(kver: &str, what: &str) -> BTreeSet<String> {
    let o = Command::new("modprobe").args(["-S", kver, "--show-depends", what]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("insmod "))
        .map(|p| leanrd_kmod::name_of_path(p.split_whitespace().next().unwrap()))
        .collect()
}

/// modprobe's answer plus, until nothing changes, the soft dependencies of every module in
/// the set (modprobe follows them only for the module asked for).
pub fn expected_modules(kver: &str, what: &str, softdeps: &str) -> BTreeSet<String> {
    let mut set = modprobe_set(kver, what);
    loop {
        let mut more = BTreeSet::new();
        for line in softdeps.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.len() > 2 && w[0] == "softdep" && set.contains(&leanrd_kmod::normalize(w[1])) {
                for s in w[2..].iter().filter(|s| !s.ends_with(':')) {
                    more.extend(modprobe_set(kver, s));
                }
            }
        }
        if more.is_subset(&set) {
            return set;
        }
        set.extend(more);
    }
}

/// Build a fixture proc/sys tree. `devs` are (sysfs path under sys/devices, modalias, driver)
/// for the hardware chain; `block` is the root's block device path under sys/devices.
pub struct Fixture {
    /// The tree's top: proc/ and sys/ (and dev/ when made) under it, as the detection reads them
    /// from /.
    pub root: PathBuf,
}

impl Fixture {
    /// An empty tree `name` in `t`: proc/self/mountinfo holding `mountinfo`, empty sys/devices and
    /// sys/dev/block.
    pub fn new(t: &TempDir, name: &str, mountinfo: &str) -> Fixture {
        let root = t.join(name);
        fs::create_dir_all(root.join("proc/self")).unwrap();
        fs::create_dir_all(root.join("sys/dev/block")).unwrap();
        fs::create_dir_all(root.join("sys/devices")).unwrap();
        fs::write(root.join("proc/self/mountinfo"), mountinfo).unwrap();
        Fixture { root }
    }
    /// A device at `path` under sys/devices: with a `modalias` file and a `driver` link (to
    /// sys/bus/x/drivers/DRIVER) when given.
    pub fn dev(&self, path: &str, modalias: Option<&str>, driver: Option<&str>) -> &Self {
        let d = self.root.join("sys/devices").join(path);
        fs::create_dir_all(&d).unwrap();
        if let Some(m) = modalias {
            fs::write(d.join("modalias"), format!("{m}\n")).unwrap();
        }
        if let Some(drv) = driver {
            let dd = self.root.join("sys/bus/x/drivers").join(drv);
            fs::create_dir_all(&dd).unwrap();
            symlink(&dd, d.join("driver")).unwrap();
        }
        self
    }
    /// A block device (and its dev number link). `partition` marks partitions.
    pub fn block(&self, path: &str, dev: &str, partition: bool) -> &Self {
        let d = self.root.join("sys/devices").join(path);
        fs::create_dir_all(&d).unwrap();
        if partition {
            fs::write(d.join("partition"), "1\n").unwrap();
        }
        let link = self.root.join("sys/dev/block").join(dev);
        let _ = fs::remove_file(&link);
        symlink(format!("../../devices/{path}"), link).unwrap();
        self.class_link(path);
        self
    }
    /// sys/class/block/NAME, as the kernel links every block device.
    fn class_link(&self, path: &str) {
        let class = self.root.join("sys/class/block");
        fs::create_dir_all(&class).unwrap();
        let name = Path::new(path).file_name().unwrap();
        let _ = fs::remove_file(class.join(name));
        symlink(format!("../../devices/{path}"), class.join(name)).unwrap();
    }
    /// /dev/disk/by-uuid/UUID pointing at the block device NAME.
    pub fn uuid(&self, uuid: &str, name: &str) -> &Self {
        let d = self.root.join("dev/disk/by-uuid");
        fs::create_dir_all(&d).unwrap();
        symlink(format!("../../{name}"), d.join(uuid)).unwrap();
        self
    }
    /// A device-mapper device `name` (dm-N) under sys/devices/virtual/block: its dm/uuid, and
    /// `slaves` links to the devices (paths under sys/devices) it is built on.
    pub fn dm(&self, name: &str, uuid: &str, slaves: &[&str]) -> &Self {
        let d = self.root.join("sys/devices/virtual/block").join(name);
        fs::create_dir_all(d.join("dm")).unwrap();
        fs::create_dir_all(d.join("slaves")).unwrap();
        fs::write(d.join("dm/uuid"), format!("{uuid}\n")).unwrap();
        for s in slaves {
            let target = self.root.join("sys/devices").join(s);
            symlink(&target, d.join("slaves").join(Path::new(s).file_name().unwrap())).unwrap();
        }
        self.class_link(&format!("virtual/block/{name}"));
        self
    }
    /// The device-mapper name of the dm device `name` (made by [`Fixture::dm`]), and its
    /// device number link.
    pub fn dm_name(&self, name: &str, mapper: &str, devno: &str) -> &Self {
        let d = self.root.join("sys/devices/virtual/block").join(name);
        fs::write(d.join("dm/name"), format!("{mapper}\n")).unwrap();
        fs::write(d.join("dev"), format!("{devno}\n")).unwrap();
        let link = self.root.join("sys/dev/block").join(devno);
        let _ = fs::remove_file(&link);
        symlink(format!("../../devices/virtual/block/{name}"), link).unwrap();
        self
    }
    /// A network interface NAME whose device is `path` under sys/devices (made with
    /// [`Fixture::dev`]), up, as sys/class/net lists it.
    pub fn net(&self, name: &str, path: &str) -> &Self {
        let d = self.root.join("sys/devices").join(path).join("net").join(name);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("operstate"), "up\n").unwrap();
        symlink("../..", d.join("device")).unwrap();
        let class = self.root.join("sys/class/net");
        fs::create_dir_all(&class).unwrap();
        symlink(format!("../../devices/{path}/net/{name}"), class.join(name)).unwrap();
        self
    }
    /// A virtio network interface eth0 (at PCI 00:03.0), up.
    pub fn virtio_nic(&self) -> &Self {
        self.dev(
            "pci0000:00/0000:00:03.0",
            Some("pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"),
            Some("virtio-pci"),
        )
        .dev("pci0000:00/0000:00:03.0/virtio0", Some("virtio:d00000001v00001AF4"), Some("virtio_net"))
        .net("eth0", "pci0000:00/0000:00:03.0/virtio0")
    }
    /// An input device at `path` under sys/devices (its parent devices made with
    /// [`Fixture::dev`]), with this `capabilities/key` bitmap, listed in sys/class/input.
    pub fn input(&self, path: &str, keys: &str) -> &Self {
        let d = self.root.join("sys/devices").join(path);
        fs::create_dir_all(d.join("capabilities")).unwrap();
        fs::write(d.join("capabilities/key"), format!("{keys}\n")).unwrap();
        let class = self.root.join("sys/class/input");
        fs::create_dir_all(&class).unwrap();
        let name = Path::new(path).file_name().unwrap();
        symlink(format!("../../devices/{path}"), class.join(name)).unwrap();
        self
    }
}

/// A full keyboard's `capabilities/key` (every key up to 127), as a 64-bit kernel prints it.
pub const KEYBOARD_KEYS: &str = "ffffffffffffffff fffffffffffffffe";
/// A power button's.
pub const POWER_BUTTON_KEYS: &str = "10000000000000 0";

/// The modalias of a virtio block device's PCI function (virtio-pci, storage class).
pub const VIRTIO_PCI: &str = "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00";
/// The modalias of an NVMe controller's PCI function (QEMU's: class 01, subclass 08, NVMe).
pub const NVME_PCI: &str = "pci:v00008086d00005845sv00001AF4sd00001100bc01sc08i02";

/// A machine whose root is ext4 on vda1, a partition of a virtio disk at PCI 00:04.0.
pub fn virtio_ext4(t: &TempDir) -> Fixture {
    let f = Fixture::new(
        t,
        "virtio-ext4",
        "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n23 22 0:5 / /proc rw - proc proc rw\n",
    );
    f.dev("pci0000:00", None, None)
        .dev("pci0000:00/0000:00:04.0", Some(VIRTIO_PCI), Some("virtio-pci"))
        .dev("pci0000:00/0000:00:04.0/virtio1", Some("virtio:d00000002v00001AF4"), Some("virtio_blk"))
        .block("pci0000:00/0000:00:04.0/virtio1/block/vda", "254:0", false)
        .block("pci0000:00/0000:00:04.0/virtio1/block/vda/vda1", "254:1", true);
    f
}

/// A machine whose root (ext4 on sda1) is LUN 1 of an iSCSI target reached over a virtio
/// NIC: the session as the kernel shows it in sysfs (port 3261, portal group 1).
pub fn iscsi_virtio(t: &TempDir, name: &str) -> Fixture {
    let f = Fixture::new(t, name, "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n");
    let disk = "platform/host2/session1/target2:0:0/2:0:0:1/block/sda";
    f.dev("platform/host2/session1/target2:0:0/2:0:0:1", Some("scsi:t-0x00"), Some("sd_mod"))
        .block(disk, "8:0", false)
        .block(&format!("{disk}/sda1"), "8:1", true)
        .virtio_nic();
    let class = |dir: &str, files: &[(&str, &str)]| {
        let d = f.root.join(dir);
        fs::create_dir_all(&d).unwrap();
        for (k, v) in files {
            fs::write(d.join(k), format!("{v}\n")).unwrap();
        }
    };
    class(
        "sys/class/iscsi_session/session1",
        &[("targetname", "iqn.2026-11.test.leanrd:root"), ("tpgt", "1"), ("initiatorname", "iqn.2026-11.test:client")],
    );
    class(
        "sys/class/iscsi_connection/connection1:0",
        &[("persistent_address", "10.77.0.1"), ("persistent_port", "3261")],
    );
    f
}

/// A machine whose root (ext4 on the whole namespace) is on NVMe over TCP, through a virtio
/// NIC: the namespace's head under the virtual nvme-subsystem device (native multipath, as
/// Debian's kernels have it), its controller nvme0 on TCP.
pub fn nvmf_virtio(t: &TempDir, name: &str) -> Fixture {
    let f = Fixture::new(t, name, "22 1 259:0 / / rw,relatime shared:1 - ext4 /dev/nvme0n1 rw\n");
    f.dev("virtual/nvme-subsystem/nvme-subsys0", None, None)
        .block("virtual/nvme-subsystem/nvme-subsys0/nvme0n1", "259:0", false)
        .virtio_nic();
    let ctrl = f.root.join("sys/class/nvme/nvme0");
    fs::create_dir_all(&ctrl).unwrap();
    for (k, v) in [
        ("transport", "tcp"),
        ("address", "traddr=10.77.0.2,trsvcid=4420,src_addr=10.77.0.50"),
        ("subsysnqn", "nqn.2026-11.test.leanrd:root"),
        ("hostnqn", "nqn.2014-08.org.nvmexpress:uuid:6c65616e-7264-0000-0000-000000000001"),
        ("hostid", "6c65616e-7264-0000-0000-000000000001"),
    ] {
        fs::write(ctrl.join(k), format!("{v}\n")).unwrap();
    }
    fs::create_dir_all(f.root.join("sys/class/nvme-subsystem/nvme-subsys0/nvme0")).unwrap();
    f
}

/// A root on a Network Block Device: ext4 on /dev/nbd0 (a virtual block device), a virtio NIC.
pub fn nbd_virtio(t: &TempDir, name: &str) -> Fixture {
    let f = Fixture::new(t, name, "22 1 43:0 / / rw,relatime shared:1 - ext4 /dev/nbd0 rw\n");
    f.dev("virtual/block", None, None).block("virtual/block/nbd0", "43:0", false).virtio_nic();
    f
}

/// The WWID of [`multipath_scsi`]'s LUN (QEMU's `wwn=0x5000c50015ea71ac`, NAA 5: `3` first).
pub const MULTIPATH_WWID: &str = "35000c50015ea71ac";

/// A root on a dm-multipath map: one LUN seen as sda and sdb through two virtio-scsi
/// controllers (PCI 00:05.0 and 00:06.0), the map dm-0 (`mpatha`, DM UUID `mpath-WWID`) over
/// both, the root ext4 on its partition map dm-1 (`mpatha-part1`, `part1-mpath-WWID`, kpartx's).
pub fn multipath_scsi(t: &TempDir, name: &str) -> Fixture {
    let f = Fixture::new(t, name, "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/mapper/mpatha-part1 rw\n");
    let mut disks = Vec::new();
    for (i, (pci, disk, devno)) in [("05", "sda", "8:0"), ("06", "sdb", "8:16")].into_iter().enumerate() {
        let ctl = format!("pci0000:00/0000:00:{pci}.0");
        let host = format!("{ctl}/virtio{i}/host{i}");
        let lun = format!("{host}/target{i}:0:0/{i}:0:0:0");
        f.dev(&ctl, Some("pci:v00001AF4d00001004sv00001AF4sd00000008bc01sc00i00"), Some("virtio-pci"))
            .dev(&format!("{ctl}/virtio{i}"), Some("virtio:d00000008v00001AF4"), Some("virtio_scsi"))
            .dev(&lun, Some("scsi:t-0x00"), Some("sd"))
            .block(&format!("{lun}/block/{disk}"), devno, false);
        disks.push(format!("{lun}/block/{disk}"));
    }
    let uuid = format!("mpath-{MULTIPATH_WWID}");
    f.dm("dm-0", &uuid, &[&disks[0], &disks[1]]).dm_name("dm-0", "mpatha", "254:0");
    f.dm("dm-1", &format!("part1-{uuid}"), &["virtual/block/dm-0"]).dm_name("dm-1", "mpatha-part1", "254:1");
    f
}

/// A diskless machine: its root NFSv4 from 10.0.2.2 over a virtio NIC (and a loopback, which
/// has no device).
pub fn nfs_virtio(t: &TempDir, name: &str) -> Fixture {
    let f = Fixture::new(
        t,
        name,
        "22 1 0:40 / / rw,relatime shared:1 - nfs4 10.0.2.2:/srv/root \
         rw,vers=4.2,rsize=131072,proto=tcp,addr=10.0.2.2,clientaddr=10.0.2.15\n23 22 0:5 / /proc rw - proc proc rw\n",
    );
    f.virtio_nic().dev("virtual", None, None).net("lo", "virtual");
    // Loopback is virtual: no device link.
    let _ = fs::remove_file(f.root.join("sys/devices/virtual/net/lo/device"));
    f
}

/// A machine with an NVMe disk at PCI 00:05.0: nvme0n1 (259:0) with partition nvme0n1p2
/// (259:2); the root as `mountinfo` says.
pub fn nvme_base(t: &TempDir, name: &str, mountinfo: &str) -> Fixture {
    let f = Fixture::new(t, name, mountinfo);
    f.dev("pci0000:00/0000:00:05.0", Some(NVME_PCI), Some("nvme"))
        .dev("pci0000:00/0000:00:05.0/nvme/nvme0", None, None)
        .block("pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1", "259:0", false)
        .block("pci0000:00/0000:00:05.0/nvme/nvme0/nvme0n1/nvme0n1p2", "259:2", true);
    f
}

/// An ext4 root on md RAID1 (md127, level raid1) over the first partitions of two SATA disks
/// behind AHCI.
pub fn md_raid1_sata(t: &TempDir) -> Fixture {
    let f = Fixture::new(t, "md", "22 1 9:127 / / rw - ext4 /dev/md127 rw\n");
    f.dev("pci0000:00/0000:00:1f.2", Some("pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01"), Some("ahci"));
    for (n, port) in [("sda", "ata1"), ("sdb", "ata2")] {
        let disk = format!("pci0000:00/0000:00:1f.2/{port}/host0/target0:0:0/0:0:0:0");
        f.dev(&disk, Some("scsi:t-0x00"), Some("sd"));
        f.block(&format!("{disk}/block/{n}"), if n == "sda" { "8:0" } else { "8:16" }, false);
        f.block(&format!("{disk}/block/{n}/{n}1"), if n == "sda" { "8:1" } else { "8:17" }, true);
    }
    let md = f.root.join("sys/devices/virtual/block/md127");
    fs::create_dir_all(md.join("md")).unwrap();
    fs::create_dir_all(md.join("slaves")).unwrap();
    fs::write(md.join("md/level"), "raid1\n").unwrap();
    for (n, port) in [("sda1", "ata1"), ("sdb1", "ata2")] {
        let disk = &n[..3];
        symlink(
            f.root
                .join(format!("sys/devices/pci0000:00/0000:00:1f.2/{port}/host0/target0:0:0/0:0:0:0/block/{disk}/{n}")),
            md.join("slaves").join(n),
        )
        .unwrap();
    }
    f.block("virtual/block/md127", "9:127", false);
    f
}

/// The mountinfo of a btrfs root: subvolume @ of the file system on /dev/vda2, device 0:31.
pub const BTRFS_MOUNTINFO: &str = "22 1 0:31 /@ / rw,relatime shared:1 - btrfs /dev/vda2 rw,space_cache=v2,subvol=/@\n";

/// A btrfs raid1 root on two virtio disks, in subvolume @: mountinfo shows device 0:31.
pub fn btrfs_two_disks(t: &TempDir) -> Fixture {
    let f = Fixture::new(t, "btrfs", BTRFS_MOUNTINFO);
    f.dev("pci0000:00/0000:00:04.0", Some(VIRTIO_PCI), Some("virtio-pci"))
        .dev("pci0000:00/0000:00:04.0/virtio1", Some("virtio:d00000002v00001AF4"), Some("virtio_blk"))
        .block("pci0000:00/0000:00:04.0/virtio1/block/vda", "254:0", false)
        .block("pci0000:00/0000:00:04.0/virtio1/block/vda/vda2", "254:2", true)
        .dev("pci0000:00/0000:00:05.0", Some(VIRTIO_PCI), Some("virtio-pci"))
        .dev("pci0000:00/0000:00:05.0/virtio2", Some("virtio:d00000002v00001AF4"), Some("virtio_blk"))
        .block("pci0000:00/0000:00:05.0/virtio2/block/vdb", "254:16", false);
    let devs = f.root.join("sys/fs/btrfs/0a1b2c3d-0000-4000-8000-000000000001/devices");
    fs::create_dir_all(&devs).unwrap();
    symlink(f.root.join("sys/devices/pci0000:00/0000:00:04.0/virtio1/block/vda/vda2"), devs.join("vda2")).unwrap();
    symlink(f.root.join("sys/devices/pci0000:00/0000:00:05.0/virtio2/block/vdb"), devs.join("vdb")).unwrap();
    f
}

/// The cached Debian 12 root of `tools/debian-root` (made with mmdebstrap when missing:
/// about a minute with a reachable mirror). `flavour` is "" for the test root, or a peer
/// generator ("initramfs-tools", "dracut") whose root has it installed. None (test skipped)
/// without root or mmdebstrap; a failing mmdebstrap fails the test.
pub fn debian_root(flavour: &str) -> Option<PathBuf> {
    debian_suite_root("bookworm", flavour)
}

/// [`debian_root`] of a suite: "bookworm" (Debian 12) or "trixie" (Debian 13, with its own
/// kernel in /boot), or "trixie arm64" (Debian 13 for arm64, its own arm64 kernel in /boot).
pub fn debian_suite_root(suite: &str, flavour: &str) -> Option<PathBuf> {
    if !is_root() || !have("mmdebstrap") {
        return skip("the Debian root needs root and mmdebstrap (apt install mmdebstrap)");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/debian-root");
    // "trixie arm64": the suite and a foreign architecture, as tools/debian-root takes them.
    let out = ok(Command::new(script).args(suite.split_whitespace()).args((!flavour.is_empty()).then_some(flavour)));
    Some(PathBuf::from(String::from_utf8_lossy(&out).trim()))
}

/// What tools/arm64 builds for aarch64 (`init`: the /init; `leanrd`: leanrd itself, the
/// aarch64 /init embedded), in a Debian 13 chroot with its rustc: its path. None (skipped,
/// with a message) when the machine cannot (not root, no mmdebstrap); a failed build fails.
pub fn arm64_build(what: &str) -> Option<PathBuf> {
    if !is_root() || !have("mmdebstrap") {
        return skip("the aarch64 build needs root and mmdebstrap (apt install mmdebstrap)");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/arm64");
    let o = Command::new(&script).arg(what).stderr(std::process::Stdio::inherit()).output().unwrap();
    assert!(o.status.success(), "tools/arm64 {what} failed");
    Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_vm_slot_is_held_until_dropped() {
        let slot = super::vm_slot();
        // Another holder (another open file description, as another process has) cannot take
        // that slot while it is held, and can once it is dropped.
        let path =
            std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&slot._held))).unwrap();
        let other = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(other.try_lock().is_err(), "{} was not locked", path.display());
        drop(slot);
        assert!(other.try_lock().is_ok());
    }

    #[test]
    fn kernels_sort_by_version() {
        let mut k = ["6.10.0-1-amd64", "6.9.12-amd64", "6.1.0-56-amd64", "6.12.117+deb13-amd64", "6.1.0-9-amd64"];
        k.sort_by_key(|r| super::version_key(r));
        assert_eq!(k, ["6.1.0-9-amd64", "6.1.0-56-amd64", "6.9.12-amd64", "6.10.0-1-amd64", "6.12.117+deb13-amd64"]);
    }
}

#[cfg(test)]
mod entry_tests {
    use super::*;

    #[test]
    fn a_debian_kernel_has_its_elf_and_pvh_entry_found() {
        let Some(k) = fs::read_dir("/boot")
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        else {
            return;
        };
        let Ok(bz) = fs::read(&k) else { return };
        let elf = pvh_elf(&bz).unwrap_or_else(|| panic!("{}: no ELF with a PVH entry found in it", k.display()));
        assert_eq!(&elf[..4], b"\x7fELF");
        // Not a bzImage: nothing.
        assert!(pvh_elf(&elf).is_none());
        assert!(pvh_elf(&bz[..0x300]).is_none());
        // A machine with a TPM starts vmlinuz itself (its ACPI tables are lost at the PVH entry).
        let tpm = ["-chardev", "socket,id=chrtpm,path=x", "-tpmdev", "emulator,id=tpm0,chardev=chrtpm"];
        assert_eq!(kernel_for(&k, &tpm), k);
    }
}
