//! Encrypted roots as installers lay them out, booted under QEMU TCG with the real /init: a
//! GPT disk whose third partition is LUKS2 with ext4 inside, named by /etc/crypttab
//! (`sda3_crypt UUID=... none luks,discard`) and booted with `root=/dev/mapper/sda3_crypt`.
//! The passphrase is typed on QEMU's emulated keyboards (PS/2, and USB through xHCI) with
//! the monitor's `sendkey` — the physical keys, so a German keymap matters — with the VT as
//! the console and the serial line beside it for the log. Key files in the image and on a
//! second disk; a wrong passphrase then the right one; one passphrase for two containers;
//! TPM2. Each boot is a test of its own (`-- host_usb_de`).
//!
//! The LUKS disks are made in a prep VM (the host kernel has no device-mapper). Needs root,
//! qemu, sfdisk, mke2fs, cryptsetup, busybox-static, kbd and console-setup.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const MARK: &str = "LEANRD-LUKS-ROOT-OK";
const LUKS_UUID: &str = "0c0c0c0c-1111-4222-8333-444444444444";
const DATA_UUID: &str = "0d0d0d0d-1111-4222-8333-444444444444";
const ROOT_UUID: &str = "0e0e0e0e-1111-4222-8333-444444444444";
const KEYDISK_UUID: &str = "0f0f0f0f-1111-4222-8333-444444444444";
/// The installer's passphrase, and a second one a German user types.
const PASS: &str = "leanrd-test-passphrase";
const DE_PASS: &str = "Zyklop-öz42";

/// console-setup's Terminus 16x32 (console-setup-linux), the font of the German boots: as
/// setupcon caches it, for `FONTFACE="Terminus" FONTSIZE="16x32"`.
const TERMINUS: &str = "/usr/share/consolefonts/Uni2-Terminus32x16.psf.gz";
const FB_CONSOLE: &str = "Console: switching to colour frame buffer device 160x50";
const FONT_LOADED: &str = "console font Uni2-Terminus32x16: 16x32, 512 glyphs, Unicode table, on tty1";

/// A feature of the test's own: QEMU's standard VGA through bochs-drm, for a framebuffer
/// console (the VMs here start the kernel at its PVH entry, which leaves the VTs on the dummy
/// console). Its screen is 1280x800 (QEMU's EDID): the first VT is 160x50 in the kernel's 8x16
/// font, 80x25 in a 16x32 one.
const BOCHS: (&str, &str) =
    ("test-bochs", "description = \"QEMU's std VGA\"\nwhen = \"requested\"\nmodules = [\"bochs\"]\n");

fn tools_ok() -> bool {
    let need = ["sfdisk", "mke2fs", "cryptsetup", "loadkeys", "ckbcomp", "qemu-system-x86_64"];
    let files = ["/bin/busybox", TERMINUS];
    if !is_root() || files.iter().any(|f| !Path::new(f).exists()) || need.iter().any(|t| !have(t)) {
        skip::<()>(&format!("needs root, {files:?} and {need:?} (apt install kbd console-setup cryptsetup)"));
        return false;
    }
    true
}

/// What the root does before its marker when a third disk holds the tools (the signed-policy
/// test): it runs the initramfs's own cryptsetup and TPM2 token plugin (the image extracted
/// onto that disk) against the root's container with the same TPM and the same signature,
/// now that PCR 11 holds leave-initrd, and says how it went.
const UNSEAL: &str = "b=/bin/busybox\n\
    if $b grep -qw leanrd.test.unseal /proc/cmdline; then\n\
      $b mount -t ext4 -o ro /dev/vdc /tools && \\\n\
      for d in dev proc sys run; do $b mount --bind /$d /tools/$d; done\n\
      c=/usr/sbin/cryptsetup; [ -x /tools$c ] || c=/sbin/cryptsetup\n\
      $b echo ROOT-TOOLS $($b chroot /tools $c --version) > /dev/ttyS0\n\
      [ -e /run/systemd/tpm2-pcr-signature.json ] && $b echo ROOT-SIG-PRESENT > /dev/ttyS0\n\
      [ -e /dev/tpmrm0 ] && $b echo ROOT-TPM-PRESENT > /dev/ttyS0\n\
      $b chroot /tools $c open --test-passphrase --token-only /dev/vdb3 </dev/null >/dev/ttyS0 2>&1\n\
      $b echo ROOT-UNSEAL-RC=$? > /dev/ttyS0\n\
    fi\n";

/// The measurement log /init hands to the root (systemd's), between these marks on the
/// serial line.
const MLOG: &str = "/run/log/systemd/tpm2-measure.log";
const MLOG_MARK: &str = "LEANRD-MEASURE-LOG";

/// What the root shows of the TPM, when it has one: PCR 15 of each bank (`PCR15 BANK HEX`)
/// and the measurement log.
const PCRS: &str = "if [ -d /sys/class/tpm/tpm0 ]; then\n\
      for f in /sys/class/tpm/tpm0/pcr-*/15; do d=${f%/15}; $b echo \"PCR15 ${d##*pcr-} $($b cat $f)\" > /dev/ttyS0; done\n\
    fi\n";

/// `leanrd.test=kexec`: the way down into the next kernel, as `systemctl kexec` takes it. The
/// root loads the same kernel and image from the tools disk (/dev/vdb: kexec-tools, its
/// libraries, `vmlinuz`, `initrd.img`) with kexec_file_load, its own command line passed on with
/// `leanrd.test=kexeced` (and no `rd.break=shutdown`), then pivots into the exitrd as
/// systemd-shutdown does (systemd's docs/INITRD_INTERFACE.md: the old root at /oldroot,
/// `/shutdown kexec` as PID 1). The exitrd closes the LUKS root and jumps; the next kernel
/// unlocks it again and prints the marker.
const KEXEC: &str = "case \" $($b cat /proc/cmdline) \" in *' leanrd.test=kexec '*)\n\
      $b mount -t ext4 -o ro /dev/vdb /tools && \\\n\
      a=$($b sed -e 's/leanrd.test=kexec/leanrd.test=kexeced/' -e 's/rd.break=shutdown//' /proc/cmdline) && \\\n\
      /tools/lib/ld-linux-x86-64.so.2 --library-path /tools/lib /tools/kexec -s -l /tools/vmlinuz \\\n\
        --initrd=/tools/initrd.img --append=\"$a\" > /dev/ttyS0 2>&1 && $b echo LEANRD-KEXEC-LOADED > /dev/ttyS0\n\
      $b umount /tools\n\
      $b mkdir -p /run/initramfs/oldroot && $b mount -n --make-rprivate / && $b mount -n --bind /run/initramfs /run/initramfs\n\
      cd /run/initramfs && $b pivot_root . oldroot && exec /shutdown kexec ;;\n\
    esac\n";

/// The first VT's size as the root finds it (`VT-SIZE ROWS COLUMNS`): the console font /init
/// loaded sets it (fbcon fits the screen's rows and columns to the glyphs).
const VT_SIZE: &str = "$b echo \"VT-SIZE $($b stty size < /dev/tty1)\" > /dev/ttyS0\n";

/// The root: busybox, and an init that prints the marker on the console and on the serial
/// line (the console is the VT in most boots here), then powers off.
fn root_tree(t: &TempDir) -> PathBuf {
    // /tools: where the signed-policy test's tools disk is mounted (the root is read-only).
    let r = busybox_root(t, &["dev", "proc", "sys", "run", "tools", "etc"]);
    // An OS tree, as systemd's switch-root wants one (bench/unlock.py boots dracut's image).
    fs::write(r.join("etc/os-release"), "ID=leanrd-test\n").unwrap();
    let init = format!(
        "#!/bin/sh\n{UNSEAL}{PCRS}if [ -e {MLOG} ]; then $b echo {MLOG_MARK}-BEGIN; $b tr -d '\\036' < {MLOG}; \
         $b echo {MLOG_MARK}-END; fi > /dev/ttyS0\nm=\"{MARK} $(/bin/busybox cat /proc/uptime) $(/bin/busybox grep ' / ' /proc/mounts)\"\n\
         /bin/busybox echo \"$m\"\n/bin/busybox echo \"$m\" > /dev/ttyS0\n\
         /bin/busybox echo \"MAPPED $(/bin/busybox ls /dev/mapper | /bin/busybox tr '\\n' ' ')\" > /dev/ttyS0\n\
         /bin/busybox echo \"ADDRS [$(/bin/busybox ip -4 -o addr show scope global | /bin/busybox tr '\\n' ' ')]\" > /dev/ttyS0\n\
         /bin/busybox echo \"LISTEN [$(/bin/busybox netstat -ltn 2>/dev/null | /bin/busybox grep LISTEN | /bin/busybox tr '\\n' ' ')]\" > /dev/ttyS0\n\
         if [ -e /run/plymouth/pid ]; then p=$(/bin/busybox cat /run/plymouth/pid); \
           /bin/busybox echo \"PLYMOUTHD $p $(/bin/busybox cat /proc/$p/comm 2>&1)\" > /dev/ttyS0; fi\n\
         {VT_SIZE}{KEXEC}/bin/busybox poweroff -f\n"
    );
    fs::write(r.join("sbin/init"), init).unwrap();
    sh(&format!("chmod 755 {}", r.join("sbin/init").display()));
    r
}

/// Bytes as a printf(1) format of octal escapes (the prep VM's busybox printf).
fn octal(b: &[u8]) -> String {
    b.iter().map(|c| format!("\\{c:03o}")).collect()
}

/// The disks: a GPT disk (p1 an ESP, p2 LUKS2 for data, p3 LUKS2 holding the root), and an
/// ext4 disk holding /keys/root.key. The containers open with PASS, DE_PASS and the key file.
fn make_disks(t: &TempDir, kver: &str, key: &[u8]) -> Option<(PathBuf, PathBuf)> {
    let tree = root_tree(t);
    let disk = t.join("luks.disk");
    sh(&format!(
        "truncate -s 200M {d} && printf 'label: gpt\\nsize=8M\\nsize=40M\\n,\\n' | sfdisk -q {d}",
        d = disk.display()
    ));
    let keydir = t.join("keydisk-tree");
    fs::create_dir_all(keydir.join("keys")).unwrap();
    fs::write(keydir.join("keys/root.key"), key).unwrap();
    let keydisk = t.join("key.disk");
    sh(&format!(
        "truncate -s 16M {k} && mke2fs -q -t ext4 -U {KEYDISK_UUID} -L KEYS -d {d} {k}",
        k = keydisk.display(),
        d = keydir.display()
    ));
    let fmt = "--batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000";
    let add = "--batch-mode --pbkdf pbkdf2 --pbkdf-force-iterations 1000";
    let body = format!(
        "printf %s '{PASS}' > /tmp/pass && printf '{de}' > /tmp/de && printf '{k}' > /tmp/key && \
         $cryptsetup luksFormat {fmt} --uuid {LUKS_UUID} --key-file /tmp/pass /dev/vda3 && \
         $cryptsetup luksAddKey {add} --key-file /tmp/pass /dev/vda3 /tmp/de && \
         $cryptsetup luksAddKey {add} --key-file /tmp/pass /dev/vda3 /tmp/key && \
         $cryptsetup open --key-file /tmp/pass /dev/vda3 prep && \
         $mke2fs -q -t ext4 -U {ROOT_UUID} -d /roottree /dev/mapper/prep && $cryptsetup close prep && \
         $cryptsetup luksFormat {fmt} --uuid {DATA_UUID} --key-file /tmp/pass /dev/vda2 && \
         sync && echo PREP-DONE",
        de = octal(DE_PASS.as_bytes()),
        k = octal(key),
    );
    let modules =
        ["virtio_pci", "virtio_blk", "dm_mod", "dm_crypt", "xts", "aes_generic", "sha256_generic", "cbc", "ecb"];
    let prep = common::prep::image(t.path(), kver, &["cryptsetup", "mke2fs"], &modules, "vda3", &body, Some(&tree))?;
    let kernel = kernel()?;
    let drive = format!("file={},if=virtio,format=raw", disk.display());
    let log = qemu_boot(&kernel, &prep, "quiet", &["-drive", &drive], 300);
    assert!(log.contains("PREP-DONE"), "preparing the LUKS disk failed:\n{}", tail(&log));
    Some((disk, keydisk))
}

/// The kernel log's timestamp on the first line holding `what`.
fn stamp(log: &str, what: &str) -> Option<f64> {
    let l = log.lines().find(|l| l.contains(what))?;
    l.trim_start().strip_prefix('[')?.split(']').next()?.trim().parse().ok()
}

/// For bench/luks.py: seconds from the kernel's "Run /init" to the prompt and to the unlock.
fn timing(name: &str, log: &str) {
    let Some(t0) = stamp(log, "Run /init as init process") else { return };
    let mut line = format!("TIMING {name}");
    for (k, what) in [("prompt", "leanrd: asking for the passphrase"), ("unlocked", " unlocked as /dev/mapper/")] {
        if let Some(t) = stamp(log, what) {
            line += &format!(" {k}={:.3}", t - t0);
        }
    }
    eprintln!("{line}");
}

