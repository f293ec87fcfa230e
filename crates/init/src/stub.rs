//! What systemd-stub hands over in /.extra, and the credentials systemd's initrd imports, put
//! where the root's systemd looks for them (systemd 257: src/core/import-creds.c,
//! src/boot/efi/stub.c, tmpfiles.d/20-systemd-stub.conf, src/sysext/sysext.c).
//!
//! - Credentials from the ESP (`UKI.efi.extra.d/*.cred` as /.extra/credentials/NAME.cred,
//!   `\loader\credentials\*.cred` as /.extra/global_credentials/NAME.cred) go, without the
//!   suffix, to /run/credentials/@encrypted (0700, files 0400, then a read-only bind mount of
//!   itself): they come from an untrusted ESP and are used only once decrypted. systemd's PID 1
//!   imports them only while it runs in an initrd (`import_credentials_boot`): the booted one
//!   never looks at /.extra, which is gone by then.
//! - The booted PID 1 imports the command line's `systemd.set_credential=` and
//!   `systemd.set_credential_binary=`, SMBIOS type 11 strings and QEMU's fw_cfg itself, into
//!   /run/credentials/@system, unless `$CREDENTIALS_DIRECTORY` or
//!   `$ENCRYPTED_CREDENTIALS_DIRECTORY` says an initrd did so already: then it imports nothing.
//!   So when /init hands on ESP credentials (and sets `$ENCRYPTED_CREDENTIALS_DIRECTORY`, which
//!   ImportCredential= and LoadCredentialEncrypted= search through), it imports those sources
//!   too, as systemd's initrd does (a tmpfs with `noswap`, else ramfs, else tmpfs; mode 0700,
//!   read-only once filled); with no ESP credentials it leaves all of them to the root.
//! - /.extra/profile and /.extra/os-release (the UKI profile booted) are copied, 0444, to
//!   /run/systemd/stub/ (tmpfiles' 20-systemd-stub.conf); the PCR signature and key are
//!   [`crate::tpm::hand_over_signatures`]'s.
//! - System and configuration extensions (/.extra/sysext, /.extra/confext) are merged by
//!   systemd into its initrd alone (the initrd's image search path; the host's has no /.extra)
//!   under a stricter, signed-only image policy for the ESP's images; nothing copies them on.
//!   /init has nothing to extend and does not hand them on (in /run/extensions they would be
//!   merged into the root without that policy): it logs them.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use rustix::fd::OwnedFd;
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::MountFlags;

use crate::Init;
use crate::sys::{self, strerror};

/// Where the booted system finds the credentials from trusted sources (the command line,
/// SMBIOS, fw_cfg): systemd's `SYSTEM_CREDENTIALS_DIRECTORY`.
pub const SYSTEM_DIR: &str = "/run/credentials/@system";
/// Where it finds those from the ESP, to be decrypted: `ENCRYPTED_SYSTEM_CREDENTIALS_DIRECTORY`.
pub const ENCRYPTED_DIR: &str = "/run/credentials/@encrypted";
/// The largest credential systemd takes (`CREDENTIAL_SIZE_MAX`), and the most all of one
/// directory's together may hold (`CREDENTIALS_TOTAL_SIZE_MAX`, the same).
pub const SIZE_MAX: usize = 1024 * 1024;
/// The stub's credential directories: this UKI's first (a name in both: this UKI's wins).
pub const BOOT_DIRS: [&str; 2] = ["/.extra/credentials", "/.extra/global_credentials"];
/// What the stub leaves beside the credentials that systemd's initrd copies on (from, to).
pub const STUB_FILES: [(&str, &str); 2] =
    [("/.extra/profile", "/run/systemd/stub/profile"), ("/.extra/os-release", "/run/systemd/stub/os-release")];
/// The stub's extension images (sysext, confext).
pub const EXTENSION_DIRS: [&str; 2] = ["/.extra/sysext", "/.extra/confext"];
/// QEMU's fw_cfg credentials (`-fw_cfg name=opt/io.systemd.credentials/NAME,...`).
pub const FW_CFG_DIR: &str = "/sys/firmware/qemu_fw_cfg/by_name/opt/io.systemd.credentials";

