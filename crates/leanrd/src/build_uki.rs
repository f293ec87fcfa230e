//! `leanrd build --uki`: the image as a Unified Kernel Image (leanrd_archive::uki) — systemd's
//! stub, os-release, the command line, the kernel version, a splash, the initramfs (early
//! microcode segment first, as in a plain image) and the kernel — with PCR 11's predicted
//! values signed (`.pcrsig`, `.pcrpkey`, by systemd-measure) and the whole signed with sbsign
//! when asked.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Args;
use leanrd_archive::devicetree;
use leanrd_archive::image::{self, SegmentSpec};
use leanrd_archive::output::AtomicFile;
use leanrd_archive::uki;
use leanrd_gen::Request;

#[derive(Args, Default, Clone)]
pub(crate) struct UkiArgs {
    /// Write a Unified Kernel Image (an EFI executable: stub, kernel, initramfs, command line)
    /// instead of a plain initramfs; -o names it.
    #[arg(long)]
    pub uki: bool,
    /// The UKI's command line (default for a host-only image: the running one without
    /// BOOT_IMAGE= and initrd=; a universal one has none unless given).
    #[arg(long, value_name = "TEXT", requires = "uki", conflicts_with = "cmdline_file")]
    cmdline: Option<String>,
    /// Read the UKI's command line from a file.
    #[arg(long, value_name = "FILE", requires = "uki")]
    cmdline_file: Option<PathBuf>,
    /// The EFI stub (default: SYSROOT/usr/lib/systemd/boot/efi/linuxARCH.efi.stub for the
    /// system's architecture, x64 or aa64, then the build machine's when it is the same).
    #[arg(long, value_name = "FILE", requires = "uki")]
    stub: Option<PathBuf>,
    /// The kernel image (default: SYSROOT/boot/vmlinuz-KVER, else the module directory's
    /// vmlinuz, where Fedora and Arch keep it: SYSROOT/usr/lib/modules/KVER/vmlinuz).
    #[arg(long, value_name = "FILE", requires = "uki")]
    linux: Option<PathBuf>,
    /// The .osrel section (default: SYSROOT/etc/os-release, else SYSROOT/usr/lib/os-release).
    #[arg(long, value_name = "FILE", requires = "uki")]
    os_release: Option<PathBuf>,
    /// A BMP image the stub shows while it boots.
    #[arg(long, value_name = "BMP", requires = "uki")]
    splash: Option<PathBuf>,
    /// A flattened device tree (.dtb) for the UKI's .dtb section: the stub installs it for the
    /// kernel in place of the firmware's (systemd 257's stub also where the firmware gives
    /// none, as AAVMF on QEMU's virt machine does), and measures it into PCR 11.
    #[arg(long, value_name = "DTB", requires = "uki")]
    devicetree: Option<PathBuf>,
    /// A device tree for the stub to choose by the machine (a .dtbauto section; systemd-stub
    /// 257 and later); repeated, one per board. The stub installs the first whose root
    /// `compatible` is the firmware's device tree's, or, where the firmware gives none, the
    /// one --hwids names for this machine; when none is chosen, --devicetree's. The chosen one
    /// is measured into PCR 11.
    #[arg(long, value_name = "DTB", requires = "uki")]
    devicetree_auto: Vec<PathBuf>,
    /// A directory of hardware-ID files for the .hwids section, as ukify's --hwids takes them:
    /// JSON files (searched through subdirectories), each {"type": "devicetree", "name": ...,
    /// "compatible": ..., "hwids": [CHID, ...]}. On a machine whose firmware gives no device
    /// tree, the stub computes its CHIDs from SMBIOS (`fwupdtool hwids` shows them) and takes
    /// the --devicetree-auto tree with the matching compatible.
    #[arg(long, value_name = "DIR", requires = "uki")]
    hwids: Option<PathBuf>,
    /// Sign the UKI for Secure Boot with this key (PEM) and --sign-cert (see --sign-tool).
    #[arg(long, value_name = "KEY", requires_all = ["uki", "sign_cert"])]
    sign_key: Option<PathBuf>,
    /// The certificate (PEM) matching --sign-key.
    #[arg(long, value_name = "CERT", requires = "sign_key")]
    sign_cert: Option<PathBuf>,
    #[command(flatten)]
    sign_tool: SignToolArg,
    /// Sign the values PCR 11 will have in each boot phase with this private key (PEM), as
    /// ukify does: systemd-measure computes them from the UKI's sections, and the signature
    /// goes into .pcrsig, the public key into .pcrpkey. A LUKS2 TPM2 token enrolled with
    /// `systemd-cryptenroll --tpm2-public-key=` then unlocks with any UKI so signed, in the
    /// phases signed for (by default only in the initramfs).
    #[arg(long, value_name = "KEY", requires_all = ["uki", "pcr_public_key"])]
    pcr_private_key: Option<PathBuf>,
    /// The public key (PEM) matching --pcr-private-key.
    #[arg(long, value_name = "KEY", requires = "pcr_private_key")]
    pcr_public_key: Option<PathBuf>,
    /// A boot phase to sign for, as systemd-measure's --phase takes it (the phases up to it,
    /// colon-separated); repeated for several. Default: enter-initrd alone, so the key
    /// unseals in the initramfs only (after leave-initrd, PCR 11 no longer matches).
    #[arg(long, value_name = "PHASES", requires = "pcr_private_key")]
    pcr_phase: Vec<String>,
    /// A PCR bank to sign for (sha1, sha256, sha384, sha512); repeated for several.
    /// Default: sha256.
    #[arg(long, value_name = "BANK", requires = "pcr_private_key")]
    pcr_bank: Vec<String>,
    /// The TPM systemd-measure uses to compute policy digests, where it needs one (systemd
    /// before 253: a device path, or a TCTI such as swtpm:host=HOST,port=PORT).
    #[arg(long, value_name = "DEVICE", requires = "pcr_private_key")]
    pcr_tpm2_device: Option<String>,
    /// SBAT lines for the UKI's .sbat: a text starting with the `sbat,1,...` header line, or
    /// @FILE holding one (ukify's default adds a `uki,1,UKI,...` line); repeated for several.
    /// The .sbat is merged, as ukify merges it, from the stub's, the kernel's (where it has
    /// one) and these. Default: the stub's, and the kernel's where it has one.
    #[arg(long, value_name = "TEXT|@FILE", requires = "uki")]
    sbat: Vec<String>,
    /// A profile of a multi-profile UKI (systemd-stub 257 and later), as KEY=VALUE words
    /// (quoted as in a shell): ID= (required: lower-case letters, digits, `.`, `_`, `-`),
    /// TITLE= (what a boot menu shows), CMDLINE= (the command line in place of the UKI's)
    /// and DTB= (a device tree in place of --devicetree's); repeated for each profile. The
    /// first is profile 0, which the stub starts by default; `@N` as the first word of the
    /// stub's load options (systemd-boot passes it) starts profile N. Each profile gets its
    /// own signed PCR 11 values (.pcrsig) with --pcr-private-key.
    #[arg(long, value_name = "WORDS", requires = "uki")]
    profile: Vec<String>,
}

/// The first systemd-stub that starts multi-profile UKIs and chooses device trees by the
/// machine (`.dtbauto`, `.hwids`): systemd 257.
const PROFILE_STUB: u32 = 257;

/// The most profiles systemd-stub takes (its UNIFIED_PROFILES_MAX).
const PROFILES_MAX: usize = 256;

/// One `--profile`: its `.profile` section's keys and the sections it has in place of the
/// base's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProfileSpec {
    id: String,
    title: Option<String>,
    cmdline: Option<String>,
    dtb: Option<PathBuf>,
}