fn tail(s: &str) -> &str {
    let mut i = s.len().saturating_sub(6000);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// The QEMU key names for typing `text` on a keyboard whose keys carry `layout` ("us" or
/// "de"): what a user of that layout presses.
fn keys(text: &str, layout: &str) -> Vec<String> {
    let de = layout == "de";
    text.chars()
        .map(|c| {
            let lower = c.to_ascii_lowercase();
            let key = match lower {
                'y' if de => "z".to_string(),
                'z' if de => "y".to_string(),
                'a'..='z' | '0'..='9' => lower.to_string(),
                '-' if de => "slash".into(),
                '-' => "minus".into(),
                'ö' if de => "semicolon".into(),
                _ => panic!("no key for {c:?} on a {layout} keyboard"),
            };
            if c.is_ascii_uppercase() { format!("shift-{key}") } else { key }
        })
        .collect()
}

/// One keyboard boot: QEMU with its monitor on a socket; once the serial log shows every
/// `ready` text, type each (wait-for, text, layout) step's keys and Enter. Returns the serial
/// log.
struct Typing<'a> {
    image: &'a Path,
    append: String,
    qemu: Vec<String>,
    ready: Vec<&'static str>,
    steps: Vec<(&'static str, &'static str, &'static str)>,
    /// Where QEMU's `screendump` of the screen goes, taken when the first step's prompt shows
    /// (before anything is typed).
    dump: Option<PathBuf>,
}

fn boot_keyboard(kernel: &Path, t: &TempDir, tag: &str, b: &Typing) -> String {
    let sock = t.join(format!("{tag}.monitor"));
    let _slot = vm_slot();
    let mut child = Command::new("timeout")
        .args(["--signal=KILL", "300", "qemu-system-x86_64", "-accel", "tcg", "-m", "512", "-display", "none"])
        .args(["-serial", "stdio", "-no-reboot", "-nic", "none", "-monitor"])
        .arg(format!("unix:{},server,nowait", sock.display()))
        .arg("-kernel")
        .arg(leanrd_testkit::kernel_for(kernel, &b.qemu.iter().map(String::as_str).collect::<Vec<_>>()))
        .arg("-initrd")
        .arg(b.image)
        .args(["-append", &format!("console=ttyS0 console=tty1 panic=-1 leanrd.debug {}", b.append)])
        .args(&b.qemu)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut step = 0;
    let mut typed_at = 0; // the console's length when the last step was typed: wait for new text
    let mut monitor: Option<UnixStream> = None;
    watch(&mut child, Duration::from_secs(310), &mut |text| {
        if step < b.steps.len() {
            let (wait_for, pass, layout) = b.steps[step];
            let ready = b.ready.iter().all(|r| text.contains(r));
            if ready && text.get(typed_at..).is_some_and(|t| t.contains(wait_for)) {
                std::thread::sleep(Duration::from_millis(500));
                let m = monitor.get_or_insert_with(|| UnixStream::connect(&sock).unwrap());
                if step == 0
                    && let Some(d) = &b.dump
                {
                    // A splash draws a moment after the request: the prompt's frame settles.
                    std::thread::sleep(Duration::from_millis(1500));
                    m.write_all(format!("screendump {}\n", d.display()).as_bytes()).unwrap();
                    std::thread::sleep(Duration::from_millis(800));
                }
                // "raw": one chord as QEMU names it (alt-sysrq-i), no Return after it.
                let chord = [pass.to_string()];
                let typed = if layout == "raw" { chord.to_vec() } else { keys(pass, layout) };
                let ret = (layout != "raw").then(|| "ret".to_string());
                for k in typed.iter().chain(ret.iter()) {
                    m.write_all(format!("sendkey {k}\n").as_bytes()).unwrap();
                    std::thread::sleep(Duration::from_millis(60));
                }
                typed_at = text.len();
                step += 1;
            }
        }
    })
}

/// Read a VM's console (its standard output) until it ends or `limit` passes, giving `act` the
/// whole console so far after each read (and every 200 ms); the console, once the VM is done.
fn watch(child: &mut std::process::Child, limit: Duration, act: &mut dyn FnMut(&str)) -> String {
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    let start = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(b) => log.extend(b),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
        act(&String::from_utf8_lossy(&log));
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
    }
    let _ = child.wait();
    String::from_utf8_lossy(&log).into_owned()
}

fn build(kver: &str, init: &Path, sysroot: &Path, host: Option<&Fixture>, out: &Path) -> String {
    build_with(kver, init, sysroot, host, out, &[])
}

/// [`build`] with more arguments.
fn build_with(kver: &str, init: &Path, sysroot: &Path, host: Option<&Fixture>, out: &Path, args: &[&str]) -> String {
    let mut c = leanrd();
    c.args(["build", "-k", kver, "--init"]).arg(init).arg("--sysroot").arg(sysroot).arg("-o").arg(out).args(args);
    match host {
        Some(f) => c.arg("--host-root").arg(&f.root),
        None => c.arg("--universal"),
    };
    let o = c.output().unwrap();
    assert!(o.status.success(), "leanrd build: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// What the boots share, made once per process by the first test that needs it.
struct Setup {
    t: TempDir,
    kernel: PathBuf,
    init: PathBuf,
    kver: String,
    disk: PathBuf,
    keydisk: PathBuf,
    univ: PathBuf,
    univ_plain: PathBuf,
    hosted: PathBuf,
    keyed: PathBuf,
    keyed_disk: PathBuf,
    /// The fixture host the host-only images are built for.
    host: Fixture,
}

fn setup() -> Option<&'static Setup> {
    static S: std::sync::OnceLock<Result<Option<Setup>, String>> = std::sync::OnceLock::new();
    once(&S, make_setup).as_ref()
}

fn make_setup() -> Option<Setup> {
    if !tools_ok() {
        return None;
    }
    let kernel = kernel()?;
    let init = init_binary()?;
    let kver = kver_of(&kernel);
    let t = TempDir::new("bootluks");
    let key = noise(13, 64);
    let (disk, keydisk) = make_disks(&t, &kver, &key)?;

    let tab = format!(
        "# <target name> <source device> <key file> <options>\nsda3_crypt UUID={LUKS_UUID} none luks,discard\n"
    );
    let tab_all = format!("{tab}sda2_crypt UUID={DATA_UUID} none luks\n");
    let de = ("vconsole.conf", b"KEYMAP=de\n".as_slice(), 0o644);
    // The German boots' console font, as console-setup sets it and setupcon caches it.
    let cs = b"CHARMAP=\"UTF-8\"\nCODESET=\"guess\"\nFONTFACE=\"Terminus\"\nFONTSIZE=\"16x32\"\n";
    let terminus = fs::read(TERMINUS).unwrap();
    let font = [
        ("default/console-setup", cs.as_slice(), 0o644),
        ("console-setup/cached_Uni2-Terminus32x16.psf.gz", &terminus, 0o644),
    ];
    let sr_de = host_sysroot(&t, "sr-de", &[&[("crypttab", tab_all.as_bytes(), 0o644), de][..], &font].concat());
    let sr_plain = host_sysroot(&t, "sr-plain", &[("crypttab", tab.as_bytes(), 0o644)]);
    let keytab = format!("sda3_crypt UUID={LUKS_UUID} /etc/keys/root.key luks,discard\n");
    let sr_key = host_sysroot(&t, "sr-key", &[("crypttab", keytab.as_bytes(), 0o644), ("keys/root.key", &key, 0o600)]);
    let disktab = format!("sda3_crypt UUID={LUKS_UUID} /keys/root.key:UUID={KEYDISK_UUID} luks,keyfile-timeout=20\n");
    let sr_keydisk = host_sysroot(&t, "sr-keydisk", &[("crypttab", disktab.as_bytes(), 0o644)]);

    let host = keyboard_host(&t, Some(LUKS_UUID));
    // The universal images have a framebuffer console ([`BOCHS`]).
    let features = t.join("features");
    fs::create_dir_all(&features).unwrap();
    fs::write(features.join(format!("{}.toml", BOCHS.0)), BOCHS.1).unwrap();
    let fb = ["--features-dir", features.to_str().unwrap(), "--include", BOCHS.0];
    let univ = t.join("universal.img");
    build_with(&kver, &init, &sr_de, None, &univ, &fb);
    let univ_plain = t.join("universal-plain.img");
    build_with(&kver, &init, &sr_plain, None, &univ_plain, &fb);
    let hosted = t.join("host.img");
    let warnings = build(&kver, &init, &sr_de, Some(&host), &hosted);
    assert!(!warnings.contains("keymap"), "{warnings}");
    let keyed = t.join("host-key.img");
    build(&kver, &init, &sr_key, Some(&host), &keyed);
    let keyed_disk = t.join("host-keydisk.img");
    let w = build(&kver, &init, &sr_keydisk, Some(&host), &keyed_disk);
    assert!(w.contains("is not plugged in"), "the key disk is not on the fixture host: {w}");
    Some(Setup { t, kernel, init, kver, disk, keydisk, univ, univ_plain, hosted, keyed, keyed_disk, host })
}

/// Debian 13's kernel (6.12: `.ko.xz` modules, no `CONFIG_IP_PNP`), for the network unlocks:
/// this machine's userspace with that kernel's modules, as a Debian 12 system running the
/// 6.12 kernel of its backports has them.
struct Trixie {
    kernel: PathBuf,
    kver: String,
    modules: PathBuf,
}

fn trixie() -> Option<&'static Trixie> {
    static S: std::sync::OnceLock<Result<Option<Trixie>, String>> = std::sync::OnceLock::new();
    once(&S, || {
        let root = debian_suite_root("trixie", "")?;
        let kernel = root_kernel(&root);
        let kver = kver_of(&kernel);
        Some(Trixie { modules: root.join("usr/lib/modules").join(&kver), kernel, kver })
    })
    .as_ref()
}

/// `sr` (a [`host_sysroot`]) with Debian 13's kernel modules beside the machine's own.
fn with_trixie_modules(sr: &Path, d13: &Trixie) {
    let to = sr.join("usr/lib/modules").join(&d13.kver);
    if !to.exists() {
        sh(&format!("cp -al {} {} 2>/dev/null || cp -a {0} {1}", d13.modules.display(), to.display()));
    }
}

const PS2: &str = "input: AT Translated Set 2 keyboard";
const USBKBD: &str = "input: QEMU QEMU USB Keyboard";
const ROOT: &str = "root=/dev/mapper/sda3_crypt";

/// One boot: keys typed on the VT, or none.
enum Boot<'a> {
    Typed(Typing<'a>),
    Quiet(&'a Path, String, Vec<String>),
}

/// The boots, each a test: its name, how it boots, what its serial log must show.
const BOOTS: &[(&str, &[&str])] = &[
    // The Debian installer's layout, universal image, PS/2 keyboard on the VT; a German keymap
    // from vconsole.conf, so the German keys are pressed; console-setup's Terminus 16x32 loaded
    // before the prompt on the framebuffer console, and the root finds the VT 80x25 (160x50
    // without it: below).
    (
        "universal_ps2_de",
        &[
            FB_CONSOLE,
            FONT_LOADED,
            "keymap de loaded",
            "unlocked as /dev/mapper/sda3_crypt with the passphrase typed",
            MARK,
            "VT-SIZE 25 80",
        ],
    ),
    // Host-only, the USB keyboard (PS/2 off): its drivers were found in /sys/class/input. No
    // display driver: the VTs are on the dummy console, and the font is not loaded.
    (
        "host_usb_de",
        &[
            "console font Uni2-Terminus32x16: no framebuffer or text console yet; not loaded",
            "keymap de loaded",
            "unlocked as /dev/mapper/sda3_crypt with the passphrase typed",
            MARK,
        ],
    ),
    // No keymap: the German keys do not give the German passphrase (wrong, and asked again);
    // then the installer's passphrase opens it.
    (
        "universal_no_keymap",
        &[
            "wrong passphrase for sda3_crypt (2 left)",
            "unlocked as /dev/mapper/sda3_crypt with the passphrase typed",
            MARK,
            // The same framebuffer console without a font from the image: the kernel's 8x16.
            "VT-SIZE 50 160",
        ],
    ),
    // Root by the UUID of the file system inside: every container is opened, the passphrase
    // asked once and tried on the other (the installer's, which both take).
    (
        "universal_one_passphrase",
        &["with the passphrase typed", "with the passphrase already given", "sda2_crypt", "sda3_crypt", MARK],
    ),
    // A fault: the passphrase typed wrong until the tries (crypttab's default, 3) run out: the
    // container is given up and the diagnosis says so, within the boot's time.
    (
        "universal_wrong_until_the_tries_run_out",
        &[
            "wrong passphrase for sda3_crypt (2 left)",
            "wrong passphrase for sda3_crypt (1 left)",
            "wrong passphrase, 3 tries",
            "leanrd: cannot boot: ",
        ],
    ),
    ("host_keyfile", &["unlocked as /dev/mapper/sda3_crypt with key file /etc/keys/root.key", MARK]),
    ("host_keydisk", &["unlocked as /dev/mapper/sda3_crypt with key file /keys/root.key on /dev/vdb", MARK]),
];

fn boot_of<'a>(s: &'a Setup, name: &str) -> Boot<'a> {
    let virtio = |extra: &[&Path]| -> Vec<String> {
        // snapshot=on: the boots share the disks; nothing written is kept.
        let mut v = vec!["-drive".to_string(), format!("file={},if=virtio,format=raw,snapshot=on", s.disk.display())];
        for d in extra {
            v.extend(["-drive".to_string(), format!("file={},if=virtio,format=raw,snapshot=on", d.display())]);
        }
        v
    };
    let usb = |mut v: Vec<String>| {
        v.extend(["-device", "qemu-xhci", "-device", "usb-kbd"].map(String::from));
        v
    };
    let typed = |image, append: String, qemu, ready, steps| {
        Boot::Typed(Typing { image, append, qemu, ready, steps, dump: None })
    };
    let de = ("Enter passphrase for sda3_crypt", DE_PASS, "de");
    match name {
        "universal_ps2_de" => typed(&s.univ, ROOT.into(), virtio(&[]), vec![PS2], vec![de]),
        "host_usb_de" => typed(&s.hosted, format!("{ROOT} i8042.nokbd"), usb(virtio(&[])), vec![USBKBD], vec![de]),
        "universal_no_keymap" => typed(
            &s.univ_plain,
            ROOT.into(),
            virtio(&[]),
            vec![PS2],
            vec![de, ("Enter passphrase for sda3_crypt", PASS, "us")],
        ),
        "universal_one_passphrase" => typed(
            &s.univ,
            format!("root=UUID={ROOT_UUID}"),
            virtio(&[]),
            vec![PS2],
            vec![("Enter passphrase for", PASS, "de")],
        ),
        "universal_wrong_until_the_tries_run_out" => {
            let wrong = ("Enter passphrase for sda3_crypt", "not-the-passphrase", "us");
            typed(&s.univ_plain, format!("{ROOT} leanrd.timeout=10"), virtio(&[]), vec![PS2], vec![wrong, wrong, wrong])
        }
        "host_keyfile" => Boot::Quiet(&s.keyed, ROOT.into(), virtio(&[])),
        "host_keydisk" => Boot::Quiet(&s.keyed_disk, ROOT.into(), virtio(&[&s.keydisk])),
        other => panic!("no boot {other}"),
    }
}

