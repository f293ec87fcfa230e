//! Unlocking over SSH (feature `ssh-unlock`): the users' public keys, the server's host keys
//! and the files that make every session the unlock prompt (see the /init side in
//! crates/init/src/ssh.rs). Read and made before composing: compose only places what this
//! found.
//!
//! - The keys that may log in: `--ssh-authorized-keys FILE` (the `ssh_authorized_keys`
//!   setting), else, host-only, [`AUTHORIZED_KEYS`] under the system root. Each line is an
//!   OpenSSH public key; its own options are replaced by leanrd's (no forwarding of any kind).
//!   DSA keys are refused; a line that is not a key is an error naming its file and line.
//! - The host keys ([`HOST_KEYS`], dropbear's format) are made once with dropbearkey, on the
//!   first build that needs them, under the system root (0600, in a 0700 directory), and
//!   kept across rebuilds and kernel updates so that the clients' known_hosts stay valid. They
//!   are never the system's own sshd keys. The image holding them is private, as every image
//!   holding a secret is.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64ct::{Base64, Base64Unpadded, Encoding};
use leanrd_archive::{Context, Result, bail, invalid};
use leanrd_contract::ssh::{AUTHORIZED_KEYS, DEFAULT_PORT, HOST_KEY_TYPES, HOST_KEYS};
use sha2::Digest;

use crate::plan::host_path;
use crate::request::Request;

/// The public key types dropbear takes for users (OpenSSH's names).
pub(crate) const KEY_TYPES: [&str; 7] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// What every key may do in the image: log in, and get the prompt (root's shell there).
const RESTRICT: &str = "no-port-forwarding,no-agent-forwarding,no-X11-forwarding";

/// What the image gets for SSH.
#[derive(Debug)]
pub(crate) struct SshSelection {
    /// The port to listen on.
    pub port: u16,
    /// The host keys: (image path, source under the system root), private in the image.
    pub host_keys: HostKeys,
    /// authorized_keys as the image holds it.
    pub authorized_keys: String,
    /// The host keys' fingerprints (`ed25519 SHA256:...`), for the build's notes.
    pub fingerprints: Vec<String>,
}

/// The SSH selection, when the request asks for it (keys given) or, host-only, the system
/// root has [`AUTHORIZED_KEYS`]; None otherwise.
pub(crate) fn select(r: &Request) -> Result<Option<SshSelection>> {
    let mut files = r.ssh_authorized_keys.clone();
    if files.is_empty() && !r.universal {
        let host = host_path(&r.sysroot, AUTHORIZED_KEYS);
        if host.exists() {
            files.push(host);
        }
    }
    if files.is_empty() {
        return Ok(None);
    }
    let mut authorized_keys = String::new();
    for f in &files {
        let text = fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let keys = authorized(&text).map_err(|(line, why)| invalid!("{}:{line}: {why}", f.display()))?;
        if keys.is_empty() {
            bail!("{}: no public key in it", f.display());
        }
        for k in keys {
            authorized_keys += &format!("{RESTRICT} {k}\n");
        }
    }
    let (host_keys, fingerprints) = host_keys(&r.sysroot)?;
    Ok(Some(SshSelection { port: r.ssh_port.unwrap_or(DEFAULT_PORT), host_keys, authorized_keys, fingerprints }))
}

/// The keys of an authorized_keys text, each `TYPE BASE64 [COMMENT]` with its options taken
/// off; Err with the line (from 1) and why.
pub(crate) fn authorized(text: &str) -> std::result::Result<Vec<String>, (usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words = shell_words(line);
        let Some(at) = words.iter().position(|w| KEY_TYPES.contains(&w.as_str()) || w == "ssh-dss") else {
            return Err((i + 1, format!("not a public key (a type of {} expected)", KEY_TYPES.join(", "))));
        };
        let kind = &words[at];
        if kind == "ssh-dss" {
            return Err((i + 1, "a DSA key: refused (OpenSSH and dropbear no longer trust DSA)".into()));
        }
        let Some(b64) = words.get(at + 1) else { return Err((i + 1, format!("{kind} without its key"))) };
        let blob = Base64::decode_vec(b64).map_err(|_| (i + 1, format!("{kind} key: {b64:.20}... is not base64")))?;
        if blob_type(&blob).as_deref() != Some(kind.as_str()) {
            return Err((i + 1, format!("the key's data is not a {kind} key")));
        }
        let comment = words[at + 2..].join(" ");
        out.push(if comment.is_empty() { format!("{kind} {b64}") } else { format!("{kind} {b64} {comment}") });
    }
    Ok(out)
}

/// A line's words, with options' double quotes kept together (`command="a b" ssh-ed25519 ...`).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// The type a public key blob names (its first SSH string).
fn blob_type(blob: &[u8]) -> Option<String> {
    let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    String::from_utf8(blob.get(4..4usize.checked_add(len)?)?.to_vec()).ok()
}

