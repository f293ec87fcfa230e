//! The request: what to build, from the command line and the configuration file merged in
//! one place. Each setting is defined once, in [`SETTINGS`]: its key, its option, its help.
//! `leanrd build`'s options are made from that table, and what they are given is read as
//! more of the file (the way ripgrep treats its config file as more arguments):
//! [`Settings::layered`] lays the command line's values over the file's and reads both with one
//! deserializer into [`Settings`], and [`Request::new`] fills in the defaults.

use std::fs;
use std::path::{Path, PathBuf};

use leanrd_archive::{Context, Result, invalid};
use leanrd_compress::{Format, Spec};
use serde::{Deserialize, Deserializer};

use crate::features::reject_nul;
use crate::modules::ModuleStrategy;

/// Settings as given: everything optional. /etc/leanrd/leanrd.toml holds the same keys as
/// the command line's options (command-line-only ones are skipped in the file).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The kernel release to build for (`--kver`, command line only); None: the running kernel.
    #[serde(skip)]
    pub kver: Option<String>,
    /// Root of the system to build for (`--sysroot`, command line only); None: /.
    #[serde(skip)]
    pub sysroot: Option<PathBuf>,
    /// Where proc/ and sys/ are read for host detection (`--host-root`, command line only, for
    /// fixture trees); None: /.
    #[serde(skip)]
    pub host_root: Option<PathBuf>,
    /// Compression of the image (`compress`); None: zstd at its default level.
    #[serde(default, deserialize_with = "from_text")]
    pub compress: Option<Spec>,
    /// Alignment of file data in an uncompressed image, in bytes, a multiple of 4 (`data_align`);
    /// None: 4096 when uncompressed.
    #[serde(default, deserialize_with = "data_align")]
    pub data_align: Option<u64>,
    /// Build a universal image, for any machine (`universal`); None: host-only.
    pub universal: Option<bool>,
    /// Features to add whether or not the machine needs them (`include`).
    #[serde(default)]
    pub include: Vec<String>,
    /// Features to leave out even where the machine needs them (`exclude`).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Modules never to put in the image, with every module that needs them (dracut's
    /// `omit_drivers`).
    #[serde(default)]
    pub omit_modules: Vec<String>,
    /// The /init executable (`init`); None: the one `find_init` finds.
    pub init: Option<PathBuf>,
    /// A directory of the user's own features (`features_dir`); None: /etc/leanrd/features.d under
    /// the sysroot.
    pub features_dir: Option<PathBuf>,
    /// The image; `{kver}` is replaced by the kernel release.
    pub output: Option<String>,
    /// Compression threads (`threads`); None: every core.
    pub threads: Option<u32>,
    /// Seconds each Tang server has at boot (`tang_timeout`); None: /init's default.
    pub tang_timeout: Option<u64>,
    /// Public keys that may unlock over SSH (`ssh_authorized_keys`): files in authorized_keys
    /// form. Empty: host-only images take /etc/leanrd/ssh/authorized_keys if there is one.
    #[serde(default)]
    pub ssh_authorized_keys: Vec<PathBuf>,
    /// The SSH server's port (`ssh_port`); None: 22.
    pub ssh_port: Option<u16>,
    /// Leave the exitrd in /run/initramfs for the way down (`exitrd`, "on" or "off"); None:
    /// when the root sits on more than a plain partition.
    #[serde(default, deserialize_with = "on_off")]
    pub exitrd: Option<bool>,
    /// Seconds each unmount of the way down has (`umount_timeout`, 0: no bound); None: /init's
    /// default.
    pub umount_timeout: Option<u64>,
    /// How compressed modules are stored: `decompress` (at build time) or `keep` (when the
    /// kernel decompresses them).
    #[serde(default, deserialize_with = "from_text")]
    pub module_compression: Option<ModuleStrategy>,
    /// Octal mode of new images (TOML `0o640` or the string "0640").
    #[serde(default, deserialize_with = "image_mode")]
    pub image_mode: Option<u32>,
}

fn from_text<'de, D: Deserializer<'de>, T: std::str::FromStr<Err: std::fmt::Display>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

fn on_off<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match String::deserialize(d)?.as_str() {
        "on" => Ok(Some(true)),
        "off" => Ok(Some(false)),
        x => Err(serde::de::Error::custom(format!("\"{x}\" is not \"on\" or \"off\""))),
    }
}

fn data_align<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let n = u64::deserialize(d)?;
    leanrd_archive::layout::check_data_align(n).map(Some).map_err(serde::de::Error::custom)
}