fn boot_one(name: &str, want: &[&str]) -> Result<(), String> {
    let Some(s) = setup() else { return Ok(()) };
    let log = match boot_of(s, name) {
        Boot::Typed(b) => boot_keyboard(&s.kernel, &s.t, name, &b),
        Boot::Quiet(img, append, q) => {
            let q: Vec<&str> = q.iter().map(String::as_str).collect();
            let append = format!("console=tty1 console=ttyS0 leanrd.debug {append}");
            qemu_boot(&s.kernel, img, &append, &q, 240)
        }
    };
    if let Some(l) = log.lines().find(|l| l.contains(MARK)) {
        eprintln!("{name}: {}", l.trim());
    }
    timing(name, &log);
    let missing: Vec<&&str> = want.iter().filter(|w| !log.contains(**w)).collect();
    if missing.is_empty() { Ok(()) } else { Err(format!("{name}: missing {missing:?}\n{}", tail(&log))) }
}

/// The image holding a key file is private; the others are as any image.
fn key_file_image_is_private() {
    let Some(s) = setup() else { return };
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(fs::metadata(&s.keyed).unwrap().permissions().mode() & 0o777, 0o600);
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&s.keyed))).unwrap();
    assert!(ls.contains("etc/keys/root.key"), "{ls}");
}

fn main() -> std::process::ExitCode {
    let mut trials: Vec<Trial> = BOOTS.iter().map(|(name, want)| test(*name, move || boot_one(name, want))).collect();
    trials.push(test("key_file_image_is_private", || {
        key_file_image_is_private();
        Ok(())
    }));
    trials.push(test("tpm2_signed_policy_unlocks_with_the_ukis_signature", || {
        if let Some(s) = setup() {
            tpm2_signed(s)
        }
        Ok(())
    }));
    trials.push(test("tpm2_pin_asked_on_the_consoles_and_a_wrong_one_refused", || {
        if let Some(s) = setup() {
            tpm2_pin(s)
        }
        Ok(())
    }));
    for (name, want) in TANG_BOOTS {
        trials.push(test(*name, move || tang_boot(name, want)));
    }
    trials.push(test("ssh_host_keys_kept_across_rebuilds_and_the_image_private", || {
        if let Some(s) = ssh_setup() {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&s.image).unwrap().permissions().mode() & 0o777, 0o600);
            let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&s.image))).unwrap();
            for f in ["etc/leanrd/ssh/dropbear_ed25519_host_key", "root/.ssh/authorized_keys", "usr/sbin/dropbear"] {
                assert!(ls.contains(f), "{f} not in the image:\n{ls}");
            }
        }
        Ok(())
    }));
    trials.push(test("ssh_unlocks_from_a_script_and_refuses_keys_passwords_and_shells_debian13_kernel", ssh_boot));
    trials.push(test("ssh_flooded_the_console_prompt_still_unlocks", ssh_flood_boot));
    trials.push(test("kexec_from_the_luks_root_after_a_shell_at_rd_break_shutdown", kexec_boot));
    trials.push(test("plymouth_splash_asks_the_german_passphrase_and_stays_into_the_root", plymouth_boots));
    trials.push(test("bench_unlock", bench_unlock).with_ignored_flag(true));
    trials.push(test("tpm2_unseals_and_refuses_a_changed_pcr", || {
        if let Some(s) = setup() {
            tpm2(&s.kernel, &s.t, &s.kver, &s.init, &s.disk)
        }
        Ok(())
    }));
    run_tests(trials, cores())
}

/// Pixels of a QEMU `screendump` (binary PPM) brighter than the background (any channel over
/// 48) in a box given as fractions of the width and height: (x0, y0, x1, y1).
fn lit(ppm: &Path, b: (f64, f64, f64, f64)) -> Result<usize, String> {
    let d = fs::read(ppm).map_err(|e| format!("{}: {e}", ppm.display()))?;
    let mut fields = Vec::new();
    let mut i = 0;
    while fields.len() < 4 {
        while d.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        let j = i + d[i..].iter().position(|c| c.is_ascii_whitespace()).ok_or("a short PPM")?;
        fields.push(String::from_utf8_lossy(&d[i..j]).into_owned());
        i = j;
    }
    let px = &d[i + 1..];
    let (w, h): (usize, usize) = (fields[1].parse().map_err(|_| "width")?, fields[2].parse().map_err(|_| "height")?);
    if fields[0] != "P6" || px.len() < w * h * 3 {
        return Err(format!("{}: not a {w}x{h} P6 frame", ppm.display()));
    }
    let (x0, y0, x1, y1) =
        ((b.0 * w as f64) as usize, (b.1 * h as f64) as usize, (b.2 * w as f64) as usize, (b.3 * h as f64) as usize);
    Ok((y0..y1)
        .flat_map(|y| (x0..x1).map(move |x| (y * w + x) * 3))
        .filter(|&o| px[o..o + 3].iter().any(|&c| c > 48))
        .count())
}

/// plymouth's splash (issue 54) on Debian 13's kernel, the image from a Debian 13 root with
/// plymouth and plymouth-themes (`spinner` set in plymouthd.conf, as plymouth-set-default-theme
/// sets it) and the German keymap, `--include plymouth`, std VGA (bochs-drm), the splash's boot
/// under OVMF. With `quiet
/// splash`: the screen at the passphrase prompt shows the theme, not the text console (its
/// top-left third unlit, the spinner lit), compared with the same boot without `splash`
/// (the prompt's text there); a wrong passphrase then the German one are typed on the PS/2
/// keyboard into plymouth (the VT is plymouthd's: /init reads only the serial console then),
/// and the root finds plymouthd still running (told the new root before the switch). Then
/// plymouthd killed at the prompt (SysRq-I): the VT comes back and the passphrase typed there
/// unlocks.
fn plymouth_boots() -> Result<(), String> {
    let Some(s) = setup() else { return Ok(()) };
    let Some(root) = debian_suite_root("trixie", "plymouth") else { return Ok(()) };
    let kernel = root_kernel(&root);
    let kver = kver_of(&kernel);
    let sr = plymouth_sysroot(&s.t, &root, "sr-plymouth", &format!("sda3_crypt UUID={LUKS_UUID} none luks,discard\n"));
    let image = s.t.join("plymouth.img");
    let mut c = leanrd();
    c.args(["build", "-k", &kver, "--universal", "--include", "plymouth", "--init"]).arg(&s.init);
    c.arg("--sysroot").arg(&sr).arg("-o").arg(&image);
    let out = c.output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() || !said.contains("plymouth: theme spinner (from /etc/plymouth/plymouthd.conf)") {
        return Err(format!("leanrd build --include plymouth: {said}"));
    }
    let disk = vec!["-drive".to_string(), format!("file={},if=virtio,format=raw,snapshot=on", s.disk.display())];
    let prompt = "Enter passphrase for sda3_crypt";
    // The frames are kept beside the consoles (target/boot-logs), for a look.
    let frame = |n: &str| leanrd_testkit::boot::console_path(&format!("luks-{n}")).with_extension("ppm");
    let (shot, plain_shot) = (frame("plymouth-splash"), frame("plymouth-off"));
    // The splash's boot under UEFI (OVMF, the kernel started at its EFI stub): the firmware's
    // framebuffer (simpledrm or efifb) is there first, then bochs-drm takes the display over.
    let vars = s.t.join("plymouth.vars");
    fs::copy(leanrd_testkit::OVMF_VARS, &vars).unwrap();
    let mut uefi = disk.clone();
    uefi.extend([
        "-drive".into(),
        format!("if=pflash,format=raw,readonly=on,file={}", leanrd_testkit::OVMF_CODE),
        "-drive".into(),
        format!("if=pflash,format=raw,file={}", vars.display()),
    ]);
    let splash = boot_keyboard(
        &kernel,
        &s.t,
        "plymouth",
        &Typing {
            image: &image,
            // `loglevel=7` after `quiet`: the serial console still gets the kernel log read here.
            append: format!("{ROOT} quiet splash plymouth.ignore-serial-consoles loglevel=7"),
            qemu: uefi,
            ready: vec![PS2, "plymouth: the splash is up"],
            steps: vec![(prompt, "wrongpassphrase", "de"), (prompt, DE_PASS, "de")],
            dump: Some(shot.clone()),
        },
    );
    let splash = keep("plymouth-splash", splash);
    timing("plymouth", &splash);
    expect_all(
        "plymouth",
        &splash,
        &[
            "plymouth: the splash is up on /dev/dri/card0",
            FONT_LOADED,
            "keymap de loaded",
            "wrong passphrase for sda3_crypt (2 left)",
            "unlocked as /dev/mapper/sda3_crypt with the passphrase typed on plymouth's splash",
            "plymouth: plymouthd told the new root",
            "PLYMOUTHD ",
            "VT-SIZE 25 80",
            MARK,
        ],
    );
    let pid_line = splash.lines().find(|l| l.starts_with("PLYMOUTHD ")).unwrap_or_default();
    if !pid_line.ends_with(" plymouthd") {
        return Err(format!("the root does not find plymouthd running: {pid_line}"));
    }
    // plymouthd killed at the prompt (SysRq-I: SIGKILL to every process but /init): the
    // consoles take over, the VT back in text mode with its keyboard on, and the German
    // passphrase typed there unlocks.
    let killed = boot_keyboard(
        &kernel,
        &s.t,
        "plymouth-killed",
        &Typing {
            image: &image,
            append: format!("{ROOT} quiet splash plymouth.ignore-serial-consoles loglevel=7 sysrq_always_enabled"),
            qemu: disk.clone(),
            ready: vec![PS2, "plymouth: the splash is up"],
            steps: vec![(prompt, "alt-sysrq-i", "raw"), ("plymouthd is gone; the consoles take over", DE_PASS, "de")],
            dump: None,
        },
    );
    let killed = keep("plymouth-killed", killed);
    expect_all(
        "plymouthd killed",
        &killed,
        &[
            "sysrq: Kill All Tasks",
            "leanrd: plymouth: plymouthd is gone; the consoles take over",
            "unlocked as /dev/mapper/sda3_crypt with the passphrase typed on tty1 (plymouthd gone)",
            MARK,
        ],
    );
    let plain = boot_keyboard(
        &kernel,
        &s.t,
        "plymouth-off",
        &Typing {
            image: &image,
            append: ROOT.into(),
            qemu: disk,
            ready: vec![PS2],
            steps: vec![(prompt, DE_PASS, "de")],
            dump: Some(plain_shot.clone()),
        },
    );
    let plain = keep("plymouth-off", plain);
    expect_all("no splash", &plain, &["unlocked as /dev/mapper/sda3_crypt with the passphrase typed", MARK]);
    if plain.contains("plymouth: the splash is up")
        || plain.contains("PLYMOUTHD ")
        || plain.contains("on plymouth's splash")
    {
        return Err("plymouthd ran without `splash`".into());
    }
    // The frames: the splash's top-left third is unlit and its password dialog (two-step's:
    // the entry, the prompt's text and the keyboard layout, 38 % down) lit; the text
    // console's top-left third holds the log and the prompt.
    let (text_box, dialog_box) = ((0.0, 0.0, 0.5, 0.33), (0.3, 0.3, 0.7, 0.5));
    let (s_text, s_dialog) = (lit(&shot, text_box)?, lit(&shot, dialog_box)?);
    let (p_text, p_dialog) = (lit(&plain_shot, text_box)?, lit(&plain_shot, dialog_box)?);
    println!(
        "plymouth: lit pixels at the prompt: splash {s_text} top-left, {s_dialog} at the dialog; \
         no splash {p_text} top-left, {p_dialog} at the dialog"
    );
    if s_text != 0 || s_dialog < 500 || p_text < 200 || p_dialog > s_dialog / 4 {
        return Err(format!(
            "the splash's frame is not the theme's (top-left {s_text}, dialog {s_dialog}; the console's top-left \
             {p_text}, dialog {p_dialog})"
        ));
    }
    Ok(())
}

