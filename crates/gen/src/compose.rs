//! Composition: the plan of the image from what selection and resolution decided — /init
//! and its configuration, the features' binaries (with their libraries), files and
//! firmware, the modules and their tables, and the early microcode segment.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use leanrd_archive::{Context, Result, bail};
use leanrd_contract::{CONFIG_PATH, DeviceRef, InitConfig, Layer, Root};
use leanrd_kmod::Resolved;

use crate::crypt::CryptSelection;
use crate::elf;
use crate::gpu::FirmwareFilter;
use crate::host::{Facts, Mount, SystemConfig};
use crate::modcache::ModuleCache;
use crate::modules::Kernel;
use crate::plan::{Item, Plan, host_path};
use crate::request::Request;
use crate::resolve::Modules;
use crate::select::Selected;

/// /init, and the libraries it needs if it is a dynamic (development) build.
fn add_init(plan: &mut Plan, init: &Path) -> Result<()> {
    let md = fs::metadata(init).with_context(|| format!("{}: the /init binary is missing", init.display()))?;
    if !md.is_file() {
        bail!("{}: the /init binary is not a file", init.display());
    }
    plan.put("/init", Item::File { src: init.to_path_buf(), mode: 0o755 });
    elf::Resolver::new(plan).add_dependencies_of(init)
}

/// The features' directories, binaries, libraries, files and firmware. Returns warnings.
fn add_features(plan: &mut Plan, selected: &[Selected]) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    for s in selected {
        for d in &s.feature.dirs {
            plan.put(d, Item::Dir { mode: 0o755 });
        }
    }
    let mut r = elf::Resolver::new(plan);
    for Selected { feature: f, required } in selected {
        for b in &f.binaries {
            match r.which(b) {
                Some(path) => r.add_binary(&path).with_context(|| format!("feature {}", f.name))?,
                None if *required => bail!("feature {}: binary {b} not found (install it)", f.name),
                None => warnings.push(format!("feature {}: binary {b} not found, left out", f.name)),
            }
        }
        for l in &f.libraries {
            r.add_library_if_present(l)?;
        }
    }
    for Selected { feature: f, required } in selected {
        let files: Vec<String> = f.files.iter().flat_map(|p| expand_files(&plan.sysroot, p)).collect();
        for file in &files {
            if host_path(&plan.sysroot, file).exists() {
                plan.add_host_path(file)?;
            } else if *required {
                // A configuration file a universal image would carry if the system had one
                // (integritytab, mdadm.conf) is no news when it has none.
                warnings.push(format!("feature {}: {file} not found, skipped", f.name));
            }
        }
        if f.name == "multipath" {
            warnings.extend(multipath_conf_problems(&plan.sysroot, &files));
        }
        for fw in &f.firmware {
            if plan.add_host_path(&format!("/lib/firmware/{fw}")).is_err() {
                warnings.push(format!("feature {}: firmware {fw} not found", f.name));
            }
        }
    }
    Ok(warnings)
}

/// What /init would refuse in the multipath configuration `files` carries (multipath.conf, then
/// conf.d's files, read in that order as /init and multipath-tools read them): said at build
/// time, where it can be mended, rather than only in the boot's log, where /init ignores the file
/// and may name a map otherwise than the root's multipathd.
fn multipath_conf_problems(sysroot: &Path, files: &[String]) -> Vec<String> {
    let mut conf = leanrd_contract::multipath::MultipathConf::default();
    let mut problems = Vec::new();
    for f in files.iter().filter(|f| f.ends_with(".conf")) {
        let Ok(text) = fs::read_to_string(host_path(sysroot, f)) else { continue };
        let mut next = conf.clone();
        match next.read(&text, f) {
            Ok(()) => conf = next,
            Err(e) => problems.push(format!("feature multipath: {e}: /init will ignore this file at boot")),
        }
    }
    problems
}

