//! clevis's `tpm2` pin: the JWE's content key is a JWK that `clevis encrypt tpm2` sealed with
//! `tpm2_create` under a primary key of the owner hierarchy, optionally behind a policy of
//! PCR values. /init unseals it as `clevis-decrypt-tpm2` does with tpm2-tools:
//!
//! 1. TPM2_CreatePrimary under the owner, from tpm2-tools' default template for the pin's
//!    `key` (`ecc`: NIST P-256, or `rsa`: RSA 2048; restricted decryption keys with AES-128
//!    CFB, the pin's `hash` as name algorithm, an empty `unique`). The TPM derives the same key
//!    from its owner seed each time, so the object made under it at bind time loads again;
//! 2. TPM2_Load of the sealed object (`jwk_pub`, `jwk_priv`: a TPM2B_PUBLIC and a TPM2B_PRIVATE
//!    as marshalled);
//! 3. with `pcr_ids`, a policy session (TPM2_StartAuthSession, then TPM2_PolicyPCR over the
//!    PCRs' current values: the TPM refuses the unseal when they differ from those sealed);
//!    without, the empty password;
//! 4. TPM2_Unseal: the JWK, whose `k` opens the JWE's A256GCM content.
//!
//! Hand-encoded, as [`crate::tpm`]'s commands are: six commands of fixed shape (TPM 2.0
//! Part 3), where tpm2-tools would bring a TSS stack of some 600 KB and libcurl into the image.
//! Every response is bounds-checked; a TPM that answers nonsense is an error, never a panic.
//! The unseal is not encrypted on the bus (clevis's tpm2-tools call does not ask for it
//! either); the handles made are flushed whatever happens.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use leanrd_contract::clevis::{Jwe, Tpm2, oct_key};

const TAG_NO_SESSIONS: u16 = 0x8001;
const TAG_SESSIONS: u16 = 0x8002;
const CC_CREATE_PRIMARY: u32 = 0x131;
const CC_LOAD: u32 = 0x157;
const CC_UNSEAL: u32 = 0x15E;
const CC_FLUSH_CONTEXT: u32 = 0x165;
const CC_START_AUTH_SESSION: u32 = 0x176;
const CC_POLICY_PCR: u32 = 0x17F;
const RH_OWNER: u32 = 0x4000_0001;
const RH_NULL: u32 = 0x4000_0007;
const RS_PW: u32 = 0x4000_0009;
const ALG_RSA: u16 = 0x0001;
const ALG_AES: u16 = 0x0006;
const ALG_NULL: u16 = 0x0010;
const ALG_ECC: u16 = 0x0023;
const ALG_CFB: u16 = 0x0043;
const ECC_NIST_P256: u16 = 0x0003;
const SE_POLICY: u8 = 0x01;
/// fixedTPM | fixedParent | sensitiveDataOrigin | userWithAuth | restricted | decrypt: what
/// `tpm2_createprimary` gives a primary key by default.
const PRIMARY_ATTRIBUTES: u32 = 0x0003_0072;

/// A hash algorithm's TPM id and digest size, by clevis's name.
fn hash_alg(name: &str) -> Result<(u16, usize), String> {
    match name {
        "sha1" => Ok((0x0004, 20)),
        "sha256" => Ok((0x000B, 32)),
        "sha384" => Ok((0x000C, 48)),
        "sha512" => Ok((0x000D, 64)),
        other => Err(format!("hash {other:?}: not one a TPM2 names (sha1, sha256, sha384, sha512)")),
    }
}

/// A command: header (tag, size, code), handles, an authorisation area when `auth` is
/// given, parameters.
fn command(code: u32, handles: &[u32], auth: Option<&[u8]>, params: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(64 + params.len());
    c.extend_from_slice(&(if auth.is_some() { TAG_SESSIONS } else { TAG_NO_SESSIONS }).to_be_bytes());
    c.extend_from_slice(&[0; 4]);
    c.extend_from_slice(&code.to_be_bytes());
    for h in handles {
        c.extend_from_slice(&h.to_be_bytes());
    }
    if let Some(a) = auth {
        c.extend_from_slice(&(a.len() as u32).to_be_bytes());
        c.extend_from_slice(a);
    }
    c.extend_from_slice(params);
    let n = (c.len() as u32).to_be_bytes();
    c[2..6].copy_from_slice(&n);
    c
}