fn image_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ModeValue {
        Int(u32),
        Text(String),
    }
    match ModeValue::deserialize(d)? {
        ModeValue::Int(m) if m <= 0o7777 => Ok(Some(m)),
        ModeValue::Int(m) => Err(serde::de::Error::custom(format!("image_mode {m:#o} has bits beyond 0o7777"))),
        ModeValue::Text(t) => parse_mode(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// An octal file mode (`0640`, `640`, `0o640`).
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o7777 => Ok(m),
        _ => Err(format!("{s:?} is not an octal mode (e.g. 0600)")),
    }
}

/// One build setting, defined once: its key in leanrd.toml, its command-line option, the form
/// of its value and what it does. `leanrd build`'s options are made from it (so its `--help`,
/// leanrd-build(1) and the completions), and so are leanrd.toml(5) and docs/configuration.md;
/// a test holds the table against the keys [`Settings`] reads, and reads every example back.
/// An option's value is read by the same deserializer as the file's ([`Settings::layered`]),
/// so a value means the same in both and is refused with the same words.
pub struct Setting {
    /// The key in leanrd.toml.
    pub key: &'static str,
    /// The command-line option that sets it too (and wins over the file).
    pub flag: &'static str,
    /// The option's one-letter form, if it has one.
    pub short: Option<char>,
    /// How the option takes its value.
    pub arg: ArgKind,
    /// The option's value as `--help` names it (`FILE`, `N`); empty for a switch.
    pub value_name: &'static str,
    /// The form of its value in the file.
    pub value: &'static str,
    /// What it does; `{formats}` stands for the compression formats' names ([`Setting::text`]).
    pub doc: &'static str,
    /// A line of TOML setting it.
    pub example: &'static str,
}

impl Setting {
    /// What it does, as the help, the man page and the reference say it: [`Setting::doc`] with
    /// the compression formats' names put in (from [`Format::ALL`], never listed by hand).
    pub fn text(&self) -> String {
        let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
        let formats = match names.split_last() {
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        self.doc.replace("{formats}", &formats)
    }
}

/// How a setting's command-line option takes its value, and the TOML value it becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// A switch with no value: `--universal` is `universal = true`.
    Switch,
    /// One value, a TOML string: `--compress xz` is `compress = "xz"`.
    Text,
    /// One value, a TOML integer: `--threads 2` is `threads = 2`.
    Number,
    /// Repeatable, a TOML array of strings: `--include a --include b` is `include = ["a", "b"]`.
    List,
}

impl ArgKind {
    /// The TOML value the option's `values` (as given, in order) stand for.
    fn value(self, values: &[String]) -> Result<toml::Value, String> {
        let one = || values.last().cloned().unwrap_or_default();
        Ok(match self {
            ArgKind::Switch => toml::Value::Boolean(true),
            ArgKind::Text => toml::Value::String(one()),
            ArgKind::Number => {
                let v = one();
                toml::Value::Integer(
                    v.parse().map_err(|_| format!("{v:?} is not a whole number (of at most 63 bits)"))?,
                )
            }
            ArgKind::List => toml::Value::Array(values.iter().cloned().map(toml::Value::String).collect()),
        })
    }
}