/// The kernel command line's credential settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmdlineCredentials {
    /// `systemd.set_credential=NAME:VALUE` and `systemd.set_credential_binary=NAME:BASE64`,
    /// decoded, in order (the first of a name wins, as in systemd).
    pub set: Vec<(String, Vec<u8>)>,
    /// `systemd.import_credentials=0`: no credential is imported from anywhere.
    pub off: bool,
}

/// Whether systemd takes `s` as a credential name (`credential_name_valid`: a valid file name
/// of at most 255 bytes, not `.` or `..`, and a valid fd name: printable ASCII without `:`).
pub fn name_valid(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s != "."
        && s != ".."
        && s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'/' && b != b':')
}

/// `NAME:VALUE` of `systemd.set_credential=` (`binary`: `systemd.set_credential_binary=`, the
/// value in base64), as systemd's `proc_cmdline_callback` reads it.
pub fn parse_set(value: &str, binary: bool) -> Result<(String, Vec<u8>), String> {
    let (name, data) = value.split_once(':').ok_or("no ':' between the name and the value")?;
    if !name_valid(name) {
        return Err(format!("'{name}' is not a credential name"));
    }
    let data = if binary { base64(data).ok_or("the value is not base64")? } else { data.as_bytes().to_vec() };
    if data.len() > SIZE_MAX {
        return Err(format!("the value is larger than {SIZE_MAX} bytes"));
    }
    Ok((name.to_string(), data))
}

/// Standard base64 (`=` padding optional, white space skipped), as systemd's `unbase64mem`.
pub fn base64(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits, mut pad) = (0u32, 0u32, 0usize);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                pad += 1;
                continue;
            }
            b' ' | b'\t' | b'\n' | b'\r' => continue,
            _ => return None,
        };
        if pad > 0 {
            return None; // data after the padding
        }
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Left over: 0, 2 or 4 bits, all zero (a lone sixth of a byte is no base64).
    (bits < 6 && acc == 0 && pad <= 2).then_some(out)
}

/// How a credential directory is made, as systemd makes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory of /run, made a read-only bind mount of itself once filled (@encrypted).
    Plain,
    /// A file system of its own that never swaps (@system).
    OwnFs,
    /// A directory only: no mount (unit tests).
    Test,
}

/// One credential directory being filled, with systemd's budget (`ImportCredentialContext`).
pub struct Target {
    /// Its path.
    pub dir: String,
    kind: Kind,
    fd: Option<OwnedFd>,
    /// Bytes written so far.
    pub total: usize,
    /// The names written, in order.
    pub names: Vec<String>,
}

/// The flags of every credentials mount (systemd's `credentials_fs_mount_flags`).
fn mount_flags(ro: bool) -> MountFlags {
    let f = MountFlags::NODEV | MountFlags::NOEXEC | MountFlags::NOSUID | MountFlags::NOSYMFOLLOW;
    if ro { f | MountFlags::RDONLY } else { f }
}

/// `m` with `flags`, then, where the kernel does not know `nosymfollow` (before Linux 5.10:
/// EINVAL), without it, as systemd's `ms_nosymfollow_supported` decides.
fn with_flags(flags: MountFlags, m: impl Fn(MountFlags) -> Result<(), Errno>) -> Result<(), Errno> {
    match m(flags) {
        Err(Errno::INVAL) => m(flags - MountFlags::NOSYMFOLLOW),
        r => r,
    }
}

impl Target {
    /// A directory to fill; nothing is made until the first credential.
    pub fn new(dir: &str, kind: Kind) -> Target {
        Target { dir: dir.to_string(), kind, fd: None, total: 0, names: Vec::new() }
    }

    /// Whether `size` more bytes fit (`credential_size_ok`).
    pub fn size_ok(&self, name: &str, size: u64) -> Result<(), String> {
        if size > SIZE_MAX as u64 {
            return Err(format!("credential '{name}' is larger than {SIZE_MAX} bytes ({size}): skipped"));
        }
        if size > (SIZE_MAX - self.total) as u64 {
            return Err(format!(
                "credential '{name}' ({size} bytes) skipped: {} holds {} bytes already, at most {SIZE_MAX} in all",
                self.dir, self.total
            ));
        }
        Ok(())
    }