/// A TPM2B: its size, then the bytes.
fn tpm2b(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u16).to_be_bytes());
    out.extend_from_slice(b);
}

/// One command authorisation: a session, a nonce, attributes (none: a session not continued
/// is flushed by the command), an empty HMAC (or password).
fn session(handle: u32, nonce: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&handle.to_be_bytes());
    tpm2b(&mut a, nonce);
    a.push(0);
    tpm2b(&mut a, &[]);
    a
}

/// TPM2_CreatePrimary under the owner with tpm2-tools' default template for `key` (`ecc` or
/// `rsa`) and `hash` as the name algorithm.
pub fn create_primary_command(key: &str, hash: &str) -> Result<Vec<u8>, String> {
    let (name_alg, _) = hash_alg(hash)?;
    let mut public = Vec::new();
    let (kind, params): (u16, &[u8]) = match key {
        // TPMS_ECC_PARMS: AES-128 CFB, no scheme, NIST P-256, no KDF; unique: two empty
        // coordinates.
        "ecc" => (ALG_ECC, &[0, 0x06, 0, 128, 0, 0x43, 0, 0x10, 0, 0x03, 0, 0x10, 0, 0, 0, 0]),
        // TPMS_RSA_PARMS: AES-128 CFB, no scheme, 2048 bits, the default exponent; unique:
        // an empty modulus.
        "rsa" => (ALG_RSA, &[0, 0x06, 0, 128, 0, 0x43, 0, 0x10, 0x08, 0, 0, 0, 0, 0, 0, 0]),
        other => return Err(format!("key {other:?}: clevis's tpm2 pin makes ecc or rsa primary keys")),
    };
    debug_assert_eq!(u16::from_be_bytes([params[0], params[1]]), ALG_AES);
    debug_assert_eq!(u16::from_be_bytes([params[4], params[5]]), ALG_CFB);
    debug_assert!(kind != ALG_ECC || u16::from_be_bytes([params[8], params[9]]) == ECC_NIST_P256);
    public.extend_from_slice(&kind.to_be_bytes());
    public.extend_from_slice(&name_alg.to_be_bytes());
    public.extend_from_slice(&PRIMARY_ATTRIBUTES.to_be_bytes());
    tpm2b(&mut public, &[]); // authPolicy
    public.extend_from_slice(params);
    let mut p = Vec::new();
    // inSensitive: an empty userAuth and no data.
    tpm2b(&mut p, &[0, 0, 0, 0]);
    tpm2b(&mut p, &public);
    tpm2b(&mut p, &[]); // outsideInfo
    p.extend_from_slice(&0u32.to_be_bytes()); // creationPCR: none
    Ok(command(CC_CREATE_PRIMARY, &[RH_OWNER], Some(&session(RS_PW, &[])), &p))
}

/// TPM2_Load of a sealed object under `parent`: its TPM2B_PRIVATE and TPM2B_PUBLIC, as
/// `tpm2_create` wrote them (each with its size first, checked here).
pub fn load_command(parent: u32, private: &[u8], public: &[u8]) -> Result<Vec<u8>, String> {
    for (what, b) in [("jwk_priv", private), ("jwk_pub", public)] {
        let n = b.get(..2).map(|s| usize::from(u16::from_be_bytes([s[0], s[1]])));
        if n != Some(b.len().wrapping_sub(2)) {
            return Err(format!("{what}: not a TPM2B of its own size ({} bytes)", b.len()));
        }
    }
    let mut p = Vec::with_capacity(private.len() + public.len());
    p.extend_from_slice(private);
    p.extend_from_slice(public);
    Ok(command(CC_LOAD, &[parent], Some(&session(RS_PW, &[])), &p))
}

