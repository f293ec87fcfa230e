//! The console font: the file the system's setting names, found as setupcon (Debian's
//! console-setup) and kbd's setfont (systemd's vconsole.conf) find it, decompressed at build
//! time and checked with the contract's PSF reader, then put in the image as `NAME.psf`
//! under `leanrd_contract::FONT_DIR`. /init loads it with KDFONTOP before the first prompt.

use std::fs;
use std::path::{Path, PathBuf};

use leanrd_archive::{Result, bail, invalid};
use leanrd_contract::{FONT_DIR, InitConfig, Psf};

use crate::keymap::{ConsoleSetup, Font};
use crate::plan::{Item, Plan, host_path};

/// Where setupcon looks for a font file (its `findfile` with `share/consolefonts`), in its
/// order; `NAME` is the file name.
const SETUPCON_DIRS: [&str; 4] = [
    "/usr/local/share/consolefonts/NAME",
    "/usr/share/consolefonts/NAME",
    "/etc/console-setup/cached_NAME",
    "/etc/console-setup/NAME",
];

/// Where kbd's setfont looks for a font by name, by distribution.
const KBD_DIRS: [&str; 4] =
    ["/usr/share/consolefonts", "/usr/share/kbd/consolefonts", "/usr/lib/kbd/consolefonts", "/lib/kbd/consolefonts"];

/// The suffixes setfont tries after a font's name.
const KBD_SUFFIXES: [&str; 7] = ["", ".psfu.gz", ".psf.gz", ".psfu", ".psf", ".gz", ".cp.gz"];

/// The largest decompressed font read (a 32x32 font of 512 glyphs is 64 KiB, its Unicode
/// table a few more).
const MAX_FONT: u64 = 1 << 20;

/// setupcon's code set for a `CHARMAP=` when `CODESET=` is `guess` or unset (its table;
/// `UTF-8`, the default, gives `Uni2`).
const CODESETS: [(&str, &str); 27] = [
    ("UTF-8", "Uni2"),
    ("ARMSCII-8", "Armenian"),
    ("CP1251", "CyrSlav"),
    ("CP1255", "Hebrew"),
    ("CP1256", "Arabic"),
    ("GEORGIAN-ACADEMY", "Georgian"),
    ("GEORGIAN-PS", "Georgian"),
    ("IBM1133", "Lao"),
    ("ISIRI-3342", "Arabic"),
    ("ISO-8859-1", "Lat15"),
    ("ISO-8859-2", "Lat2"),
    ("ISO-8859-3", "Lat38"),
    ("ISO-8859-4", "Lat7"),
    ("ISO-8859-5", "CyrSlav"),
    ("ISO-8859-6", "Arabic"),
    ("ISO-8859-7", "Greek"),
    ("ISO-8859-8", "Hebrew"),
    ("ISO-8859-9", "Lat15"),
    ("ISO-8859-10", "Lat15"),
    ("ISO-8859-11", "Thai"),
    ("ISO-8859-13", "Lat7"),
    ("ISO-8859-14", "Lat38"),
    ("ISO-8859-15", "Lat15"),
    ("ISO-8859-16", "Lat2"),
    ("KOI8-R", "CyrKoi"),
    ("KOI8-U", "CyrKoi"),
    ("TIS-620", "Thai"),
];

/// console-setup's `FONTSIZE=` as its file names spell it (setupcon's rules): `8xN` and `Nx8`
/// are `N`, otherwise height first (`16x32` is `32x16`); empty or `guess` is `16`.
fn file_size(size: &str) -> String {
    let Some((a, b)) = size.split_once('x') else {
        return if size.is_empty() || size == "guess" { "16".into() } else { size.into() };
    };
    match (a.parse::<u32>(), b.parse::<u32>()) {
        _ if a == "8" => b.into(),
        _ if b == "8" => a.into(),
        (Ok(x), Ok(y)) if x < y => format!("{b}x{a}"),
        _ => size.into(),
    }
}

/// The file setupcon's `findfile` finds for `name` under the system root.
fn setupcon_find(sysroot: &Path, name: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        return Some(host_path(sysroot, name)).filter(|p| p.is_file());
    }
    SETUPCON_DIRS.iter().map(|d| host_path(sysroot, &d.replace("NAME", name))).find(|p| p.is_file())
}

