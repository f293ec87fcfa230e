//! `leanrd install-hooks`: make the distribution call leanrd when a kernel is installed or
//! removed — a kernel-install plugin and Debian's /etc/kernel/postinst.d and postrm.d hooks —
//! and, on Debian, stop update-initramfs from overwriting leanrd's images on package
//! triggers. `--remove` undoes all of it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use leanrd_archive::output::AtomicFile;

const HOOKS_EXAMPLES: &str = "\
Examples:
  sudo leanrd install-hooks                        kernel installs build leanrd images
  sudo leanrd install-hooks --remove               give image generation back
  leanrd install-hooks --dest pkgroot              the hook files only, for a package";

#[derive(Args)]
#[command(after_long_help = HOOKS_EXAMPLES)]
pub(crate) struct HooksArgs {
    /// Install into this root instead of / (the hooks then build for that root).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
    /// Remove the hooks and restore update-initramfs.
    #[arg(long)]
    remove: bool,
    /// Write the hook files under DIR, acting on / (to package them); update-initramfs is
    /// left alone (the package's maintainer scripts see to it).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["sysroot", "remove"])]
    dest: Option<PathBuf>,
    /// The leanrd the hooks run (default: this executable).
    #[arg(long, value_name = "FILE")]
    leanrd: Option<PathBuf>,
}

const MARK: &str = "# installed by `leanrd install-hooks`";

/// The kernel-install plugin. With `layout=uki` (kernel-install's environment, else
/// install.conf) it writes the UKI to $BOOT/EFI/Linux/ENTRY-TOKEN-KVER.efi (and removes it on
/// `remove`), unless `uki_generator=` names another tool; otherwise the initrd into the
/// staging area (systemd ≥ 251) or the entry directory, unless `initrd_generator=` names
/// another tool. The command line of a UKI is /etc/kernel/cmdline when there is one.
const KERNEL_INSTALL_PLUGIN: &str = r#"#!/bin/sh
@MARK@
command="$1" kver="$2" entry_dir="$3" image="$4"
[ -x '@LEANRD@' ] || exit 0
# A setting of kernel-install: its environment, else the last line of install.conf.
conf() {
  for f in '@ROOT@/etc/kernel/install.conf' '@ROOT@/usr/lib/kernel/install.conf'; do
    if [ -f "$f" ]; then sed -n "s/^$1=//p" "$f" | tail -n 1; return; fi
  done
}
layout=${KERNEL_INSTALL_LAYOUT:-$(conf layout)}
if [ "$layout" = uki ]; then
  gen=${KERNEL_INSTALL_UKI_GENERATOR:-$(conf uki_generator)}
  [ -z "$gen" ] || [ "$gen" = leanrd ] || exit 0
  token=${KERNEL_INSTALL_ENTRY_TOKEN:-$(cat '@ROOT@/etc/kernel/entry-token' 2>/dev/null || cat '@ROOT@/etc/machine-id')}
  boot=${KERNEL_INSTALL_BOOT_ROOT:-$(dirname "$(dirname "$entry_dir")")}
  out="$boot/EFI/Linux/$token-$kver.efi"
  case "$command" in
    remove) rm -f "$out"; exit 0 ;;
    add) ;;
    *) exit 0 ;;
  esac
  # systemd >= 254: its 90-uki-copy.install puts the staging area's uki.efi in place (with
  # boot counting) and refuses a kernel image without .efi when there is none.
  for d in '@ROOT@/etc/kernel/install.d' '@ROOT@/usr/lib/kernel/install.d'; do
    if [ -e "$d/90-uki-copy.install" ] || [ -L "$d/90-uki-copy.install" ]; then
      if [ -n "$KERNEL_INSTALL_STAGING_AREA" ] && [ "$(readlink -f "$d/90-uki-copy.install")" != /dev/null ]; then
        out="$KERNEL_INSTALL_STAGING_AREA/uki.efi"
      fi
      break
    fi
  done
  mkdir -p "$(dirname "$out")" || exit 1
  set --
  if [ -f '@ROOT@/etc/kernel/cmdline' ]; then set -- --cmdline-file '@ROOT@/etc/kernel/cmdline'; fi
  if [ -n "$image" ]; then set -- "$@" --linux "$image"; fi
  '@LEANRD@' build@SYSROOT@ --uki -k "$kver" -o "$out" "$@" && exit 0
  @KEPT@
fi
[ "$command" = add ] || exit 0
gen=${KERNEL_INSTALL_INITRD_GENERATOR:-$(conf initrd_generator)}
[ -z "$gen" ] || [ "$gen" = leanrd ] || exit 0
out="${KERNEL_INSTALL_STAGING_AREA:-$entry_dir}/initrd"
'@LEANRD@' build@SYSROOT@ -k "$kver" -o "$out" && exit 0
@KEPT@"#;
const KERNEL_INSTALL: &str = "usr/lib/kernel/install.d/50-leanrd.install";
const POSTINST: &str = "etc/kernel/postinst.d/zz-leanrd";
const POSTRM: &str = "etc/kernel/postrm.d/zz-leanrd";
const UPDATE_CONF: &str = "etc/initramfs-tools/update-initramfs.conf";