/// A sysroot of the Debian 13 plymouth root: its /usr (hard links: read, never written) with an
/// /etc of the test's: `crypttab`, KEYMAP=de, the spinner theme, Terminus 16x32.
fn plymouth_sysroot(t: &TempDir, root: &Path, name: &str, crypttab: &str) -> PathBuf {
    let sr = t.join(name);
    fs::create_dir_all(sr.join("etc/plymouth")).unwrap();
    sh(&format!("cp -al {}/usr {}/usr", root.display(), sr.display()));
    for (l, target) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        std::os::unix::fs::symlink(target, sr.join(l)).unwrap();
    }
    fs::copy(root.join("etc/ld.so.cache"), sr.join("etc/ld.so.cache")).unwrap();
    fs::copy(root.join("usr/lib/os-release"), sr.join("etc/os-release")).unwrap();
    fs::write(sr.join("etc/crypttab"), crypttab).unwrap();
    fs::write(sr.join("etc/vconsole.conf"), "KEYMAP=de\n").unwrap();
    fs::write(sr.join("etc/plymouth/plymouthd.conf"), "[Daemon]\nTheme=spinner\n").unwrap();
    // The console font (the root's console-setup-linux has it): loaded before plymouthd takes
    // the VT, for the console it gives back.
    fs::create_dir_all(sr.join("etc/default")).unwrap();
    fs::write(sr.join("etc/default/console-setup"), "CHARMAP=\"UTF-8\"\nFONTFACE=\"Terminus\"\nFONTSIZE=\"16x32\"\n")
        .unwrap();
    sr
}

/// kexec from the LUKS root (the key file in the image), with `rd.break=shutdown`: systemd's
/// way into the next kernel ([`KEXEC`]). On the way down the exitrd stops in the image's
/// busybox (`--include rescue`), where the test types on the serial console what it sees; the
/// shell left, it closes the LUKS mapping (its key wiped) and calls reboot(2) with
/// LINUX_REBOOT_CMD_KEXEC. The same kernel and image boot again, unlock the root again and reach
/// its init. Needs kexec-tools.
fn kexec_boot() -> Result<(), String> {
    let Some(s) = setup() else { return Ok(()) };
    if !have("kexec") {
        skip::<()>("needs kexec (apt install kexec-tools)");
        return Ok(());
    }
    let key = noise(13, 64);
    let keytab = format!("sda3_crypt UUID={LUKS_UUID} /etc/keys/root.key luks,discard\n");
    let sr =
        host_sysroot(&s.t, "sr-key-rescue", &[("crypttab", keytab.as_bytes(), 0o644), ("keys/root.key", &key, 0o600)]);
    let image = s.t.join("host-key-rescue.img");
    let mut c = leanrd();
    c.args(["build", "-k", &s.kver, "--include", "rescue", "--init"]).arg(&s.init);
    c.arg("--sysroot").arg(&sr).arg("--host-root").arg(&s.host.root).arg("-o").arg(&image);
    ok(&mut c);
    // The tools disk: kexec-tools with the libraries it links, and what it loads.
    let tools = s.t.join("kexec-tree");
    fs::create_dir_all(tools.join("lib")).unwrap();
    let kexec = String::from_utf8(ok(Command::new("sh").args(["-c", "command -v kexec"]))).unwrap();
    fs::copy(kexec.trim(), tools.join("kexec")).unwrap();
    sh(&format!(
        "ldd {k} | grep -o '/[^ ]*' | while read l; do cp -L \"$l\" {d}/lib/; done",
        k = kexec.trim(),
        d = tools.display()
    ));
    fs::copy(&s.kernel, tools.join("vmlinuz")).unwrap();
    fs::copy(&image, tools.join("initrd.img")).unwrap();
    let disk = s.t.join("kexec.disk");
    sh(&format!("truncate -s 96M {k} && mke2fs -q -t ext4 -d {d} {k}", k = disk.display(), d = tools.display()));
    let append = format!("{ROOT} leanrd.debug leanrd.test=kexec rd.break=shutdown");
    let qemu = [
        "-drive".to_string(),
        format!("file={},if=virtio,format=raw,snapshot=on", s.disk.display()),
        "-drive".to_string(),
        format!("file={},if=virtio,format=raw,snapshot=on,readonly=on", disk.display()),
    ];
    let qemu: Vec<&str> = qemu.iter().map(String::as_str).collect();
    // One line typed into the shell: what it sees (the old root still mounted), then exit.
    let answers = [(
        "a shell before the teardown; exit it to go on",
        "echo LEANRD-SHELL $(/bin/busybox grep -c ' /oldroot' /proc/mounts) mounts under /oldroot; exit",
    )];
    let c = leanrd_testkit::boot::run_console_answering(
        qemu_command(&s.kernel, &image, &append, &qemu, 300),
        &answers,
        &[],
        &[],
        None,
    );
    let log = keep("kexec_from_the_luks_root_after_a_shell_at_rd_break_shutdown", c.console);
    timing("kexec", &log);
    let want = [
        "LEANRD-KEXEC-LOADED",
        "leanrd: shutdown: the way down: kexec",
        "rd.break=shutdown: a shell before the teardown",
        "rescue shell left",
        "sda3_crypt: LUKS mapping closed, its key wiped",
        "all taken apart in ",
        "kexec_core: Starting new kernel",
        "leanrd.test=kexeced",
    ];
    expect_all("kexec", &log, &want);
    // The shell saw the old root mounted, and the next kernel reached the root's init again.
    let shell = log.lines().find(|l| l.starts_with("LEANRD-SHELL ")).ok_or("the shell said nothing")?;
    if shell.starts_with("LEANRD-SHELL 0 ") {
        return Err(format!("the shell saw nothing under /oldroot: {shell}"));
    }
    let after = &log[log.find("kexec_core: Starting new kernel").unwrap()..];
    if !after.contains(MARK) || after.contains("rd.break=shutdown: a shell") {
        return Err(format!("the kexec'd kernel did not reach the root's init, or broke again:\n{}", tail(after)));
    }
    if log.matches("unlocked as /dev/mapper/sda3_crypt").count() != 2 {
        return Err(format!("not unlocked twice:\n{}", tail(&log)));
    }
    Ok(())
}

/// TPM2: the container enrolled with `systemd-cryptenroll --tpm2-pcrs=1` (PCR 1: the
/// platform's configuration, which holds the SMBIOS tables) in a prep VM with a software
/// TPM; booted on the same machine it opens with no typing; booted with another SMBIOS serial
/// number (PCR 1 differs) the token fails and the passphrase is asked.
fn tpm2(kernel: &Path, t: &TempDir, kver: &str, init: &Path, disk: &Path) {
    let plugin = "/usr/lib/x86_64-linux-gnu/cryptsetup/libcryptsetup-token-systemd-tpm2.so";
    if !have("swtpm") || !have("systemd-cryptenroll") || !Path::new(plugin).exists() {
        skip::<()>(&format!("TPM2: needs swtpm, systemd-cryptenroll and {plugin} (apt install swtpm systemd)"));
        return;
    }
    let tpm_disk = t.join("tpm.disk");
    sh(&format!("cp --sparse=always {} {}", disk.display(), tpm_disk.display()));
    let body = format!(
        "mkdir -p /run/systemd && PASSWORD='{PASS}' $systemd_cryptenroll --tpm2-device=auto --tpm2-pcrs=1 /dev/vda3 && \
         $cryptsetup luksDump /dev/vda3 | grep -q systemd-tpm2 && sync && echo PREP-DONE"
    );
    let modules = ["virtio_pci", "virtio_blk", "dm_mod", "dm_crypt"];
    let tools = ["cryptsetup", "systemd-cryptenroll"];
    let Some(prep) = common::prep::image(&t.join("tpm-prep"), kver, &tools, &modules, "vda3", &body, None) else {
        return;
    };
    let state = t.join("tpm-state");
    let machine = |serial: &str, tpm: &Swtpm| -> Vec<String> {
        let mut v = vec![
            "-drive".to_string(),
            format!("file={},if=virtio,format=raw", tpm_disk.display()),
            "-smbios".into(),
            format!("type=1,serial={serial}"),
        ];
        v.extend(tpm.args.iter().cloned());
        v
    };
    {
        let tpm = Swtpm::start(&state);
        let q = machine("leanrd-a", &tpm);
        let log = qemu_boot(kernel, &prep, "quiet", &q.iter().map(String::as_str).collect::<Vec<_>>(), 300);
        assert!(log.contains("PREP-DONE"), "enrolling the TPM2 token failed:\n{}", tail(&log));
    }
    // tpm2-measure-pcr=yes, on a boot no UKI measured: as with systemd, nothing is.
    let tab = format!("sda3_crypt UUID={LUKS_UUID} none luks,discard,tpm2-device=auto,tpm2-measure-pcr=yes\n");
    let sr = host_sysroot(t, "sr-tpm", &[("crypttab", tab.as_bytes(), 0o644)]);
    let img = t.join("host-tpm.img");
    build(kver, init, &sr, Some(&keyboard_host(&TempDir::new("tpmhost"), Some(LUKS_UUID))), &img);
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&img))).unwrap();
    assert!(ls.contains("libcryptsetup-token-systemd-tpm2.so") && ls.contains("libtss2-esys"), "{ls}");
    let append = "console=ttyS0 leanrd.debug root=/dev/mapper/sda3_crypt";
    // The same machine: the TPM unseals the key.
    let log = {
        let tpm = Swtpm::start(&state);
        let q = machine("leanrd-a", &tpm);
        qemu_boot(kernel, &img, append, &q.iter().map(String::as_str).collect::<Vec<_>>(), 240)
    };
    let opened = "unlocked as /dev/mapper/sda3_crypt with its enrolled token";
    assert!(log.contains(opened) && log.contains(MARK), "TPM2 unlock:\n{}", tail(&log));
    assert!(!log.contains("Enter passphrase"), "asked for a passphrase with the TPM there:\n{}", tail(&log));
    assert!(
        log.contains("sda3_crypt: not a measured UKI boot (PCR 11 is zero), PCR 15 not extended"),
        "tpm2-measure-pcr=yes without a measured UKI:\n{}",
        tail(&log)
    );
    let pcr15 = pcr15_values(&log);
    assert!(!pcr15.is_empty() && pcr15.iter().all(|(_, v)| v.bytes().all(|c| c == b'0')), "PCR 15: {pcr15:?}");
    if let Some(l) = log.lines().find(|l| l.contains(MARK)) {
        eprintln!("tpm2-same-machine: {}", l.trim());
    }
    timing("tpm2-same-machine", &log);
    // Another SMBIOS serial: PCR 1 differs, the token fails, the passphrase opens it.
    let log = {
        let tpm = Swtpm::start(&state);
        let q = machine("leanrd-b", &tpm);
        boot_typing(kernel, &img, append.trim_start_matches("console=ttyS0 "), &q, PASS, 240)
    };
    let want = ["no token opened /dev/vda3", "Enter passphrase for sda3_crypt", "with the passphrase typed", MARK];
    assert!(want.iter().all(|w| log.contains(w)), "TPM2 with PCR 1 changed:\n{}", tail(&log));
    eprintln!("tpm2-pcr-changed: token refused, passphrase asked and accepted");
}