/// setupcon's fallback when the face has no file in the size: another face of the code set in
/// that size (`CODESET-*[A-Za-wyz]SIZE.psf.gz`, the first in name order).
fn setupcon_fallback(sysroot: &Path, codeset: &str, size: &str) -> Option<PathBuf> {
    let (prefix, suffix) = (format!("{codeset}-"), format!("{size}.psf.gz"));
    SETUPCON_DIRS[..2].iter().find_map(|d| {
        let dir = host_path(sysroot, d.trim_end_matches("/NAME"));
        let mut names: Vec<String> = fs::read_dir(dir)
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.len() > prefix.len() + suffix.len()
                    && n.starts_with(&prefix)
                    && n.ends_with(&suffix)
                    && n[..n.len() - suffix.len()].ends_with(|c: char| c.is_ascii_alphabetic() && c != 'x')
            })
            .collect();
        names.sort();
        names.first().and_then(|n| setupcon_find(sysroot, n))
    })
}

/// The font file the setting names, under the system root: None when there is nothing to
/// load (console-setup's default, the kernel's own font), an error saying where it was
/// looked for when it is not there.
pub(crate) fn find(sysroot: &Path, font: &Font) -> Option<std::result::Result<PathBuf, String>> {
    if font.is_default() {
        return None;
    }
    Some(match font {
        Font::Vconsole { font, .. } => {
            let candidates: Vec<PathBuf> = if font.contains('/') {
                KBD_SUFFIXES.iter().map(|s| host_path(sysroot, &format!("{font}{s}"))).collect()
            } else {
                KBD_DIRS
                    .iter()
                    .flat_map(|d| KBD_SUFFIXES.iter().map(move |s| host_path(sysroot, &format!("{d}/{font}{s}"))))
                    .collect()
            };
            candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
                if font.contains('/') {
                    format!("{font} is not there")
                } else {
                    format!("not in {}", KBD_DIRS.join(", "))
                }
            })
        }
        Font::ConsoleSetup { font: Some(files), .. } => {
            // setupcon hands every file to setfont; the first is the font (the others are
            // extra glyphs, such as a braille font's), and it is what is loaded here.
            let first = files.split_whitespace().next().unwrap_or_default();
            setupcon_find(sysroot, first).ok_or_else(|| format!("{first} is not in {}", SETUPCON_DIRS.join(", ")))
        }
        Font::ConsoleSetup { font: None, codeset, charmap, face, size, .. } => {
            let charmap = charmap.as_deref().filter(|c| *c != "guess").unwrap_or("UTF-8");
            let codeset = match codeset.as_deref().filter(|c| *c != "guess") {
                Some(c) => c,
                None => match CODESETS.iter().find(|(m, _)| *m == charmap) {
                    Some((_, c)) => c,
                    None => return Some(Err(format!("CHARMAP={charmap}: setupcon knows no code set for it"))),
                },
            };
            let size = file_size(size);
            let name = format!("{codeset}-{face}{size}.psf.gz");
            setupcon_find(sysroot, &name)
                .or_else(|| setupcon_fallback(sysroot, codeset, &size))
                .ok_or_else(|| format!("{name} is not in {}", SETUPCON_DIRS.join(", ")))
        }
    })
}

/// The font's name in the image: its file name without setupcon's `cached_` and the
/// extensions (`Uni2-Terminus32x16`).
pub(crate) fn image_name(path: &Path) -> String {
    let mut n = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    n = n.strip_prefix("cached_").map(str::to_string).unwrap_or(n);
    for ext in [".gz", ".psfu", ".psf", ".cp"] {
        if let Some(s) = n.strip_suffix(ext) {
            n = s.to_string();
        }
    }
    n.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.+".contains(c) { c } else { '_' }).collect()
}

/// The font file's PSF bytes, decompressed (any compression the kernel unpacks, gzip as the
/// distributions ship them), checked: its description (`16x32, 512 glyphs, Unicode
/// table`). Errors name the file and what is wrong.
pub(crate) fn read(path: &Path) -> Result<(Vec<u8>, String)> {
    let raw = fs::read(path).map_err(|e| invalid!("{}: cannot read: {e}", path.display()))?;
    let data = match leanrd_compress::Format::detect(&raw) {
        Some(f) => leanrd_compress::decompress_vec_max(f, &raw, MAX_FONT)
            .map_err(|e| invalid!("{}: cannot decompress ({}): {e}", path.display(), f.name()))?,
        None => raw,
    };
    let psf = Psf::parse(&data).map_err(|e| invalid!("{}: {e}", path.display()))?;
    if let Some(why) = psf.kernel_refuses() {
        bail!("{}: {why}", path.display());
    }
    psf.unicode_pairs().map_err(|e| invalid!("{}: {e}", path.display()))?;
    let what = psf.describe();
    Ok((data, what))
}

