//! The console keymap for the passphrase prompt: found in the system's configuration and
//! compiled at build time into the binary form `loadkeys -b` writes (busybox's `loadkmap`
//! format), which /init applies with the VT's KDSKBENT ioctl — no loadkeys and no keymap tree
//! in the image. Sources, first found wins:
//!
//! 1. `vconsole.keymap=` / `rd.vconsole.keymap=` on the build machine's command line
//!    (host-only builds);
//! 2. `KEYMAP=` in /etc/vconsole.conf (systemd);
//! 3. Debian's console-setup: the keymap setupcon cached
//!    (/etc/console-setup/cached_*.kmap.gz), else /etc/default/keyboard's XKB settings
//!    through ckbcomp.
//!
//! The kernel's own keymap is US: "us" without variant or options needs nothing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use leanrd_archive::{Context, Result, bail};

use crate::plan::host_path;

/// Where a keymap comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// A kbd keymap by name (`de-latin1`) that the system's keymap directories do not have
    /// (Debian's): the XKB layout of that name, through ckbcomp.
    Named(String),
    /// A keymap file (console-setup's cache, or a kbd keymap found by name).
    File(PathBuf),
    /// XKB settings for ckbcomp: model, layout, variant, options.
    Xkb {
        /// The keyboard model (`XKBMODEL`: `pc105`).
        model: String,
        /// The layout (`XKBLAYOUT`: `de`).
        layout: String,
        /// The layout's variant (`XKBVARIANT`: `nodeadkeys`); empty: the layout's default.
        variant: String,
        /// XKB options (`XKBOPTIONS`: `ctrl:nocaps`); empty: none.
        options: String,
    },
}

/// The keymap to compile, with the name /init knows it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// The name /init knows it by: the image holds it as `NAME.bmap` under
    /// `leanrd_contract::KEYMAP_DIR`.
    pub name: String,
    /// What it is compiled from.
    pub source: Source,
    /// Where the setting was found, for messages.
    pub origin: String,
}

/// `KEY=value` lines of a shell-style configuration file (quotes removed).
fn shell_vars(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if l.starts_with('#') {
                return None;
            }
            let (k, v) = l.split_once('=')?;
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

fn var<'a>(vars: &'a [(String, String)], k: &str) -> Option<&'a str> {
    vars.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
}

/// A file name usable in the image for a keymap name.
fn safe_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.+".contains(c) { c } else { '_' }).collect()
}

/// The console as the system sets it up: the keymap the passphrase prompt uses and the
/// font, read once with the other facts (see `host::read_config`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ConsoleSetup {
    /// The keymap to compile; None for the kernel's US keymap.
    pub keymap: Option<Wanted>,
    /// The console font the system sets; None when it sets none.
    pub font: Option<Font>,
    /// The file of that font, found under the system root with the facts (compose reads it):
    /// None when there is nothing to load ([`Font::is_default`]), an error saying where it
    /// was looked for when it is not there.
    pub font_file: Option<std::result::Result<PathBuf, String>>,
}

/// The console font the system sets, as its configuration says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Font {
    /// systemd's /etc/vconsole.conf: `FONT=` (a kbd font name or file), with `FONT_MAP=` and
    /// `FONT_UNIMAP=`.
    Vconsole {
        /// `FONT=` (`eurlatgr`).
        font: String,
        /// `FONT_MAP=`, if set.
        map: Option<String>,
        /// `FONT_UNIMAP=`, if set.
        unimap: Option<String>,
        /// The file it was read from.
        file: PathBuf,
    },
    /// Debian's console-setup (/etc/default/console-setup): `FONT=` (font files, which
    /// setupcon prefers when set), else the font setupcon makes of `CODESET=`, `FONTFACE=` and
    /// `FONTSIZE=`.
    ConsoleSetup {
        /// `FONT=` (`Lat15-Terminus16.psf.gz`), if set.
        font: Option<String>,
        /// `CODESET=` (`Lat15`, `guess`), if set.
        codeset: Option<String>,
        /// `CHARMAP=` (`UTF-8`, `guess`), if set: the code set setupcon guesses from.
        charmap: Option<String>,
        /// `FONTFACE=`; `Fixed` when unset.
        face: String,
        /// `FONTSIZE=`; `8x16` when unset.
        size: String,
        /// The file it was read from.
        file: PathBuf,
    },
}