/// A TPM2 token sealed with a PIN (`systemd-cryptenroll --tpm2-with-pin=yes`, PCR 1): /init
/// reads the token from the LUKS2 header, tries no PIN on its own, and asks for the PIN on
/// every console. A wrong PIN is refused with the tries left shown, then the right one opens
/// the container with nothing else typed. Three wrong PINs (crypttab's tries=) and /init goes
/// on to the passphrase.
fn tpm2_pin(s: &Setup) {
    let plugin = "/usr/lib/x86_64-linux-gnu/cryptsetup/libcryptsetup-token-systemd-tpm2.so";
    if !have("swtpm") || !have("systemd-cryptenroll") || !Path::new(plugin).exists() {
        skip::<()>(&format!("TPM2 PIN: needs swtpm, systemd-cryptenroll and {plugin} (apt install swtpm systemd)"));
        return;
    }
    const PIN: &str = "4711";
    let t = &s.t;
    let disk = t.join("tpm-pin.disk");
    sh(&format!("cp --sparse=always {} {}", s.disk.display(), disk.display()));
    let body = format!(
        "mkdir -p /run/systemd && PASSWORD='{PASS}' NEWPIN='{PIN}' $systemd_cryptenroll --tpm2-device=auto \
         --tpm2-pcrs=1 --tpm2-with-pin=yes /dev/vda3 && $cryptsetup luksDump /dev/vda3 | grep -q systemd-tpm2 && \
         sync && echo PREP-DONE"
    );
    let modules = ["virtio_pci", "virtio_blk", "dm_mod", "dm_crypt"];
    let tools = ["cryptsetup", "systemd-cryptenroll"];
    let Some(prep) = common::prep::image(&t.join("tpm-pin-prep"), &s.kver, &tools, &modules, "vda3", &body, None)
    else {
        return;
    };
    let state = t.join("tpm-pin-state");
    let machine = |tpm: &Swtpm| -> Vec<String> {
        let mut v = vec![
            "-drive".to_string(),
            format!("file={},if=virtio,format=raw,snapshot=on", disk.display()),
            "-smbios".into(),
            "type=1,serial=leanrd-a".into(),
        ];
        v.extend(tpm.args.iter().cloned());
        v
    };
    {
        let tpm = Swtpm::start(&state);
        let mut q = machine(&tpm);
        q[1] = q[1].replace(",snapshot=on", "");
        let log = qemu_boot(&s.kernel, &prep, "quiet", &q.iter().map(String::as_str).collect::<Vec<_>>(), 300);
        assert!(log.contains("PREP-DONE"), "enrolling the TPM2 token with a PIN failed:\n{}", tail(&log));
    }
    let tab = format!("sda3_crypt UUID={LUKS_UUID} none luks,discard,tpm2-device=auto\n");
    let sr = host_sysroot(t, "sr-tpm-pin", &[("crypttab", tab.as_bytes(), 0o644)]);
    let img = t.join("host-tpm-pin.img");
    build(&s.kver, &s.init, &sr, Some(&keyboard_host(&TempDir::new("tpmpinhost"), Some(LUKS_UUID))), &img);
    let boot = |name: &str, answers: &[(&str, &str)]| -> String {
        let tpm = Swtpm::start(&state);
        let q = machine(&tpm);
        let q: Vec<&str> = q.iter().map(String::as_str).collect();
        let append = "console=ttyS0 leanrd.debug root=/dev/mapper/sda3_crypt panic=-1";
        let cmd = leanrd_testkit::qemu_command(&s.kernel, &img, append, &q, 240);
        let stop = ["leanrd: cannot boot".to_string()];
        keep(name, leanrd_testkit::boot::run_console_answering(cmd, answers, &stop, &[], None).console)
    };
    let prompt = "Enter TPM2 PIN for sda3_crypt";
    let log = boot("tpm2-pin", &[(prompt, "1234"), (prompt, PIN)]);
    let want = [
        "asking for the TPM2 PIN of sda3_crypt",
        "leanrd: wrong TPM2 PIN for sda3_crypt (2 left)",
        "unlocked as /dev/mapper/sda3_crypt with its TPM2 token and the PIN typed",
        MARK,
    ];
    expect_all("TPM2 PIN", &log, &want);
    assert!(!log.contains("Enter passphrase"), "asked for a passphrase with the PIN right:\n{}", tail(&log));
    eprintln!("tpm2-pin: a wrong PIN refused (2 tries left), the right one unsealed the key");
    // Through plymouth's splash: Debian 13's kernel, plymouth and TPM2 token plugin (the plymouth
    // root's), `quiet splash`; a wrong PIN, then the right one, pressed on the PS/2 keyboard.
    // Before the boot below with three wrong PINs: the TPM counts every failed authorisation
    // (dictionary-attack protection) and locks out after a few, the right PIN refused too.
    if let Some(root) = debian_suite_root("trixie", "plymouth") {
        let kernel = root_kernel(&root);
        let kver = kver_of(&kernel);
        let sr = plymouth_sysroot(t, &root, "sr-tpm-pin-plymouth", &tab);
        let img = t.join("tpm-pin-plymouth.img");
        let mut c = leanrd();
        c.args(["build", "-k", &kver, "--universal", "--include", "plymouth", "--init"]).arg(&s.init);
        c.arg("--sysroot").arg(&sr).arg("-o").arg(&img);
        ok(&mut c);
        let tpm = Swtpm::start(&state);
        let log = boot_keyboard(
            &kernel,
            t,
            "tpm2-pin-plymouth",
            &Typing {
                image: &img,
                append: format!("{ROOT} quiet splash plymouth.ignore-serial-consoles loglevel=7"),
                qemu: machine(&tpm),
                ready: vec![PS2, "plymouth: the splash is up"],
                steps: vec![(prompt, "1234", "de"), (prompt, PIN, "de")],
                dump: None,
            },
        );
        let log = keep("tpm2-pin-plymouth", log);
        let want = [
            "plymouth: the splash is up",
            "asking for the TPM2 PIN of sda3_crypt on ttyS0, plymouth",
            "leanrd: wrong TPM2 PIN for sda3_crypt (2 left)",
            "unlocked as /dev/mapper/sda3_crypt with its TPM2 token and the PIN typed on plymouth's splash",
            MARK,
        ];
        expect_all("TPM2 PIN through plymouth", &log, &want);
        eprintln!("tpm2-pin-plymouth: a wrong PIN, then the right one, typed into plymouth's splash");
    }
    let log =
        boot("tpm2-pin-wrong", &[(prompt, "1111"), (prompt, "2222"), (prompt, "3333"), ("Enter passphrase", PASS)]);
    let want = [
        "leanrd: wrong TPM2 PIN for sda3_crypt (1 left)",
        "Enter passphrase for sda3_crypt",
        "unlocked as /dev/mapper/sda3_crypt with the passphrase typed",
        MARK,
    ];
    expect_all("TPM2 PIN wrong three times", &log, &want);
    let refused = log.matches("leanrd: wrong TPM2 PIN for sda3_crypt").count();
    assert_eq!(refused, 3, "three wrong PINs, each refused once on the one console:\n{}", tail(&log));
    eprintln!("tpm2-pin-wrong: three wrong PINs, then the passphrase");
}

/// The console of the boot `name`, kept under target/boot-logs as luks-NAME.log.
/// The root's `PCR15 BANK HEX` lines: (bank, value in lower case).
fn pcr15_values(log: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = log
        .lines()
        .filter_map(|l| {
            let mut w = l.split("PCR15 ").nth(1)?.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_ascii_lowercase()))
        })
        .collect();
    v.dedup();
    v
}