    fn open(&mut self) -> Result<&OwnedFd, String> {
        if self.fd.is_none() {
            let parent = self.dir.rsplit_once('/').map_or("", |(p, _)| p);
            sys::mkdir_p(parent);
            match rustix::fs::mkdir(self.dir.as_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(format!("cannot make {}: {}", self.dir, strerror(e))),
            }
            if self.kind == Kind::OwnFs {
                mount_credentials_fs(&self.dir)?;
            }
            let fd = rustix::fs::open(
                self.dir.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| format!("cannot open {}: {}", self.dir, strerror(e)))?;
            self.fd = Some(fd);
        }
        Ok(self.fd.as_ref().expect("opened above"))
    }

    /// Write one credential, 0400, never over one already there (Ok(false): the name was set
    /// before, and the first stays, as in systemd).
    pub fn put(&mut self, name: &str, data: &[u8]) -> Result<bool, String> {
        self.size_ok(name, data.len() as u64)?;
        let dir = self.dir.clone();
        let fd = self.open()?;
        let f = match rustix::fs::openat(
            fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o400),
        ) {
            Ok(f) => f,
            Err(Errno::EXIST) => return Ok(false),
            Err(e) => return Err(format!("cannot create {dir}/{name}: {}", strerror(e))),
        };
        if !sys::write_all(&f, data) {
            let _ = rustix::fs::unlinkat(fd, name, rustix::fs::AtFlags::empty());
            return Err(format!("cannot write {dir}/{name}"));
        }
        self.total += data.len();
        self.names.push(name.to_string());
        Ok(true)
    }

    /// Make the directory read-only, as `finalize_credentials_dir` does: a bind mount of itself
    /// where it is no mount yet, remounted read-only with the credentials' flags.
    pub fn finish(&self) -> Result<(), String> {
        if self.names.is_empty() || self.kind == Kind::Test {
            return Ok(());
        }
        let d = self.dir.as_str();
        if self.kind == Kind::Plain {
            rustix::mount::mount_bind(d, d).map_err(|e| format!("cannot make {d} a mount: {}", strerror(e)))?;
        }
        with_flags(MountFlags::BIND | mount_flags(true), |f| rustix::mount::mount_remount(d, f, ""))
            .map_err(|e| format!("cannot make {d} read-only: {}", strerror(e)))
    }
}

