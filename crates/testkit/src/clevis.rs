//! Clevis and Tang on the test host, one definition for every test that binds a LUKS2
//! container to a Tang server (boot_luks's Tang boots, the boot scenarios' `tang = true`):
//! tangd's keys ([`tang_keys`]) and its advertisement ([`advertisement`]), `clevis encrypt`
//! ([`encrypt`]), and what `clevis luks bind` does to a container ([`bind`]). The server
//! itself runs in a network lab ([`crate::netlab::TangServer`]).

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::netlab;

/// The tools [`tang_keys`], [`advertisement`], [`encrypt`] and [`bind`] run, besides
/// `/usr/libexec/tangd-keygen` and `/usr/libexec/tangd` ([`have_tools`] checks them all).
pub const TOOLS: [&str; 4] = ["clevis", "cryptsetup", "losetup", "sfdisk"];

/// Whether the host has what binding to Tang needs (clevis, tangd and its key generator,
/// cryptsetup); `apt install clevis tang cryptsetup`.
pub fn have_tools() -> bool {
    TOOLS.iter().all(|t| crate::have(t))
        && Path::new("/usr/libexec/tangd-keygen").exists()
        && Path::new("/usr/libexec/tangd").exists()
}

/// The URL a container is bound to: the lab's Tang server.
pub fn tang_url() -> String {
    format!("http://{}:{}", netlab::SERVER, netlab::TANG_PORT)
}

/// A new Tang key directory at `db` (`tangd-keygen`: a signing and an exchange key).
pub fn tang_keys(db: &Path) {
    fs::create_dir_all(db).unwrap_or_else(|e| panic!("{}: {e}", db.display()));
    crate::boot::sh(&format!("/usr/libexec/tangd-keygen {}", db.display()));
}

/// The advertisement tangd serves for the keys in `db` (its reply's body to GET /adv on its
/// standard input, as socat hands it a connection): what `clevis encrypt tang` binds to
/// without asking the server.
pub fn advertisement(db: &Path) -> Result<String, String> {
    let mut c = Command::new("/usr/libexec/tangd")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("tangd: {e}"))?;
    c.stdin
        .take()
        .expect("tangd's standard input")
        .write_all(b"GET /adv HTTP/1.1\r\nHost: t\r\n\r\n")
        .map_err(|e| format!("tangd: {e}"))?;
    let out = c.wait_with_output().map_err(|e| format!("tangd: {e}"))?;
    let reply = String::from_utf8_lossy(&out.stdout).into_owned();
    match reply.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") && !body.is_empty() => Ok(body.to_string()),
        _ => Err(format!("tangd's reply to GET /adv: {reply:.200}")),
    }
}

/// The configuration of `clevis encrypt tang` for the lab's server ([`tang_url`]), with the
/// advertisement in the file `adv` (trusted as given: no question to the server).
pub fn tang_config(adv: &Path) -> String {
    format!(r#"{{"url":"{}","adv":"{}"}}"#, tang_url(), adv.display())
}

/// `clevis encrypt PIN CONFIG` of the key in the file `key`; `tcti`: the TPM for a tpm2 pin.
/// The compact JWE.
pub fn encrypt(pin: &str, cfg: &str, key: &Path, tcti: Option<&str>) -> Result<String, String> {
    let mut c = Command::new("clevis");
    c.args(["encrypt", pin, cfg]).stdin(fs::File::open(key).map_err(|e| format!("{}: {e}", key.display()))?);
    if let Some(tcti) = tcti {
        c.env("TPM2TOOLS_TCTI", tcti);
    }
    let enc = c.output().map_err(|e| e.to_string())?;
    if !enc.status.success() {
        return Err(format!("clevis encrypt {pin}: {}", String::from_utf8_lossy(&enc.stderr)));
    }
    Ok(String::from_utf8_lossy(&enc.stdout).trim().to_string())
}

/// What `clevis luks bind` does to the LUKS2 container on `disk`'s third partition (opened by
/// the passphrase `pass`): key slot 5 for the key in the file `key` (PBKDF2: clevis's default
/// Argon2 would want more memory than a test VM has), and a clevis token holding `jwe` for
/// it, `{"type":"clevis","keyslots":["5"],"jwe":{...}}` as clevis writes it. On the host,
/// through an offset loop device (header operations need no device-mapper); `t` holds the
/// passphrase's and the token's files.
pub fn bind(t: &Path, disk: &Path, pass: &str, key: &Path, jwe: &str) -> Result<(), String> {
    let (start, size) = partition(disk, 3)?;
    let lo = Command::new("losetup")
        .args(["--find", "--show", "-o", &start.to_string(), "--sizelimit", &size.to_string()])
        .arg(disk)
        .output()
        .map_err(|e| format!("losetup: {e}"))?;
    if !lo.status.success() {
        return Err(format!("losetup {}: {}", disk.display(), String::from_utf8_lossy(&lo.stderr)));
    }
    let lo = String::from_utf8_lossy(&lo.stdout).trim().to_string();
    let pass_file = t.join("tang-pass");
    let bind = (|| -> Result<(), String> {
        fs::write(&pass_file, pass).map_err(|e| e.to_string())?;
        let add = Command::new("cryptsetup")
            .args(["luksAddKey", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"])
            .args(["--new-key-slot", "5", "--key-file"])
            .arg(&pass_file)
            .arg(&lo)
            .arg(key)
            .output()
            .map_err(|e| e.to_string())?;
        if !add.status.success() {
            return Err(format!("luksAddKey: {}", String::from_utf8_lossy(&add.stderr)));
        }
        let p: Vec<&str> = jwe.split('.').collect();
        if p.len() != 5 {
            return Err(format!("not a compact JWE: {jwe:.80}"));
        }
        let token = serde_json::json!({
            "type": "clevis", "keyslots": ["5"],
            "jwe": { "protected": p[0], "encrypted_key": p[1], "iv": p[2], "ciphertext": p[3], "tag": p[4] },
        });
        let tok = t.join("clevis-token.json");
        fs::write(&tok, token.to_string()).map_err(|e| e.to_string())?;
        let imp = Command::new("cryptsetup").args(["token", "import", "--json-file"]).arg(&tok).arg(&lo).output();
        match imp {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!("token import: {}", String::from_utf8_lossy(&o.stderr))),
            Err(e) => Err(e.to_string()),
        }
    })();
    let _ = Command::new("losetup").args(["-d", &lo]).status();
    let _ = fs::remove_file(&pass_file);
    bind
}

/// Where partition `n` (from 1) of a disk image is: its start and size in bytes, from
/// `sfdisk -J`.
pub fn partition(disk: &Path, n: usize) -> Result<(u64, u64), String> {
    let o = Command::new("sfdisk").arg("-J").arg(disk).output().map_err(|e| format!("sfdisk: {e}"))?;
    let table: serde_json::Value = serde_json::from_slice(&o.stdout)
        .map_err(|e| format!("sfdisk -J {}: {e}: {}", disk.display(), String::from_utf8_lossy(&o.stderr)))?;
    let p = &table["partitiontable"]["partitions"][n - 1];
    match (p["start"].as_u64(), p["size"].as_u64()) {
        (Some(start), Some(size)) => Ok((start * 512, size * 512)),
        _ => Err(format!("{} has no partition {n}", disk.display())),
    }
}