/// A feature's `files` entry as paths: itself, or for `DIR/PREFIX*SUFFIX` (one `*`, in the last
/// component: `/etc/multipath/conf.d/*.conf`) the regular files of DIR under the system root
/// that match, in name order (none: nothing, and nothing said).
fn expand_files(sysroot: &Path, pattern: &str) -> Vec<String> {
    let Some((dir, last)) = pattern.rsplit_once('/') else { return vec![pattern.to_string()] };
    let Some((prefix, suffix)) = last.split_once('*') else { return vec![pattern.to_string()] };
    let Ok(rd) = fs::read_dir(host_path(sysroot, if dir.is_empty() { "/" } else { dir })) else { return Vec::new() };
    let mut v: Vec<String> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.len() >= prefix.len() + suffix.len() && n.starts_with(prefix) && n.ends_with(suffix))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    v.sort();
    v
}

/// The file system checkers the image needs (see [`Feature::fsck`]), and their entries in
/// the configuration. Returns warnings.
///
/// [`Feature::fsck`]: crate::features::Feature::fsck
fn add_checkers(
    plan: &mut Plan,
    selected: &[Selected],
    facts: Option<&Facts>,
    conf: &mut InitConfig,
) -> Result<Vec<String>> {
    // Host-only: the types of the root and /usr that the initramfs mounts read-write (the
    // root with `rw` on this boot's command line, /usr when its fstab options say `rw`) and
    // whose fstab pass number is not 0. Mounted read-only (the usual), the root's own
    // systemd-fsck checks them, and a checker in the image (with the C library it brings) would
    // be megabytes loaded at every boot for nothing.
    let checked: Vec<&str> = match facts {
        None => Vec::new(),
        Some(x) => [("/", Some(&x.root)), ("/usr", x.usr.as_ref())]
            .into_iter()
            .filter_map(|(at, m)| Some((at, m?, leanrd_contract::fstab_entry(&x.fstab, at)?)))
            .filter(|(at, _, e)| {
                let rw = if *at == "/" {
                    x.cmdline.split_whitespace().rfind(|w| *w == "rw" || *w == "ro") == Some("rw")
                } else {
                    e.mntops.as_deref().is_some_and(|o| o.split(',').any(|x| x == "rw"))
                };
                rw && e.passno > 0
            })
            .map(|(_, m, _)| m.fstype.as_str())
            .collect(),
    };
    let mut warnings = Vec::new();
    let mut res = elf::Resolver::new(plan);
    for s in selected {
        let Some(prog) = &s.feature.fsck else { continue };
        let types: Vec<&String> =
            s.feature.fstypes.iter().filter(|t| facts.is_none() || checked.contains(&t.as_str())).collect();
        if types.is_empty() {
            continue;
        }
        match res.which(prog) {
            Some(path) => {
                res.add_binary(&path).with_context(|| format!("feature {}", s.feature.name))?;
                conf.fsck.extend(types.into_iter().map(|t| (t.clone(), prog.clone())));
            }
            None if facts.is_some() => warnings.push(format!(
                "feature {}: {prog} not found: a root or /usr mounted read-write (`rw`) will not be checked \
                 before it is mounted",
                s.feature.name
            )),
            None => {}
        }
    }
    Ok(warnings)
}

/// A mounted file system's device as the image will name it: by UUID when /dev/disk/by-uuid
/// had a link to its device (the facts' `by_uuid`), else as mountinfo gives its source.
fn device_ref(facts: &Facts, m: &Mount) -> Option<DeviceRef> {
    let name = Path::new(&m.source).file_name()?.to_string_lossy();
    facts.by_uuid.get(name.as_ref()).cloned().map(DeviceRef::Uuid).or_else(|| DeviceRef::parse(&m.source).ok())
}

/// The modules /init loads before it uses a capability: the feature's modules named one by
/// one (a glob over the module tree is for the image, not for loading all at once), those the
/// image has (a module some kernels lack is left out).
fn layer_modules(kernel: &Kernel, s: &Selected, universal: bool, set: &BTreeSet<String>) -> Vec<String> {
    let f = &s.feature;
    let extra = if universal { f.universal_modules.as_slice() } else { &[] };
    f.modules
        .iter()
        .chain(extra)
        .filter(|n| !n.contains('/'))
        .filter(|n| match kernel.db.paths.contains_key(&leanrd_kmod::normalize(n)) {
            true => set.contains(&leanrd_kmod::normalize(n)),
            false => match kernel.db.resolve(n) {
                Resolved::Modules(v) => v.iter().all(|x| set.contains(x)),
                Resolved::Builtin => true,
                Resolved::Missing => false,
            },
        })
        .cloned()
        .collect()
}