impl ProfileSpec {
    /// `--profile`'s words: KEY=VALUE, each key once, ID= required.
    fn parse(spec: &str) -> Result<ProfileSpec> {
        let words = shlex::split(spec)
            .with_context(|| format!("--profile {spec:?}: an unterminated quote or a trailing backslash"))?;
        // shlex drops a word starting with `#` and what follows, as a shell comment.
        let hashes = |t: &str| t.matches('#').count();
        if hashes(spec) > words.iter().map(|w| hashes(w)).sum::<usize>() {
            bail!("--profile {spec:?}: a word starting with # (quote it: a shell would take the rest as a comment)");
        }
        let mut p = ProfileSpec { id: String::new(), title: None, cmdline: None, dtb: None };
        let mut seen: Vec<&str> = Vec::new();
        for w in &words {
            let Some((key, value)) = w.split_once('=') else {
                bail!("--profile {spec:?}: {w:?} is not KEY=VALUE (ID=, TITLE=, CMDLINE=, DTB=)")
            };
            if seen.contains(&key) {
                bail!("--profile {spec:?}: {key}= is given twice");
            }
            match key {
                "ID" => {
                    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
                    if value.is_empty() || value.len() > 64 || !value.chars().all(ok) {
                        bail!(
                            "--profile {spec:?}: ID={value:?}: 1 to 64 lower-case letters, digits, `.`, `_` or `-` \
                             (as os-release's ID=)"
                        );
                    }
                    p.id = value.to_string();
                }
                "TITLE" => {
                    if let Some(c) = value.chars().find(|c| c.is_control() || "\"\\$`".contains(*c)) {
                        bail!("--profile {spec:?}: TITLE= holds {c:?}, which its os-release-style text cannot quote");
                    }
                    p.title = Some(value.to_string());
                }
                "CMDLINE" if value.trim().is_empty() => {
                    bail!("--profile {spec:?}: CMDLINE= is empty (leave it out for the UKI's own command line)")
                }
                "CMDLINE" => p.cmdline = Some(value.to_string()),
                "DTB" => p.dtb = Some(PathBuf::from(value)),
                _ => bail!("--profile {spec:?}: unknown key {key}= (ID=, TITLE=, CMDLINE=, DTB=)"),
            }
            seen.push(key);
        }
        if p.id.is_empty() {
            bail!("--profile {spec:?}: no ID= (each profile is known by one)");
        }
        Ok(p)
    }

    /// The `.profile` section: os-release-style lines, as systemd-boot reads them.
    fn text(&self) -> String {
        let mut t = format!("ID={}\n", self.id);
        if let Some(title) = &self.title {
            t += &format!("TITLE=\"{title}\"\n");
        }
        t
    }

    /// Its sections: `.profile`, then those in place of the base's.
    fn sections(&self) -> Result<Vec<(&'static str, Vec<u8>)>> {
        let mut v = vec![(".profile", self.text().into_bytes())];
        if let Some(c) = &self.cmdline {
            v.push((".cmdline", cmdline_section(c)));
        }
        if let Some(p) = &self.dtb {
            v.push((".dtb", dtb_section(p)?));
        }
        Ok(v)
    }
}

/// Every `--profile`, checked: IDs unique, no more than the stub takes.
fn profile_specs(given: &[String]) -> Result<Vec<ProfileSpec>> {
    if given.len() > PROFILES_MAX {
        bail!("{} profiles: systemd-stub takes {PROFILES_MAX} at most", given.len());
    }
    let specs: Vec<ProfileSpec> = given.iter().map(|g| ProfileSpec::parse(g)).collect::<Result<_>>()?;
    for (i, p) in specs.iter().enumerate() {
        if specs[..i].iter().any(|q| q.id == p.id) {
            bail!("--profile: ID={} is given to two profiles", p.id);
        }
    }
    Ok(specs)
}

/// The sections systemd-measure takes, by its options; `.uname`, `.sbat` and `.profile` only
/// where it knows them (systemd 253, 254 and 257 and later, whose stubs measure them too).
const MEASURED: &[(&str, &str)] = &[
    (".linux", "--linux"),
    (".osrel", "--osrel"),
    (".cmdline", "--cmdline"),
    (".initrd", "--initrd"),
    (".ucode", "--ucode"),
    (".splash", "--splash"),
    (".dtb", "--dtb"),
    (".dtbauto", "--dtbauto"),
    (".hwids", "--hwids"),
    (".uname", "--uname"),
    (".sbat", "--sbat"),
    (".pcrpkey", "--pcrpkey"),
    (".profile", "--profile"),
];

/// Where systemd-measure is.
const MEASURE: &str = "/usr/lib/systemd/systemd-measure";

/// systemd-measure, ready to sign PCR 11's values for a UKI written to a file: the tool, what
/// its `--help` says it takes, and the UKI's `.initrd` as a file of its own (systemd-measure
/// reads sections from files). Made once for all of a UKI's profiles.
struct Signer {
    /// The tool's path, for messages.
    tool: String,
    /// How it is run ([`leanrd_gen::sysroot_command`]'s program and arguments, found once:
    /// resolving its libraries reads each of them).
    run: (std::ffi::OsString, Vec<std::ffi::OsString>),
    help: String,
    /// Holds the section files.
    dir: tempfile::TempDir,
    initrd: PathBuf,
}

impl Signer {
    /// The system's systemd-measure (that of its stub, which knows the sections the stub
    /// measures), run with its own loader and libraries where the system is not this
    /// machine's root; this machine's where the system's is of another architecture or
    /// missing.
    fn new(sysroot: &Path, out: &fs::File, layout: &uki::Layout) -> Result<Signer> {
        let own = sysroot.join(MEASURE.trim_start_matches('/'));
        let (root, tool) = if own.is_file() && leanrd_gen::runs_here(sysroot, MEASURE) {
            (sysroot.to_path_buf(), own.display().to_string())
        } else if Path::new(MEASURE).is_file() {
            (PathBuf::from("/"), MEASURE.to_string())
        } else {
            bail!(
                "no systemd-measure (part of systemd 252 and later) at {} or {MEASURE} to sign PCR 11's values with",
                own.display()
            );
        };
        let c = leanrd_gen::sysroot_command(&root, MEASURE).with_context(|| format!("cannot run {tool}"))?;
        let run = (c.get_program().to_os_string(), c.get_args().map(|x| x.to_os_string()).collect());
        let help =
            Command::new(&run.0).args(&run.1).arg("--help").output().with_context(|| format!("cannot run {tool}"))?;
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
        // The section's bytes as a file of their own: copied in the kernel (std's io::copy
        // of a file range is copy_file_range), not through memory.
        use std::io::{Read, Seek};
        let initrd = dir.path().join("initrd");
        let mut src = out.try_clone().context("cannot reopen the UKI")?;
        src.seek(std::io::SeekFrom::Start(layout.initrd_offset)).context("cannot read the UKI's .initrd back")?;
        let mut dst = fs::File::create(&initrd).with_context(|| format!("{}: cannot write", initrd.display()))?;
        let n = std::io::copy(&mut src.take(layout.initrd_len), &mut dst)
            .with_context(|| format!("{}: cannot write", initrd.display()))?;
        if n != layout.initrd_len {
            bail!("the UKI's .initrd ends {} bytes short", layout.initrd_len - n);
        }
        Ok(Signer { tool, run, help, dir, initrd })
    }