/// Every setting leanrd.toml can hold.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "universal",
        flag: "--universal",
        short: None,
        arg: ArgKind::Switch,
        value_name: "",
        value: "true|false",
        doc: "Every storage, file-system and crypto driver: an image that boots on any machine. Default: a host-only \
              image, holding what this machine needs to mount its root.",
        example: "universal = true",
    },
    Setting {
        key: "compress",
        flag: "--compress",
        short: Some('c'),
        arg: ArgKind::Text,
        value_name: "FORMAT[:LEVEL]",
        value: "\"FORMAT[:LEVEL]\"",
        doc: "Compression of the image: {formats}, with a level where the format has one (zstd:19). none gives an \
              uncompressed image aligned for reflinks. Default: zstd:3.",
        example: "compress = \"xz\"",
    },
    Setting {
        key: "data_align",
        flag: "--data-align",
        short: None,
        arg: ArgKind::Number,
        value_name: "N",
        value: "N",
        doc: "Align every file's data in an uncompressed image to N bytes (a multiple of 4; the file system's block \
              size lets it be cloned from its source on XFS and Btrfs). Default: 4096 when uncompressed.",
        example: "data_align = 65536",
    },
    Setting {
        key: "include",
        flag: "--include",
        short: None,
        arg: ArgKind::List,
        value_name: "FEATURE",
        value: "[\"FEATURE\", ...]",
        doc: "Features to add whether or not the machine needs them: rescue, live, nfs, iscsi, nvmf, luks, lvm, \
              mdraid, ... (features/*.toml in the source, or the guide's list). The file's and the command line's \
              add up.",
        example: "include = [\"rescue\"]",
    },
    Setting {
        key: "exclude",
        flag: "--exclude",
        short: None,
        arg: ArgKind::List,
        value_name: "FEATURE",
        value: "[\"FEATURE\", ...]",
        doc: "Features to leave out even where the machine needs them (the boot proof then refuses an image that \
              would not boot).",
        example: "exclude = [\"microcode\"]",
    },
    Setting {
        key: "omit_modules",
        flag: "--omit-module",
        short: None,
        arg: ArgKind::List,
        value_name: "MODULE",
        value: "[\"MODULE\", ...]",
        doc: "Modules never to put in the image, nor any module that needs them (dracut's omit_drivers); the boot \
              proof refuses the image if the machine needs one.",
        example: "omit_modules = [\"floppy\"]",
    },
    Setting {
        key: "init",
        flag: "--init",
        short: None,
        arg: ArgKind::Text,
        value_name: "FILE",
        value: "\"PATH\"",
        doc: "The /init executable. Default: $LEANRD_INIT, else the one built into leanrd when the sysroot has \
              leanrd's architecture, else leanrd-init (another architecture's: leanrd-init-ARCH, such as \
              leanrd-init-aarch64) next to leanrd or in /usr/lib/leanrd.",
        example: "init = \"/usr/lib/leanrd/leanrd-init\"",
    },
    Setting {
        key: "features_dir",
        flag: "--features-dir",
        short: None,
        arg: ArgKind::Text,
        value_name: "DIR",
        value: "\"DIR\"",
        doc: "A directory of features of your own, which add to the built-in ones or replace those of the same name. \
              Default: /etc/leanrd/features.d under the sysroot.",
        example: "features_dir = \"/etc/leanrd/features.d\"",
    },
    Setting {
        key: "output",
        flag: "--output",
        short: Some('o'),
        arg: ArgKind::Text,
        value_name: "FILE",
        value: "\"PATH\"",
        doc: "Where the image goes; {kver} is replaced by the kernel release. Default: /boot/initrd.img-{kver} \
              under the sysroot.",
        example: "output = \"/boot/initramfs-{kver}.img\"",
    },
    Setting {
        key: "threads",
        flag: "--threads",
        short: None,
        arg: ArgKind::Number,
        value_name: "N",
        value: "N",
        doc: "Compression threads. Default: every core.",
        example: "threads = 2",
    },
    Setting {
        key: "tang_timeout",
        flag: "--tang-timeout",
        short: None,
        arg: ArgKind::Number,
        value_name: "SECONDS",
        value: "N",
        doc: "How long each Tang server of a container's clevis tokens has at boot, the network's start included, \
              before the next token and then the passphrase prompt (the kernel parameter rd.leanrd.tang_timeout= \
              wins over it). Default: 10.",
        example: "tang_timeout = 30",
    },
    Setting {
        key: "ssh_authorized_keys",
        flag: "--ssh-authorized-keys",
        short: None,
        arg: ArgKind::List,
        value_name: "FILE",
        value: "[\"FILE\", ...]",
        doc: "Unlock over SSH (feature ssh-unlock): files of public keys (authorized_keys lines: ed25519, ECDSA, \
              RSA, FIDO) that may log in to the image's SSH server, where the session is the passphrase prompt and \
              nothing else. Without it, a host-only image takes /etc/leanrd/ssh/authorized_keys if there is one. \
              The server's host keys are made once in /etc/leanrd/ssh/ and kept; the image is private.",
        example: "ssh_authorized_keys = [\"/root/.ssh/authorized_keys\"]",
    },
    Setting {
        key: "ssh_port",
        flag: "--ssh-port",
        short: None,
        arg: ArgKind::Number,
        value_name: "PORT",
        value: "PORT",
        doc: "The port the image's SSH server listens on. Default: 22.",
        example: "ssh_port = 2222",
    },
    Setting {
        key: "exitrd",
        flag: "--exitrd",
        short: None,
        arg: ArgKind::Text,
        value_name: "on|off",
        value: "\"on\"|\"off\"",
        doc: "The exitrd: at the switch to the root, /init leaves itself in /run/initramfs as `shutdown`, with a \
              record of what the boot built (md arrays, LVM volumes, LUKS mappings, loop devices, iSCSI sessions, \
              NVMe-oF controllers, an NFS root, a live CD to eject); systemd's shutdown returns there and the teardown takes it apart \
              top-down before the power goes. Default: on where the root sits on more than a plain partition (the \
              kernel parameter rd.leanrd.exitrd= wins over it).",
        example: "exitrd = \"off\"",
    },
    Setting {
        key: "umount_timeout",
        flag: "--umount-timeout",
        short: None,
        arg: ArgKind::Number,
        value_name: "SECONDS",
        value: "N",
        doc: "How long each unmount of the way down has before it is given up and the file system detached (0: \
              no bound; the kernel parameter rd.shutdown.timeout.umount= wins over it). Default: 90.",
        example: "umount_timeout = 20",
    },
    Setting {
        key: "module_compression",
        flag: "--module-compression",
        short: None,
        arg: ArgKind::Text,
        value_name: "HOW",
        value: "\"decompress\"|\"keep\"",
        doc: "Compressed modules (.ko.xz, .ko.zst, .ko.gz): decompress them at build time, the image compressed \
              once (the default: it boots faster, see `leanrd advise`), or keep them compressed where the kernel \
              decompresses that format itself. Decompressed modules are cached for the next build by their files' \
              identity: $LEANRD_CACHE_DIR (empty: no cache), else /var/cache/leanrd for root, else ~/.cache/leanrd.",
        example: "module_compression = \"keep\"",
    },
    Setting {
        key: "image_mode",
        flag: "--image-mode",
        short: None,
        arg: ArgKind::Text,
        value_name: "MODE",
        value: "0oMODE|\"MODE\"",
        doc: "Mode of the image, octal. Default: kept from the image replaced, else 0600. An image holding a file \
              that others may not read is never readable by others.",
        example: "image_mode = 0o640",
    },
];