/// What /init is told: the kernel, the root this image was built for, what to load first,
/// and the capabilities the features turn on with the modules each needs.
pub(crate) fn init_config(
    r: &Request,
    kernel: &Kernel,
    selected: &[Selected],
    facts: Option<&Facts>,
    m: &Modules,
) -> InitConfig {
    let mut c = InitConfig {
        kver: Some(r.kver.clone()),
        load: m.load.clone(),
        tang_timeout: r.tang_timeout,
        exitrd: r.exitrd,
        umount_timeout: r.umount_timeout,
        ..InitConfig::default()
    };
    if let Some(x) = facts {
        c.mounts.root = x.root_source.clone().or_else(|| device_ref(x, &x.root).map(Root::Block));
        // A verified root is /dev/mapper/root, never its data partition's file system by UUID
        // (which would mount it unverified when the command line gives no roothash=): /init
        // sets it up from roothash= or the booted disk's verity-sig partition, and no root=
        // needs to be on a signed command line.
        if x.stack.contains(&crate::stack::StackLayer::Verity)
            && x.root.source.trim_start_matches("/dev/mapper/") == "root"
        {
            c.mounts.root = Some(Root::Block(DeviceRef::Mapper("root".into())));
        }
        if x.root_source.is_none() {
            c.mounts.rootfstype = Some(x.root.fstype.clone());
        }
        // A btrfs root in a subvolume (Debian's and Fedora's `@`, `root`): mounted as it is now
        // unless the command line says otherwise.
        if x.root.fstype == "btrfs" && x.root.fsroot != "/" {
            c.mounts.rootflags = Some(format!("subvol={}", x.root.fsroot.trim_start_matches('/')));
        }
        c.iscsi = x.iscsi.clone();
        c.iscsi_initiator = x.iscsi_initiator.clone();
        c.nvmf = x.nvmf.clone();
        c.nvmf_hostnqn = x.nvmf_hostnqn.clone();
        c.nvmf_hostid = x.nvmf_hostid.clone();
        if let Some(resume) = &x.resume {
            c.resume = Some(resume.device.clone());
            c.resume_offset = resume.offset;
        }
        // /usr on a block device (not a network or virtual file system).
        if let Some(u) = x.usr.as_ref().filter(|u| !leanrd_contract::NOT_BLOCK_FSTYPES.contains(&u.fstype.as_str())) {
            c.mounts.usr = device_ref(x, u);
            c.mounts.usrfstype = Some(u.fstype.clone());
        }
    }
    for s in selected {
        let Some(capability) = s.feature.init else { continue };
        let mut modules = layer_modules(kernel, s, r.universal, &m.set);
        if capability == leanrd_contract::Capability::Plymouth {
            modules.extend(display_modules(kernel, selected, facts, r.universal, &m.set));
        }
        c.layers.push(Layer { capability, modules });
    }
    c
}

/// What goes in of the display drivers' firmware: host-only, with the drm feature, only the
/// files the boot display's GPU loads ([`crate::gpu`]: of the files its driver tries in turn,
/// the first the sysroot has); a universal image, or one with drm-all (every DRM driver, for
/// any GPU), keeps every module's whole list.
fn display_firmware(r: &Request, selected: &[Selected], facts: Option<&Facts>) -> FirmwareFilter {
    let has = |name: &str| selected.iter().any(|s| s.feature.name == name);
    match facts {
        Some(x) if !r.universal && has("drm") && !has("drm-all") => {
            let present = |fw: &str| {
                ["", ".zst", ".xz"]
                    .iter()
                    .any(|ext| host_path(&r.sysroot, &format!("/lib/firmware/{fw}{ext}")).exists())
            };
            FirmwareFilter::for_displays(&x.display_gpus, &present)
        }
        _ => FirmwareFilter::default(),
    }
}

/// The display's drivers plymouthd waits for (the drm feature's): the host's display driver,
/// or in a universal image the virtual GPUs' (each binds only where its device is).
fn display_modules(
    kernel: &Kernel,
    selected: &[Selected],
    facts: Option<&Facts>,
    universal: bool,
    set: &BTreeSet<String>,
) -> Vec<String> {
    let mut v: Vec<String> = selected
        .iter()
        .filter(|s| s.feature.name == "drm")
        .flat_map(|s| layer_modules(kernel, s, universal, set))
        .collect();
    if let Some(x) = facts {
        v.extend(
            x.display_modules
                .iter()
                .filter(|a| match kernel.db.resolve(a) {
                    Resolved::Modules(m) => !m.is_empty() && m.iter().all(|x| set.contains(x)),
                    _ => false,
                })
                .cloned(),
        );
    }
    v
}