    /// [`Signer::sign`] for each set of sections the stub may measure ([`dtbauto_choices`]),
    /// the signatures merged into one `.pcrsig`, each once in its bank's list, as ukify merges
    /// them.
    fn sign_each_dtbauto(&self, a: &UkiArgs, small: &[(&str, Vec<u8>)], kernel: &Path) -> Result<Vec<u8>> {
        let choices = dtbauto_choices(small);
        if choices.len() == 1 {
            return self.sign(a, small, kernel);
        }
        let mut merged = serde_json::Map::new();
        for one in choices {
            let text = self.sign(a, &one, kernel)?;
            let v: serde_json::Value = serde_json::from_slice(&text).context("systemd-measure's signature")?;
            for (bank, sigs) in v.as_object().into_iter().flatten() {
                let list = merged.entry(bank.clone()).or_insert_with(|| serde_json::Value::Array(Vec::new()));
                if let (Some(list), Some(sigs)) = (list.as_array_mut(), sigs.as_array()) {
                    for s in sigs {
                        if !list.contains(s) {
                            list.push(s.clone());
                        }
                    }
                }
            }
        }
        Ok(serde_json::to_vec(&serde_json::Value::Object(merged))?)
    }

    /// The signed PCR 11 predictions (the .pcrsig section's text) for the kernel `kernel`, the
    /// UKI's .initrd and the sections `small` (a profile's: the base's with the profile's in
    /// their place).
    fn sign(&self, a: &UkiArgs, small: &[(&str, Vec<u8>)], kernel: &Path) -> Result<Vec<u8>> {
        let (Some(key), Some(public)) = (&a.pcr_private_key, &a.pcr_public_key) else { bail!("no PCR signing key") };
        let tool = &self.tool;
        let mut cmd = Command::new(&self.run.0);
        cmd.args(&self.run.1).arg("sign");
        for (name, opt) in MEASURED {
            if !self.help.contains(&format!("{opt}=")) {
                // A stub that reads .ucode (systemd 256 and later) or .profile (257) measures
                // it: a systemd-measure that cannot take it would sign values PCR 11 never has.
                if [".ucode", ".profile", ".dtbauto", ".hwids"].contains(name) && small.iter().any(|(n, _)| n == name) {
                    bail!(
                        "{tool} takes no {opt} (systemd {} and later do), and the UKI's stub measures its {name}: \
                         its signed values would never match; use the systemd-measure of the stub's systemd",
                        if *name == ".ucode" { 256 } else { 257 }
                    );
                }
                continue;
            }
            let path = match *name {
                ".linux" => kernel.to_path_buf(),
                ".initrd" => self.initrd.clone(),
                _ => match small.iter().find(|(n, _)| n == name) {
                    Some((_, data)) => {
                        let p = self.dir.path().join(&name[1..]);
                        fs::write(&p, data).with_context(|| format!("{}: cannot write", p.display()))?;
                        p
                    }
                    None => continue,
                },
            };
            cmd.arg(format!("{opt}={}", path.display()));
        }
        let banks = if a.pcr_bank.is_empty() { vec!["sha256".to_string()] } else { a.pcr_bank.clone() };
        let phases = if a.pcr_phase.is_empty() { vec!["enter-initrd".to_string()] } else { a.pcr_phase.clone() };
        for b in &banks {
            cmd.arg(format!("--bank={b}"));
        }
        for p in &phases {
            cmd.arg(format!("--phase={p}"));
        }
        cmd.arg("--private-key").arg(key).arg("--public-key").arg(public).arg("--json=short");
        if let Some(d) = &a.pcr_tpm2_device {
            cmd.arg(format!("--tpm2-device={d}"));
        }
        let o = cmd.output().with_context(|| format!("cannot run {tool}"))?;
        if !o.status.success() {
            bail!("{tool} sign failed: {}", String::from_utf8_lossy(&o.stderr).trim());
        }
        let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{tool} sign wrote no JSON: {text:?}"))?;
        if !v.is_object() || v.as_object().is_some_and(|m| m.is_empty()) {
            bail!("{tool} sign wrote no signature: {text:?}");
        }
        Ok(text.into_bytes())
    }
}

/// The programs that sign a PE image for Secure Boot (`--sign-tool`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum SignTool {
    /// systemd-sbsign where the system or this machine has it (systemd 257 and later:
    /// Debian 13's systemd-repart package), else sbsign.
    #[default]
    Auto,
    /// sbsign (sbsigntool).
    Sbsign,
    /// systemd-sbsign: the system's (run with its own loader and libraries), else this
    /// machine's. It copies the image with reflinks where the file system has them.
    SystemdSbsign,
    /// pesign (Debian's pesign package), which takes keys only from an NSS database: the key
    /// and certificate are imported into one of the build's own (private, removed after) with
    /// openssl and NSS's pk12util (libnss3-tools).
    Pesign,
}

/// `--sign-tool`, shared by `build --uki` and `uki-addon`.
#[derive(Args, Default, Clone)]
pub(crate) struct SignToolArg {
    /// The program that signs for Secure Boot (with --sign-key).
    #[arg(long, value_enum, value_name = "TOOL", default_value_t = SignTool::Auto)]
    sign_tool: SignTool,
}

/// Where systemd installs systemd-sbsign: /usr/lib/systemd in 257, /usr/bin later.
const SYSTEMD_SBSIGN: [&str; 2] = ["/usr/bin/systemd-sbsign", "/usr/lib/systemd/systemd-sbsign"];

impl SignToolArg {
    /// Sign `unsigned` (a PE image not yet in place) into `output`, atomically and with
    /// `mode`; the program used, for the summary.
    fn sign(
        &self,
        sysroot: &Path,
        key: &Path,
        cert: &Path,
        unsigned: AtomicFile,
        output: &Path,
        mode: u32,
    ) -> Result<String> {
        let systemd = || -> Option<(Command, String)> {
            for p in SYSTEMD_SBSIGN {
                let own = sysroot.join(p.trim_start_matches('/'));
                if own.is_file() && leanrd_gen::runs_here(sysroot, p) {
                    let c = leanrd_gen::sysroot_command(sysroot, p).ok()?;
                    return Some((c, own.display().to_string()));
                }
            }
            SYSTEMD_SBSIGN.iter().find(|p| Path::new(p).is_file()).map(|p| (Command::new(p), p.to_string()))
        };
        match self.sign_tool {
            SignTool::Sbsign => sbsign(key, cert, unsigned, output, mode).map(|()| "sbsign".to_string()),
            SignTool::Pesign => pesign(key, cert, unsigned, output, mode).map(|()| "pesign".to_string()),
            SignTool::SystemdSbsign | SignTool::Auto => match systemd() {
                Some((c, name)) => systemd_sbsign(c, &name, key, cert, unsigned, output, mode).map(|()| name),
                None if self.sign_tool == SignTool::Auto => {
                    sbsign(key, cert, unsigned, output, mode).map(|()| "sbsign".to_string())
                }
                None => bail!(
                    "--sign-tool systemd-sbsign: none at {} under {} or on this machine (systemd 257 and later; \
                     Debian 13: apt install systemd-repart)",
                    SYSTEMD_SBSIGN.join(" or "),
                    sysroot.display()
                ),
            },
        }
    }
}

/// The path through /proc by which another program opens a file of ours (an unnamed
/// temporary file has no other).
fn proc_path(f: &fs::File) -> String {
    format!("/proc/{}/fd/{}", std::process::id(), std::os::fd::AsRawFd::as_raw_fd(f))
}

