//! The tokens of a container's LUKS2 header, read before cryptsetup runs
//! ([`leanrd_contract::luks2`] parses them).
//!
//! Why /init reads them itself: `cryptsetup open --token-only` asks for a token's PIN on its
//! own standard input when it is a terminal (one console, blocking the boot there), and a PIN
//! token tried with no PIN must not cost a try of the TPM's dictionary-attack counter. Knowing
//! the tokens first, /init tries the PIN-less ones alone (`--token-id`) and asks for the PIN on
//! every console, as it asks for a passphrase.

use alloc::vec::Vec;

use leanrd_contract::luks2::{BINARY_HEADER, Token, header_size, tokens};

/// The tokens of the LUKS2 header at `path` (the device, or a detached header); empty when it
/// cannot be read or is not LUKS2.
pub fn read_tokens(path: &str) -> Vec<Token> {
    read_header(path).map(|h| tokens(&h)).unwrap_or_default()
}

/// The whole LUKS2 header (binary header and JSON area) at `path`; None when it cannot be
/// read or is not LUKS2.
pub fn read_header(path: &str) -> Option<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut head = alloc::vec![0u8; BINARY_HEADER];
    if !read_at(&fd, &mut head, 0) {
        return None;
    }
    let size = header_size(&head)?;
    let mut all = alloc::vec![0u8; size];
    read_at(&fd, &mut all, 0).then_some(all)
}

/// Fill `buf` from `offset`; false on an error or a short file.
fn read_at(fd: &rustix::fd::OwnedFd, buf: &mut [u8], offset: u64) -> bool {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) | Err(_) => return false,
            Ok(n) => done += n,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_read_from_a_file() {
        let mut h = alloc::vec![0u8; 16384];
        h[..6].copy_from_slice(leanrd_contract::luks2::MAGIC);
        h[6..8].copy_from_slice(&[0, 2]);
        h[8..16].copy_from_slice(&16384u64.to_be_bytes());
        let json = br#"{"tokens":{"0":{"type":"systemd-tpm2","tpm2-pin":true}}}"#;
        h[4096..4096 + json.len()].copy_from_slice(json);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("hdr");
        std::fs::write(&p, &h).unwrap();
        assert_eq!(read_tokens(p.to_str().unwrap()), [Token { id: 0, kind: "systemd-tpm2".into(), pin: true }]);
        std::fs::write(&p, &h[..10000]).unwrap();
        assert!(read_tokens(p.to_str().unwrap()).is_empty(), "a short header");
        assert!(read_tokens("/nonexistent/hdr").is_empty());
    }
}