fn write_script(path: &Path, text: &str) -> Result<()> {
    fs::create_dir_all(path.parent().expect("has parent"))
        .with_context(|| format!("{}: cannot create", path.display()))?;
    let f = AtomicFile::create(path)?;
    std::io::Write::write_all(&mut f.file(), text.as_bytes())
        .with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(f.commit(0o755)?)
}

/// Remove a file only if leanrd wrote it.
fn remove_ours(path: &Path) -> Result<bool> {
    match fs::read_to_string(path) {
        Ok(t) if t.contains(MARK) => {
            fs::remove_file(path).with_context(|| format!("{}: cannot remove", path.display()))?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `--remove`: the hooks leanrd wrote, and initramfs-tools' setting restored.
fn remove(root: &Path, conf: &Path, saved: &Path) -> Result<()> {
    for p in [KERNEL_INSTALL, POSTINST, POSTRM] {
        if remove_ours(&root.join(p))? {
            outln!("removed {}", root.join(p).display());
        }
    }
    if saved.exists() {
        fs::rename(saved, conf).with_context(|| format!("{}: cannot restore", conf.display()))?;
        outln!("restored {}", conf.display());
    }
    Ok(())
}

/// Package triggers run `update-initramfs -u`, which would replace leanrd's image: turn them
/// off (the original file is kept and restored by --remove).
fn disable_update_initramfs(conf: &Path, saved: &Path) -> Result<()> {
    if !conf.exists() || saved.exists() {
        return Ok(());
    }
    let text = fs::read_to_string(conf).with_context(|| format!("{}: cannot read", conf.display()))?;
    fs::copy(conf, saved).with_context(|| format!("{}: cannot back up", conf.display()))?;
    let mut new: String =
        text.lines().filter(|l| !l.trim_start().starts_with("update_initramfs=")).map(|l| format!("{l}\n")).collect();
    new += &format!("{MARK}: leanrd builds the initramfs\nupdate_initramfs=no\n");
    fs::write(conf, new).with_context(|| format!("{}: cannot write", conf.display()))?;
    outln!("set update_initramfs=no in {}", conf.display());
    Ok(())
}

pub(crate) fn run(a: HooksArgs) -> Result<ExitCode> {
    let root = a.sysroot.clone().unwrap_or_else(|| PathBuf::from("/"));
    let conf = root.join(UPDATE_CONF);
    let saved = root.join(format!("{UPDATE_CONF}.leanrd-orig"));
    if a.remove {
        remove(&root, &conf, &saved)?;
        return Ok(ExitCode::SUCCESS);
    }
    let leanrd = match a.leanrd {
        Some(p) => p,
        None => std::env::current_exe().context("cannot find the leanrd executable")?,
    };
    let sysroot_arg = match &a.sysroot {
        Some(d) => format!(" --sysroot '{}'", d.display()),
        None => String::new(),
    };
    let boot = root.join("boot");
    let l = leanrd.display();
    // Where the files are written: the root they act on, or --dest.
    let root = a.dest.clone().unwrap_or(root);
    // When the build fails (the boot proof among the reasons) the image it would have replaced
    // is left as it was: say so where the package manager's output shows it, and fail, as
    // update-initramfs does, so that the kernel's installation reports the error.
    let kept = |out: &str| {
        format!(
            "echo \"leanrd: the initramfs for kernel $kver was not written; {out} was left as it was \
             (see the reason above; \\`leanrd build --force\\` writes it anyway)\" >&2\nexit 1\n"
        )
    };
    // kernel-install(8): COMMAND KERNEL_VERSION ENTRY_DIR_ABS KERNEL_IMAGE.
    let root_prefix = a.sysroot.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
    let plugin = KERNEL_INSTALL_PLUGIN
        .replace("@MARK@", MARK)
        .replace("@LEANRD@", &l.to_string())
        .replace("@ROOT@", &root_prefix)
        .replace("@SYSROOT@", &sysroot_arg)
        .replace("@KEPT@", &kept("$out"));
    write_script(&root.join(KERNEL_INSTALL), &plugin)?;
    // Debian: /etc/kernel/postinst.d hooks get KVER [IMAGE]; zz- runs after initramfs-tools.
    write_script(
        &root.join(POSTINST),
        &format!(
            "#!/bin/sh\n{MARK}\nkver=\"$1\"\n[ -n \"$kver\" ] && [ -x '{l}' ] || exit 0\n\
             out='{}'/initrd.img-\"$kver\"\n'{l}' build{sysroot_arg} -k \"$kver\" -o \"$out\" && exit 0\n{}",
            boot.display(),
            kept("$out")
        ),
    )?;
    write_script(
        &root.join(POSTRM),
        &format!(
            "#!/bin/sh\n{MARK}\nkver=\"$1\"\n[ -n \"$kver\" ] || exit 0\n\
             rm -f '{b}'/initrd.img-\"$kver\" '{b}'/initrd.img-\"$kver\".leanrd-digest\n",
            b = boot.display()
        ),
    )?;
    if a.dest.is_none() {
        disable_update_initramfs(&conf, &saved)?;
    }
    for p in [KERNEL_INSTALL, POSTINST, POSTRM] {
        outln!("installed {}", root.join(p).display());
    }
    Ok(ExitCode::SUCCESS)
}