/// systemd's `mount_credentials_fs`: a tmpfs that never swaps (`noswap`, Linux 6.4 and later),
/// else a ramfs, else a plain tmpfs; mode 0700, at most 1024 files and [`SIZE_MAX`] bytes.
fn mount_credentials_fs(dir: &str) -> Result<(), String> {
    let f = mount_flags(false);
    let sized = format!("mode=0700,nr_inodes=1024,size={SIZE_MAX}");
    let tries = [("tmpfs", format!("{sized},noswap")), ("ramfs", "mode=0700".to_string()), ("tmpfs", sized)];
    let mut last = Errno::NOSYS;
    for (fs, data) in &tries {
        match with_flags(f, |f| sys::mount(fs, dir, fs, f, Some(data))) {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(format!("cannot mount a file system for credentials on {dir}: {}", strerror(last)))
}

/// Read a regular file in `dir` (opened without following links) of at most [`SIZE_MAX`]
/// bytes, after `check` has accepted its size; never blocks on a FIFO.
fn read_regular(
    dir: &OwnedFd,
    path: &str,
    name: &str,
    check: impl FnOnce(u64) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    let f = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| format!("{path}/{name}: {}", strerror(e)))?;
    let st = rustix::fs::fstat(&f).map_err(|e| format!("{path}/{name}: {}", strerror(e)))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(format!("{path}/{name}: not a regular file"));
    }
    check(st.st_size as u64)?;
    let want = (st.st_size as usize).min(SIZE_MAX);
    let mut data = alloc::vec![0u8; want];
    let mut got = 0;
    while got < want {
        match rustix::io::read(&f, &mut data[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(format!("{path}/{name}: {}", strerror(e))),
        }
    }
    data.truncate(got);
    Ok(data)
}

/// The stub's credentials under `extra_root` (`""` at boot) into `t`, as systemd's
/// `import_credentials_boot`: in each of [`BOOT_DIRS`], in name order, each regular
/// `NAME.cred` with a valid NAME. Returns what was wrong, one line each (the file and why).
pub fn import_boot(extra_root: &str, t: &mut Target) -> Vec<String> {
    let mut warnings = Vec::new();
    for d in BOOT_DIRS {
        let path = format!("{extra_root}{d}");
        let dir = match rustix::fs::open(
            path.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => continue,
            Err(e) => {
                warnings.push(format!("{path}: {}", strerror(e)));
                continue;
            }
        };
        let mut names: Vec<String> = match sys::list_dir(&path) {
            Ok(l) => l.into_iter().map(|(n, _)| n).collect(),
            Err(e) => {
                warnings.push(format!("{path}: {}", strerror(e)));
                continue;
            }
        };
        names.sort();
        for file in names {
            let Some(name) = file.strip_suffix(".cred") else { continue };
            if !name_valid(name) {
                warnings.push(format!("{path}/{file}: '{name}' is not a credential name: skipped"));
                continue;
            }
            let data = match read_regular(&dir, &path, &file, |size| t.size_ok(name, size)) {
                Ok(d) => d,
                Err(e) => {
                    warnings.push(e);
                    continue;
                }
            };
            match t.put(name, &data) {
                Ok(_) => {}
                Err(e) => warnings.push(format!("{path}/{file}: {e}")),
            }
        }
    }
    warnings
}

/// The credentials in SMBIOS type 11 (OEM strings) structure `raw` (sysfs's
/// /sys/firmware/dmi/entries/11-N/raw: a 5-byte header, then NUL-terminated strings):
/// `io.systemd.credential:NAME=VALUE` and `io.systemd.credential.binary:NAME=BASE64`, as
/// systemd's `parse_smbios_strings` takes them; what is wrong, as Err lines.
pub fn smbios_credentials(raw: &[u8]) -> Vec<Result<(String, Vec<u8>), String>> {
    let mut out = Vec::new();
    if raw.len() < 5 || raw[0] != 11 || raw[1] != 5 {
        out.push(Err("not an SMBIOS type 11 structure".to_string()));
        return out;
    }
    for s in raw[5..].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let (rest, binary) = if let Some(r) = s.strip_prefix(b"io.systemd.credential:") {
            (r, false)
        } else if let Some(r) = s.strip_prefix(b"io.systemd.credential.binary:") {
            (r, true)
        } else {
            continue;
        };
        let Some(eq) = rest.iter().position(|&b| b == b'=') else {
            out.push(Err("an SMBIOS credential string has no '='".to_string()));
            continue;
        };
        let name = String::from_utf8_lossy(&rest[..eq]).into_owned();
        if !name_valid(&name) {
            out.push(Err(format!("SMBIOS credential '{name}': not a credential name")));
            continue;
        }
        let value = &rest[eq + 1..];
        let data = if binary {
            match core::str::from_utf8(value).ok().and_then(base64) {
                Some(d) => d,
                None => {
                    out.push(Err(format!("SMBIOS credential '{name}': not base64")));
                    continue;
                }
            }
        } else {
            value.to_vec()
        };
        out.push(Ok((name, data)));
    }
    out
}

/// Whether this may be a confidential VM (AMD SEV, Intel TDX), whose firmware systemd does not
/// trust with credentials: a CPU flag of /proc/cpuinfo says so.
fn maybe_confidential() -> bool {
    sys::read_string("/proc/cpuinfo").is_some_and(|c| confidential_flags(&c))
}

/// [`maybe_confidential`] on the text of /proc/cpuinfo: `tdx_guest`, or an SEV flag under a
/// hypervisor. An EPYC host that can run SEV guests shows `sev` and `sev_es` too, but no
/// `hypervisor`: it is no guest, and its SMBIOS is trusted as systemd trusts it (systemd asks
/// CPUID and the SEV status MSR, which /init cannot read without the msr driver).
fn confidential_flags(cpuinfo: &str) -> bool {
    let Some(flags) = cpuinfo.lines().find(|l| l.starts_with("flags")) else { return false };
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    has("tdx_guest") || (has("hypervisor") && ["sev", "sev_es", "sev_snp"].iter().any(|f| has(f)))
}