/// plymouth's files (see [`crate::plymouth`]), for the command line the image is built for.
/// Returns warnings; an error when plymouth was asked for (`required`) and cannot be resolved.
pub(crate) fn add_plymouth(plan: &mut Plan, sysroot: &Path, cmdline: &str, required: bool) -> Result<Vec<String>> {
    let s = match crate::plymouth::resolve(sysroot, cmdline) {
        Ok(s) => s,
        Err(e) if required => bail!("feature plymouth: {e}"),
        Err(e) => return Ok(vec![format!("feature plymouth: {e}; no splash")]),
    };
    let mut r = elf::Resolver::new(plan);
    for p in &s.elf {
        r.add_binary(p).with_context(|| format!("feature plymouth: {p}"))?;
    }
    for f in &s.files {
        plan.add_host_tree(f, 3).with_context(|| format!("feature plymouth: {f}"))?;
    }
    for (dest, src) in &s.fonts {
        let real = plan.add_host_path(src).with_context(|| format!("feature plymouth: {src}"))?;
        plan.put(dest, Item::Symlink { target: real });
    }
    let mut w = s.warnings;
    w.push(format!("plymouth: theme {} (from {})", s.theme, s.origin));
    Ok(w)
}

/// What the image needs to unlock its encrypted devices: the crypttab entries, their key
/// files and headers (private in the image: the image becomes private too), the keyboard
/// drivers loaded before the prompt, and the console keymap. Returns warnings.
fn add_crypt(
    plan: &mut Plan,
    tmp: &Path,
    kernel: &Kernel,
    console: &crate::keymap::ConsoleSetup,
    m: &Modules,
    crypt: CryptSelection,
    conf: &mut InitConfig,
) -> Vec<String> {
    let mut warnings = crypt.warnings;
    if let Some(s) = crypt.ssh {
        add_ssh(plan, s, conf);
    }
    for (dest, src) in crypt.files {
        plan.put(&dest, Item::File { src, mode: 0o600 });
    }
    conf.crypt = crypt.entries;
    // Keyboard drivers the image has, loaded with the LUKS layer (before the prompt).
    let keyboard: Vec<String> = crypt
        .before_prompt
        .into_iter()
        .filter(|a| match kernel.db.resolve(a) {
            Resolved::Modules(v) => v.iter().all(|x| m.set.contains(x)),
            _ => false,
        })
        .collect();
    if let Some(l) = conf.layers.iter_mut().find(|l| l.capability == leanrd_contract::Capability::Luks) {
        l.modules.extend(keyboard);
    }
    if let Some(w) = &console.keymap {
        match crate::keymap::compile(w, &tmp.join("keymaps")) {
            Ok(file) => {
                plan.put(
                    &format!("{}/{}.bmap", leanrd_contract::KEYMAP_DIR, w.name),
                    Item::File { src: file, mode: 0o644 },
                );
                conf.keymap = Some(w.name.clone());
            }
            Err(e) => warnings.push(format!(
                "keymap {} (from {}): {e}; a passphrase is read with the kernel's US keymap",
                w.name, w.origin
            )),
        }
    }
    warnings
}

/// Unlocking over SSH: the host keys (private: the image becomes private too), root's keys
/// with leanrd's restrictions, and root's shell the session program (a link to /init), the
/// only one /etc/shells lists: a session gets the prompt whatever it asks for.
fn add_ssh(plan: &mut Plan, s: crate::ssh::SshSelection, conf: &mut InitConfig) {
    use leanrd_contract::ssh::UNLOCK_PROGRAM;
    for (dest, src) in s.host_keys {
        plan.put(&dest, Item::File { src, mode: 0o600 });
    }
    plan.put("/root", Item::Dir { mode: 0o700 });
    plan.put("/root/.ssh", Item::Dir { mode: 0o700 });
    plan.put("/root/.ssh/authorized_keys", Item::Inline { data: s.authorized_keys.into_bytes(), mode: 0o600 });
    plan.put(UNLOCK_PROGRAM, Item::Symlink { target: "/init".into() });
    let passwd = format!("root:x:0:0:root:/root:{UNLOCK_PROGRAM}\n");
    plan.put("/etc/passwd", Item::Inline { data: passwd.into_bytes(), mode: 0o644 });
    plan.put("/etc/group", Item::Inline { data: b"root:x:0:\n".to_vec(), mode: 0o644 });
    plan.put("/etc/shells", Item::Inline { data: format!("{UNLOCK_PROGRAM}\n").into_bytes(), mode: 0o644 });
    conf.ssh_port = Some(s.port);
}