/// Put the console font in the image and name it in /init's configuration; the warnings.
pub(crate) fn add(plan: &mut Plan, console: &ConsoleSetup, conf: &mut InitConfig) -> Vec<String> {
    let (Some(font), Some(file)) = (&console.font, &console.font_file) else { return Vec::new() };
    let mut warnings = Vec::new();
    let fail = |why: String| format!("console font ({}): {why}; the prompt uses the kernel's font", font.setting());
    if let Font::Vconsole { map, unimap, .. } = font {
        for (k, v) in [("FONT_MAP", map), ("FONT_UNIMAP", unimap)] {
            if let Some(v) = v {
                warnings.push(format!(
                    "console font ({}): {k}={v} is not applied by leanrd's /init (the font's own Unicode table is)",
                    font.setting()
                ));
            }
        }
    }
    if let Font::ConsoleSetup { font: Some(files), .. } = font
        && files.split_whitespace().count() > 1
    {
        warnings.push(format!("console font ({}): only the first file is loaded by leanrd's /init", font.setting()));
    }
    let path = match file {
        Ok(p) => p,
        Err(why) => {
            warnings.push(fail(why.clone()));
            return warnings;
        }
    };
    match read(path) {
        Ok((data, _)) => {
            let name = image_name(path);
            plan.put(&format!("{FONT_DIR}/{name}.psf"), Item::Inline { data, mode: 0o644 });
            conf.font = Some(name);
        }
        Err(e) => warnings.push(fail(e.to_string())),
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A console-setup font file of this machine (console-setup-linux), if installed.
    fn system_font(name: &str) -> Option<PathBuf> {
        let p = Path::new("/usr/share/consolefonts").join(name);
        if p.is_file() {
            Some(p)
        } else {
            leanrd_testkit::skip::<()>(&format!("{} not installed (console-setup-linux)", p.display()));
            None
        }
    }

    #[test]
    fn sizes_as_setupcon_spells_them() {
        for (given, file) in [("8x16", "16"), ("16", "16"), ("", "16"), ("guess", "16"), ("16x32", "32x16")] {
            assert_eq!(file_size(given), file, "{given}");
        }
        for (given, file) in [("14x8", "14"), ("32x16", "32x16"), ("6x12", "12x6"), ("10x18", "18x10")] {
            assert_eq!(file_size(given), file, "{given}");
        }
    }

    #[test]
    fn finds_the_file_as_setupcon_and_setfont_do() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path();
        let cs = |font: Option<&str>, codeset: Option<&str>, face: &str, size: &str| Font::ConsoleSetup {
            font: font.map(str::to_string),
            codeset: codeset.map(str::to_string),
            charmap: None,
            face: face.into(),
            size: size.into(),
            file: sys.join("etc/default/console-setup"),
        };
        assert_eq!(find(sys, &cs(None, Some("guess"), "Fixed", "8x16")), None, "the default: nothing to load");
        let err = find(sys, &cs(None, Some("guess"), "Terminus", "16x32")).unwrap().unwrap_err();
        assert!(err.starts_with("Uni2-Terminus32x16.psf.gz is not in /usr/local/share/consolefonts/"), "{err}");
        // setupcon's cache, then the fonts directory first.
        fs::create_dir_all(sys.join("etc/console-setup")).unwrap();
        fs::write(sys.join("etc/console-setup/cached_Uni2-Terminus32x16.psf.gz"), b"x").unwrap();
        let found = find(sys, &cs(None, None, "Terminus", "16x32")).unwrap().unwrap();
        assert_eq!(found, sys.join("etc/console-setup/cached_Uni2-Terminus32x16.psf.gz"));
        assert_eq!(image_name(&found), "Uni2-Terminus32x16");
        let fonts = sys.join("usr/share/consolefonts");
        fs::create_dir_all(&fonts).unwrap();
        fs::write(fonts.join("Uni2-Terminus32x16.psf.gz"), b"x").unwrap();
        assert_eq!(
            find(sys, &cs(None, None, "Terminus", "16x32")).unwrap().unwrap(),
            fonts.join("Uni2-Terminus32x16.psf.gz")
        );
        // The code set from CHARMAP=, and the fallback face in that size.
        fs::write(fonts.join("Lat15-TerminusBold32x16.psf.gz"), b"x").unwrap();
        fs::write(fonts.join("Lat15-Fixed32x16.psf.gz"), b"x").unwrap();
        let mut latin = cs(None, None, "Nope", "16x32");
        if let Font::ConsoleSetup { charmap, .. } = &mut latin {
            *charmap = Some("ISO-8859-15".into());
        }
        assert_eq!(find(sys, &latin).unwrap().unwrap(), fonts.join("Lat15-Fixed32x16.psf.gz"));
        // FONT= wins over the face; a path is taken as is.
        fs::write(fonts.join("lat9w-08.psf.gz"), b"x").unwrap();
        let f = find(sys, &cs(Some("lat9w-08.psf.gz brl-8x8.psf"), None, "Fixed", "8x16")).unwrap().unwrap();
        assert_eq!(f, fonts.join("lat9w-08.psf.gz"));
        // vconsole.conf: a kbd name, with setfont's suffixes, in kbd's directories.
        let vc = |font: &str| Font::Vconsole {
            font: font.into(),
            map: None,
            unimap: None,
            file: sys.join("etc/vconsole.conf"),
        };
        let kbd = sys.join("usr/lib/kbd/consolefonts");
        fs::create_dir_all(&kbd).unwrap();
        fs::write(kbd.join("eurlatgr.psfu.gz"), b"x").unwrap();
        assert_eq!(find(sys, &vc("eurlatgr")).unwrap().unwrap(), kbd.join("eurlatgr.psfu.gz"));
        assert_eq!(image_name(&kbd.join("eurlatgr.psfu.gz")), "eurlatgr");
        assert!(find(sys, &vc("nope")).unwrap().unwrap_err().contains("/usr/share/kbd/consolefonts"));
        assert_eq!(
            find(sys, &vc("/usr/lib/kbd/consolefonts/eurlatgr")).unwrap().unwrap(),
            kbd.join("eurlatgr.psfu.gz")
        );
    }

    /// Debian's Terminus 16x32 (console-setup-linux): decompressed and read as the kernel
    /// wants it.
    #[test]
    fn reads_debians_terminus_16x32() {
        let Some(p) = system_font("Uni2-Terminus32x16.psf.gz") else { return };
        let (data, what) = read(&p).unwrap();
        assert_eq!(what, "16x32, 512 glyphs, Unicode table");
        let psf = Psf::parse(&data).unwrap();
        assert_eq!(psf.kernel_glyphs().unwrap().len(), 512 * 2 * 32);
        let pairs = psf.unicode_pairs().unwrap();
        assert!(pairs.iter().any(|(c, _)| *c == u16::from(b'A')));
        assert!(pairs.iter().any(|(c, _)| *c == 0xe4), "ä is in Uni2");
    }

    /// A garbled font file (hostile or cut short) is a warning naming the file and the cause,
    /// and the image goes without the font.
    #[test]
    fn garbled_fonts_are_warnings() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path();
        fs::create_dir_all(sys.join("etc/console-setup")).unwrap();
        let cached = sys.join("etc/console-setup/cached_Uni2-Terminus32x16.psf.gz");
        let font = Font::ConsoleSetup {
            font: None,
            codeset: None,
            charmap: None,
            face: "Terminus".into(),
            size: "16x32".into(),
            file: sys.join("etc/default/console-setup"),
        };
        let add_with = |bytes: &[u8]| {
            fs::write(&cached, bytes).unwrap();
            let console = ConsoleSetup { keymap: None, font_file: find(sys, &font), font: Some(font.clone()) };
            let mut plan = Plan::new(sys);
            let mut conf = InitConfig::default();
            let w = add(&mut plan, &console, &mut conf);
            (w, conf.font)
        };
        let gz = |b: &[u8]| {
            leanrd_compress::compress_vec(leanrd_compress::Spec::new(leanrd_compress::Format::Gzip), 1, b).unwrap()
        };
        for (bytes, why) in [
            (b"not a font".to_vec(), "not a PSF font"),
            (gz(b"not a font"), "not a PSF font"),
            (gz(&[0x72, 0xb5, 0x4a, 0x86, 0, 0]), "PSF2: truncated header"),
            (vec![0x1f, 0x8b, 8, 0, 1, 2, 3], "cannot decompress (gzip)"),
        ] {
            let (w, name) = add_with(&bytes);
            assert_eq!(name, None);
            assert_eq!(w.len(), 1, "{w:?}");
            assert!(w[0].contains(&cached.display().to_string()) && w[0].contains(why), "{}", w[0]);
            assert!(w[0].starts_with("console font (FONTFACE=Terminus FONTSIZE=16x32 in "), "{}", w[0]);
        }
        // The real one goes in.
        if let Some(p) = system_font("Uni2-Terminus32x16.psf.gz") {
            let (w, name) = add_with(&fs::read(p).unwrap());
            assert!(w.is_empty(), "{w:?}");
            assert_eq!(name.as_deref(), Some("Uni2-Terminus32x16"));
        }
    }
}