impl Font {
    /// The setting, for messages: `FONTFACE=Terminus FONTSIZE=16x32 in /etc/default/console-setup`.
    pub(crate) fn setting(&self) -> String {
        match self {
            Font::Vconsole { font, file, .. } => format!("FONT={font} in {}", file.display()),
            Font::ConsoleSetup { font: Some(f), file, .. } => format!("FONT={f} in {}", file.display()),
            Font::ConsoleSetup { face, size, file, .. } => {
                format!("FONTFACE={face} FONTSIZE={size} in {}", file.display())
            }
        }
    }

    /// Whether the setting is console-setup's default (Fixed or VGA 8x16, no `FONT=`), which
    /// looks like the kernel's own VGA font: nothing to load.
    pub(crate) fn is_default(&self) -> bool {
        matches!(self, Font::ConsoleSetup { font: None, face, size, .. }
            if matches!(face.as_str(), "Fixed" | "VGA") && matches!(size.as_str(), "8x16" | "16"))
    }
}

/// The console's keymap and font as the system under `sysroot` sets them; host-only, with
/// this boot's command line (`cmdline`), whose `vconsole.keymap=` wins.
pub(crate) fn console_setup(sysroot: &Path, cmdline: Option<&str>) -> ConsoleSetup {
    let vconsole = host_path(sysroot, "/etc/vconsole.conf");
    let vconsole_vars = fs::read_to_string(&vconsole).ok().map(|t| shell_vars(&t));
    let mut keymap = keymap_setting(sysroot, cmdline.unwrap_or(""), &vconsole, vconsole_vars.as_deref());
    // A kbd keymap by name is looked up now, with the other files: compose compiles the file.
    if let Some(w) = &mut keymap
        && let Source::Named(n) = &w.source
        && let Some(p) = find_named(sysroot, n)
    {
        w.source = Source::File(p);
    }
    let font = font_setting(sysroot, &vconsole, vconsole_vars.as_deref());
    let font_file = font.as_ref().and_then(|f| crate::font::find(sysroot, f));
    ConsoleSetup { keymap, font, font_file }
}

/// The keymap the system's configuration asks for; None for the kernel's US keymap.
fn keymap_setting(
    sysroot: &Path,
    cmdline: &str,
    vconsole: &Path,
    vconsole_vars: Option<&[(String, String)]>,
) -> Option<Wanted> {
    let from_cmdline = cmdline.split_whitespace().rev().find_map(|w| {
        w.strip_prefix("rd.vconsole.keymap=").or_else(|| w.strip_prefix("vconsole.keymap=")).map(str::to_string)
    });
    if let Some(k) = from_cmdline {
        return named(k, "the kernel command line".into());
    }
    if let Some(k) = vconsole_vars.and_then(|v| var(v, "KEYMAP")) {
        return named(k.to_string(), vconsole.display().to_string());
    }
    let keyboard = host_path(sysroot, "/etc/default/keyboard");
    let vars = shell_vars(&fs::read_to_string(&keyboard).ok()?);
    let layout = var(&vars, "XKBLAYOUT").unwrap_or("us").to_string();
    let variant = var(&vars, "XKBVARIANT").unwrap_or("").to_string();
    let options = var(&vars, "XKBOPTIONS").unwrap_or("").to_string();
    let model = var(&vars, "XKBMODEL").unwrap_or("pc105").to_string();
    if layout == "us" && variant.is_empty() && options.is_empty() {
        return None;
    }
    let name = safe_name(
        &[layout.as_str(), variant.as_str()].iter().filter(|x| !x.is_empty()).cloned().collect::<Vec<_>>().join("-"),
    );
    // setupcon's cache is exactly what the console uses (it is made from the same settings).
    let cached = fs::read_dir(host_path(sysroot, "/etc/console-setup")).ok().and_then(|rd| {
        let mut v: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with("cached_") && n.ends_with(".kmap.gz")
                })
            })
            .collect();
        v.sort();
        v.pop()
    });
    let source = match cached {
        Some(p) => Source::File(p),
        None => Source::Xkb { model, layout, variant, options },
    };
    Some(Wanted { name, source, origin: keyboard.display().to_string() })
}