/// TPM2_StartAuthSession: an unbound, unsalted policy session over `hash`.
pub fn start_policy_session_command(hash: &str, nonce: &[u8]) -> Result<Vec<u8>, String> {
    let (alg, _) = hash_alg(hash)?;
    let mut p = Vec::new();
    tpm2b(&mut p, nonce);
    tpm2b(&mut p, &[]); // encryptedSalt
    p.push(SE_POLICY);
    p.extend_from_slice(&ALG_NULL.to_be_bytes()); // symmetric: none
    p.extend_from_slice(&alg.to_be_bytes());
    Ok(command(CC_START_AUTH_SESSION, &[RH_NULL, RH_NULL], None, &p))
}

/// TPM2_PolicyPCR: the session's policy extended with the PCRs' current values in `bank`.
pub fn policy_pcr_command(session: u32, bank: &str, pcrs: &[u8]) -> Result<Vec<u8>, String> {
    let (alg, _) = hash_alg(bank)?;
    let mut select = [0u8; 3];
    for &p in pcrs {
        let p = usize::from(p);
        *select.get_mut(p / 8).ok_or_else(|| format!("PCR {p}: a TPM2 has 24"))? |= 1 << (p % 8);
    }
    let mut p = Vec::new();
    tpm2b(&mut p, &[]); // pcrDigest: the TPM's own reading
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&alg.to_be_bytes());
    p.push(3);
    p.extend_from_slice(&select);
    Ok(command(CC_POLICY_PCR, &[session], None, &p))
}

/// TPM2_Unseal of `item`, authorised by `auth` (a policy session, or the password one).
pub fn unseal_command(item: u32, auth: u32, nonce: &[u8]) -> Vec<u8> {
    command(CC_UNSEAL, &[item], Some(&session(auth, nonce)), &[])
}

/// TPM2_FlushContext.
pub fn flush_command(handle: u32) -> Vec<u8> {
    command(CC_FLUSH_CONTEXT, &[], None, &handle.to_be_bytes())
}

/// What the TPM's response codes that a user meets mean, for the message.
fn refusal(code: u32, what: &str) -> String {
    // Format-one codes carry a parameter/handle/session number in bits 8-11: the error is
    // in the low bits (TPM 2.0 Part 2, 6.6).
    let base = if code & 0x80 != 0 { code & 0xbf } else { code };
    let why = match base {
        0x99 => " (PCR values differ from those sealed: policy check failed)",
        0x9d => " (the PCR values differ from those sealed)",
        0x8f | 0x9f => " (the sealed object is not this TPM's: integrity check failed)",
        0x0128 => " (PCR values changed during the policy)",
        0x0921 | 0x0922 => " (the TPM is busy or locked out: try again)",
        0x0100 => " (the TPM was not started)",
        0x098e => " (authorisation failed; dictionary-attack lockout may follow)",
        _ => "",
    };
    format!("{what}: the TPM refused (response code {code:#x}){why}")
}

/// A response checked: its size as said, its code 0; `what` names the command.
fn checked<'a>(r: &'a [u8], what: &str) -> Result<&'a [u8], String> {
    let size = r.get(2..6).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let rc = r.get(6..10).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    match (size, rc) {
        (Some(s), _) if s != r.len() => Err(format!("{what}: a response of {} bytes that says {s}", r.len())),
        (Some(_), Some(0)) => Ok(r),
        (Some(_), Some(rc)) => Err(refusal(rc, what)),
        _ => Err(format!("{what}: a short response")),
    }
}

/// The handle a response returns first (CreatePrimary, Load, StartAuthSession).
pub fn response_handle(r: &[u8], what: &str) -> Result<u32, String> {
    let r = checked(r, what)?;
    r.get(10..14).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(|| format!("{what}: no handle"))
}