/// The main segment's plan.
// The stages' outputs, each its own argument (as `generate` has them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn main_plan(
    r: &Request,
    kernel: &Kernel,
    selected: &[Selected],
    facts: Option<&Facts>,
    config: &SystemConfig,
    m: &Modules,
    crypt: CryptSelection,
    cache: Option<&ModuleCache>,
) -> Result<(Plan, Vec<String>)> {
    let mut plan = Plan::new(&r.sysroot);
    plan.add_console();
    add_init(&mut plan, &r.init)?;
    let mut warnings = add_features(&mut plan, selected)?;
    if selected.iter().any(|s| s.feature.init == Some(leanrd_contract::Capability::Plymouth)) {
        let cmdline = facts.map(|f| f.cmdline.as_str()).unwrap_or_default();
        // Found on the host (`splash`), a splash that cannot be resolved is a warning: the
        // image boots without it. Asked for with --include, it is an error.
        let asked = r.include.iter().any(|i| i == "plymouth");
        warnings.extend(add_plymouth(&mut plan, &r.sysroot, cmdline, asked)?);
    }
    let modprobe = config.modprobe.for_modules(&m.set);
    let firmware = display_firmware(r, selected, facts);
    warnings.extend(kernel.add_to_plan(&mut plan, &m.set, &r.tmp, cache, &modprobe, r.threads, &firmware)?);
    let mut conf = init_config(r, kernel, selected, facts, m);
    if let (Some(_), Some(Root::Block(DeviceRef::Kernel(name)))) = (facts, &conf.mounts.root) {
        // No /dev/disk/by-uuid link for the root's device (udev has not named it yet, or the
        // file system has no UUID): another boot may give the name to another disk.
        warnings.push(format!(
            "the root is named /dev/{name}, a kernel name that may differ on the next boot: \
             /dev/disk/by-uuid has no link to it (has udev named the disks? `udevadm settle`)"
        ));
    }
    warnings.extend(add_checkers(&mut plan, selected, facts, &mut conf)?);
    if conf.layer(leanrd_contract::Capability::Luks).is_some() {
        warnings.extend(add_crypt(&mut plan, &r.tmp, kernel, &config.console, m, crypt, &mut conf));
    }
    // The font serves every prompt and the diagnosis, not only the passphrase's.
    warnings.extend(crate::font::add(&mut plan, &config.console, &mut conf));

    conf.options = modprobe.options;
    conf.blacklist = modprobe.blacklist;
    plan.put(CONFIG_PATH, Item::Inline { data: conf.encode().into_bytes(), mode: 0o644 });
    Ok((plan, warnings))
}

/// The CPU's microcode file name: Intel's `FF-MM-SS` (family, model, stepping in hex) under
/// intel-ucode/, AMD's family file under amd-ucode/ (one file before family 15h).
pub(crate) fn cpu_microcode(cpuinfo: &str) -> Option<(&'static str, String)> {
    let field = |k: &str| {
        cpuinfo
            .lines()
            .find(|l| l.split(':').next().is_some_and(|n| n.trim() == k))
            .map(|l| l.split(':').nth(1).unwrap_or("").trim())
    };
    let num = |k: &str| field(k).and_then(|v| v.parse::<u32>().ok());
    match field("vendor_id")? {
        "GenuineIntel" => {
            let (f, m, s) = (num("cpu family")?, num("model")?, num("stepping")?);
            Some(("GenuineIntel", format!("/lib/firmware/intel-ucode/{f:02x}-{m:02x}-{s:02x}")))
        }
        "AuthenticAMD" => {
            let f = num("cpu family")?;
            let file = if f >= 0x15 { format!("microcode_amd_fam{f:02x}h.bin") } else { "microcode_amd.bin".into() };
            Some(("AuthenticAMD", format!("/lib/firmware/amd-ucode/{file}")))
        }
        _ => None,
    }
}