/// fw_cfg's credentials (the driver loaded, as systemd's initrd has it by then).
fn import_fw_cfg(t: &mut Target, warnings: &mut Vec<String>) {
    let Ok(list) = sys::list_dir(FW_CFG_DIR) else { return };
    let mut names: Vec<String> = list.into_iter().map(|(n, _)| n).collect();
    names.sort();
    for name in names {
        if !name_valid(&name) {
            warnings.push(format!("{FW_CFG_DIR}/{name}: not a credential name: skipped"));
            continue;
        }
        let dir = format!("{FW_CFG_DIR}/{name}");
        let size = sys::read_string(&format!("{dir}/size")).and_then(|s| s.trim().parse::<u64>().ok());
        let Some(size) = size else {
            warnings.push(format!("{dir}/size: no size"));
            continue;
        };
        if let Err(e) = t.size_ok(&name, size) {
            warnings.push(e);
            continue;
        }
        // The raw file says size 0: read what `size` says, no more.
        let data = match sys::open(&format!("{dir}/raw")) {
            Ok(f) => sys::read_at(&f, 0, size as usize),
            Err(e) => {
                warnings.push(format!("{dir}/raw: {}", strerror(e)));
                continue;
            }
        };
        match data {
            Some(d) if d.len() as u64 == size => {
                if let Err(e) = t.put(&name, &d) {
                    warnings.push(e);
                }
            }
            _ => warnings.push(format!("{dir}/raw: shorter than its size, {size} bytes")),
        }
    }
}

/// Up to `max` bytes of `f`, from its start; what was read before an error.
fn read_upto(f: &OwnedFd, max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = alloc::vec![0u8; 4096];
    while out.len() < max {
        let n = buf.len().min(max - out.len());
        match rustix::io::read(f, &mut buf[..n]) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(Errno::INTR) => {}
            Err(_) => break,
        }
    }
    out
}

/// SMBIOS type 11's credentials.
fn import_smbios(t: &mut Target, warnings: &mut Vec<String>) {
    for i in 0..1024 {
        let path = format!("/sys/firmware/dmi/entries/11-{i}/raw");
        let raw = match sys::open(&path) {
            Ok(f) => read_upto(&f, 5 + SIZE_MAX),
            Err(_) => break,
        };
        for c in smbios_credentials(&raw) {
            match c {
                Ok((name, data)) => {
                    if let Err(e) = t.put(&name, &data) {
                        warnings.push(format!("{path}: {e}"));
                    }
                }
                Err(e) => warnings.push(format!("{path}: {e}")),
            }
        }
    }
}

/// The command line's credentials into `t`.
pub fn import_cmdline(set: &[(String, Vec<u8>)], t: &mut Target) -> Vec<String> {
    let mut warnings = Vec::new();
    for (name, data) in set {
        if let Err(e) = t.put(name, data) {
            warnings.push(format!("systemd.set_credential={name}: {e}"));
        }
    }
    warnings
}

/// `env` with `VAR=value` set (replaced where it was); an empty `env` is first given what the
/// root's init gets without one (`HOME=/`, `TERM=linux`).
pub fn set_env(env: &mut Vec<String>, var: &str, value: &str) {
    if env.is_empty() {
        env.push("HOME=/".into());
        env.push("TERM=linux".into());
    }
    let prefix = format!("{var}=");
    env.retain(|e| !e.starts_with(&prefix));
    env.push(format!("{prefix}{value}"));
}

