//! Plymouth in the image (feature `plymouth`): plymouthd, the theme it would show on this
//! system, that theme's plugin and images, the text fallbacks, the renderers, and one font for
//! the freetype label. Resolved from the sysroot the way plymouthd itself picks a theme at boot
//! (its main.c: `plymouth.splash=`, then plymouthd.conf, then the distribution's
//! plymouthd.defaults, then `default.plymouth`, then `text`), so that the image holds what the
//! daemon will load and nothing else. No staging tree and no plymouth-populate-initrd: that
//! script (and Debian's hook) copy the theme into a directory and run fc-cache in it; leanrd's
//! plan takes the same files from the sysroot, and the ELF resolver adds what each program and
//! plugin links (plugins are dlopen()ed, so they are listed here, not found through
//! DT_NEEDED).
//!
//! Fonts: the label plugin drawn is `label-freetype` (freetype alone), which reads
//! `/usr/share/fonts/Plymouth.ttf` and `Plymouth-monospace.ttf`. `label-pango` (pango, cairo,
//! harfbuzz, fontconfig: megabytes) is left out; plymouthd falls back to freetype by itself.
//! The two fonts are picked by file name (DejaVu Sans, as Debian's fontconfig answers for
//! `sans-serif`, else the first TrueType/OpenType file), not by running the sysroot's
//! fc-match, which a cross-root build cannot run.

use std::fs;
use std::path::Path;

use crate::elf::which;
use crate::plan::host_path;

/// Where plymouth keeps its themes.
pub(crate) const THEMES: &str = "/usr/share/plymouth/themes";
/// The administrator's settings.
pub(crate) const CONF: &str = "/etc/plymouth/plymouthd.conf";
/// The distribution's defaults.
pub(crate) const DEFAULTS: &str = "/usr/share/plymouth/plymouthd.defaults";
/// The fonts label-freetype reads.
pub(crate) const FONT: &str = "/usr/share/fonts/Plymouth.ttf";
/// The monospace font label-freetype reads.
pub(crate) const FONT_MONO: &str = "/usr/share/fonts/Plymouth-monospace.ttf";

/// What the image gets for plymouth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Splash {
    /// The theme plymouthd will show (`spinner`), and where its choice came from.
    pub theme: String,
    /// Where the choice came from (`/etc/plymouth/plymouthd.conf`).
    pub origin: String,
    /// Programs and plugins, by their path in the sysroot, each with what it links.
    pub elf: Vec<String>,
    /// Files and directories (whole) copied as they are.
    pub files: Vec<String>,
    /// (path in the image, font file in the sysroot).
    pub fonts: Vec<(String, String)>,
    /// What a user should know (a configured theme that cannot be shown...).
    pub warnings: Vec<String>,
}

/// A plymouth key file (ply-key-file.c's format: `[Group]`, `key=value`, `#` comments, no
/// quoting or escapes): the value of `key` in `group`. Hand-written: INI crates accept and
/// rewrite more than plymouth does (quotes, escapes, inline comments), and three keys are read.
pub(crate) fn key_value(text: &str, group: &str, key: &str) -> Option<String> {
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(g) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = g.trim().to_string();
            continue;
        }
        if current != group {
            continue;
        }
        if let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            let v = v.trim();
            return (!v.is_empty()).then(|| v.to_string());
        }
    }
    None
}

/// Plymouth's plugin directory in the sysroot (`/usr/lib/x86_64-linux-gnu/plymouth`), found by
/// its renderers.
pub(crate) fn plugin_dir(sysroot: &Path) -> Option<String> {
    let mut dirs = vec!["/usr/lib64/plymouth".to_string(), "/usr/lib/plymouth".to_string()];
    if let Ok(rd) = fs::read_dir(host_path(sysroot, "/usr/lib")) {
        let mut multiarch: Vec<String> = rd
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .filter(|n| n.contains("-linux-"))
            .map(|n| format!("/usr/lib/{n}/plymouth"))
            .collect();
        multiarch.sort();
        dirs.splice(0..0, multiarch);
    }
    dirs.into_iter().find(|d| host_path(sysroot, &format!("{d}/renderers")).is_dir())
}