/// The microcode files to bundle, by vendor: host-only (with `facts`), only this CPU's file
/// (none when the system has no file for it); universal, every file of both vendors.
fn microcode_files(r: &Request, facts: Option<&Facts>) -> Vec<(&'static str, Vec<PathBuf>)> {
    if let Some(x) = facts {
        return match &x.cpu_microcode {
            Some((vendor, f)) if host_path(&r.sysroot, f).is_file() => vec![(*vendor, vec![host_path(&r.sysroot, f)])],
            _ => Vec::new(),
        };
    }
    let mut out = Vec::new();
    for (vendor, dir) in [("GenuineIntel", "/lib/firmware/intel-ucode"), ("AuthenticAMD", "/lib/firmware/amd-ucode")] {
        let Ok(rd) = fs::read_dir(host_path(&r.sysroot, dir)) else { continue };
        let mut files: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
        if !files.is_empty() {
            out.push((vendor, files));
        }
    }
    out
}

/// The early microcode segment: the files [`microcode_files`] chose, concatenated per vendor
/// into the one file the kernel's early loader reads.
pub(crate) fn microcode(r: &Request, facts: Option<&Facts>) -> Result<Option<Plan>> {
    let mut plan = Plan::new(&r.sysroot);
    for (vendor, files) in microcode_files(r, facts) {
        let mut blob = Vec::new();
        for f in files {
            blob.extend(fs::read(&f).with_context(|| format!("{}: cannot read", f.display()))?);
        }
        let name = format!("{vendor}.bin");
        let dst = r.tmp.join(&name);
        fs::write(&dst, blob).with_context(|| format!("{}: cannot write", dst.display()))?;
        // The early loader wants exactly this name, without "./" and with no symlinks.
        plan.put(&format!("/kernel/x86/microcode/{name}"), Item::File { src: dst, mode: 0o644 });
    }
    Ok(if plan.items.is_empty() { None } else { Some(plan) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Settings;

    #[test]
    fn file_patterns_name_the_files_that_match() {
        let t = leanrd_testkit::TempDir::new("expand-files");
        let d = t.join("etc/multipath/conf.d");
        fs::create_dir_all(d.join("sub.conf")).unwrap();
        for n in ["b.conf", "a.conf", "a", "x.conf.bak"] {
            fs::write(d.join(n), "").unwrap();
        }
        assert_eq!(
            expand_files(t.path(), "/etc/multipath/conf.d/*.conf"),
            ["/etc/multipath/conf.d/a.conf", "/etc/multipath/conf.d/b.conf"]
        );
        assert_eq!(expand_files(t.path(), "/etc/multipath/conf.d/a*a"), Vec::<String>::new());
        assert_eq!(expand_files(t.path(), "/etc/multipath.conf"), ["/etc/multipath.conf"]);
        fs::write(t.path().join("etc/multipath.conf"), "defaults {\n\tfind_multipaths maybe\n}\n").unwrap();
        let p = multipath_conf_problems(t.path(), &["/etc/multipath.conf".to_string()]);
        assert_eq!(
            p,
            ["feature multipath: /etc/multipath.conf:2: find_multipaths maybe: no, yes, greedy, smart or strict \
              expected: /init will ignore this file at boot"]
        );
        assert!(expand_files(t.path(), "/etc/none/*.conf").is_empty());
    }

    #[test]
    fn the_cpu_names_its_microcode_file() {
        let intel = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 158\n\
                     model name\t: Intel(R) Core(TM) i7\nstepping\t: 10\n";
        assert_eq!(cpu_microcode(intel), Some(("GenuineIntel", "/lib/firmware/intel-ucode/06-9e-0a".into())));
        let amd = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 33\nstepping\t: 0\n";
        assert_eq!(
            cpu_microcode(amd),
            Some(("AuthenticAMD", "/lib/firmware/amd-ucode/microcode_amd_fam19h.bin".into()))
        );
        let old = "vendor_id\t: AuthenticAMD\ncpu family\t: 16\n";
        assert_eq!(cpu_microcode(old).unwrap().1, "/lib/firmware/amd-ucode/microcode_amd.bin");
        assert_eq!(cpu_microcode("vendor_id\t: HygonGenuine\n"), None);
    }

    #[test]
    fn host_only_takes_only_this_cpus_file() {
        let t = tempfile::tempdir().unwrap();
        let (sys, host) = (t.path().join("sys"), t.path().join("host"));
        let ucode = sys.join("lib/firmware/intel-ucode");
        fs::create_dir_all(&ucode).unwrap();
        for f in ["06-9e-0a", "06-9e-0b", "06-55-04"] {
            fs::write(ucode.join(f), f).unwrap();
        }
        let s = Settings {
            kver: Some("x".into()),
            sysroot: Some(sys.clone()),
            host_root: Some(host),
            init: Some(t.path().into()),
            ..Default::default()
        };
        let r = Request::new(s, t.path()).unwrap();
        // The host's /proc/cpuinfo, as the facts keep it.
        let cpuinfo = "vendor_id : GenuineIntel\ncpu family : 6\nmodel : 158\nstepping : 10\n";
        let facts = Facts { cpu_microcode: cpu_microcode(cpuinfo), ..Facts::default() };
        assert_eq!(microcode_files(&r, Some(&facts)), [("GenuineIntel", vec![ucode.join("06-9e-0a")])]);
        assert_eq!(microcode_files(&r, None)[0].1.len(), 3);
        fs::remove_file(ucode.join("06-9e-0a")).unwrap();
        assert!(microcode_files(&r, Some(&facts)).is_empty(), "no file for this CPU: no early segment");
    }

    /// A request whose sysroot and host root do not exist: whatever compose does with it
    /// comes from the facts it is given.
    fn nowhere(t: &Path) -> Request {
        let s = Settings {
            kver: Some("x".into()),
            sysroot: Some(t.join("gone/sys")),
            host_root: Some(t.join("gone/host")),
            init: Some(t.into()),
            ..Default::default()
        };
        Request::new(s, t).unwrap()
    }

    /// A kernel with no modules (its tables read from `t`, which is then free to go).
    fn empty_kernel(t: &Path) -> Kernel {
        fs::create_dir_all(t.join("k/lib/modules/x")).unwrap();
        fs::write(t.join("k/lib/modules/x/modules.dep"), "").unwrap();
        Kernel::load(&t.join("k"), "x").unwrap()
    }

    fn no_modules() -> Modules {
        Modules { set: BTreeSet::new(), load: Vec::new(), warnings: Vec::new(), notes: Vec::new() }
    }

    fn mount(at: &str, source: &str, fstype: &str) -> Mount {
        Mount {
            mountpoint: at.into(),
            source: source.into(),
            fstype: fstype.into(),
            fsroot: "/".into(),
            ..Mount::default()
        }
    }

    #[test]
    fn the_root_is_named_from_the_facts_by_uuid_links() {
        let t = tempfile::tempdir().unwrap();
        let (r, kernel) = (nowhere(t.path()), empty_kernel(t.path()));
        let facts = Facts {
            root: mount("/", "/dev/sda2", "ext4"),
            usr: Some(mount("/usr", "/dev/sda3", "xfs")),
            by_uuid: [("sda2".to_string(), "0a1b2c3d-1111-2222-3333-444455556666".to_string())].into(),
            ..Facts::default()
        };
        let c = init_config(&r, &kernel, &[], Some(&facts), &no_modules());
        assert_eq!(c.mounts.root, Some(Root::Block(DeviceRef::Uuid("0a1b2c3d-1111-2222-3333-444455556666".into()))));
        assert_eq!(c.mounts.rootfstype.as_deref(), Some("ext4"));
        assert_eq!(c.mounts.usr, DeviceRef::parse("/dev/sda3").ok(), "no link: as mountinfo names it");
        assert_eq!(c.mounts.usrfstype.as_deref(), Some("xfs"));
    }

    /// A verified root is /dev/mapper/root to /init: never its data's file system by UUID, which
    /// a boot without roothash= would mount unverified.
    #[test]
    fn a_verity_root_is_recorded_as_its_mapper_device() {
        let t = tempfile::tempdir().unwrap();
        let (r, kernel) = (nowhere(t.path()), empty_kernel(t.path()));
        let mut facts = Facts {
            root: mount("/", "/dev/mapper/root", "erofs"),
            by_uuid: [("root".to_string(), "0a1b2c3d-1111-2222-3333-444455556666".to_string())].into(),
            ..Facts::default()
        };
        facts.stack.insert(crate::stack::StackLayer::Verity);
        let c = init_config(&r, &kernel, &[], Some(&facts), &no_modules());
        assert_eq!(c.mounts.root, Some(Root::Block(DeviceRef::Mapper("root".into()))));
        facts.stack.clear();
        let c = init_config(&r, &kernel, &[], Some(&facts), &no_modules());
        assert_eq!(c.mounts.root, Some(Root::Block(DeviceRef::Uuid("0a1b2c3d-1111-2222-3333-444455556666".into()))));
    }

    #[test]
    fn the_checkers_follow_the_facts_command_line_and_fstab() {
        let t = tempfile::tempdir().unwrap();
        let r = nowhere(t.path());
        let feature = crate::features::Feature {
            name: "fs-ext4".into(),
            fstypes: vec!["ext4".into()],
            fsck: Some("no-such-fsck".into()),
            ..Default::default()
        };
        let selected = [Selected { feature, required: true }];
        let mut facts = Facts {
            root: mount("/", "/dev/sda2", "ext4"),
            fstab: "/dev/sda2 / ext4 defaults 0 1\n".into(),
            cmdline: "root=/dev/sda2 ro".into(),
            ..Facts::default()
        };
        let check = |facts: &Facts| {
            let mut plan = Plan::new(&r.sysroot);
            add_checkers(&mut plan, &selected, Some(facts), &mut InitConfig::default()).unwrap()
        };
        assert!(check(&facts).is_empty(), "read-only root: its own systemd-fsck checks it");
        facts.cmdline = "root=/dev/sda2 rw quiet".into();
        assert_eq!(check(&facts).len(), 1, "read-write root with pass 1: its checker is wanted");
        facts.fstab = "/dev/sda2 / ext4 defaults 0 0\n".into();
        assert!(check(&facts).is_empty(), "pass 0: never checked");
    }

    #[test]
    fn the_console_and_modprobe_d_come_from_the_facts() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path().join("sys");
        fs::create_dir_all(sys.join("etc/modprobe.d")).unwrap();
        fs::write(sys.join("etc/modprobe.d/a.conf"), "options dm_crypt x=1\noptions other y=2\nblacklist dm_crypt\n")
            .unwrap();
        fs::write(sys.join("etc/vconsole.conf"), "FONT=eurlatgr\n").unwrap();
        // Gathered once, then the files are gone: compose works from what was gathered.
        let config = crate::host::read_config(&sys, None).unwrap();
        fs::remove_dir_all(&sys).unwrap();
        let set: BTreeSet<String> = ["dm_crypt".to_string()].into();
        let m = config.modprobe.for_modules(&set);
        assert_eq!(m.options, [("dm_crypt".to_string(), "x=1".to_string())]);
        assert_eq!(m.blacklist, ["dm_crypt"]);

        let kernel = empty_kernel(t.path());
        let mut plan = Plan::new(&sys);
        let mut conf = InitConfig {
            layers: vec![Layer { capability: leanrd_contract::Capability::Luks, modules: Vec::new() }],
            ..InitConfig::default()
        };
        let w = add_crypt(
            &mut plan,
            t.path(),
            &kernel,
            &config.console,
            &no_modules(),
            CryptSelection::default(),
            &mut conf,
        );
        assert!(w.is_empty(), "{w:?}");
        // The font was looked for with the facts: not there, a warning saying where it was looked for.
        let w = crate::font::add(&mut plan, &config.console, &mut conf);
        let vconsole = sys.join("etc/vconsole.conf");
        assert_eq!(
            w,
            [format!(
                "console font (FONT=eurlatgr in {}): not in /usr/share/consolefonts, /usr/share/kbd/consolefonts, \
                 /usr/lib/kbd/consolefonts, /lib/kbd/consolefonts; the prompt uses the kernel's font",
                vconsole.display()
            )]
        );
        assert_eq!(conf.font, None);
        assert_eq!(conf.keymap, None, "no keymap set: the kernel's US keymap");
    }
}