/// The console font the system sets: vconsole.conf's `FONT=` first, else console-setup's
/// settings.
fn font_setting(sysroot: &Path, vconsole: &Path, vconsole_vars: Option<&[(String, String)]>) -> Option<Font> {
    if let Some(v) = vconsole_vars
        && let Some(f) = var(v, "FONT")
    {
        return Some(Font::Vconsole {
            font: f.to_string(),
            map: var(v, "FONT_MAP").map(str::to_string),
            unimap: var(v, "FONT_UNIMAP").map(str::to_string),
            file: vconsole.to_path_buf(),
        });
    }
    let cs = host_path(sysroot, "/etc/default/console-setup");
    let vars = shell_vars(&fs::read_to_string(&cs).ok()?);
    Some(Font::ConsoleSetup {
        font: var(&vars, "FONT").map(str::to_string),
        codeset: var(&vars, "CODESET").map(str::to_string),
        charmap: var(&vars, "CHARMAP").map(str::to_string),
        face: var(&vars, "FONTFACE").unwrap_or("Fixed").to_string(),
        size: var(&vars, "FONTSIZE").unwrap_or("8x16").to_string(),
        file: cs,
    })
}

fn named(k: String, origin: String) -> Option<Wanted> {
    (k != "us").then(|| Wanted { name: safe_name(&k), source: Source::Named(k), origin })
}

/// The system's keymap directories (kbd's, by distribution).
const KEYMAP_DIRS: [&str; 5] = [
    "/usr/share/keymaps",
    "/usr/share/kbd/keymaps",
    "/usr/lib/kbd/keymaps",
    "/lib/kbd/keymaps",
    "/usr/share/rescue/keymaps",
];

/// A keymap file by name under the system's keymap directories (`NAME.map`, compressed or
/// not; `NAME.kmap` for Debian's console-data).
fn find_named(sysroot: &Path, name: &str) -> Option<PathBuf> {
    let wanted: Vec<String> = ["map", "map.gz", "map.bz2", "map.xz", "map.zst", "kmap", "kmap.gz"]
        .iter()
        .map(|e| format!("{name}.{e}"))
        .collect();
    for d in KEYMAP_DIRS {
        let mut stack = vec![host_path(sysroot, d)];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            entries.sort();
            for p in entries {
                if p.is_dir() {
                    stack.push(p);
                } else if p.file_name().is_some_and(|n| wanted.iter().any(|w| *w == n.to_string_lossy())) {
                    return Some(p);
                }
            }
        }
    }
    None
}

/// Run a program to its end, its output as bytes; fails with its message.
fn output(c: &mut Command, what: &str, input: Option<&[u8]>) -> Result<Vec<u8>> {
    use std::io::Write;
    let mut child = c
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("{what}: cannot run it"))?;
    if let (Some(i), Some(mut w)) = (input, child.stdin.take()) {
        w.write_all(i).with_context(|| format!("{what}: writing its input"))?;
    }
    let o = child.wait_with_output().with_context(|| format!("{what}: waiting for it"))?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        let last: Vec<&str> = err.lines().filter(|l| !l.starts_with("WARNING")).collect();
        bail!("{what} failed ({}): {}", o.status, last.join("; "));
    }
    Ok(o.stdout)
}

/// The binary keymap: 7 bytes "bkeymap", 256 flag bytes (which of the kernel's keymaps are
/// defined), then 128 16-bit entries per defined keymap.
pub(crate) fn check_bkeymap(b: &[u8]) -> std::result::Result<usize, String> {
    let body = b.strip_prefix(b"bkeymap").ok_or("not a binary keymap (no \"bkeymap\" magic)")?;
    if body.len() < 256 {
        return Err("truncated flags".into());
    }
    let maps = body[..256].iter().filter(|f| **f != 0).count();
    if body.len() != 256 + maps * 256 {
        return Err(format!("{} bytes for {maps} keymaps, not {}", body.len(), 256 + maps * 256));
    }
    Ok(maps)
}