/// A theme that plymouthd could show: its `.plymouth` file exists and names a plugin that is
/// installed. (theme file, plugin, image directory).
fn usable(sysroot: &Path, dir: &str, name: &str, plugins: &str) -> Result<(String, String, Option<String>), String> {
    let file = format!("{dir}/{name}/{name}.plymouth");
    let text = fs::read_to_string(host_path(sysroot, &file)).map_err(|e| format!("{file}: {e}"))?;
    let module = key_value(&text, "Plymouth Theme", "ModuleName").ok_or(format!("{file}: no ModuleName"))?;
    if module.contains('/') || module.contains("..") {
        return Err(format!("{file}: ModuleName={module} is not a plugin's name"));
    }
    let plugin = format!("{plugins}/{module}.so");
    if !host_path(sysroot, &plugin).is_file() {
        return Err(format!("{file}: its plugin {plugin} is not installed"));
    }
    let images = key_value(&text, &module, "ImageDir").map(|d| crate::plan::clean(&d));
    Ok((file, plugin, images))
}

/// What plymouth needs in the image on this sysroot; `cmdline` is the command line the image
/// is built for (its `plymouth.splash=` comes first, as at boot). An error when plymouthd or
/// its plugins are not installed.
pub(crate) fn resolve(sysroot: &Path, cmdline: &str) -> Result<Splash, String> {
    let daemon = which(sysroot, "plymouthd").ok_or("plymouthd is not installed (install plymouth)")?;
    let plugins = plugin_dir(sysroot).ok_or("plymouth's plugins (renderers/) are not installed")?;
    let read = |p: &str| fs::read_to_string(host_path(sysroot, p)).unwrap_or_default();
    let (conf, defaults) = (read(CONF), read(DEFAULTS));
    // plymouthd's order (main.c's show_default_splash).
    let mut candidates: Vec<(String, String, String)> = Vec::new();
    if let Some(t) = cmdline.split_whitespace().find_map(|w| w.strip_prefix("plymouth.splash=")) {
        candidates.push((t.to_string(), THEMES.into(), "plymouth.splash= on the command line".into()));
    }
    for (text, origin) in [(&conf, CONF), (&defaults, DEFAULTS)] {
        if let Some(t) = key_value(text, "Daemon", "Theme") {
            let dir = key_value(text, "Daemon", "ThemeDir").unwrap_or_else(|| THEMES.into());
            candidates.push((t, dir, origin.into()));
        }
    }
    let mut warnings = Vec::new();
    let mut chosen = None;
    for (name, dir, origin) in &candidates {
        if name.contains('/') || name.contains("..") {
            warnings.push(format!("plymouth theme \"{name}\" (from {origin}): not a theme's name"));
            continue;
        }
        match usable(sysroot, dir, name, &plugins) {
            Ok(u) => {
                chosen = Some((name.clone(), origin.clone(), u));
                break;
            }
            Err(e) => warnings.push(format!("plymouth theme {name} (from {origin}): {e}; plymouthd falls back")),
        }
    }
    let chosen = match chosen {
        Some(c) => c,
        None => {
            let u =
                usable(sysroot, THEMES, "text", &plugins).map_err(|e| format!("no theme plymouthd can show: {e}"))?;
            ("text".to_string(), "plymouth's own fallback".to_string(), u)
        }
    };
    let (theme, origin, (theme_file, plugin, images)) = chosen;
    let mut elf = vec![daemon, plugin];
    let mut files = vec![theme_file.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default()];
    if let Some(i) = images.filter(|i| !files.contains(i) && host_path(sysroot, i).is_dir()) {
        files.push(i);
    }
    // The fallbacks plymouthd takes when the graphics fail (text on a VT, details on serial).
    for fallback in ["text", "details"] {
        if let Ok((f, p, _)) = usable(sysroot, THEMES, fallback, &plugins) {
            let dir = f.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
            if !files.contains(&dir) {
                files.push(dir);
            }
            if !elf.contains(&p) {
                elf.push(p);
            }
        }
    }
    for p in ["renderers/drm.so", "renderers/frame-buffer.so", "label-freetype.so"] {
        let p = format!("{plugins}/{p}");
        if host_path(sysroot, &p).is_file() {
            elf.push(p);
        }
    }
    // Kept open across the switch by plymouthd (its DRM file descriptor) where installed.
    for p in ["/usr/libexec/plymouth/plymouthd-fd-escrow", "/usr/lib/plymouth/plymouthd-fd-escrow"] {
        if host_path(sysroot, p).is_file() {
            elf.push(p.into());
            break;
        }
    }
    // Settings, the logo the themes draw, the release name the text themes show, and the
    // keyboard layout plymouth's keymap indicator reads.
    for f in [CONF, DEFAULTS, "/usr/share/plymouth/debian-logo.png", "/etc/os-release", "/etc/default/keyboard"] {
        if host_path(sysroot, f).exists() {
            files.push(f.into());
        }
    }
    let mut fonts = Vec::new();
    if theme != "text" && theme != "details" {
        let all = font_files(sysroot);
        let pick = |want: &str, mono: bool| {
            all.iter()
                .find(|f| f.ends_with(want))
                .or_else(|| all.iter().find(|f| f.to_ascii_lowercase().contains("mono") == mono))
                .cloned()
        };
        match pick("/DejaVuSans.ttf", false) {
            Some(f) => fonts.push((FONT.to_string(), f)),
            None => warnings.push(format!(
                "plymouth theme {theme}: no TrueType or OpenType font under /usr/share/fonts: its text is not drawn"
            )),
        }
        if let Some(f) = pick("/DejaVuSansMono.ttf", true) {
            fonts.push((FONT_MONO.to_string(), f));
        }
    }
    Ok(Splash { theme, origin, elf, files, fonts, warnings })
}