/// Sign with sbsign, which reads and writes paths: both unnamed temporary files, through /proc.
fn sbsign(key: &Path, cert: &Path, unsigned: AtomicFile, output: &Path, mode: u32) -> Result<()> {
    let signed = AtomicFile::create(output)?;
    let o = Command::new("sbsign")
        .arg("--key")
        .arg(key)
        .arg("--cert")
        .arg(cert)
        .arg("--output")
        .arg(proc_path(signed.file()))
        .arg(proc_path(unsigned.file()))
        .output()
        .context("cannot run sbsign (apt install sbsigntool)")?;
    if !o.status.success() {
        bail!("sbsign failed: {}", String::from_utf8_lossy(&o.stderr).trim());
    }
    signed.commit(mode)?;
    Ok(())
}

/// A directory beside `output` for a signer that writes its output by name (mode 0700:
/// nobody else opens the image before it has `mode`), and the signed image's path in it.
fn signing_dir(output: &Path) -> Result<(tempfile::TempDir, PathBuf, &Path)> {
    let parent = output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir = tempfile::Builder::new()
        .prefix(".leanrd-sign-")
        .tempdir_in(parent)
        .with_context(|| format!("{}: cannot make a temporary directory", parent.display()))?;
    let signed = dir.path().join("signed.efi");
    Ok((dir, signed, parent))
}

/// The signed image in place: `mode`, synced, renamed over `output`, the directory synced.
fn put_signed(name: &str, signed: &Path, output: &Path, parent: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let f = fs::File::open(signed).with_context(|| format!("{name} wrote no {}", signed.display()))?;
    f.set_permissions(fs::Permissions::from_mode(mode))
        .and_then(|()| f.sync_all())
        .with_context(|| format!("{}: cannot finish", signed.display()))?;
    fs::rename(signed, output).with_context(|| format!("{}: cannot write", output.display()))?;
    fs::File::open(parent).and_then(|d| d.sync_all()).with_context(|| format!("{}: cannot sync", parent.display()))?;
    Ok(())
}

/// Run a step of signing; its failure names the program and what it said.
fn step(c: &mut Command, what: &str, package: &str) -> Result<()> {
    let o = c.output().with_context(|| format!("cannot run {what} ({package})"))?;
    if !o.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(())
}

/// Sign with pesign. pesign reads keys only from an NSS database: the PEM key and certificate
/// go, as a PKCS#12 bundle with no password (openssl), into a database of their own (NSS's
/// certutil and pk12util) in a private temporary directory (0700, under the system's
/// temporary directory, removed when signing ends, whatever its outcome). pesign refuses an
/// output that exists: it writes into a directory beside `output`, as systemd-sbsign does.
fn pesign(key: &Path, cert: &Path, unsigned: AtomicFile, output: &Path, mode: u32) -> Result<()> {
    let nss =
        tempfile::Builder::new().prefix("leanrd-pesign-").tempdir().context("cannot make a temporary directory")?;
    let db = format!("sql:{}", nss.path().display());
    let p12 = nss.path().join("key.p12");
    let nick = "leanrd-signing";
    step(
        Command::new("openssl")
            .args(["pkcs12", "-export", "-name", nick, "-passout", "pass:", "-inkey"])
            .arg(key)
            .arg("-in")
            .arg(cert)
            .arg("-out")
            .arg(&p12),
        "openssl pkcs12 (the key and certificate for pesign's NSS database)",
        "apt install openssl",
    )?;
    step(
        Command::new("certutil").args(["-N", "--empty-password", "-d", &db]),
        "certutil (pesign's NSS database)",
        "apt install libnss3-tools",
    )?;
    step(
        Command::new("pk12util").arg("-i").arg(&p12).args(["-W", "", "-K", "", "-d", &db]),
        "pk12util (the key into pesign's NSS database)",
        "apt install libnss3-tools",
    )?;
    let (_dir, signed, parent) = signing_dir(output)?;
    step(
        // Short options: pesign spells its long one "--certficate".
        Command::new("pesign")
            .arg("-n")
            .arg(nss.path())
            .args(["-c", nick, "-s", "-i"])
            .arg(proc_path(unsigned.file()))
            .arg("-o")
            .arg(&signed),
        "pesign",
        "apt install pesign",
    )?;
    put_signed("pesign", &signed, output, parent, mode)?;
    drop(unsigned);
    Ok(())
}

/// Sign with systemd-sbsign. It writes its --output through a temporary file it links into
/// place, which an unnamed file cannot be: the output goes into a directory of our own beside
/// `output` (mode 0700: nobody else opens the image before it has `mode`), then is renamed
/// over `output`. The image it copies from is ours, through /proc.
fn systemd_sbsign(
    mut c: Command,
    name: &str,
    key: &Path,
    cert: &Path,
    unsigned: AtomicFile,
    output: &Path,
    mode: u32,
) -> Result<()> {
    let (_dir, signed, parent) = signing_dir(output)?;
    let o = c
        .arg("sign")
        .arg(format!("--private-key={}", key.display()))
        .arg(format!("--certificate={}", cert.display()))
        .arg(format!("--output={}", signed.display()))
        .arg(proc_path(unsigned.file()))
        .output()
        .with_context(|| format!("cannot run {name}"))?;
    if !o.status.success() {
        bail!("{name} sign failed: {}", String::from_utf8_lossy(&o.stderr).trim());
    }
    put_signed(name, &signed, output, parent, mode)?;
    drop(unsigned);
    Ok(())
}

/// The SBAT texts given as `--sbat` (TEXT or @FILE), each checked for its header line.
fn sbat_texts(given: &[String]) -> Result<Vec<Vec<u8>>> {
    let mut texts = Vec::new();
    for t in given {
        let text = match t.strip_prefix('@') {
            Some(f) => read(Path::new(f), "SBAT text")?,
            None => t.clone().into_bytes(),
        };
        if !text.starts_with(b"sbat,") {
            bail!("--sbat {t}: an SBAT text starts with its header line ({})", uki::SBAT_HEADER);
        }
        texts.push(text);
    }
    Ok(texts)
}

/// The EFI stub `kind` (`linux`, `addon`) of the system at `sysroot` for its architecture
/// (x64 or aa64): the system's own, then the build machine's when it is of that architecture.
fn default_stub(sysroot: &Path, target: Option<&str>, kind: &str) -> Result<PathBuf> {
    let efi = match target {
        Some("aarch64") => "aa64",
        _ => "x64",
    };
    let name = format!("usr/lib/systemd/boot/efi/{kind}{efi}.efi.stub");
    let mut candidates = vec![sysroot.join(&name)];
    if target == Some(std::env::consts::ARCH) && sysroot != Path::new("/") {
        candidates.push(Path::new("/").join(&name));
    }
    first_file(&candidates).with_context(|| {
        let shown: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
        format!("no EFI stub at {}: install systemd-boot-efi there or pass --stub", shown.join(" or "))
    })
}

fn first_file(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates.iter().find(|p| p.is_file()).cloned()
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("{}: cannot read the {what}", path.display()))
}

/// The host's command line without what belongs to the boot loader that started it.
pub(crate) fn host_cmdline(text: &str) -> String {
    text.split_whitespace()
        .filter(|w| !w.starts_with("BOOT_IMAGE=") && !w.starts_with("initrd="))
        .collect::<Vec<_>>()
        .join(" ")
}