/// Compile the keymap into `dir`; the file written.
pub(crate) fn compile(w: &Wanted, dir: &Path) -> Result<PathBuf> {
    let loadkeys = |file: Option<&Path>, input: Option<&[u8]>| -> Result<Vec<u8>> {
        let mut c = Command::new("loadkeys");
        // -u: the console runs in Unicode; characters past ASCII are kept as Unicode.
        c.args(["-b", "-q", "-u"]).arg(file.map(Path::as_os_str).unwrap_or("-".as_ref()));
        output(&mut c, "loadkeys -b (install kbd)", input)
    };
    let bin = match &w.source {
        Source::File(p) => loadkeys(Some(p), None)?,
        // Debian keeps no kbd keymap tree: an XKB layout of that name, through ckbcomp.
        Source::Named(n) => {
            let (layout, variant) = n.split_once('-').unwrap_or((n, ""));
            let mut c = Command::new("ckbcomp");
            c.arg(layout);
            if !variant.is_empty() && variant != "latin1" {
                c.arg(variant);
            }
            let text = output(&mut c, &format!("keymap {n}: not in {}; ckbcomp", KEYMAP_DIRS.join(", ")), None)?;
            loadkeys(None, Some(&text))?
        }
        Source::Xkb { model, layout, variant, options } => {
            let mut c = Command::new("ckbcomp");
            c.args(["-model", model, "-layout", layout]);
            if !variant.is_empty() {
                c.args(["-variant", variant]);
            }
            if !options.is_empty() {
                c.args(["-option", options]);
            }
            let text = output(&mut c, "ckbcomp (install console-setup)", None)?;
            loadkeys(None, Some(&text))?
        }
    };
    if let Err(e) = check_bkeymap(&bin) {
        bail!("loadkeys -b output: {e}");
    }
    fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    let out = dir.join(format!("{}.bmap", w.name));
    fs::write(&out, bin).with_context(|| format!("{}: cannot write", out.display()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_names_the_keymap() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path().join("sys");
        let wanted = |cmdline: Option<&str>| console_setup(&sys, cmdline).keymap;
        fs::create_dir_all(sys.join("etc/default")).unwrap();
        assert_eq!(wanted(Some("")), None, "nothing configured: the kernel's US keymap");
        fs::write(sys.join("etc/default/keyboard"), "XKBMODEL=\"pc105\"\nXKBLAYOUT=\"us\"\n").unwrap();
        assert_eq!(wanted(Some("")), None);
        fs::write(sys.join("etc/default/keyboard"), "XKBLAYOUT=\"de\"\nXKBVARIANT=\"nodeadkeys\"\n").unwrap();
        let w = wanted(Some("")).unwrap();
        assert_eq!(w.name, "de-nodeadkeys");
        assert_eq!(
            w.source,
            Source::Xkb {
                model: "pc105".into(),
                layout: "de".into(),
                variant: "nodeadkeys".into(),
                options: "".into()
            }
        );
        fs::create_dir_all(sys.join("etc/console-setup")).unwrap();
        fs::write(sys.join("etc/console-setup/cached_UTF-8_del.kmap.gz"), b"").unwrap();
        assert!(matches!(wanted(Some("")).unwrap().source, Source::File(_)), "setupcon's cache first");
        fs::write(sys.join("etc/vconsole.conf"), "# x\nKEYMAP=fr\nFONT=eurlatgr\n").unwrap();
        assert_eq!(wanted(Some("")).unwrap().source, Source::Named("fr".into()));
        let cmdline = "root=/dev/sda1 rd.vconsole.keymap=sv-latin1 quiet\n";
        assert_eq!(wanted(Some(cmdline)).unwrap().source, Source::Named("sv-latin1".into()));
        assert_eq!(wanted(None).unwrap().source, Source::Named("fr".into()), "universal: not this boot's");
        // A kbd keymap by name is found with the facts, so compose only compiles a file.
        let kbd = sys.join("usr/share/kbd/keymaps/i386/azerty");
        fs::create_dir_all(&kbd).unwrap();
        fs::write(kbd.join("fr.map.gz"), b"").unwrap();
        assert_eq!(wanted(None).unwrap().source, Source::File(kbd.join("fr.map.gz")));
        assert_eq!(wanted(None).unwrap().name, "fr");
    }

    #[test]
    fn the_configuration_names_the_font() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path().join("sys");
        let font = || console_setup(&sys, None).font;
        assert_eq!(font(), None);
        fs::create_dir_all(sys.join("etc/default")).unwrap();
        let cs = sys.join("etc/default/console-setup");
        fs::write(&cs, "CODESET=\"guess\"\nFONTFACE=\"Fixed\"\nFONTSIZE=\"8x16\"\n").unwrap();
        let f = font().unwrap();
        assert_eq!(
            f,
            Font::ConsoleSetup {
                font: None,
                codeset: Some("guess".into()),
                charmap: None,
                face: "Fixed".into(),
                size: "8x16".into(),
                file: cs.clone()
            }
        );
        assert!(f.is_default(), "Debian's default looks like the kernel's font");
        fs::write(&cs, "FONT=\"Lat15-Terminus32x16.psf.gz\"\nFONTFACE=\"Terminus\"\nFONTSIZE=\"16x32\"\n").unwrap();
        let f = font().unwrap();
        assert!(matches!(&f, Font::ConsoleSetup { font: Some(x), .. } if x == "Lat15-Terminus32x16.psf.gz"));
        assert!(!f.is_default());
        assert_eq!(f.setting(), format!("FONT=Lat15-Terminus32x16.psf.gz in {}", cs.display()));
        // vconsole.conf's FONT= first; without it, console-setup's.
        let vc = sys.join("etc/vconsole.conf");
        fs::write(&vc, "KEYMAP=de\n").unwrap();
        assert!(matches!(font(), Some(Font::ConsoleSetup { .. })));
        fs::write(&vc, "KEYMAP=de\nFONT=eurlatgr\nFONT_UNIMAP=x\n").unwrap();
        let f = font().unwrap();
        assert_eq!(
            f,
            Font::Vconsole { font: "eurlatgr".into(), map: None, unimap: Some("x".into()), file: vc.clone() }
        );
        assert_eq!(f.setting(), format!("FONT=eurlatgr in {}", vc.display()));
    }

    #[test]
    fn binary_keymaps_are_checked() {
        let mut b = b"bkeymap".to_vec();
        b.extend([1u8, 0, 1].iter().chain(&[0u8; 253]));
        b.extend([0u8; 512]);
        assert_eq!(check_bkeymap(&b), Ok(2));
        assert!(check_bkeymap(&b[..b.len() - 1]).is_err());
        assert!(check_bkeymap(b"bkeymaq").is_err());
    }

    /// With kbd and console-setup installed: the German layout compiles, and its Y and Z
    /// keys are swapped against the kernel's US map.
    #[test]
    fn compiles_a_german_keymap() {
        if !testable() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let w = Wanted {
            name: "de".into(),
            source: Source::Xkb { model: "pc105".into(), layout: "de".into(), variant: "".into(), options: "".into() },
            origin: "test".into(),
        };
        let p = compile(&w, t.path()).unwrap();
        let b = fs::read(p).unwrap();
        let maps = check_bkeymap(&b).unwrap();
        assert!(maps >= 2);
        // Keymap 0 (plain), keycode 21 (US "y") and 44 (US "z").
        let key = |code: usize| u16::from_le_bytes([b[7 + 256 + code * 2], b[7 + 256 + code * 2 + 1]]);
        assert_eq!(key(21) & 0xff, u16::from(b'z'));
        assert_eq!(key(44) & 0xff, u16::from(b'y'));
    }

    fn testable() -> bool {
        let ok = ["loadkeys", "ckbcomp"].iter().all(|p| Command::new(p).arg("--help").output().is_ok());
        if !ok {
            leanrd_testkit::skip::<()>("loadkeys (kbd) or ckbcomp (console-setup) not installed");
        }
        ok
    }
}