/// Hand over what the stub and the firmware left for the root's systemd; before switch_root.
/// Every failure is logged with its file and cause; none stops the boot.
pub fn hand_over(init: &mut Init) {
    for (from, to) in STUB_FILES {
        let Ok(data) = sys::read(from) else { continue };
        sys::mkdir_p("/run/systemd/stub");
        match sys::write_file_mode(to, &String::from_utf8_lossy(&data), 0o444) {
            Ok(()) => init.log.step(&format!("{from} handed on as {to}")),
            Err(e) => init.log.error(&format!("{to}: {}", strerror(e))),
        }
    }
    for d in EXTENSION_DIRS {
        if let Ok(l) = sys::list_dir(d) {
            let names: Vec<String> = l.into_iter().map(|(n, _)| n).collect();
            if !names.is_empty() {
                init.log.step(&format!(
                    "{d}: {} not handed on (systemd merges the stub's extensions into its initrd only)",
                    names.join(", ")
                ));
            }
        }
    }
    if init.cmd.credentials.off {
        init.log.step("systemd.import_credentials=0: no credentials imported");
        return;
    }
    if sys::exists(ENCRYPTED_DIR) {
        return; // Handed over before a switch that failed and is tried again.
    }
    let mut enc = Target::new(ENCRYPTED_DIR, Kind::Plain);
    for w in import_boot("", &mut enc) {
        init.log.error(&format!("credentials: {w}"));
    }
    if enc.names.is_empty() {
        return; // The root's systemd imports the command line's, SMBIOS's and fw_cfg's.
    }
    if let Err(e) = enc.finish() {
        init.log.error(&format!("credentials: {e}"));
    }
    init.log.step(&format!("ESP credentials handed on in {ENCRYPTED_DIR}: {}", enc.names.join(", ")));
    set_env(&mut init.env, "ENCRYPTED_CREDENTIALS_DIRECTORY", ENCRYPTED_DIR);
    // With that variable set the root's systemd imports nothing itself: the trusted sources
    // now, in systemd's order.
    let mut system = Target::new(SYSTEM_DIR, Kind::OwnFs);
    let mut warnings = Vec::new();
    if maybe_confidential() {
        init.log.step("credentials: a confidential VM's CPU flags: SMBIOS and fw_cfg are not trusted with any");
    } else {
        import_fw_cfg(&mut system, &mut warnings);
        import_smbios(&mut system, &mut warnings);
    }
    let set = init.cmd.credentials.set.clone();
    warnings.extend(import_cmdline(&set, &mut system));
    for w in warnings {
        init.log.error(&format!("credentials: {w}"));
    }
    if system.names.is_empty() {
        return;
    }
    if let Err(e) = system.finish() {
        init.log.error(&format!("credentials: {e}"));
    }
    init.log.step(&format!("credentials imported in {SYSTEM_DIR}: {}", system.names.join(", ")));
    set_env(&mut init.env, "CREDENTIALS_DIRECTORY", SYSTEM_DIR);
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_confidential_guest_is_told_from_an_sev_host() {
        let host = "processor\t: 0\nflags\t\t: fpu sme sev sev_es svm\n";
        let guest = "processor\t: 0\nflags\t\t: fpu hypervisor sev sev_es\n";
        let tdx = "flags\t\t: fpu tdx_guest hypervisor\n";
        assert!(!confidential_flags(host) && confidential_flags(guest) && confidential_flags(tdx));
        assert!(!confidential_flags("flags\t\t: fpu hypervisor\n") && !confidential_flags(""));
    }
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn mode(p: &std::path::Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn names_are_checked_as_systemd_does() {
        for ok in ["leanrd.esp", "a b", "x-y_z.1", &"n".repeat(255)] {
            assert!(name_valid(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "tab\there", "é", &"n".repeat(256), "nul\0"] {
            assert!(!name_valid(bad), "{bad:?}");
        }
    }

    #[test]
    fn base64_is_read_with_or_without_padding() {
        assert_eq!(base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64("aGVs bG8h\n").unwrap(), b"hello!");
        assert_eq!(base64("").unwrap(), b"");
        for bad in ["a", "aGVsbG8=x", "a*b=", "aGVsbG9="] {
            assert!(base64(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn command_line_settings_are_name_colon_value() {
        assert_eq!(parse_set("leanrd.cmdline:a=b:c", false).unwrap(), ("leanrd.cmdline".into(), b"a=b:c".to_vec()));
        assert_eq!(parse_set("bin:aGk=", true).unwrap(), ("bin".into(), b"hi".to_vec()));
        assert_eq!(parse_set("empty:", false).unwrap(), ("empty".into(), Vec::new()));
        assert!(parse_set("novalue", false).unwrap_err().contains("':'"));
        assert!(parse_set("../x:1", false).unwrap_err().contains("not a credential name"));
        assert!(parse_set("b:!!", true).unwrap_err().contains("base64"));
    }

    #[test]
    fn the_stubs_credentials_go_to_the_encrypted_directory() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().to_str().unwrap();
        let local = t.path().join(".extra/credentials");
        let global = t.path().join(".extra/global_credentials");
        std::fs::create_dir_all(&local).unwrap();
        std::fs::create_dir_all(&global).unwrap();
        std::fs::write(local.join("leanrd.esp.cred"), b"this UKI's").unwrap();
        std::fs::write(global.join("leanrd.esp.cred"), b"every UKI's").unwrap();
        std::fs::write(global.join("global.cred"), b"global").unwrap();
        std::fs::write(local.join("readme.txt"), b"not a credential").unwrap();
        std::fs::write(local.join(":bad.cred"), b"x").unwrap();
        std::fs::write(t.path().join("secret"), b"outside").unwrap();
        symlink(t.path().join("secret"), local.join("link.cred")).unwrap();
        std::fs::create_dir(local.join("dir.cred")).unwrap();
        std::fs::write(local.join("big.cred"), vec![0u8; SIZE_MAX + 1]).unwrap();
        let out = t.path().join("run/credentials/@encrypted");
        let mut target = Target::new(out.to_str().unwrap(), Kind::Test);
        let warnings = import_boot(root, &mut target);
        assert_eq!(target.names, ["leanrd.esp", "global"]);
        assert_eq!(std::fs::read(out.join("leanrd.esp")).unwrap(), b"this UKI's");
        assert_eq!(std::fs::read(out.join("global")).unwrap(), b"global");
        assert_eq!(mode(&out), 0o700);
        assert_eq!(mode(&out.join("global")), 0o400);
        assert!(!out.join("link").exists() && !out.join("dir").exists() && !out.join("big").exists());
        let all = warnings.join("\n");
        for w in [":bad.cred: ':bad' is not a credential name", "link.cred: ", "dir.cred: ", "larger than 1048576"] {
            assert!(all.contains(w), "{w} in {all}");
        }
        assert!(all.contains(&format!("{root}/.extra/credentials/")), "{all}");
    }

    #[test]
    fn a_directory_holds_at_most_a_mebibyte() {
        let t = tempfile::tempdir().unwrap();
        let mut target = Target::new(t.path().join("c").to_str().unwrap(), Kind::Test);
        let half = vec![1u8; SIZE_MAX / 2];
        assert!(target.put("a", &half).unwrap());
        assert!(target.put("b", &half).unwrap());
        assert!(target.put("c", b"x").unwrap_err().contains("at most 1048576 in all"));
        // The first of a name stays.
        let mut t2 = Target::new(t.path().join("d").to_str().unwrap(), Kind::Test);
        let w = import_cmdline(&[("n".into(), b"1".to_vec()), ("n".into(), b"2".to_vec())], &mut t2);
        assert!(w.is_empty());
        assert_eq!(std::fs::read(t.path().join("d/n")).unwrap(), b"1");
    }

    #[test]
    fn smbios_strings_carry_credentials() {
        let mut raw = vec![11u8, 5, 0, 0, 3];
        for s in [
            &b"io.systemd.credential:leanrd.smbios=v=1"[..],
            b"io.systemd.credential.binary:bin=aGk=",
            b"other string",
            b"io.systemd.credential:noequals",
            b"io.systemd.credential:a/b=x",
        ] {
            raw.extend_from_slice(s);
            raw.push(0);
        }
        raw.push(0);
        let got = smbios_credentials(&raw);
        assert_eq!(got[0], Ok(("leanrd.smbios".into(), b"v=1".to_vec())));
        assert_eq!(got[1], Ok(("bin".into(), b"hi".to_vec())));
        assert!(got[2].as_ref().unwrap_err().contains("no '='"));
        assert!(got[3].as_ref().unwrap_err().contains("not a credential name"));
        assert_eq!(got.len(), 4);
        assert!(smbios_credentials(&[1, 5, 0, 0, 0])[0].is_err());
        assert!(smbios_credentials(&[11]).len() == 1);
    }

    #[test]
    fn the_roots_init_is_told_where_they_are() {
        let mut env = Vec::new();
        set_env(&mut env, "CREDENTIALS_DIRECTORY", SYSTEM_DIR);
        assert_eq!(env, ["HOME=/", "TERM=linux", "CREDENTIALS_DIRECTORY=/run/credentials/@system"]);
        let mut env = vec!["TERM=vt100".to_string(), "CREDENTIALS_DIRECTORY=/elsewhere".into()];
        set_env(&mut env, "CREDENTIALS_DIRECTORY", SYSTEM_DIR);
        assert_eq!(env, ["TERM=vt100", "CREDENTIALS_DIRECTORY=/run/credentials/@system"]);
    }
}