impl UkiArgs {
    fn cmdline(&self, r: &Request) -> Result<Option<String>> {
        if let Some(c) = &self.cmdline {
            return Ok(Some(c.clone()));
        }
        if let Some(f) = &self.cmdline_file {
            let t = String::from_utf8(read(f, "command line")?)
                .with_context(|| format!("{}: the command line is not UTF-8", f.display()))?;
            return Ok(Some(t.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
        if r.universal {
            return Ok(None);
        }
        let p = r.host_root.join("proc/cmdline");
        let t = fs::read_to_string(&p).with_context(|| format!("{}: cannot read", p.display()))?;
        Ok(Some(host_cmdline(&t)))
    }

    /// The UKI's .sbat: the stub's, the kernel's and --sbat's lines merged; None when there is
    /// nothing beside the stub's own (it stays as it is).
    fn sbat(&self, stub: &[u8], kernel: &Path) -> Result<Option<Vec<u8>>> {
        let kernel = uki::file_section(kernel, ".sbat")?;
        if kernel.is_none() && self.sbat.is_empty() {
            return Ok(None);
        }
        let mut texts: Vec<Vec<u8>> =
            uki::section_data(stub, ".sbat").map(<[u8]>::to_vec).into_iter().chain(kernel).collect();
        texts.extend(sbat_texts(&self.sbat)?);
        Ok(Some(uki::merge_sbat(&texts.iter().map(Vec::as_slice).collect::<Vec<_>>())))
    }

    /// The small sections, in ukify's order.
    fn sections(&self, r: &Request) -> Result<Vec<(&'static str, Vec<u8>)>> {
        let mut v = Vec::new();
        let osrel = match &self.os_release {
            Some(p) => Some(p.clone()),
            None => first_file(&[r.sysroot.join("etc/os-release"), r.sysroot.join("usr/lib/os-release")]),
        };
        if let Some(p) = osrel {
            v.push((".osrel", read(&p, "os-release")?));
        }
        if let Some(c) = self.cmdline(r)? {
            v.push((".cmdline", cmdline_section(&c)));
        }
        if let Some(p) = &self.devicetree {
            v.push((".dtb", dtb_section(p)?));
        }
        v.extend(dtbauto_sections(&self.devicetree_auto, self.hwids.as_deref())?);
        v.push((".uname", r.kver.clone().into_bytes()));
        if let Some(p) = &self.splash {
            let b = read(p, "splash image")?;
            if !b.starts_with(b"BM") {
                bail!("{}: the splash image is not a BMP file", p.display());
            }
            v.push((".splash", b));
        }
        Ok(v)
    }
}

/// A `.cmdline` section: the words as they are, ended with a NUL as ukify ends them (the stub
/// hands them on as they are).
fn cmdline_section(words: &str) -> Vec<u8> {
    let mut b = words.as_bytes().to_vec();
    b.push(0);
    b
}

/// A `.dtb` section: the device tree file, its header checked as the stub checks it (the
/// magic, a total size within the data) and its root node read.
fn dtb_section(path: &Path) -> Result<Vec<u8>> {
    Ok(dtb_with_root(path)?.0)
}

/// A device tree file and its root node.
fn dtb_with_root(path: &Path) -> Result<(Vec<u8>, devicetree::Root)> {
    let b = read(path, "device tree")?;
    let root =
        devicetree::root(&b).with_context(|| format!("{}: not a flattened device tree (.dtb)", path.display()))?;
    Ok((b, root))
}

/// The sets of sections the stub may measure, by the `.dtbauto` it chooses: `small` with
/// each `.dtbauto` alone (the stub measures the one it chooses, as ukify signs them), then
/// with none (a machine no tree is for, where the stub installs `.dtb`: ukify signs no
/// values for it, and a token would never unseal there). Without `.dtbauto`, `small` itself.
fn dtbauto_choices<'a>(small: &[(&'a str, Vec<u8>)]) -> Vec<Vec<(&'a str, Vec<u8>)>> {
    let n = small.iter().filter(|(name, _)| *name == ".dtbauto").count();
    (0..=n)
        .map(|k| {
            let mut seen = 0;
            small
                .iter()
                .filter(|(name, _)| {
                    let keep = *name != ".dtbauto" || seen == k;
                    seen += usize::from(*name == ".dtbauto");
                    keep
                })
                .cloned()
                .collect()
        })
        .collect()
}

/// The `.dtbauto` sections, each a device tree with a root `compatible` (what the stub chooses
/// it by), and the `.hwids` section from `hwids`' files. Each machine in `.hwids` should have
/// a tree of its compatible; one that has none is said (the stub would choose nothing for it).
fn dtbauto_sections(trees: &[PathBuf], hwids: Option<&Path>) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let mut v = Vec::new();
    let mut compatibles = Vec::new();
    for p in trees {
        let (b, root) = dtb_with_root(p)?;
        let Some(c) = root.compatible.first() else {
            bail!("{}: its root has no compatible property, by which the stub would choose it (.dtbauto)", p.display())
        };
        if compatibles.contains(c) {
            bail!("{}: a second device tree for {c:?} (the stub takes the first)", p.display());
        }
        compatibles.push(c.clone());
        v.push((".dtbauto", b));
    }
    if let Some(dir) = hwids {
        let devices = hwid_files(dir)?;
        for d in devices.iter().filter(|d| !compatibles.contains(&d.compatible)) {
            eprintln!(
                "leanrd: warning: {}: machine {:?} gets compatible {:?}, and no --devicetree-auto tree is one",
                dir.display(),
                d.name,
                d.compatible
            );
        }
        v.push((".hwids", devicetree::hwids_section(&devices)));
    }
    Ok(v)
}

/// The machines of a `--hwids` directory: its JSON files (and its subdirectories'), in the
/// order of their paths, each `{"type": "devicetree", "name": ..., "compatible": ...,
/// "hwids": [...]}` as ukify reads them (`type` may be left out: a device tree is the only
/// kind leanrd writes); one (name, compatible) pair given in two files is one machine.
fn hwid_files(dir: &Path) -> Result<Vec<devicetree::HwidDevice>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = fs::read_dir(&d).with_context(|| format!("{}: cannot read the --hwids directory", d.display()))?;
        for e in rd {
            let p = e.with_context(|| format!("{}: cannot read", d.display()))?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    if files.is_empty() {
        bail!("{}: no *.json hardware-ID files (--hwids)", dir.display());
    }
    let mut out: Vec<devicetree::HwidDevice> = Vec::new();
    for f in files {
        let text = read(&f, "hardware-ID file")?;
        let v: serde_json::Value =
            serde_json::from_slice(&text).with_context(|| format!("{}: not JSON", f.display()))?;
        let text_of = |k: &str| -> Result<String> {
            match v.get(k).and_then(|x| x.as_str()) {
                Some(t) if !t.is_empty() && !t.contains('\0') => Ok(t.to_string()),
                _ => bail!(
                    "{}: no \"{k}\" text (ukify's hardware-ID files have \"name\", \"compatible\" and \"hwids\")",
                    f.display()
                ),
            }
        };
        match v.get("type").map(|t| t.as_str()) {
            None | Some(Some("devicetree")) => {}
            Some(Some("uefi-fw")) => {
                bail!("{}: type \"uefi-fw\" (.efifw firmware) is not written by leanrd", f.display())
            }
            Some(t) => bail!("{}: type {t:?}: not \"devicetree\"", f.display()),
        }
        let (name, compatible) = (text_of("name")?, text_of("compatible")?);
        let Some(list) = v.get("hwids").and_then(|h| h.as_array()).filter(|l| !l.is_empty()) else {
            bail!("{}: no \"hwids\" list of CHIDs", f.display());
        };
        let mut chids = Vec::new();
        for h in list {
            let t = h.as_str().unwrap_or("");
            let Some(c) = devicetree::parse_chid(t) else {
                bail!("{}: {h} is not a CHID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", f.display());
            };
            chids.push(c);
        }
        match out.iter_mut().find(|d| d.name == name && d.compatible == compatible) {
            Some(d) => d.chids.extend(chids),
            None => out.push(devicetree::HwidDevice { name, compatible, chids }),
        }
    }
    Ok(out)
}