/// The settings reference in Markdown: docs/configuration.md.
#[cfg(test)]
pub(crate) fn settings_markdown() -> String {
    let mut s = String::from(
        "# leanrd.toml\n\n<!-- Generated from crates/gen/src/request.rs (SETTINGS) by its unit tests \
         (LEANRD_BLESS=1 rewrites it): edit that, not this. -->\n\n\
         /etc/leanrd/leanrd.toml (or `leanrd build --config FILE`) holds defaults for `leanrd build`; also \
         `man 5 leanrd.toml`. Every key is optional, an unknown key is an error (named with its line), and an \
         option on the command line wins over the file (lists add up).\n\n",
    );
    for x in SETTINGS {
        s += &format!("- `{} = {}` (`{}`): {}\n", x.key, x.value, x.flag, x.text());
    }
    s += "\n## Example\n\n```toml\n";
    for x in SETTINGS {
        s += &format!("{}\n", x.example);
    }
    s += "```\n";
    s
}

impl Settings {
    /// The settings in `text`, read from `path` (named in errors, with the line).
    pub fn parse(text: &str, path: &Path) -> Result<Settings> {
        Settings::parse_table(text, path)?.try_into().map_err(|e: toml::de::Error| invalid!("{}: {e}", path.display()))
    }

    /// `text` as a table whose every key and value [`Settings`] takes.
    fn parse_table(text: &str, path: &Path) -> Result<toml::Table> {
        reject_nul(text, &path.display().to_string())?;
        let bad = |e: toml::de::Error| invalid!("{}: {}", path.display(), e.to_string().trim_end());
        // Read as Settings first: its errors name the line, which a table's values have lost.
        toml::from_str::<Settings>(text).map_err(bad)?;
        toml::from_str(text).map_err(bad)
    }

