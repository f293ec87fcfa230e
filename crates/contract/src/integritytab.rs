//! Standalone dm-integrity devices as /etc/integritytab describes them (systemd's format:
//! `NAME DEVICE [KEYFILE|-] [OPTIONS]`), parsed once: /init reads the image's copy of the
//! system's file with it, and opens each device with integritysetup's options for it.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::device::DeviceRef;

/// Where the table is, on the system and in the image.
pub const INTEGRITYTAB: &str = "/etc/integritytab";

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegrityEntry {
    /// The mapping's name (/dev/mapper/NAME).
    pub name: String,
    /// The device holding the dm-integrity superblock.
    pub device: DeviceRef,
    /// integritysetup's options for it, in order.
    pub args: Vec<String>,
}

/// The entries of `text` (the file `file`, for messages); an error names the file, the line
/// and what is wrong with it. Keyed algorithms (a key file, `hmac-*`) are refused: /init has
/// no key file to give.
pub fn parse_integritytab(text: &str, file: &str) -> Result<Vec<IntegrityEntry>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: String| format!("{file}:{}: {why}", i + 1);
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 2 || f.len() > 4 {
            return Err(at(format!("{} fields; NAME DEVICE [KEYFILE|-] [OPTIONS] expected", f.len())));
        }
        if f[0].contains('/') {
            return Err(at(format!("the name \"{}\" has a '/'", f[0])));
        }
        let device = DeviceRef::parse(f[1]).map_err(|e| at(format!("device \"{}\": {e}", f[1])))?;
        if let Some(k) = f.get(2).filter(|k| **k != "-" && **k != "none") {
            return Err(at(format!("key file {k}: keyed integrity is not supported by leanrd's /init")));
        }
        let mut args = Vec::new();
        for o in f.get(3).copied().unwrap_or("").split(',').filter(|o| !o.is_empty()) {
            let (k, v) = o.split_once('=').map_or((o, None), |(k, v)| (k, Some(v)));
            let num = |v: Option<&str>| {
                v.filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .map(ToString::to_string)
                    .ok_or_else(|| at(format!("option {o}: a number expected")))
            };
            match (k, v) {
                ("allow-discards", None) => args.push("--allow-discards".into()),
                ("mode", Some("journal")) => {}
                ("mode", Some("bitmap")) => args.push("--integrity-bitmap-mode".into()),
                ("mode", Some("direct")) => args.push("--integrity-no-journal".into()),
                ("journal-watermark", v) => {
                    let n = v.and_then(|v| v.strip_suffix('%')).unwrap_or(v.unwrap_or(""));
                    args.extend(["--journal-watermark".into(), num(Some(n))?]);
                }
                ("journal-commit-time", v) => args.extend(["--journal-commit-time".into(), num(v)?]),
                ("data-device", Some(d)) if d.starts_with('/') => args.extend(["--data-device".into(), d.into()]),
                ("integrity-algorithm", Some(a)) if a.starts_with("hmac") || a.starts_with("phmac") => {
                    return Err(at(format!("option {o}: keyed integrity is not supported by leanrd's /init")));
                }
                ("integrity-algorithm", Some(a))
                    if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
                {
                    args.extend(["--integrity".into(), a.into()])
                }
                _ => return Err(at(format!("option {o} is not known"))),
            }
        }
        out.push(IntegrityEntry { name: f[0].into(), device, args });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_integritysetup_options() {
        let t = "# comment\n\nroot UUID=1b2c3d4e-0000-4000-8000-000000000001 - allow-discards,mode=bitmap\n\
                 data /dev/vdb none integrity-algorithm=sha256,journal-watermark=50%,journal-commit-time=10\n\
                 plain /dev/vdc\n";
        let v = parse_integritytab(t, "/etc/integritytab").unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].name, "root");
        assert_eq!(v[0].args, ["--allow-discards", "--integrity-bitmap-mode"]);
        assert_eq!(v[1].device, DeviceRef::parse("/dev/vdb").unwrap());
        assert_eq!(v[1].args, ["--integrity", "sha256", "--journal-watermark", "50", "--journal-commit-time", "10"]);
        assert!(v[2].args.is_empty());
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = |t: &str| parse_integritytab(t, "/etc/integritytab").unwrap_err();
        assert_eq!(e("\nx\n"), "/etc/integritytab:2: 1 fields; NAME DEVICE [KEYFILE|-] [OPTIONS] expected");
        assert!(e("a /dev/vda /key").starts_with("/etc/integritytab:1: key file /key: keyed"));
        assert!(e("a /dev/vda - integrity-algorithm=hmac-sha256").contains("keyed integrity"));
        assert_eq!(e("a /dev/vda - mode=fast"), "/etc/integritytab:1: option mode=fast is not known");
        assert!(e("a /dev/vda - journal-commit-time=x").ends_with("a number expected"));
        assert!(e("a/b /dev/vda").contains("has a '/'"));
        for hostile in
            ["a b c d e", "a UUID= -", "a /dev/x - =,==,journal-watermark=%", "\u{0} \u{0}", "a /dev/x - ,,,"]
        {
            let _ = parse_integritytab(hostile, "f");
        }
    }
}