/// The early (microcode) segment as the data of a `.ucode` section: its archive, written
/// straight into memory (it is small, and uncompressed: nothing in it is cloned).
fn ucode_section(early: SegmentSpec) -> Result<Vec<u8>> {
    let opts = leanrd_archive::layout::Options { data_align: None, checksum: early.checksum, base: 0 };
    let layout = leanrd_archive::Layout::plan(early.entries, opts)?;
    let mut data = Vec::with_capacity(usize::try_from(layout.len()).unwrap_or(0));
    image::write_compressed(&layout, early.compress, 1, &mut data)?;
    Ok(data)
}

/// Write the UKI to `r.output`, atomically; returns its layout. `early`: the first of `segs`
/// is the early microcode segment (with a stub that reads `.ucode`, it goes there, as ukify
/// puts it, and the stub hands it to the kernel first).
pub(crate) fn write(
    a: &UkiArgs,
    r: &Request,
    mut segs: Vec<SegmentSpec>,
    early: bool,
    mode: u32,
) -> Result<uki::Layout> {
    // The system's architecture, once: from its kernel's modules, else its programs.
    let target = leanrd_gen::target_arch(&r.sysroot, Some(&r.kver));
    let stub = match &a.stub {
        Some(p) => p.clone(),
        None => default_stub(&r.sysroot, target, "linux")?,
    };
    let kernel = match &a.linux {
        Some(k) if k.is_file() => k.clone(),
        Some(k) => bail!("{}: no kernel image there (--linux)", k.display()),
        None => {
            let candidates = [
                r.sysroot.join(format!("boot/vmlinuz-{}", r.kver)),
                r.sysroot.join(format!("usr/lib/modules/{}/vmlinuz", r.kver)),
                r.sysroot.join(format!("lib/modules/{}/vmlinuz", r.kver)),
            ];
            let shown: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
            first_file(&candidates).with_context(|| {
                format!("no kernel image for {} at {} (--linux FILE names one)", r.kver, shown.join(" or "))
            })?
        }
    };
    // A stub for another architecture than the system's would not start its kernel.
    let stub_bytes = read(&stub, "EFI stub")?;
    let stub_arch = uki::pe_arch(&stub_bytes);
    if let (Some(t), Some(s)) = (target, stub_arch)
        && t != s
    {
        bail!("{}: the EFI stub is for {s}, and the system (its kernel) for {t}", stub.display());
    }
    let specs = profile_specs(&a.profile)?;
    if !specs.is_empty() || !a.devicetree_auto.is_empty() || a.hwids.is_some() {
        let what = if specs.is_empty() {
            "device trees chosen by the machine (--devicetree-auto, --hwids)"
        } else {
            "a multi-profile UKI (--profile)"
        };
        match uki::stub_version(&stub_bytes) {
            Some(v) if v >= PROFILE_STUB => {}
            v => bail!(
                "{}: {}: {what} needs systemd-stub {PROFILE_STUB} or later (Debian 13's systemd-boot-efi): an older \
                 stub ignores the sections it does not know",
                stub.display(),
                v.map_or("not a systemd-stub whose version is known".to_string(), |v| format!("systemd-stub {v}"))
            ),
        }
    }
    let mut small = a.sections(r)?;
    if early && !segs.is_empty() && uki::stub_version(&stub_bytes).is_some_and(|v| v >= uki::UCODE_STUB) {
        small.push((".ucode", ucode_section(segs.remove(0))?));
    }
    // The signed values' room: a signature per bank and phase (about 600 bytes each in JSON),
    // and room to spare; in each profile where there are profiles (as ukify puts it), else in
    // the base.
    let signing = a.pcr_public_key.is_some();
    // With .dtbauto, a signature for each tree the stub may choose (as ukify signs them).
    let dtbautos = a.devicetree_auto.len() + 1;
    let room = 4096 + 1024 * (a.pcr_bank.len().max(1) * a.pcr_phase.len().max(1) * dtbautos) as u64;
    let mut reserve = Vec::new();
    if let Some(p) = &a.pcr_public_key {
        small.push((".pcrpkey", read(p, "PCR public key")?));
        if specs.is_empty() {
            reserve.push((".pcrsig", room));
        }
    }
    let mut profiles = Vec::new();
    for p in &specs {
        let reserve = if signing { vec![(".pcrsig", room)] } else { Vec::new() };
        profiles.push(uki::Profile { small: p.sections()?, reserve });
    }
    let sbat = a.sbat(&stub_bytes, &kernel)?;
    let parts = uki::Parts { small: small.clone(), reserve, kernel: &kernel, sbat: sbat.clone(), profiles };
    let out = AtomicFile::create(&r.output)?;
    let threads = r.threads;
    let mut layout = uki::write(out.file(), &stub, &parts, |f, at| {
        let stats = image::write_image(f, at, segs, threads)?;
        Ok(stats.last().map_or(at, |s| s.offset + s.len))
    })?;
    if a.pcr_private_key.is_some() {
        // What the stub measures: the merged .sbat, or the stub's own.
        if let Some(t) = sbat.or_else(|| uki::section_data(&stub_bytes, ".sbat").map(<[u8]>::to_vec)) {
            small.push((".sbat", t));
        }
        // Each profile's values: the base's sections, each replaced by the profile's of the
        // same name, and its .profile (what the stub measures when it starts that profile).
        let measured: Vec<Vec<(&str, Vec<u8>)>> = if parts.profiles.is_empty() {
            vec![small.clone()]
        } else {
            parts
                .profiles
                .iter()
                .map(|p| {
                    let mut v: Vec<(&str, Vec<u8>)> =
                        small.iter().filter(|(n, _)| !p.small.iter().any(|(m, _)| m == n)).cloned().collect();
                    v.extend(p.small.iter().cloned());
                    v
                })
                .collect()
        };
        let signer = Signer::new(&r.sysroot, out.file(), &layout)?;
        let mut sigs = Vec::new();
        for (i, m) in measured.iter().enumerate() {
            let sig = signer.sign_each_dtbauto(a, m, &kernel)?;
            uki::fill_nth(out.file(), ".pcrsig", i, &sig)?;
            sigs.push(sig.len() as u64);
        }
        for (s, len) in layout.sections.iter_mut().filter(|s| s.0 == ".pcrsig").zip(sigs) {
            s.2 = len;
        }
    }
    match (&a.sign_key, &a.sign_cert) {
        (Some(key), Some(cert)) => {
            let tool = a.sign_tool.sign(&r.sysroot, key, cert, out, &r.output, mode)?;
            eprintln!("leanrd: {}: signed for Secure Boot by {tool}", r.output.display());
        }
        _ => out.commit(mode)?,
    }
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// systemd-sbsign's way of writing (its --output, through a file of its own) ends in
    /// `output` with the build's mode, over what was there, leaving nothing beside it; its
    /// failure leaves the old file as it was.
    #[test]
    fn systemd_sbsign_output_lands_whole_with_the_mode() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("uki.efi");
        fs::write(&output, b"old").unwrap();
        let unsigned = || {
            let a = AtomicFile::create(&output).unwrap();
            a.file().write_all(b"the unsigned image").unwrap();
            a
        };
        // A stand-in with systemd-sbsign's arguments: sign ... --output=OUT IN.
        let fake = |script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("shift 3; out=${{1#--output=}}; {script}"), "sh"]);
            c
        };
        let k = Path::new("k.pem");
        systemd_sbsign(fake(r#"cat "$2" > "$out"; echo signed >> "$out""#), "fake", k, k, unsigned(), &output, 0o600)
            .unwrap();
        assert_eq!(fs::read(&output).unwrap(), b"the unsigned imagesigned\n");
        assert_eq!(fs::metadata(&output).unwrap().permissions().mode() & 0o7777, 0o600);
        let e = systemd_sbsign(fake("echo no key >&2; exit 1"), "fake", k, k, unsigned(), &output, 0o644).unwrap_err();
        assert!(e.to_string().contains("fake sign failed: no key"), "{e}");
        assert_eq!(fs::read(&output).unwrap(), b"the unsigned imagesigned\n");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["uki.efi"], "nothing left beside the output");
    }

    #[test]
    fn the_boot_loaders_words_are_dropped() {
        assert_eq!(
            host_cmdline("BOOT_IMAGE=/vmlinuz-6.1 root=UUID=x ro initrd=\\initrd.img quiet\n"),
            "root=UUID=x ro quiet"
        );
    }

    #[test]
    fn profiles_are_read_from_their_words() {
        let p = ProfileSpec::parse(
            r#"ID=rescue TITLE="Rescue shell" CMDLINE='root=/dev/sda2  ro systemd.unit=rescue.target'"#,
        )
        .unwrap();
        assert_eq!(p.id, "rescue");
        // Kept as given, as --cmdline's is.
        assert_eq!(p.cmdline.as_deref(), Some("root=/dev/sda2  ro systemd.unit=rescue.target"));
        assert_eq!(p.text(), "ID=rescue\nTITLE=\"Rescue shell\"\n");
        let secs = p.sections().unwrap();
        assert_eq!(secs.iter().map(|s| s.0).collect::<Vec<_>>(), [".profile", ".cmdline"]);
        assert_eq!(secs[1].1, b"root=/dev/sda2  ro systemd.unit=rescue.target\0");
        assert_eq!(ProfileSpec::parse("ID=main").unwrap().sections().unwrap().len(), 1);
        // What is refused, and says why.
        for (spec, why) in [
            ("TITLE=x", "no ID="),
            ("ID=Main", "lower-case"),
            ("ID=a ID=b", "twice"),
            ("ID=a KERNEL=x", "unknown key KERNEL="),
            ("ID=a cmdline", "not KEY=VALUE"),
            ("ID=a 'TITLE=x", "unterminated quote"),
            ("ID=a TITLE='a\"b'", "cannot quote"),
            ("ID=a DTB=/nonexistent/x.dtb", "/nonexistent/x.dtb: cannot read"),
            ("ID=a #TITLE=x", "a word starting with #"),
            ("ID=a CMDLINE=", "CMDLINE= is empty"),
            ("ID=a TITLE=x\\", "trailing backslash"),
        ] {
            let e = ProfileSpec::parse(spec).and_then(|p| p.sections().map(|_| p)).unwrap_err().to_string();
            assert!(e.contains(why), "{spec}: {e}");
        }
        let two = [String::from("ID=a"), String::from("ID=a TITLE=b")];
        assert!(profile_specs(&two).unwrap_err().to_string().contains("two profiles"));
        let many: Vec<String> = (0..257).map(|i| format!("ID=p{i}")).collect();
        assert!(profile_specs(&many).unwrap_err().to_string().contains("256 at most"));
    }

    /// A device tree whose root's compatible is `compatible` (none when empty).
    fn tree(compatible: &str) -> Vec<u8> {
        let c = format!("{compatible}\0");
        let props: &[(&str, &[u8])] = if compatible.is_empty() { &[] } else { &[("compatible", c.as_bytes())] };
        leanrd_testkit::device_tree(props)
    }

    #[test]
    fn a_device_tree_is_checked_by_its_header() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("x.dtb");
        let mut dtb = tree("vendor,board");
        fs::write(&p, &dtb).unwrap();
        assert_eq!(dtb_section(&p).unwrap(), dtb);
        // Longer than the file (a cut blob), shorter than a header, no magic, empty.
        let n = dtb.len();
        dtb[4..8].copy_from_slice(&(n as u32 + 1).to_be_bytes());
        let check = |b: &[u8]| {
            fs::write(&p, b).unwrap();
            dtb_section(&p).unwrap_err().chain().map(|e| e.to_string()).collect::<Vec<_>>().join(": ")
        };
        assert!(check(&dtb).contains(&format!("{} bytes", n + 1)));
        dtb[4..8].copy_from_slice(&8u32.to_be_bytes());
        assert!(check(&dtb).contains("says 8 bytes"));
        assert!(check(b"BM not a device tree").contains("magic"));
        assert!(check(&[]).contains("magic"));
    }

    #[test]
    fn signed_values_cover_each_tree_the_stub_may_choose_and_none() {
        let small = vec![
            (".cmdline", b"a".to_vec()),
            (".dtbauto", b"x".to_vec()),
            (".dtbauto", b"y".to_vec()),
            (".hwids", b"h".to_vec()),
        ];
        let names =
            |v: &Vec<(&str, Vec<u8>)>| v.iter().map(|(n, d)| format!("{n}={}", d[0] as char)).collect::<Vec<_>>();
        let c: Vec<Vec<String>> = dtbauto_choices(&small).iter().map(names).collect();
        assert_eq!(
            c,
            [
                vec![".cmdline=a", ".dtbauto=x", ".hwids=h"],
                vec![".cmdline=a", ".dtbauto=y", ".hwids=h"],
                vec![".cmdline=a", ".hwids=h"],
            ]
        );
        assert_eq!(dtbauto_choices(&small[..1]), vec![small[..1].to_vec()]);
    }

    #[test]
    fn auto_device_trees_need_a_compatible_and_hwids_files_are_read_as_ukify_reads_them() {
        let t = tempfile::tempdir().unwrap();
        let (a, b, none) = (t.path().join("a.dtb"), t.path().join("b.dtb"), t.path().join("none.dtb"));
        fs::write(&a, tree("vendor,a")).unwrap();
        fs::write(&b, tree("vendor,b")).unwrap();
        fs::write(&none, tree("")).unwrap();
        let hw = t.path().join("hwids");
        fs::create_dir_all(hw.join("more")).unwrap();
        fs::write(
            hw.join("a.json"),
            r#"{"type": "devicetree", "name": "Board A", "compatible": "vendor,a", "hwids": ["2f6d4c3e-6e1b-5cf6-9a8b-1f2e3d4c5b6a"]}"#,
        )
        .unwrap();
        // The same machine in another file (its CHIDs join), without "type".
        fs::write(
            hw.join("more/a2.json"),
            r#"{"name": "Board A", "compatible": "vendor,a", "hwids": ["0a1b2c3d-4e5f-5061-8273-8495a6b7c8d9"]}"#,
        )
        .unwrap();
        let v = dtbauto_sections(&[a.clone(), b.clone()], Some(&hw)).unwrap();
        assert_eq!(v.iter().map(|s| s.0).collect::<Vec<_>>(), [".dtbauto", ".dtbauto", ".hwids"]);
        let entries = devicetree::hwids_entries(&v[2].1).unwrap();
        assert_eq!(entries.len(), 2);
        assert!(entries.iter().all(|e| e.name == "Board A" && e.compatible == "vendor,a"));
        let err = |trees: &[PathBuf], hw: Option<&Path>| {
            dtbauto_sections(trees, hw).unwrap_err().chain().map(|e| e.to_string()).collect::<Vec<_>>().join(": ")
        };
        assert!(err(std::slice::from_ref(&none), None).contains("no compatible property"));
        assert!(err(&[a.clone(), a.clone()], None).contains("a second device tree for \"vendor,a\""));
        for (json, why) in [
            (r#"{"name": "X", "compatible": "v,x"}"#, "no \"hwids\""),
            (r#"{"name": "X", "hwids": ["2f6d4c3e-6e1b-5cf6-9a8b-1f2e3d4c5b6a"]}"#, "no \"compatible\""),
            (r#"{"type": "uefi-fw", "name": "X", "fwid": "f", "hwids": []}"#, "uefi-fw"),
            (r#"{"name": "X", "compatible": "v,x", "hwids": ["not-a-chid"]}"#, "not a CHID"),
            ("[1, 2", "not JSON"),
        ] {
            let d = t.path().join(format!("bad-{}", why.len()));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("x.json"), json).unwrap();
            assert!(
                err(std::slice::from_ref(&a), Some(&d)).contains(why),
                "{json}: {}",
                err(std::slice::from_ref(&a), Some(&d))
            );
        }
        let empty = t.path().join("empty");
        fs::create_dir_all(&empty).unwrap();
        assert!(err(&[a], Some(&empty)).contains("no *.json"));
    }
}

const ADDON_EXAMPLES: &str = "\
Examples:
  sudo leanrd addon --cmdline rd.luks.options=discard -o /efi/loader/addons/discard.addon.efi   every UKI
  sudo leanrd addon --cmdline console=ttyS0 -o /efi/EFI/Linux/l.efi.extra.d/tty.addon.efi   one UKI
  sudo leanrd addon --devicetree board-rev2.dtb -o /efi/EFI/Linux/l.efi.extra.d/rev2.addon.efi   a device tree";

/// `leanrd addon`: a UKI add-on, for a UKI's command line or device tree without a new UKI.
#[derive(Args)]
#[command(after_long_help = ADDON_EXAMPLES)]
pub(crate) struct AddonArgs {
    /// Where the add-on goes: NAME.addon.efi in the ESP's /loader/addons/ (for every UKI) or in
    /// UKI.efi.extra.d/ beside one UKI (for that one). systemd-stub 254 and later append its
    /// command line to the UKI's, in the order of their file names; under Secure Boot only a
    /// signed add-on is taken (--sign-key).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: PathBuf,
    /// The words it adds to the kernel's command line.
    #[arg(long, value_name = "TEXT", required_unless_present_any = ["devicetree", "devicetree_auto"])]
    cmdline: Option<String>,
    /// A device tree the add-on carries (.dtb): systemd-stub 256 and later install it in place
    /// of the UKI's and the firmware's (the last add-on's wins), and measure it into PCR 12.
    #[arg(long, value_name = "DTB")]
    devicetree: Option<PathBuf>,
    /// A device tree for the stub to choose by the machine (.dtbauto; systemd-stub 257 and
    /// later), as `build --devicetree-auto` takes it; repeated, one per board.
    #[arg(long, value_name = "DTB")]
    devicetree_auto: Vec<PathBuf>,
    /// Hardware-ID files for the add-on's .hwids, as `build --hwids` takes them: which of its
    /// --devicetree-auto trees a machine without a firmware device tree gets.
    #[arg(long, value_name = "DIR", requires = "devicetree_auto")]
    hwids: Option<PathBuf>,
    /// A kernel release: the stub takes the add-on only with a UKI of this kernel (.uname).
    #[arg(long, value_name = "KVER")]
    uname: Option<String>,
    /// The add-on stub (default: SYSROOT/usr/lib/systemd/boot/efi/addonARCH.efi.stub for the
    /// system's architecture, x64 or aa64; systemd-boot-efi 255 and later ship it).
    #[arg(long, value_name = "FILE")]
    stub: Option<PathBuf>,
    /// The system the add-on is for: its stub and its architecture (default: /).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
    /// SBAT lines for its .sbat, as `build --sbat` takes them (default: ukify's add-on line,
    /// so that an SBAT policy can revoke it).
    #[arg(long, value_name = "TEXT|@FILE")]
    sbat: Vec<String>,
    /// Sign the add-on for Secure Boot with this key (PEM) and --sign-cert (see --sign-tool).
    #[arg(long, value_name = "KEY", requires = "sign_cert")]
    sign_key: Option<PathBuf>,
    /// The certificate (PEM) matching --sign-key.
    #[arg(long, value_name = "CERT", requires = "sign_key")]
    sign_cert: Option<PathBuf>,
    #[command(flatten)]
    sign_tool: SignToolArg,
}

pub(crate) fn addon(a: AddonArgs) -> Result<std::process::ExitCode> {
    let sysroot = a.sysroot.clone().unwrap_or_else(|| PathBuf::from("/"));
    let cmdline = a.cmdline.as_deref().map(|c| c.split_whitespace().collect::<Vec<_>>().join(" "));
    if cmdline.as_deref() == Some("") {
        bail!("--cmdline: an add-on without words adds nothing");
    }
    let stub = match &a.stub {
        Some(p) => p.clone(),
        None => default_stub(&sysroot, leanrd_gen::target_arch(&sysroot, a.uname.as_deref()), "addon")?,
    };
    let stub_bytes = read(&stub, "add-on stub")?;
    // A kernel stub would make an EFI program that boots no kernel, not an add-on.
    if let Some((name, _)) = uki::loader_info(&stub_bytes).filter(|(n, _)| n != "systemd-addon") {
        bail!("{}: a {name}, not an add-on stub (addonx64.efi.stub, addonaa64.efi.stub)", stub.display());
    }
    let mut small = Vec::new();
    if let Some(c) = &cmdline {
        small.push((".cmdline", cmdline_section(c)));
    }
    if let Some(p) = &a.devicetree {
        small.push((".dtb", dtb_section(p)?));
    }
    small.extend(dtbauto_sections(&a.devicetree_auto, a.hwids.as_deref())?);
    if let Some(k) = &a.uname {
        small.push((".uname", k.clone().into_bytes()));
    }
    let mut texts: Vec<Vec<u8>> = uki::section_data(&stub_bytes, ".sbat").map(<[u8]>::to_vec).into_iter().collect();
    let given = sbat_texts(&a.sbat)?;
    if given.is_empty() {
        texts.push(format!("{}\n{}\n", uki::SBAT_HEADER, uki::SBAT_ADDON).into_bytes());
    }
    texts.extend(given);
    let sbat = uki::merge_sbat(&texts.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let out = AtomicFile::create(&a.output)?;
    let l = uki::write_addon(out.file(), &stub, small, Some(sbat))?;
    match (&a.sign_key, &a.sign_cert) {
        (Some(key), Some(cert)) => {
            let tool = a.sign_tool.sign(&sysroot, key, cert, out, &a.output, 0o644)?;
            eprintln!("leanrd: {}: signed for Secure Boot by {tool}", a.output.display());
        }
        _ => out.commit(0o644)?,
    }
    let adds = match (&cmdline, a.devicetree.is_some() || !a.devicetree_auto.is_empty()) {
        (Some(c), true) => format!("adding {c:?} and device trees"),
        (Some(c), false) => format!("adding {c:?}"),
        (None, _) => "carrying device trees".to_string(),
    };
    eprintln!(
        "leanrd: {}: UKI add-on {adds}; sections {}",
        a.output.display(),
        l.sections.iter().map(|(n, o, len)| format!("{n} at {o} ({len} B)")).collect::<Vec<_>>().join(", ")
    );
    Ok(std::process::ExitCode::SUCCESS)
}