    /// The command line's settings over the configuration file at `path` (a missing file is no
    /// settings unless `required`). `args` are the options given, by key: a switch's values are
    /// ignored, a list's are in order, otherwise the last counts. A value given on the command
    /// line wins; lists add up, the command line's first. Both are read by one deserializer.
    pub fn layered(args: &[(&str, Vec<String>)], path: &Path, required: bool) -> Result<Settings> {
        let mut table = match fs::read_to_string(path) {
            Ok(t) => Settings::parse_table(&t, path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => toml::Table::new(),
            Err(e) => return Err(e).with_context(|| format!("{}: cannot read", path.display())),
        };
        for (key, values) in args {
            let value = command_line_value(key, values).map_err(|e| {
                let flag = SETTINGS.iter().find(|s| s.key == *key).map_or(*key, |s| s.flag);
                invalid!("{flag} {}: {e}", values.last().map(String::as_str).unwrap_or_default())
            })?;
            match (table.get_mut(*key), value) {
                (Some(toml::Value::Array(file)), toml::Value::Array(mut cli)) => {
                    cli.append(file);
                    *file = cli;
                }
                (_, value) => {
                    table.insert(key.to_string(), value);
                }
            }
        }
        table.try_into().map_err(|e: toml::de::Error| invalid!("{}: {e}", path.display()))
    }
}

/// The TOML value that the command-line option of the setting `key` stands for with `values`,
/// checked on its own as the file's would be (so that an error is the option's, not the
/// file's; the caller names the option).
pub fn command_line_value(key: &str, values: &[String]) -> Result<toml::Value, String> {
    let s = SETTINGS.iter().find(|s| s.key == key).ok_or_else(|| format!("{key}: not a setting"))?;
    let value = s.arg.value(values)?;
    let mut one = toml::Table::new();
    one.insert(key.to_string(), value.clone());
    one.try_into::<Settings>().map_err(|e| e.message().to_string())?;
    Ok(value)
}

/// What to build, every default filled in.
#[derive(Debug, Clone)]
pub struct Request {
    /// Root of the system the image is for (binaries, libraries, modules, firmware).
    pub sysroot: PathBuf,
    /// Where proc/ and sys/ are read for host detection ("/" normally; a fixture in tests).
    pub host_root: PathBuf,
    /// The kernel release the image is for (`6.1.0-28-amd64`).
    pub kver: String,
    /// Whether the image is universal (boots on any machine) rather than host-only.
    pub universal: bool,
    /// Features added whether or not the machine needs them.
    pub include: Vec<String>,
    /// Features left out even where the machine needs them.
    pub exclude: Vec<String>,
    /// Module names (normalised) left out with all that depend on them.
    pub omit_modules: Vec<String>,
    /// The directory of the user's own features, which add to or replace the built-in ones; None:
    /// the built-in ones only.
    pub features_dir: Option<PathBuf>,
    /// The /init executable on the build machine.
    pub init: PathBuf,
    /// The ELF machine of the system the image is for (its kernel's modules', else its
    /// programs'): never the build machine's unless the sysroot says nothing.
    pub machine: u16,
    /// For transformed files (decompressed modules, microcode bundles).
    pub tmp: PathBuf,
    /// The image's compression.
    pub compress: Spec,
    /// Alignment of file data in an uncompressed image, in bytes; None: not aligned.
    pub data_align: Option<u64>,
    /// Where the image is written (`{kver}` already replaced).
    pub output: PathBuf,
    /// Asked-for mode of the image (else kept from the image replaced, else private).
    pub image_mode: Option<u32>,
    /// Compression threads.
    pub threads: u32,
    /// Seconds each Tang server has at boot; None: /init's default.
    pub tang_timeout: Option<u64>,
    /// Files of public keys that may unlock over SSH.
    pub ssh_authorized_keys: Vec<PathBuf>,
    /// The SSH server's port; None: 22.
    pub ssh_port: Option<u16>,
    /// Whether the exitrd is left in /run/initramfs; None: where the root needs it.
    pub exitrd: Option<bool>,
    /// Seconds each unmount of the way down has; None: /init's default.
    pub umount_timeout: Option<u64>,
    /// How compressed modules are stored in the image.
    pub module_compression: ModuleStrategy,
    /// Where decompressed modules are cached between builds (see `crate::modcache`).
    pub module_cache: Option<PathBuf>,
}

impl Request {
    /// Fill in the defaults; `tmp` holds transformed files for the build's duration.
    pub fn new(s: Settings, tmp: &Path) -> Result<Request> {
        let sysroot = s.sysroot.unwrap_or_else(|| PathBuf::from("/"));
        let kver = match s.kver {
            Some(k) => k,
            None => crate::modules::running_kernel()?,
        };
        let compress = s.compress.unwrap_or(Spec::new(Format::Zstd));
        let output = match s.output {
            Some(o) => PathBuf::from(o.replace("{kver}", &kver)),
            None => sysroot.join(format!("boot/initrd.img-{kver}")),
        };
        let machine = crate::elf::target_machine(&sysroot, Some(&kver));
        Ok(Request {
            host_root: s.host_root.unwrap_or_else(|| PathBuf::from("/")),
            universal: s.universal.unwrap_or(false),
            include: s.include,
            exclude: s.exclude,
            omit_modules: s.omit_modules.iter().map(|m| leanrd_kmod::normalize(m)).collect(),
            features_dir: Some(s.features_dir.unwrap_or_else(|| sysroot.join("etc/leanrd/features.d"))),
            init: find_init(s.init, machine)?,
            machine,
            tmp: tmp.to_path_buf(),
            data_align: s.data_align.or((compress.format == Format::None).then_some(4096)),
            compress,
            output,
            image_mode: s.image_mode,
            threads: s.threads.unwrap_or_else(leanrd_compress::default_threads),
            tang_timeout: s.tang_timeout,
            ssh_authorized_keys: s.ssh_authorized_keys,
            ssh_port: s.ssh_port,
            exitrd: s.exitrd,
            umount_timeout: s.umount_timeout,
            module_compression: s.module_compression.unwrap_or_default(),
            module_cache: crate::modcache::base_dir(),
            sysroot,
            kver,
        })
    }
}

/// The /init executable for a system of ELF machine `machine` (the sysroot's): as given,
/// else $LEANRD_INIT, else the first of [`init_candidates`] that is there.
pub(crate) fn find_init(explicit: Option<PathBuf>, machine: u16) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    if let Some(p) = std::env::var_os("LEANRD_INIT") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok();
    let candidates = init_candidates(exe.as_deref().and_then(Path::parent), machine);
    candidates.iter().find(|p| p.is_file()).cloned().with_context(|| {
        let arch = crate::elf::machine_arch(machine).unwrap_or("ARCH");
        format!(
            "no /init for {} found (looked for {}): build it with `cargo build --profile init -p \
             leanrd-init --features standalone --target {arch}-unknown-linux-gnu` ({}see the README) or pass --init",
            crate::elf::machine_name(machine),
            candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", "),
            if machine == crate::elf::HOST_MACHINE { "" } else { "tools/arm64 init for aarch64; " },
        )
    })
}