/// The TrueType and OpenType files under /usr/share/fonts, sorted (bounded: a font tree is
/// not walked past 4 levels).
fn font_files(sysroot: &Path) -> Vec<String> {
    fn walk(sysroot: &Path, dir: &str, depth: usize, out: &mut Vec<String>) {
        let Ok(rd) = fs::read_dir(host_path(sysroot, dir)) else { return };
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(String::from) else { continue };
            let path = format!("{dir}/{name}");
            match e.file_type() {
                Ok(t) if t.is_dir() && depth < 4 => walk(sysroot, &path, depth + 1, out),
                Ok(t) if (t.is_file() || t.is_symlink()) && (name.ends_with(".ttf") || name.ends_with(".otf")) => {
                    out.push(path)
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(sysroot, "/usr/share/fonts", 0, &mut out);
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, path: &str, data: &str) {
        let p = root.join(path.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    }

    /// A sysroot laid out as Debian 13's plymouth and plymouth-themes lay it out.
    fn debian(root: &Path) {
        let lib = "/usr/lib/x86_64-linux-gnu/plymouth";
        put(root, "/usr/sbin/plymouthd", "");
        for p in [
            "two-step.so",
            "text.so",
            "details.so",
            "label-freetype.so",
            "renderers/drm.so",
            "renderers/frame-buffer.so",
        ] {
            put(root, &format!("{lib}/{p}"), "");
        }
        put(root, DEFAULTS, "[Daemon]\nTheme=ceratopsian\nShowDelay=0\n");
        put(
            root,
            "/usr/share/plymouth/themes/spinner/spinner.plymouth",
            "[Plymouth Theme]\nName=Spinner\nModuleName=two-step\n\n[two-step]\nFont=Cantarell 12\nImageDir=/usr/share/plymouth/themes//spinner\n",
        );
        put(root, "/usr/share/plymouth/themes/spinner/throbber-0001.png", "png");
        put(root, "/usr/share/plymouth/themes/text/text.plymouth", "[Plymouth Theme]\nModuleName=text\n");
        put(root, "/usr/share/plymouth/themes/details/details.plymouth", "[Plymouth Theme]\nModuleName=details\n");
        put(root, "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "");
        put(root, "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf", "");
        put(root, "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf", "");
    }

    #[test]
    fn key_files_as_plymouth_reads_them() {
        let t = "# c\n[Daemon]\nTheme = spinner\n[Other]\nTheme=x\n";
        assert_eq!(key_value(t, "Daemon", "Theme").as_deref(), Some("spinner"));
        assert_eq!(key_value(t, "Other", "Theme").as_deref(), Some("x"));
        assert_eq!(key_value("#[Daemon]\n#Theme=spinner\n", "Daemon", "Theme"), None);
        assert_eq!(key_value("[Daemon]\nTheme=\n", "Daemon", "Theme"), None);
        assert_eq!(key_value("[Daemon\nTheme=a", "Daemon", "Theme"), None);
    }

    #[test]
    fn the_configured_theme_with_its_plugin_images_fallbacks_and_fonts() {
        let t = leanrd_testkit::TempDir::new("ply-conf");
        debian(t.path());
        put(t.path(), CONF, "[Daemon]\nTheme=spinner\n");
        let s = resolve(t.path(), "quiet splash").unwrap();
        assert_eq!((s.theme.as_str(), s.origin.as_str()), ("spinner", CONF));
        let lib = "/usr/lib/x86_64-linux-gnu/plymouth";
        assert!(s.elf.contains(&format!("{lib}/two-step.so")), "{s:?}");
        assert!(s.elf.contains(&format!("{lib}/renderers/drm.so")), "{s:?}");
        assert!(s.elf.contains(&format!("{lib}/label-freetype.so")), "{s:?}");
        assert_eq!(s.elf[0], "/usr/sbin/plymouthd");
        for d in ["/usr/share/plymouth/themes/spinner", "/usr/share/plymouth/themes/text", CONF, DEFAULTS] {
            assert!(s.files.iter().any(|f| f == d), "{d} not in {:?}", s.files);
        }
        // The image directory is the theme's own (spelled with a double slash): not twice.
        assert_eq!(s.files.iter().filter(|f| f.ends_with("/spinner")).count(), 1, "{:?}", s.files);
        assert_eq!(
            s.fonts,
            vec![
                (FONT.to_string(), "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf".to_string()),
                (FONT_MONO.to_string(), "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf".to_string()),
            ]
        );
        // The defaults' ceratopsian (desktop-base not installed) was never reached.
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }

    #[test]
    fn a_missing_theme_falls_back_as_plymouthd_does() {
        let t = leanrd_testkit::TempDir::new("ply-fallback");
        debian(t.path());
        // Only the defaults' theme, which is not installed: plymouthd shows text.
        let s = resolve(t.path(), "splash").unwrap();
        assert_eq!(s.theme, "text");
        assert!(s.warnings.iter().any(|w| w.contains("ceratopsian")), "{:?}", s.warnings);
        assert!(s.fonts.is_empty());
        // plymouth.splash= first, as at boot.
        put(t.path(), CONF, "[Daemon]\nTheme=text\n");
        let s = resolve(t.path(), "splash plymouth.splash=spinner").unwrap();
        assert_eq!(s.theme, "spinner");
        // A theme whose plugin is missing is passed over; hostile names are refused.
        put(t.path(), "/usr/share/plymouth/themes/bgrt/bgrt.plymouth", "[Plymouth Theme]\nModuleName=../../x\n");
        put(t.path(), CONF, "[Daemon]\nTheme=../../etc\n");
        let s = resolve(t.path(), "splash plymouth.splash=bgrt").unwrap();
        assert_eq!(s.theme, "text");
        assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
    }

    #[test]
    fn no_plymouth_is_an_error() {
        let t = leanrd_testkit::TempDir::new("ply-none");
        assert!(resolve(t.path(), "splash").unwrap_err().contains("plymouthd"));
        put(t.path(), "/usr/sbin/plymouthd", "");
        assert!(resolve(t.path(), "splash").unwrap_err().contains("plugins"));
    }
}