/// OpenSSH's fingerprint of a public key blob: `SHA256:` and its base64.
pub(crate) fn fingerprint(blob: &[u8]) -> String {
    // OpenSSH's fingerprint: the standard alphabet, unpadded.
    format!("SHA256:{}", Base64Unpadded::encode_string(&sha2::Sha256::digest(blob)))
}

/// Host keys: (image path, source under the system root).
type HostKeys = Vec<(String, PathBuf)>;

/// The host keys under `sysroot`, made where missing; with their fingerprints.
fn host_keys(sysroot: &Path) -> Result<(HostKeys, Vec<String>)> {
    let dir =
        host_path(sysroot, leanrd_contract::ssh::HOST_KEYS[0]).parent().map(Path::to_path_buf).unwrap_or_default();
    if !dir.exists() {
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private", dir.display()))?;
    }
    let tool = dropbearkey(sysroot)?;
    let (mut keys, mut prints) = (Vec::new(), Vec::new());
    for (image_path, kind) in HOST_KEYS.iter().zip(HOST_KEY_TYPES) {
        let file = host_path(sysroot, image_path);
        if !file.exists() {
            // Made beside it and renamed: a build killed meanwhile leaves no half key.
            let tmp = file.with_extension("new");
            let _ = fs::remove_file(&tmp);
            let o = Command::new(&tool)
                .args(["-t", kind, "-f"])
                .arg(&tmp)
                .output()
                .with_context(|| format!("running {}", tool.display()))?;
            if !o.status.success() {
                let _ = fs::remove_file(&tmp);
                bail!("{} -t {kind}: {}", tool.display(), String::from_utf8_lossy(&o.stderr).trim());
            }
            fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))?;
            fs::rename(&tmp, &file).with_context(|| format!("writing {}", file.display()))?;
        }
        let mode = fs::metadata(&file)?.permissions().mode();
        if mode & 0o077 != 0 {
            bail!("{}: a private host key readable by others (mode {:o}): chmod 600 it", file.display(), mode & 0o777);
        }
        let o = Command::new(&tool).arg("-y").arg("-f").arg(&file).output()?;
        let text = String::from_utf8_lossy(&o.stdout);
        if let Some(blob) = text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()?.starts_with(if kind == "ecdsa" { "ecdsa-sha2-" } else { "ssh-" })).then(|| w.next())?
        }) && let Ok(blob) = Base64::decode_vec(blob)
        {
            prints.push(format!("{kind} {}", fingerprint(&blob)));
        } else {
            bail!("{}: not a dropbear host key ({} -y says: {})", file.display(), tool.display(), text.trim());
        }
        keys.push((image_path.to_string(), file));
    }
    Ok((keys, prints))
}

/// dropbearkey: the system root's, else the build machine's.
fn dropbearkey(sysroot: &Path) -> Result<PathBuf> {
    for d in leanrd_contract::SEARCH_PATH {
        let p = host_path(sysroot, &format!("{d}/dropbearkey"));
        if p.exists() {
            return Ok(p);
        }
    }
    for d in leanrd_contract::SEARCH_PATH {
        let p = PathBuf::from(format!("{d}/dropbearkey"));
        if p.exists() {
            return Ok(p);
        }
    }
    bail!("dropbearkey not found (install dropbear-bin): it makes the SSH host keys")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIEZjj4pt1TyP0UgN2gZSS2lOs9kVtsxrwdziAMaSBFIE";

    #[test]
    fn authorized_keys_lines() {
        let text = format!("# admins\n\nssh-ed25519 {ED} alice@box\ncommand=\"/bin/sh -i\",no-pty ssh-ed25519 {ED}\n");
        let k = authorized(&text).unwrap();
        assert_eq!(k, [format!("ssh-ed25519 {ED} alice@box"), format!("ssh-ed25519 {ED}")], "options taken off");
        // Standard base64 with + / and padding, as OpenSSH writes it.
        let ec = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBGdnA41lNWmtE0iBQme1WnU2ZamKw1E8IC/bL08+aLX1ulxC6Qn17Cmdc9AagNvQp4aOnva+n7OrS4Js0H/S8WU= e";
        assert_eq!(authorized(ec).unwrap(), [ec]);
        assert_eq!(authorized("hello world\n").unwrap_err().0, 1);
        let dss = "ssh-dss AAAAB3NzaC1kc3MAAACBAP\n";
        assert!(authorized(&format!("\n{dss}")).unwrap_err().1.contains("DSA"));
        assert!(authorized("ssh-ed25519\n").unwrap_err().1.contains("without its key"));
        assert!(authorized("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIGGZ\n").unwrap_err().1.contains("not a ssh-rsa key"));
        assert!(authorized("ssh-ed25519 !!!!\n").unwrap_err().1.contains("not base64"));
    }

    #[test]
    fn fingerprints_are_openssh_s() {
        // What `ssh-keygen -lf` says of this key.
        assert_eq!(fingerprint(&Base64::decode_vec(ED).unwrap()), "SHA256:yR5TMSKiBD533miHTWiH/T989KHSOr4Eurfr1G9hWBE");
    }
}