/// Where an /init for ELF machine `machine` may be, in order, beside leanrd in `exe_dir`: the
/// build machine's own is `leanrd-init`, another architecture's `leanrd-init-ARCH`
/// (`leanrd-init-aarch64`); beside it, in a development tree (target/release/leanrd and
/// target/ARCH-unknown-linux-gnu/init/leanrd-init), in /usr/lib/leanrd/ and in
/// /usr/local/lib/leanrd/. One x86-64 leanrd builds images for both architectures this way: it
/// carries its own /init and finds the other one installed beside it.
pub(crate) fn init_candidates(exe_dir: Option<&Path>, machine: u16) -> Vec<PathBuf> {
    let name = match crate::elf::machine_arch(machine) {
        Some(_) if machine == crate::elf::HOST_MACHINE => "leanrd-init".to_string(),
        Some(arch) => format!("leanrd-init-{arch}"),
        None => return Vec::new(),
    };
    let arch = crate::elf::machine_arch(machine).unwrap_or_default();
    let mut v = Vec::new();
    if let Some(dir) = exe_dir {
        v.push(dir.join(&name));
        if let Some(target) = dir.parent() {
            v.push(target.join(format!("{arch}-unknown-linux-gnu/init/leanrd-init")));
        }
    }
    for dir in ["/usr/lib/leanrd", "/usr/local/lib/leanrd"] {
        v.push(Path::new(dir).join(&name));
    }
    v
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Each architecture's /init by its own name: the build machine's `leanrd-init`, another's
    /// `leanrd-init-ARCH`, beside leanrd and in the development tree by its target triple.
    #[test]
    fn each_architecture_has_its_own_init() {
        let exe = Path::new("/x/target/release");
        let native = init_candidates(Some(exe), crate::elf::HOST_MACHINE);
        let arch = crate::elf::machine_arch(crate::elf::HOST_MACHINE).unwrap();
        assert_eq!(native[0], Path::new("/x/target/release/leanrd-init"));
        assert_eq!(native[1], PathBuf::from(format!("/x/target/{arch}-unknown-linux-gnu/init/leanrd-init")));
        assert_eq!(native[2], Path::new("/usr/lib/leanrd/leanrd-init"));
        let other = if crate::elf::HOST_MACHINE == 62 { 183 } else { 62 };
        let oarch = crate::elf::machine_arch(other).unwrap();
        let foreign = init_candidates(Some(exe), other);
        assert_eq!(foreign[0], PathBuf::from(format!("/x/target/release/leanrd-init-{oarch}")));
        assert_eq!(foreign[1], PathBuf::from(format!("/x/target/{oarch}-unknown-linux-gnu/init/leanrd-init")));
        assert_eq!(foreign[3], PathBuf::from(format!("/usr/local/lib/leanrd/leanrd-init-{oarch}")));
        assert!(init_candidates(Some(exe), 243).is_empty(), "no /init is built for riscv");
        if std::env::var_os("LEANRD_INIT").is_none() {
            let e = find_init(None, 243).unwrap_err().to_string();
            assert!(e.starts_with("no /init for riscv found"), "{e}");
        }
    }

    /// The table and the keys the file takes are the same set (serde names every key it
    /// expects when it meets one it does not), and every example is read back as a change.
    #[test]
    fn every_setting_is_documented_and_read_back() {
        let e = Settings::parse("no_such_key = 1\n", Path::new("f")).unwrap_err().to_string();
        assert_same_keys(&e, SETTINGS.iter().map(|s| s.key));
        for x in SETTINGS {
            let s = Settings::parse(x.example, Path::new("f")).unwrap_or_else(|e| panic!("{}: {e}", x.example));
            assert_ne!(s, Settings::default(), "{} changed nothing", x.example);
            assert!(x.example.starts_with(&format!("{} = ", x.key)), "{}", x.example);
            assert!(x.text().ends_with('.') && !x.text().contains("{formats}"), "{}", x.key);
        }
        // The file the package installs: its commented lines, uncommented, are settings.
        let shipped = include_str!("../../../packaging/leanrd.toml");
        let uncommented: String = shipped
            .lines()
            .filter_map(|l| l.strip_prefix('#').filter(|l| l.contains(" = ")))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(uncommented.lines().count() >= 6, "{uncommented}");
        Settings::parse(&uncommented, Path::new("packaging/leanrd.toml")).unwrap();
    }

    /// The features the `include` setting's help names as examples are built-in ones.
    #[test]
    fn the_features_named_in_the_help_exist() {
        let all = crate::features::load(None).unwrap();
        let doc = SETTINGS.iter().find(|s| s.key == "include").unwrap().doc;
        let list = doc.split_once(": ").unwrap().1.split(", ...").next().unwrap();
        for name in list.split(", ") {
            assert!(all.contains_key(name), "{name} in the help of include is no built-in feature");
        }
    }

    /// The keys serde names in `e` (its "unknown field ..., expected one of ..." error) are
    /// `documented`, no more and no fewer.
    pub(crate) fn assert_same_keys<'a>(e: &str, documented: impl Iterator<Item = &'a str>) {
        let expected = e.split("expected one of ").nth(1).unwrap_or_else(|| panic!("{e}"));
        let mut keys: Vec<&str> = expected.split(", ").map(|k| k.trim().trim_matches('`')).collect();
        let mut documented: Vec<&str> = documented.collect();
        keys.sort();
        documented.sort();
        assert_eq!(keys, documented, "{e}");
    }

    #[test]
    fn the_committed_reference_is_current() {
        let md = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        if std::env::var_os("LEANRD_BLESS").is_some() {
            fs::write(md, settings_markdown()).unwrap();
        }
        let have = fs::read_to_string(md).unwrap_or_default();
        assert!(
            have == settings_markdown(),
            "{md} is not what SETTINGS says: run `LEANRD_BLESS=1 cargo test -p leanrd-gen`"
        );
    }

    #[test]
    fn the_command_line_wins_and_lists_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("leanrd.toml");
        fs::write(
            &file,
            "compress = \"xz:6\"\nthreads = 2\ninclude = [\"luks\"]\nimage_mode = \"0640\"\nmodule_compression = \"keep\"\n",
        )
        .unwrap();
        let args = |a: &[(&str, &[&str])]| -> Vec<(&'static str, Vec<String>)> {
            a.iter()
                .map(|(k, v)| {
                    let key = SETTINGS.iter().find(|s| s.key == *k).unwrap().key;
                    (key, v.iter().map(|x| x.to_string()).collect())
                })
                .collect()
        };
        let cli = args(&[("threads", &["1"]), ("include", &["rescue", "nfs"]), ("universal", &[])]);
        let s = Settings::layered(&cli, &file, true).unwrap();
        assert_eq!(s.threads, Some(1));
        assert_eq!(s.compress.unwrap().to_string(), "xz:6");
        assert_eq!(s.include, ["rescue", "nfs", "luks"]);
        assert_eq!(s.image_mode, Some(0o640));
        assert_eq!(s.module_compression, Some(ModuleStrategy::Keep));
        assert_eq!(s.universal, Some(true));
        // A missing file is no settings unless it was asked for.
        let none = dir.path().join("none.toml");
        assert_eq!(Settings::layered(&[], &none, false).unwrap(), Settings::default());
        assert!(Settings::layered(&[], &none, true).unwrap_err().to_string().contains("none.toml: cannot read"));
        // The command line's values are read as the file's, and an error names the option.
        let e = |k: &str, v: &str| Settings::layered(&args(&[(k, &[v])]), &none, false).unwrap_err().to_string();
        assert!(e("threads", "x").starts_with("--threads x: \"x\" is not a whole number"), "{}", e("threads", "x"));
        assert!(e("threads", " 2").contains("not a whole number"), "{}", e("threads", " 2"));
        assert!(e("data_align", "6").contains("--data-align 6: ") && e("data_align", "6").contains("multiple of 4"));
        assert!(e("compress", "zip").starts_with("--compress zip: "), "{}", e("compress", "zip"));
        assert!(e("image_mode", "9").starts_with("--image-mode 9: "), "{}", e("image_mode", "9"));
        assert!(e("threads", "-1").starts_with("--threads -1: "), "{}", e("threads", "-1"));
        // Every setting's example, given on the command line instead, means what it means in the file.
        for x in SETTINGS {
            let from_file = Settings::parse(x.example, Path::new("f")).unwrap();
            let values: Vec<String> = match x.example.split_once(" = ").unwrap().1.parse::<toml::Value>() {
                Ok(toml::Value::Array(a)) => a.iter().map(|v| v.as_str().unwrap().to_string()).collect(),
                Ok(toml::Value::String(t)) => vec![t],
                Ok(toml::Value::Boolean(_)) => vec![],
                // The one text option the file also takes as an integer: the octal mode.
                Ok(toml::Value::Integer(n)) if x.arg == ArgKind::Text => vec![format!("0{n:o}")],
                Ok(v) => vec![v.to_string()],
                Err(e) => panic!("{}: {e}", x.example),
            };
            let from_args = Settings::layered(&[(x.key, values)], &none, false).unwrap();
            assert_eq!(from_args, from_file, "{}", x.key);
        }
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = |t: &str| Settings::parse(t, Path::new("leanrd.toml")).unwrap_err().to_string();
        assert!(
            e("threads = 2\ncompress = \"zip\"\n").starts_with("leanrd.toml: TOML parse error at line 2"),
            "{}",
            e("compress = \"zip\"\n")
        );
        assert!(e("data_align = 6\n").contains("multiple of 4"), "{}", e("data_align = 6\n"));
        assert!(e("image_mode = 0o17777\n").contains("beyond 0o7777"));
        assert!(e("module_compression = \"lz4\"\n").contains("not a module strategy (decompress, keep)"));
        assert!(e("kver = \"6.1\"\n").contains("kver"), "command-line-only keys are not in the file");
        let exitrd = e("threads = 1\nexitrd = \"maybe\"\n");
        assert!(exitrd.contains("line 2") && exitrd.contains("\"maybe\" is not \"on\" or \"off\""), "{exitrd}");
        let p = |t: &str| Settings::parse(t, Path::new("leanrd.toml")).unwrap();
        assert_eq!(p("exitrd = \"off\"\numount_timeout = 0\n").exitrd, Some(false));
        assert_eq!(p("exitrd = \"on\"\n").exitrd, Some(true));
        assert_eq!(p("umount_timeout = 20\n").umount_timeout, Some(20));
    }

    /// Bounded mutation fuzzing of the configuration parser: an error names the file; never
    /// a panic.
    #[test]
    fn mutated_configs_never_panic() {
        let text = "compress = \"zstd:3\"\ndata_align = 4096\nuniversal = false\ninclude = [\"luks\"]\n\
                    exclude = []\ninit = \"/usr/lib/leanrd/leanrd-init\"\noutput = \"/boot/initrd.img-{kver}\"\n\
                    threads = 2\nimage_mode = 0o600\n";
        let path = Path::new("leanrd.toml");
        assert!(Settings::parse(text, path).is_ok());
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..3000 {
            let t = crate::features::mutate_toml(&mut state, text);
            if let Err(e) = Settings::parse(&t, path) {
                assert!(e.to_string().starts_with("leanrd.toml"), "case {i}: {e}");
            }
        }
    }
}