/// `openssl dgst` over `input` with `args`: the digest in hex.
fn openssl_dgst(args: &[&str], input: &[u8]) -> String {
    let o = leanrd_testkit::run_stdin(Command::new("openssl").arg("dgst").args(args).arg("-r"), input);
    assert!(o.status.success(), "openssl dgst {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap()).collect()
}

/// PCR 15 as systemd-cryptsetup leaves it with `tpm2-measure-pcr=yes`, computed here with
/// OpenSSL (as systemd computes it) from the volume key the prep VM dumped: in every bank
/// the TPM has (PCR 15 was zero in all of them), HMAC(volume key, "cryptsetup:NAME:UUID")
/// extended into zero. The log's record holds the same HMACs, as a `volume-key` event.
fn volume_key_measured(log: &str, vk: &str) {
    let event = format!("cryptsetup:sda3_crypt:{LUKS_UUID}");
    let said = format!("PCR 15 extended with {event} and its volume key");
    assert!(log.contains(&said), "no {said:?}:\n{}", tail(log));
    let pcrs = pcr15_values(log);
    assert!(pcrs.iter().any(|(b, _)| b == "sha256"), "the root showed no sha256 PCR 15: {pcrs:?}");
    let block =
        log.split(&format!("{MLOG_MARK}-BEGIN")).nth(1).and_then(|r| r.split(&format!("{MLOG_MARK}-END")).next());
    let records: Vec<serde_json::Value> =
        block.unwrap_or("").lines().filter_map(|l| serde_json::from_str(l.trim()).ok()).collect();
    let rec = records
        .iter()
        .find(|r| r["content"]["eventType"] == "volume-key")
        .unwrap_or_else(|| panic!("no volume-key record in {MLOG}: {records:?}"));
    assert_eq!((rec["pcr"].as_u64(), rec["content"]["string"].as_str()), (Some(15), Some(event.as_str())));
    for (bank, value) in &pcrs {
        let hmac =
            openssl_dgst(&[&format!("-{bank}"), "-mac", "HMAC", "-macopt", &format!("hexkey:{vk}")], event.as_bytes());
        let mut input = vec![0u8; hmac.len() / 2];
        input.extend(unhex(&hmac));
        let want = openssl_dgst(&[&format!("-{bank}")], &input);
        assert_eq!(value, &want, "PCR 15 in {bank}");
        let logged = rec["digests"].as_array().unwrap().iter().find(|d| d["hashAlg"] == bank.as_str());
        assert_eq!(logged.and_then(|d| d["digest"].as_str()), Some(hmac.as_str()), "the log's {bank} digest");
    }
    let banks: Vec<&str> = pcrs.iter().map(|(b, _)| b.as_str()).collect();
    eprintln!("tpm2-signed: PCR 15 holds HMAC(volume key, {event}) in {}, as OpenSSL computes it", banks.join(", "));
}

fn keep(name: &str, log: String) -> String {
    let kept = leanrd_testkit::boot::console_path(&format!("luks-{name}"));
    let _ = fs::create_dir_all(kept.parent().unwrap()).and_then(|()| fs::write(&kept, &log));
    log
}

/// Every text of `want` is in the boot's console, or the test fails naming the missing ones.
fn expect_all(what: &str, log: &str, want: &[&str]) {
    let missing: Vec<&&str> = want.iter().filter(|w| !log.contains(**w)).collect();
    assert!(missing.is_empty(), "{what}: missing {missing:?}:\n{}", tail(log));
}

/// A software TPM on a TCP port, for systemd-measure (before systemd 253 it computes policy
/// digests with a TPM); its TCTI for `--pcr-tpm2-device`.
struct TcpTpm(std::process::Child, String);

impl TcpTpm {
    fn start(state: &Path) -> TcpTpm {
        fs::create_dir_all(state).unwrap();
        // A port free now (the kernel's pick), and the next one for the control channel.
        let port = (0..20)
            .find_map(|_| {
                let p = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
                std::net::TcpListener::bind(("127.0.0.1", p + 1)).ok().map(|_| p)
            })
            .expect("a free TCP port");
        let child = Command::new("swtpm")
            .args(["socket", "--tpm2", "--flags", "not-need-init,startup-clear", "--tpmstate"])
            .arg(format!("dir={}", state.display()))
            .args(["--server", &format!("type=tcp,port={port},bindaddr=127.0.0.1")])
            .args(["--ctrl", &format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        TcpTpm(child, format!("swtpm:host=127.0.0.1,port={port}"))
    }
}

impl Drop for TcpTpm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A signed PCR policy, as ukify and systemd-cryptenroll make it: the container enrolled
/// with `--tpm2-public-key=P --tpm2-public-key-pcrs=11` (no PCR value in the token, only the
/// key) in a prep VM with a software TPM; a host-only UKI built with `--pcr-private-key` and
/// `--pcr-public-key`, whose .pcrsig signs PCR 11's value in the phase enter-initrd. Started
/// by OVMF with that TPM, the stub measures the UKI into PCR 11 and hands .pcrsig to the
/// initramfs; /init measures enter-initrd and hands the signature to the token plugin, which
/// unseals with no typing. The same UKI signed by another key (its own .pcrpkey) is refused
/// by the token: the passphrase is asked. After leave-initrd, PCR 11 no longer has the
/// value signed for (boot_uki's uki_phases: PCR 11 in the root is systemd-measure's
/// enter-initrd:leave-initrd), so the root cannot unseal what the initramfs could.
fn tpm2_signed(s: &Setup) {
    let plugin = "/usr/lib/x86_64-linux-gnu/cryptsetup/libcryptsetup-token-systemd-tpm2.so";
    let (measure, stub) = ("/usr/lib/systemd/systemd-measure", "/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    let need = [plugin, measure, stub, OVMF_CODE];
    if !have("swtpm") || !have("systemd-cryptenroll") || !have("mcopy") || !need.iter().all(|p| Path::new(p).exists()) {
        skip::<()>(&format!("signed TPM2 policy: needs swtpm, systemd-cryptenroll, mtools and {need:?}"));
        return;
    }
    let t = &s.t;
    let keys = t.join("pcr-keys");
    fs::create_dir_all(&keys).unwrap();
    for name in ["pcr", "other"] {
        sh(&format!(
            "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out {d}/{name}.key 2>/dev/null && \
             openssl pkey -in {d}/{name}.key -pubout -out {d}/{name}.pem",
            d = keys.display()
        ));
    }
    let disk = t.join("tpm-signed.disk");
    sh(&format!("cp --sparse=always {} {}", s.disk.display(), disk.display()));
    let body = format!(
        "mkdir -p /run/systemd && PASSWORD='{PASS}' $systemd_cryptenroll --tpm2-device=auto \
         --tpm2-public-key=/roottree/pcr.pem --tpm2-public-key-pcrs=11 --tpm2-pcrs= /dev/vda3 && \
         $cryptsetup luksDump /dev/vda3 | grep -q systemd-tpm2 && \
         printf %s '{PASS}' | $cryptsetup luksDump --dump-volume-key --batch-mode --key-file - \
           --volume-key-file /tmp/vk /dev/vda3 >/dev/null && echo VK=$(od -An -v -tx1 /tmp/vk | tr -d ' \\n') && \
         sync && echo PREP-DONE"
    );
    let tools = ["cryptsetup", "systemd-cryptenroll"];
    let modules = ["virtio_pci", "virtio_blk", "dm_mod", "dm_crypt"];
    let Some(prep) =
        common::prep::image(&t.join("tpm-signed-prep"), &s.kver, &tools, &modules, "vda3", &body, Some(&keys))
    else {
        return;
    };
    let state = t.join("tpm-signed-state");
    let prep_log = {
        let tpm = Swtpm::start(&state);
        let mut q = vec!["-drive".to_string(), format!("file={},if=virtio,format=raw", disk.display())];
        q.extend(tpm.args.iter().cloned());
        let log = qemu_boot(&s.kernel, &prep, "quiet", &q.iter().map(String::as_str).collect::<Vec<_>>(), 300);
        assert!(log.contains("PREP-DONE"), "enrolling the signed-policy token failed:\n{}", tail(&log));
        log
    };
    // The volume key, as the prep VM's cryptsetup dumped it, for PCR 15's expected value.
    let vk = prep_log.split("VK=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("").to_string();
    assert_eq!(vk.len(), 128, "the volume key dump: {vk:?}");
    let tab = format!("sda3_crypt UUID={LUKS_UUID} none luks,discard,tpm2-device=auto,tpm2-measure-pcr=yes\n");
    let sr = host_sysroot(t, "sr-tpm-signed", &[("crypttab", tab.as_bytes(), 0o644)]);
    let host_dir = TempDir::new("tpmsignedhost");
    let host = keyboard_host(&host_dir, Some(LUKS_UUID));
    let measure_tpm = TcpTpm::start(&t.join("measure-tpm"));
    let cmdline = "console=ttyS0 leanrd.debug root=/dev/mapper/sda3_crypt panic=-1";
    let uki_as = |key: &str, name: &str, cmdline: &str, linux: &Path| -> PathBuf {
        let out = t.join(format!("{name}.efi"));
        let o = leanrd()
            .args(["build", "-k", &s.kver, "--init"])
            .arg(&s.init)
            .arg("--sysroot")
            .arg(&sr)
            .arg("--host-root")
            .arg(&host.root)
            .args(["--uki", "--cmdline", cmdline, "--linux"])
            .arg(linux)
            .arg("--pcr-private-key")
            .arg(keys.join(format!("{key}.key")))
            .arg("--pcr-public-key")
            .arg(keys.join(format!("{key}.pem")))
            .args(["--pcr-tpm2-device", &measure_tpm.1, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "leanrd build --uki --pcr-private-key: {}", String::from_utf8_lossy(&o.stderr));
        let shown = String::from_utf8(ok(leanrd().arg("inspect").arg(&out))).unwrap();
        assert!(shown.contains(".pcrsig") && shown.contains("sha256 PCR 11: policy"), "{shown}");
        out
    };
    let uki = |key: &str| uki_as(key, &format!("signed-by-{key}"), cmdline, &s.kernel);
    let (signed, other) = (uki("pcr"), uki("other"));
    // Signed with the same key: a new kernel (here the same kernel with 4 KiB appended, so
    // that every measurement of .linux differs) with another command line (which also has the
    // root try the token after leave-initrd). One boot shows both: the policy follows the key,
    // not the sections' values.
    let unseal_cmdline = format!("{cmdline} leanrd.test.unseal");
    let kernel2 = t.join("vmlinuz-new");
    let mut k = fs::read(&s.kernel).unwrap();
    k.extend(std::iter::repeat_n(0xa5u8, 4096));
    fs::write(&kernel2, k).unwrap();
    let new_kernel = uki_as("pcr", "signed-new-kernel-other-cmdline", &unseal_cmdline, &kernel2);
    drop(measure_tpm);
    // The signed UKI with its .cmdline changed after signing (the same length, in place).
    let tampered = t.join("signed-cmdline-changed.efi");
    let mut bytes = fs::read(&signed).unwrap();
    let sec = leanrd_archive::uki::sections(&bytes).into_iter().find(|x| x.name == ".cmdline").unwrap();
    let range = sec.offset as usize..(sec.offset + sec.len) as usize;
    let at = bytes[range.clone()].windows(8).position(|w| w == b"panic=-1").unwrap() + range.start;
    bytes[at..at + 8].copy_from_slice(b"panic=-2");
    fs::write(&tampered, bytes).unwrap();
    // The initramfs's own tools, on a disk of their own for the root to run.
    let tools_dir = t.join("signed-tools");
    let _ = fs::remove_dir_all(&tools_dir);
    ok(leanrd().arg("extract").arg(&signed).arg("-C").arg(&tools_dir));
    let tools_disk = t.join("signed-tools.disk");
    sh(&format!(
        "rm -f {d} && truncate -s 160M {d} && mke2fs -q -t ext4 -d {s} {d}",
        d = tools_disk.display(),
        s = tools_dir.display()
    ));
    let boot_with = |name: &str, efi: &Path, more: &[String]| -> String {
        let esp = esp(t, name, efi, "BOOTX64.EFI");
        let vars = t.join(format!("{name}.vars"));
        fs::copy(OVMF_VARS, &vars).unwrap();
        let tpm = Swtpm::start(&state);
        let mut args = vec![
            "-m".to_string(),
            "1024".into(),
            "-drive".into(),
            format!("file={},format=raw,if=virtio", esp.display()),
            "-drive".into(),
            format!("file={},format=raw,if=virtio,snapshot=on", disk.display()),
        ];
        args.extend(more.iter().cloned());
        args.extend(tpm.args.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stop = ["Enter passphrase".to_string(), "leanrd: cannot boot".to_string()];
        keep(name, leanrd_testkit::boot::run_console(firmware_command(&vars, &args, 300), None, &stop, &[]).console)
    };
    let boot = |name: &str, efi: &Path| boot_with(name, efi, &[]);
    let log = boot("tpm2-signed", &signed);
    let want = [
        "/.extra/tpm2-pcr-signature.json handed on",
        "PCR 11 extended with enter-initrd",
        "unlocked as /dev/mapper/sda3_crypt with its enrolled token",
        MARK,
    ];
    expect_all("signed policy", &log, &want);
    assert!(!log.contains("Enter passphrase"), "asked for a passphrase with the signature there:\n{}", tail(&log));
    eprintln!("tpm2-signed: unsealed by the UKI's signature of PCR 11 at enter-initrd");
    volume_key_measured(&log, &vk);
    let log = boot("tpm2-signed-by-another-key", &other);
    assert!(
        log.contains("no token opened /dev/vdb3") && log.contains("Enter passphrase for sda3_crypt"),
        "a UKI signed by another key unsealed:\n{}",
        tail(&log)
    );
    eprintln!("tpm2-signed-by-another-key: the token refused, the passphrase was asked");
    let log = boot("tpm2-signed-cmdline-changed", &tampered);
    assert!(
        log.contains("no token opened /dev/vdb3") && log.contains("Enter passphrase for sda3_crypt"),
        "a UKI whose .cmdline changed after signing unsealed:\n{}",
        tail(&log)
    );
    eprintln!("tpm2-signed-cmdline-changed: PCR 11 has no signature, the passphrase was asked");
    // The new kernel and command line, signed with the same key, open it; then the booted
    // root, with PCR 11 past leave-initrd, tries the same token with the same tools and
    // signature.
    let tools_drive = ["-drive".to_string(), format!("file={},format=raw,if=virtio,readonly=on", tools_disk.display())];
    let log = boot_with("tpm2-signed-new-kernel-other-cmdline", &new_kernel, &tools_drive);
    let want = [
        "unlocked as /dev/mapper/sda3_crypt with its enrolled token",
        "PCR 11 extended with leave-initrd",
        "ROOT-SIG-PRESENT",
        "ROOT-TPM-PRESENT",
        "ROOT-TOOLS cryptsetup 2.",
        MARK,
    ];
    expect_all("a new kernel and command line signed with the same key", &log, &want);
    let rc = log.split("ROOT-UNSEAL-RC=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("");
    assert!(!rc.is_empty() && rc != "0", "the booted root unsealed the initramfs's key (rc {rc:?}):\n{}", tail(&log));
    // Refused by the token plugin for want of a signed PCR 11 value (systemd 252: "Couldn't
    // find signature for this PCR bank, PCR index and public key."), not for a missing tool.
    let said = log.split("ROOT-TPM-PRESENT").nth(1).and_then(|r| r.split("ROOT-UNSEAL-RC=").next()).unwrap_or("");
    let said = said.to_lowercase();
    assert!(
        said.contains("signature") || said.contains("token"),
        "the root's cryptsetup failed, but not for the token: {said:?}\n{}",
        tail(&log)
    );
    eprintln!(
        "tpm2-signed-new-kernel-other-cmdline: unsealed with no re-enrolment; the booted root could not \
         (cryptsetup exit status {rc})"
    );
}

/// Clevis and Tang: the root container bound to a Tang server as `clevis luks bind` binds it
/// (a new key slot for a random key, and a `clevis` token holding `clevis encrypt tang`'s JWE
/// of that key), the server Debian's tangd in the test's network namespace. The bind is done
/// on the host through an offset loop device (header operations need no device-mapper), its
/// key slot with PBKDF2 (clevis's default Argon2 would want more memory than the test VM has).
struct TangSetup {
    /// The disk, bound.
    disk: PathBuf,
    /// A universal image with `--include clevis`.
    image: PathBuf,
    /// The same for Debian 13's kernel ([`trixie`]).
    image_d13: PathBuf,
    /// tangd's keys, and the same after a rotation (the old keys hidden, new ones made).
    db: PathBuf,
    rotated: PathBuf,
    /// The same disk bound instead with `sss` t=2 over that Tang server and a TPM2 (PCR 16 of
    /// sha256, which no firmware extends), and the software TPM's state that sealed it.
    sss: PathBuf,
    tpm_state: PathBuf,
    /// A host-only image of the machine that disk is in (its LUKS2 header, its virtio NIC up):
    /// the clevis feature, the TPM's and the NIC's drivers found by detection.
    host_only: PathBuf,
}

fn tang_setup() -> Option<&'static TangSetup> {
    static S: std::sync::OnceLock<Result<Option<TangSetup>, String>> = std::sync::OnceLock::new();
    once(&S, make_tang).as_ref()
}

fn make_tang() -> Option<TangSetup> {
    let s = setup()?;
    let need = ["clevis", "socat", "losetup", "ip", "dnsmasq"];
    if need.iter().any(|t| !have(t)) || !clevis::have_tools() {
        return skip(&format!("Tang: needs {need:?} and tangd (apt install clevis tang socat dnsmasq-base)"));
    }
    let t = &s.t;
    let db = t.join("tang-db");
    clevis::tang_keys(&db);
    let adv = t.join("tang-adv.jws");
    fs::write(&adv, clevis::advertisement(&db).unwrap_or_else(|e| panic!("{e}"))).unwrap();
    // Bind: the disk's third partition, through an offset loop device.
    let disk = t.join("tang.disk");
    sh(&format!("cp --sparse=always {} {}", s.disk.display(), disk.display()));
    let cfg = clevis::tang_config(&adv);
    let key = t.join("tang-key");
    fs::write(&key, leanrd_contract::clevis::b64_encode(&noise(29, 32))).unwrap();
    let jwe = clevis::encrypt("tang", &cfg, &key, None).unwrap_or_else(|e| panic!("{e}"));
    clevis::bind(t.path(), &disk, PASS, &key, &jwe).unwrap_or_else(|e| panic!("binding the disk to Tang: {e}"));
    // sss t=2 over the same server and a TPM2, as `clevis luks bind -d DISK sss CFG` does it.
    if !have("tpm2_createprimary") || !have("swtpm") {
        return skip("Tang with TPM2: needs tpm2-tools and swtpm (apt install clevis-tpm2 swtpm)");
    }
    let sss = t.join("tang-sss.disk");
    sh(&format!("cp --sparse=always {} {}", s.disk.display(), sss.display()));
    let tpm_state = t.join("tang-tpm-state");
    let _ = fs::remove_dir_all(&tpm_state);
    let sss_cfg = format!(r#"{{"t":2,"pins":{{"tang":[{cfg}],"tpm2":[{{"pcr_ids":"16","pcr_bank":"sha256"}}]}}}}"#);
    let sss_key = t.join("tang-sss-key");
    fs::write(&sss_key, leanrd_contract::clevis::b64_encode(&noise(31, 32))).unwrap();
    let jwe = {
        let tpm = TcpTpm::start(&tpm_state);
        clevis::encrypt("sss", &sss_cfg, &sss_key, Some(&tpm.1)).unwrap_or_else(|e| panic!("{e}"))
    };
    clevis::bind(t.path(), &sss, PASS, &sss_key, &jwe).unwrap_or_else(|e| panic!("binding the disk to sss: {e}"));
    // tangd-rotate-keys: the old keys hidden (still answering for what was bound to them),
    // new ones advertised.
    let rotated = t.join("tang-db-rotated");
    fs::create_dir_all(&rotated).unwrap();
    for e in fs::read_dir(&db).unwrap().flatten() {
        fs::copy(e.path(), rotated.join(format!(".{}", e.file_name().to_string_lossy()))).unwrap();
    }
    clevis::tang_keys(&rotated);
    let tab = format!("sda3_crypt UUID={LUKS_UUID} none luks,discard\n");
    let sr = host_sysroot(t, "sr-tang", &[("crypttab", tab.as_bytes(), 0o644)]);
    let image = t.join("universal-clevis.img");
    let o = leanrd()
        .args(["build", "-k", &s.kver, "--universal", "--include", "clevis", "--init"])
        .arg(&s.init)
        .arg("--sysroot")
        .arg(&sr)
        .arg("-o")
        .arg(&image)
        .output()
        .unwrap();
    assert!(o.status.success(), "leanrd build --include clevis: {}", String::from_utf8_lossy(&o.stderr));
    let d13 = trixie()?;
    with_trixie_modules(&sr, d13);
    let image_d13 = t.join("universal-clevis-d13.img");
    ok(leanrd()
        .args(["build", "-k", &d13.kver, "--universal", "--include", "clevis", "--init"])
        .arg(&s.init)
        .arg("--sysroot")
        .arg(&sr)
        .arg("-o")
        .arg(&image_d13));
    // Host-only, on the machine of the sss disk: its header (read where the fixture's /dev has
    // the partition), a virtio NIC that is up.
    let fixture_dir = TempDir::new("tanghost");
    let f = keyboard_host(&fixture_dir, Some(LUKS_UUID));
    let header = t.join("tang-sss.header");
    sh(&format!(
        "dd if={} of={} bs=512 skip={} count=32768 status=none",
        sss.display(),
        header.display(),
        clevis::partition(&sss, 3).unwrap_or_else(|e| panic!("{e}")).0 / 512
    ));
    fs::create_dir_all(f.root.join("dev")).unwrap();
    fs::rename(&header, f.root.join("dev/vda3")).unwrap();
    let nic = "pci0000:00/0000:00:03.0";
    f.dev(nic, Some("pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"), Some("virtio-pci")).dev(
        &format!("{nic}/virtio0"),
        Some("virtio:d00000001v00001AF4"),
        Some("virtio_net"),
    );
    let class = f.root.join("sys/class/net/eth0");
    fs::create_dir_all(&class).unwrap();
    fs::write(class.join("operstate"), "up\n").unwrap();
    std::os::unix::fs::symlink(f.root.join("sys/devices").join(nic).join("virtio0"), class.join("device")).unwrap();
    let host_only = t.join("host-clevis.img");
    let said = build(&s.kver, &s.init, &sr, Some(&f), &host_only);
    let ls = String::from_utf8(ok(leanrd().arg("ls").arg(&host_only))).unwrap();
    assert!(ls.contains("virtio_net.ko"), "no NIC driver in the host-only image of a clevis-bound machine:\n{said}");
    Some(TangSetup { disk, image, image_d13, db, rotated, sss, tpm_state, host_only })
}

const TANG_TRYING: &str = "trying its clevis token 0 (tang http://10.77.0.1:7500)";
const TANG_OPENED: &str = "unlocked as /dev/mapper/sda3_crypt with its clevis token 0 (tang http://10.77.0.1:7500)";

/// The Tang boots, each a test: its name and what its serial log must show.
const TANG_BOOTS: &[(&str, &[&str])] = &[
    // Nothing typed, no ip=: DHCP on the interface with a link, the root opens, and the
    // interface is down again before the switch (the root has no address from it).
    ("tang_unattended_by_dhcp", &[TANG_TRYING, TANG_OPENED, "down again (it was up for Tang only)", "ADDRS []", MARK]),
    // Debian 13's kernel (6.12: its NIC driver a .ko.xz, no CONFIG_IP_PNP), ip=dhcp, and the
    // server's keys rotated since the bind: still opens.
    (
        "tang_rotated_keys_ip_dhcp_debian13_kernel",
        &[TANG_TRYING, TANG_OPENED, "Linux version 6.12", "leanrd: loaded virtio_net", MARK],
    ),
    // A server that takes the connection and never answers: given up at the bound
    // (rd.leanrd.tang_timeout=4), then the passphrase prompt, and the typed passphrase boots.
    (
        "tang_silent_server_falls_back_to_the_prompt",
        &[TANG_TRYING, "no whole reply in time", "Enter passphrase for sda3_crypt", "with the passphrase typed", MARK],
    ),
    // The server comes up only after the prompt has appeared (refused until then): the Tang
    // attempt still pending in the background wins the race, with nothing typed.
    (
        "tang_late_server_wins_the_race_with_the_prompt",
        &[
            TANG_TRYING,
            "Enter passphrase for sda3_crypt",
            "tried again in the background",
            "unlocked by its clevis token (Tang answered)",
            "unlocked as /dev/mapper/sda3_crypt with its clevis token (Tang answered after the prompt appeared)",
            "down again (it was up for Tang only)",
            "ADDRS []",
            MARK,
        ],
    ),
    // sss t=2 over Tang and the TPM2 (a policy session over PCR 16): both shares open, nothing
    // typed, by a host-only image built for that machine.
    ("tang_and_tpm2_sss_opens", &[SSS_TRYING, "tpm2 PCR sha256:16", SSS_OPENED, MARK]),
    // The same with the Tang server silent: the TPM's share alone is one of two, so the
    // prompt comes after the bound, and the passphrase typed boots.
    (
        "tang_and_tpm2_sss_tang_silent_prompts",
        &[
            SSS_TRYING,
            "1 of 2 shares opened, 2 needed",
            "Enter passphrase for sda3_crypt",
            "with the passphrase typed",
            MARK,
        ],
    ),
];

const SSS_TRYING: &str = "trying its clevis token 0 (sss(t=2: ";
const SSS_OPENED: &str = "unlocked as /dev/mapper/sda3_crypt with its clevis token 0 (sss(t=2: ";

fn tang_boot(name: &str, want: &[&str]) -> Result<(), String> {
    let Some(s) = setup() else { return Ok(()) };
    let Some(ts) = tang_setup() else { return Ok(()) };
    let (server, append, answer) = match name {
        "tang_unattended_by_dhcp" | "tang_and_tpm2_sss_opens" => {
            (netlab::TangServer::Keys(&ts.db), ROOT.to_string(), None)
        }
        "tang_rotated_keys_ip_dhcp_debian13_kernel" => {
            (netlab::TangServer::Keys(&ts.rotated), format!("{ROOT} ip=dhcp"), None)
        }
        "tang_late_server_wins_the_race_with_the_prompt" => {
            (netlab::TangServer::Back(&ts.db), format!("{ROOT} rd.leanrd.tang_timeout=4"), None)
        }
        "tang_silent_server_falls_back_to_the_prompt" | "tang_and_tpm2_sss_tang_silent_prompts" => {
            (netlab::TangServer::Silent, format!("{ROOT} rd.leanrd.tang_timeout=4"), Some(PASS))
        }
        other => panic!("no Tang boot {other}"),
    };
    let sss = name.contains("sss");
    // Each boot its own copy of the TPM (two swtpm on one state would fight over it).
    let tpm = sss.then(|| {
        let state = ts.tpm_state.with_file_name(format!("{name}-tpm"));
        let _ = fs::remove_dir_all(&state);
        fs::create_dir_all(&state).unwrap();
        for e in fs::read_dir(&ts.tpm_state).unwrap().flatten().filter(|e| e.path().is_file()) {
            fs::copy(e.path(), state.join(e.file_name())).unwrap();
        }
        Swtpm::start(&state)
    });
    let spec = netlab::LabSpec { exports: &[], dhcp: true, root_path: None, luns: &[], nvmf: None, tang: Some(server) };
    let lab = netlab::NetLab::start(&name[..name.len().min(12)], &spec).map_err(|e| format!("the network lab: {e}"))?;
    let disk = if sss { &ts.sss } else { &ts.disk };
    let mut q = vec!["-drive".to_string(), format!("file={},if=virtio,format=raw,snapshot=on", disk.display())];
    q.extend(lab.nics(&["52:54:00:12:34:61"], "virtio-net-pci", true)?);
    if let Some(tpm) = &tpm {
        q.extend(tpm.args.iter().cloned());
    }
    let q: Vec<&str> = q.iter().map(String::as_str).collect();
    // sss opens by the host-only image: detection found the token and what it needs.
    let (kernel, image) = match name {
        "tang_and_tpm2_sss_opens" => (&s.kernel, &ts.host_only),
        n if n.ends_with("debian13_kernel") => (&trixie().unwrap().kernel, &ts.image_d13),
        _ => (&s.kernel, &ts.image),
    };
    let cmd = qemu_command(kernel, image, &format!("leanrd.debug {append}"), &q, 240);
    let log = leanrd_testkit::boot::run_console(netlab::in_netns(&lab.ns, &cmd), answer, &[], &[]).console;
    let _ = fs::create_dir_all(leanrd_testkit::boot::console_path(name).parent().unwrap());
    let _ = fs::write(leanrd_testkit::boot::console_path(name), &log);
    if let Some(l) = log.lines().find(|l| l.contains(MARK)) {
        eprintln!("{name}: {}", l.trim());
    }
    let trying = if sss { SSS_TRYING } else { TANG_TRYING };
    let gap = stamp(&log, trying).zip(stamp(&log, "Enter passphrase for sda3_crypt")).map(|(a, b)| b - a);
    if let Some(g) = gap {
        eprintln!("{name}: the prompt came {g:.1} s after the Tang attempt began");
    }
    let mut missing: Vec<String> = want.iter().filter(|w| !log.contains(**w)).map(|w| w.to_string()).collect();
    if answer.is_none() && log.contains("Enter passphrase") && !name.contains("late") {
        missing.push("no passphrase prompt".into());
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: missing {missing:?}\n{}\ntang: {}", tail(&log), lab.log("tang")))
    }
}

/// SSH: a universal image with `--ssh-authorized-keys` (an ed25519 and an ECDSA key), built
/// twice: the host keys made on the first build are the second's too.
struct SshSetup {
    image: PathBuf,
    /// The same for Debian 13's kernel ([`trixie`]), with the same host keys.
    image_d13: PathBuf,
    /// The authorized keys (private halves), and one that is not authorized.
    ed25519: PathBuf,
    ecdsa: PathBuf,
    stranger: PathBuf,
    /// The host keys' fingerprints, as the build's note gives them.
    prints: String,
}

fn ssh_setup() -> Option<&'static SshSetup> {
    static S: std::sync::OnceLock<Result<Option<SshSetup>, String>> = std::sync::OnceLock::new();
    once(&S, make_ssh).as_ref()
}

fn make_ssh() -> Option<SshSetup> {
    let s = setup()?;
    let need = ["dropbear", "dropbearkey", "ssh", "ssh-keygen", "ip", "dnsmasq", "bash"];
    if need.iter().any(|t| !have(t)) {
        return skip(&format!("SSH: needs {need:?} (apt install dropbear-bin openssh-client dnsmasq-base)"));
    }
    let t = &s.t;
    let key = |name: &str, kind: &str| {
        let k = t.join(name);
        let _ = fs::remove_file(&k);
        sh(&format!("ssh-keygen -q -t {kind} -N '' -C {name} -f {}", k.display()));
        k
    };
    let (ed25519, ecdsa, stranger) =
        (key("ssh-ed25519", "ed25519"), key("ssh-ecdsa", "ecdsa"), key("ssh-stranger", "ed25519"));
    let auth = t.join("ssh-authorized_keys");
    let pubs: Vec<String> = [&ed25519, &ecdsa]
        .iter()
        .map(|k| {
            fs::read_to_string(k.with_extension("pub"))
                .unwrap_or_else(|_| fs::read_to_string(format!("{}.pub", k.display())).unwrap())
        })
        .collect();
    fs::write(&auth, pubs.concat()).unwrap();
    let tab = format!("sda3_crypt UUID={LUKS_UUID} none luks,discard\n");
    let sr = host_sysroot(t, "sr-ssh", &[("crypttab", tab.as_bytes(), 0o644)]);
    let d13 = trixie()?;
    with_trixie_modules(&sr, d13);
    let build = |kver: &str, out: &Path| -> String {
        let o = leanrd()
            .args(["build", "-k", kver, "--universal", "--ssh-authorized-keys"])
            .arg(&auth)
            .arg("--init")
            .arg(&s.init)
            .arg("--sysroot")
            .arg(&sr)
            .arg("-o")
            .arg(out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "leanrd build --ssh-authorized-keys: {err}");
        err.lines()
            .find(|l| l.contains("SSH unlock on port 22: host keys"))
            .unwrap_or_else(|| panic!("no host key note:\n{err}"))
            .to_string()
    };
    let image = t.join("universal-ssh.img");
    let prints = build(&s.kver, &image);
    let image_d13 = t.join("universal-ssh-d13.img");
    let again = build(&d13.kver, &image_d13);
    assert_eq!(prints, again, "the host keys changed on a rebuild");
    let mode = fs::metadata(sr.join("etc/leanrd/ssh/dropbear_ed25519_host_key")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600, "the host key under the system root");
    Some(SshSetup { image, image_d13, ed25519, ecdsa, stranger, prints })
}

/// Where the SSH boots' guest is.
const SSH_GUEST: &str = "10.77.0.9";

/// A boot in `lab` whose console `act` watches (the whole console so far each time, and the
/// VM's serial input to type on); the console when the VM ends.
fn boot_acting(
    lab: &netlab::NetLab,
    kernel: &Path,
    image: &Path,
    append: &str,
    act: &mut dyn FnMut(&str, &mut dyn Write),
) -> String {
    let s = setup().unwrap();
    let mut q = vec!["-drive".to_string(), format!("file={},if=virtio,format=raw,snapshot=on", s.disk.display())];
    q.extend(lab.nics(&["52:54:00:12:34:71"], "virtio-net-pci", true).unwrap());
    let q: Vec<&str> = q.iter().map(String::as_str).collect();
    let ip = format!("ip={SSH_GUEST}::{}:255.255.255.0::eth0:off", netlab::SERVER);
    let cmd = qemu_command(kernel, image, &format!("leanrd.debug {ip} {append}"), &q, 300);
    let _slot = vm_slot();
    let mut child = netlab::in_netns(&lab.ns, &cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    watch(&mut child, Duration::from_secs(330), &mut |text| act(text, &mut input))
}

/// `ssh` from inside the lab to the guest (bounded: 60 s), with `input` on its standard input:
/// (exit status, standard output, standard error).
fn ssh_to_guest(lab: &netlab::NetLab, known: &Path, args: &[&str], input: &[u8]) -> (i32, String, String) {
    let mut c = Command::new("timeout");
    c.args([
        "60",
        "ip",
        "netns",
        "exec",
        &lab.ns,
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=accept-new",
    ])
    .arg("-o")
    .arg(format!("UserKnownHostsFile={}", known.display()))
    .args(["-o", "ConnectTimeout=20", "-o", "IdentitiesOnly=yes", "-l", "root"])
    .args(args)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut i = child.stdin.take().unwrap();
    let _ = i.write_all(input);
    drop(i);
    let o = child.wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const SSH_LISTENING: &str = "ssh: dropbear starting on 10.77.0.9:22";

/// Wait (bounded: 60 tries, 30 s) until the guest's SSH port takes a connection.
fn wait_for_port(lab: &netlab::NetLab) -> bool {
    for _ in 0..60 {
        let probe = format!("exec 3<>/dev/tcp/{SSH_GUEST}/22");
        let ok = Command::new("timeout")
            .args(["5", "ip", "netns", "exec", &lab.ns, "bash", "-c", &probe])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

/// The SSH boot, by Debian 13's kernel: a key not authorized, a password and a shell are refused; `printf
/// 'wrong\nPASS\n' | ssh -T` gets the prompt, the wrong passphrase counted, then unlocks;
/// the known host key is the build's; in the booted root nothing listens on 22 and the
/// interface has no address.
fn ssh_boot() -> Result<(), String> {
    let Some(ss) = ssh_setup() else { return Ok(()) };
    let s = setup().unwrap();
    let spec = netlab::LabSpec { exports: &[], dhcp: false, root_path: None, luns: &[], nvmf: None, tang: None };
    let lab = netlab::NetLab::start("ssh", &spec)?;
    let known = s.t.join("ssh-known_hosts");
    let _ = fs::remove_file(&known);
    let id = |k: &Path| format!("-i{}", k.display());
    let mut results: Vec<(String, (i32, String, String))> = Vec::new();
    let mut done = false;
    let d13 = trixie().unwrap();
    let log = boot_acting(&lab, &d13.kernel, &ss.image_d13, ROOT, &mut |text, _| {
        if done || !text.contains(SSH_LISTENING) {
            return;
        }
        done = true;
        if !wait_for_port(&lab) {
            return;
        }
        let guest = SSH_GUEST;
        let stranger = id(&ss.stranger);
        results.push(("stranger".into(), ssh_to_guest(&lab, &known, &[&stranger, guest, "true"], b"")));
        results.push((
            "password".into(),
            ssh_to_guest(
                &lab,
                &known,
                &[
                    "-o",
                    "PubkeyAuthentication=no",
                    "-o",
                    "PreferredAuthentications=password,keyboard-interactive",
                    guest,
                    "true",
                ],
                b"",
            ),
        ));
        let ecdsa = id(&ss.ecdsa);
        results.push(("shell".into(), ssh_to_guest(&lab, &known, &[&ecdsa, guest, "echo PWNED; /bin/sh -i"], b"")));
        let ed = id(&ss.ed25519);
        let answer = format!("wrong-passphrase\n{PASS}\n");
        results.push(("unlock".into(), ssh_to_guest(&lab, &known, &["-T", &ed, guest], answer.as_bytes())));
    });
    let _ = fs::write(leanrd_testkit::boot::console_path("ssh_unlock"), &log);
    let get = |n: &str| results.iter().find(|(k, _)| k == n).map(|(_, r)| r.clone());
    let mut bad = Vec::new();
    let Some(stranger) = get("stranger") else { return Err(format!("the SSH server never listened:\n{}", tail(&log))) };
    if stranger.0 == 0 || !stranger.2.contains("Permission denied (publickey)") {
        bad.push(format!("a key not authorized: {stranger:?}"));
    }
    let pw = get("password").unwrap();
    if pw.0 == 0 || !pw.2.contains("Permission denied (publickey)") {
        bad.push(format!("a password login: {pw:?}"));
    }
    let shell = get("shell").unwrap();
    if shell.1.contains("PWNED") || !shell.1.contains("Enter passphrase for sda3_crypt (/dev/vda3): ") {
        bad.push(format!("a command or shell: {shell:?}"));
    }
    let unlock = get("unlock").unwrap();
    for w in ["Enter passphrase for sda3_crypt", "wrong passphrase for sda3_crypt (2 left)", "sda3_crypt unlocked"] {
        if !unlock.1.contains(w) {
            bad.push(format!("the script's session lacks {w:?}: {unlock:?}"));
        }
    }
    for w in [
        "Linux version 6.12",
        "leanrd: loaded virtio_net",
        "unlocked as /dev/mapper/sda3_crypt with the passphrase typed",
        "ssh: server stopped",
        "down again (it was up for SSH only)",
        "ADDRS []",
        MARK,
    ] {
        if !log.contains(w) {
            bad.push(format!("the console lacks {w:?}"));
        }
    }
    if log.lines().any(|l| l.starts_with("LISTEN [") && l.contains(":22 ")) {
        bad.push("something listens on port 22 in the booted root".into());
    }
    // The host key the client met is one the build named.
    let o = Command::new("ssh-keygen").arg("-lf").arg(&known).output().unwrap();
    let met = String::from_utf8_lossy(&o.stdout);
    let fp = met.split_whitespace().nth(1).unwrap_or("none").to_string();
    if !ss.prints.contains(&fp) {
        bad.push(format!("the host key met ({fp}) is not the build's ({})", ss.prints));
    }
    eprintln!("ssh: host key {fp}; the script's session said: {:?}", unlock.1);
    if bad.is_empty() { Ok(()) } else { Err(format!("{}\n{}", bad.join("\n"), tail(&log))) }
}

/// 200 connections opened to the SSH port and left idle: the console prompt still takes the
/// passphrase typed on it.
fn ssh_flood_boot() -> Result<(), String> {
    let Some(ss) = ssh_setup() else { return Ok(()) };
    let spec = netlab::LabSpec { exports: &[], dhcp: false, root_path: None, luns: &[], nvmf: None, tang: None };
    let lab = netlab::NetLab::start("sshflood", &spec)?;
    let mut flood: Option<std::process::Child> = None;
    let mut typed = false;
    let log = boot_acting(&lab, &setup().unwrap().kernel, &ss.image, ROOT, &mut |text, input| {
        if flood.is_none() && text.contains(SSH_LISTENING) && wait_for_port(&lab) {
            // Bounded: 200 connections, held 40 s.
            let script = format!(
                "for i in $(seq 200); do exec {{fd}}<>/dev/tcp/{SSH_GUEST}/22 || break; done; echo FLOODED; sleep 40"
            );
            flood = Some(
                Command::new("timeout")
                    .args(["60", "ip", "netns", "exec", &lab.ns, "bash", "-c", &script])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
            std::thread::sleep(Duration::from_secs(3));
        }
        if flood.is_some() && !typed && text.contains("Enter passphrase for sda3_crypt") {
            typed = true;
            let _ = input.write_all(format!("{PASS}\r").as_bytes());
            let _ = input.flush();
        }
    });
    if let Some(mut f) = flood {
        let _ = f.kill();
        let _ = f.wait();
    }
    let _ = fs::write(leanrd_testkit::boot::console_path("ssh_flood"), &log);
    let want = ["unlocked as /dev/mapper/sda3_crypt with the passphrase typed", MARK];
    let missing: Vec<&&str> = want.iter().filter(|w| !log.contains(**w)).collect();
    if missing.is_empty() { Ok(()) } else { Err(format!("missing {missing:?}\n{}", tail(&log))) }
}

/// For bench/unlock.py (issue 52; ignored, run by the bench): the images it names, booted on
/// the disk bound to Tang ([`make_tang`]) in a lab of their own. `LEANRD_BENCH_UNLOCK` names
/// a JSON file: `{"out": DIR, "boots": [{"name", "image", "append", "how": "tang"|"ssh",
/// "marks": [...], "ssh_key", "ssh_args": [...], "newline", "guest"}]}`. A Tang boot has DHCP and tangd;
/// an SSH boot has neither: a thread waits (bounded) for the guest's port 22, then sends the
/// passphrase with `printf 'PASS\n' | ssh -T -i KEY root@GUEST ARGS...` (no newline when
/// `"newline": false`). Each boot leaves
/// OUT/NAME.json: its console, marks (seconds from QEMU's start), the SSH client's answer.
fn bench_unlock() -> Result<(), String> {
    let Ok(spec) = std::env::var("LEANRD_BENCH_UNLOCK") else { return Ok(()) };
    let spec: serde_json::Value = serde_json::from_str(&fs::read_to_string(&spec).map_err(|e| format!("{spec}: {e}"))?)
        .map_err(|e| e.to_string())?;
    let Some(s) = setup() else { return Err("no setup".into()) };
    let Some(ts) = tang_setup() else { return Err("no Tang setup".into()) };
    let out = PathBuf::from(spec["out"].as_str().ok_or("no out")?);
    let strs = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect()).unwrap_or_default()
    };
    for b in spec["boots"].as_array().ok_or("no boots")? {
        let name = b["name"].as_str().ok_or("a boot without a name")?;
        let image = PathBuf::from(b["image"].as_str().ok_or("no image")?);
        let ssh = b["how"] == "ssh";
        let tang = if ssh { None } else { Some(netlab::TangServer::Keys(&ts.db)) };
        let lab_spec = netlab::LabSpec { exports: &[], dhcp: !ssh, root_path: None, luns: &[], nvmf: None, tang };
        let lab = netlab::NetLab::start("bench", &lab_spec).map_err(|e| format!("the network lab: {e}"))?;
        let mut q = vec!["-drive".to_string(), format!("file={},if=virtio,format=raw,snapshot=on", ts.disk.display())];
        q.extend(lab.nics(&["52:54:00:12:34:81"], "virtio-net-pci", true)?);
        let q: Vec<&str> = q.iter().map(String::as_str).collect();
        // As users' machines boot (the benchmarks' way): the bzImage as it is, no test words.
        let cmd = qemu_command_as_is(&s.kernel, &image, b["append"].as_str().unwrap_or(""), &q, 300);
        let marks = strs(&b["marks"]);
        let (console, client) = std::thread::scope(|sc| {
            let client = ssh.then(|| {
                let (lab, out) = (&lab, &out);
                sc.spawn(move || {
                    let guest = b["guest"].as_str().unwrap_or(SSH_GUEST).to_string();
                    let started = Instant::now();
                    // Bounded: 240 tries, at most 300 s.
                    for _ in 0..240 {
                        let probe = format!("exec 3<>/dev/tcp/{guest}/22");
                        let up = Command::new("timeout")
                            .args(["2", "ip", "netns", "exec", &lab.ns, "bash", "-c", &probe])
                            .stderr(Stdio::null())
                            .status()
                            .is_ok_and(|s| s.success());
                        if up {
                            let open = started.elapsed().as_secs_f64();
                            let known = out.join(format!("{name}.known_hosts"));
                            let _ = fs::remove_file(&known);
                            let key = format!("-i{}", b["ssh_key"].as_str().unwrap_or(""));
                            let mut args = vec!["-T".to_string(), key, guest.clone()];
                            args.extend(strs(&b["ssh_args"]));
                            let args: Vec<&str> = args.iter().map(String::as_str).collect();
                            // cryptroot-unlock's non-interactive mode takes its standard input whole.
                            let nl = if b["newline"] == false { "" } else { "\n" };
                            let r = ssh_to_guest(lab, &known, &args, format!("{PASS}{nl}").as_bytes());
                            return serde_json::json!({"port_open_s": open, "done_s": started.elapsed().as_secs_f64(),
                                "rc": r.0, "stdout": r.1, "stderr": r.2});
                        }
                        if started.elapsed() > Duration::from_secs(300) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(500));
                    }
                    serde_json::json!({"error": "port 22 never opened"})
                })
            });
            let c = leanrd_testkit::boot::run_console(netlab::in_netns(&lab.ns, &cmd), None, &[], &marks);
            (c, client.map(|h| h.join().unwrap()))
        });
        let doc = serde_json::json!({"name": name, "console": console.console, "marks": console.marks,
            "vm_seconds": console.ran.as_secs_f64(), "ssh": client, "tang_log": lab.log("tang")});
        fs::write(out.join(format!("{name}.json")), doc.to_string()).map_err(|e| e.to_string())?;
        eprintln!("bench_unlock: {name}: {:.1} s", console.ran.as_secs_f64());
    }
    Ok(())
}