/// The sealed data of a TPM2_Unseal response (sessions tag: the parameter size, then the
/// TPM2B_SENSITIVE_DATA).
pub fn unsealed(r: &[u8]) -> Result<Vec<u8>, String> {
    let r = checked(r, "TPM2_Unseal")?;
    let short = || String::from("TPM2_Unseal: a short response");
    let n = r.get(14..16).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))).ok_or_else(short)?;
    r.get(16..16 + n).map(<[u8]>::to_vec).ok_or_else(short)
}

/// One TPM command sent, its response read.
pub type Transact<'a> = dyn FnMut(&[u8]) -> Result<Vec<u8>, String> + 'a;

/// Unseal the pin's key with `tx` (one TPM command, its response) and open the JWE. `nonce`
/// fills the session nonces. Every handle made is flushed, whatever fails.
pub fn decrypt(
    jwe: &Jwe,
    t: &Tpm2,
    tx: &mut Transact<'_>,
    nonce: &mut dyn FnMut(&mut [u8]) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    if jwe.alg != "dir" {
        return Err(format!("key management {}: a tpm2 pin's is dir", jwe.alg));
    }
    let (_, digest) = hash_alg(&t.hash)?;
    let primary = response_handle(&tx(&create_primary_command(&t.key, &t.hash)?)?, "TPM2_CreatePrimary")?;
    let loaded = tx(&load_command(primary, &t.private, &t.public)?).and_then(|r| response_handle(&r, "TPM2_Load"));
    let _ = tx(&flush_command(primary));
    let item = loaded?;
    let r = (|| {
        let mut n = alloc::vec![0u8; digest];
        let auth = if t.pcr_ids.is_empty() {
            RS_PW
        } else {
            nonce(&mut n)?;
            let s = response_handle(&tx(&start_policy_session_command(&t.hash, &n)?)?, "TPM2_StartAuthSession")?;
            let policy = tx(&policy_pcr_command(s, &t.pcr_bank, &t.pcr_ids)?)
                .and_then(|r| checked(&r, "TPM2_PolicyPCR").map(|_| ()));
            if let Err(e) = policy {
                let _ = tx(&flush_command(s));
                return Err(e);
            }
            nonce(&mut n)?;
            s
        };
        let r = tx(&unseal_command(item, auth, if auth == RS_PW { &[] } else { &n }));
        let out = r.and_then(|r| unsealed(&r));
        // A policy session not continued is flushed by a successful command; after a
        // refusal it stays, and goes here.
        if out.is_err() && auth != RS_PW {
            let _ = tx(&flush_command(auth));
        }
        out
    })();
    let _ = tx(&flush_command(item));
    let mut jwk = r?;
    let key = oct_key(&jwk).map_err(|e| format!("the unsealed data: {e}"));
    jwk.fill(0);
    let mut key = key?;
    let out = crate::tang::open_content(jwe, &key);
    key.fill(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use leanrd_contract::clevis::Pin;

    /// clevis-encrypt-tpm2's output for `{"pcr_ids":"7","pcr_bank":"sha256"}`.
    const JWE: &str = include_str!("../../contract/testdata/clevis-tpm2-pcr7.jwe");

    #[test]
    fn commands_are_the_specs() {
        // CreatePrimary, ecc/sha256: header, owner, a password session, then the template.
        let c = create_primary_command("ecc", "sha256").unwrap();
        assert_eq!(&c[..2], &TAG_SESSIONS.to_be_bytes());
        assert_eq!(u32::from_be_bytes([c[2], c[3], c[4], c[5]]) as usize, c.len());
        assert_eq!(&c[6..14], &[0, 0, 1, 0x31, 0x40, 0, 0, 1]);
        // auth area: 9 bytes (handle, empty nonce, attributes, empty hmac).
        assert_eq!(&c[14..27], &[0, 0, 0, 9, 0x40, 0, 0, 9, 0, 0, 0, 0, 0]);
        let public = &c[33..];
        assert_eq!(&public[..12], &[0, 26, 0, 0x23, 0, 0x0b, 0, 3, 0, 0x72, 0, 0]);
        assert_eq!(c.len(), 33 + 2 + 26 + 2 + 4);
        assert!(create_primary_command("dsa", "sha256").unwrap_err().contains("ecc or rsa"));
        assert!(create_primary_command("ecc", "md5").unwrap_err().contains("md5"));
        // PolicyPCR over 0 and 7 of sha256: one selection, bits 0 and 7 of the first byte.
        let p = policy_pcr_command(0x0300_0000, "sha256", &[0, 7]).unwrap();
        assert_eq!(&p[p.len() - 10..], &[0, 0, 0, 1, 0, 0x0b, 3, 0x81, 0, 0]);
        assert!(policy_pcr_command(1, "sha256", &[24]).is_err());
        // Load: the blobs as given, checked for their own sizes.
        assert!(load_command(1, &[0, 1, 9], &[0, 0]).is_ok());
        assert!(load_command(1, &[0, 5, 9], &[0, 0]).unwrap_err().contains("jwk_priv"));
        assert!(load_command(1, &[], &[0, 0]).is_err());
    }

    #[test]
    fn responses_are_bounded_and_refusals_say_why() {
        assert!(response_handle(&[], "x").unwrap_err().contains("short"));
        assert!(response_handle(&[0x80, 1, 0, 0, 0, 10, 0, 0, 0, 0], "x").unwrap_err().contains("no handle"));
        let refused = [0x80, 1, 0, 0, 0, 10, 0, 0, 0x09, 0x9d];
        let e = unsealed(&refused).unwrap_err();
        assert!(e.contains("0x99d") && e.contains("PCR values"), "{e}");
        assert!(unsealed(&[0x80, 2, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 9, 0, 200]).unwrap_err().contains("short"));
        assert_eq!(unsealed(&[0x80, 2, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 7]).unwrap(), [7]);
    }

    #[test]
    fn a_tpm_that_answers_nonsense_is_an_error() {
        let j = Jwe::compact(JWE).unwrap();
        let Pin::Tpm2(t) = &j.pin else { panic!() };
        for answer in [alloc::vec![], alloc::vec![0xff; 3], alloc::vec![0x80, 1, 0, 0, 0, 99, 0, 0, 0, 0]] {
            let mut tx = |_: &[u8]| Ok(answer.clone());
            assert!(decrypt(&j, t, &mut tx, &mut |_| Ok(())).is_err());
        }
    }

    /// swtpm on loopback (its TCP server speaks the raw command protocol), or None.
    pub(crate) struct Swtpm {
        child: std::process::Child,
        pub port: u16,
        _dir: tempfile::TempDir,
    }

    impl Drop for Swtpm {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    pub(crate) fn swtpm() -> Option<Swtpm> {
        if std::process::Command::new("swtpm").arg("--version").output().is_err() {
            return leanrd_testkit::skip("no swtpm (apt-get install swtpm)");
        }
        let dir = tempfile::tempdir().unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = std::process::Command::new("swtpm")
            .args(["socket", "--tpm2", "--flags", "not-need-init,startup-clear"])
            .arg("--tpmstate")
            .arg(format!("dir={}", dir.path().display()))
            .args(["--server", &format!("type=tcp,port={port}")])
            .args(["--ctrl", &format!("type=tcp,port={}", port + 1)])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let tpm = Swtpm { child, port, _dir: dir };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(tpm);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("swtpm did not listen on {port}");
    }

    /// One connection to swtpm for a whole exchange, as /dev/tpmrm0 is one open file.
    pub(crate) fn transport(port: u16) -> impl FnMut(&[u8]) -> Result<Vec<u8>, String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        move |cmd| {
            s.write_all(cmd).map_err(|e| e.to_string())?;
            let mut head = [0u8; 10];
            s.read_exact(&mut head).map_err(|e| e.to_string())?;
            let n = u32::from_be_bytes([head[2], head[3], head[4], head[5]]) as usize;
            let mut r = head.to_vec();
            r.resize(n.max(10), 0);
            s.read_exact(&mut r[10..]).map_err(|e| e.to_string())?;
            Ok(r)
        }
    }

    /// `clevis encrypt tpm2 CONFIG` of `secret` against the swtpm at `port`.
    pub(crate) fn clevis_encrypt(port: u16, config: &str, secret: &[u8]) -> Option<String> {
        use std::io::Write;
        if std::process::Command::new("tpm2_createprimary").arg("-v").output().is_err() {
            return leanrd_testkit::skip("no tpm2-tools (apt-get install clevis-tpm2)");
        }
        let mut c = std::process::Command::new("clevis")
            .args(["encrypt", "tpm2", config])
            .env("TPM2TOOLS_TCTI", format!("swtpm:host=127.0.0.1,port={port}"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(secret).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "clevis encrypt tpm2 {config}: {}", String::from_utf8_lossy(&o.stderr));
        // swtpm has no resource manager: the sessions tpm2-tools left loaded would fill its
        // three slots (the kernel's /dev/tpmrm0 flushes them when a process closes it).
        for what in ["-l", "-s", "-t"] {
            let _ = std::process::Command::new("tpm2_flushcontext")
                .arg(what)
                .env("TPM2TOOLS_TCTI", format!("swtpm:host=127.0.0.1,port={port}"))
                .stderr(std::process::Stdio::null())
                .status();
        }
        Some(String::from_utf8(o.stdout).unwrap())
    }

    fn nonce(b: &mut [u8]) -> Result<(), String> {
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 ^ 0x5a;
        }
        Ok(())
    }

    #[test]
    fn what_clevis_sealed_in_swtpm_unseals_and_a_changed_pcr_refuses() {
        let Some(tpm) = swtpm() else { return };
        for (config, secret) in [
            (r#"{}"#, &b"no policy"[..]),
            (r#"{"pcr_ids":"7","pcr_bank":"sha256"}"#, b"sealed to PCR 7"),
            (r#"{"key":"rsa","pcr_ids":"0,7","pcr_bank":"sha256"}"#, b"rsa primary"),
            (r#"{"pcr_ids":"0,1,2,7,16,23","pcr_bank":"sha256"}"#, b"many PCRs"),
        ] {
            let Some(text) = clevis_encrypt(tpm.port, config, secret) else { return };
            let j = Jwe::compact(text.trim()).unwrap();
            let Pin::Tpm2(t) = &j.pin else { panic!("{:?}", j.pin) };
            let mut tx = transport(tpm.port);
            assert_eq!(decrypt(&j, t, &mut tx, &mut nonce).expect(config), secret, "{config}");
        }
        // PCR 7 extended: the policy no longer holds.
        let text = clevis_encrypt(tpm.port, r#"{"pcr_ids":"7","pcr_bank":"sha256"}"#, b"x").unwrap();
        let j = Jwe::compact(text.trim()).unwrap();
        let Pin::Tpm2(t) = &j.pin else { panic!() };
        let mut tx = transport(tpm.port);
        let ext = crate::tpm::pcr_extend_command(7, &[("sha256", alloc::vec![1; 32])]).unwrap();
        tx(&ext).unwrap();
        let e = decrypt(&j, t, &mut tx, &mut nonce).unwrap_err();
        assert!(e.contains("TPM2_Unseal: the TPM refused") && e.contains("PCR"), "{e}");
        // Every handle was flushed: a TPM holds 3 transient objects, and this many exchanges
        // would have filled it.
        for _ in 0..4 {
            let _ = decrypt(&j, t, &mut tx, &mut nonce);
        }
        // (swtpm serves one connection at a time: this one closed for clevis's.)
        drop(tx);
        let again = clevis_encrypt(tpm.port, "{}", b"still room").unwrap();
        let j = Jwe::compact(again.trim()).unwrap();
        let Pin::Tpm2(t) = &j.pin else { panic!() };
        let mut tx = transport(tpm.port);
        assert_eq!(decrypt(&j, t, &mut tx, &mut nonce).unwrap(), b"still room");
    }
}
