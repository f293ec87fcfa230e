//! LUKS2 containers bound with clevis (`clevis luks bind`): each clevis token's JWE decrypted
//! by /init itself ([`crate::tang`] for the tang pin), the result given to cryptsetup as the
//! passphrase of the token's key slot, as `clevis luks unlock` does.
//!
//! The network comes up only for a pin that needs it (a Tang server): by `ip=` where the
//! command line gives it, else by DHCP on the interfaces with a link (the network roots' code,
//! [`crate::boot::network`]). A machine whose containers have no clevis token never waits for
//! it. Each Tang server has a bounded time (`rd.leanrd.tang_timeout=`, the image's
//! `clevis.tang_timeout`, default [`DEFAULT_TIMEOUT_S`] s, the network's start included);
//! then the next token is tried, then the passphrase prompt.
//!
//! Before the switch to the root, an interface brought up for Tang alone goes down again,
//! its address removed; with `rd.neednet=1` it is handed over as a network root's is.
//!
//! `tpm2` is unsealed by the TPM ([`crate::tpm2pin`]); it never waits for a network. `sss`
//! (Shamir's threshold over other pins, nested: [`crate::sss`]) is unlocked through its shares'
//! pins, in order, until the threshold is met. Other pins (`yubikey`, `pkcs11`...) are not
//! unlocked by this /init: such a share or token fails with a note saying so (and the
//! generator warns of it at build time).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use leanrd_contract::clevis::{ClevisToken, EcKey, Jwe, Pin, Tang, describe};

use crate::Init;
use crate::http::{self, Url};
use crate::net::{self, Configured};
use crate::sys;

/// How long one Tang server has (s), the network's start included, unless the command line
/// or the image says otherwise.
pub const DEFAULT_TIMEOUT_S: u64 = 10;
/// How long a tpm2 pin waits for /dev/tpmrm0 (its driver probing).
const TPM_WAIT_MS: u64 = 3_000;

/// How long a pending Tang unlock keeps trying once the prompt has appeared, all told (s).
const PENDING_S: u64 = 300;
/// The pause between its rounds (ms).
const PENDING_PAUSE_MS: u64 = 2_000;
/// Where it notes the interface it configured, for /init to take down before the switch.
const PENDING_NET_NOTE: &str = "/run/leanrd/clevis-net";

/// A Tang unlock still going on while the prompt is up: a child process that keeps trying
/// the container's Tang tokens (the network may come up late, the server may come back), and
/// sends the secret it gets on `fd` (hex, one line). The prompt reads it as one more console
/// ([`crate::prompt::Consoles::race_key`]): the first good answer wins.
pub struct Pending {
    pid: i32,
    /// The child's end: taken by the prompt.
    pub fd: Option<rustix::fd::OwnedFd>,
}

/// The network clevis brought up, once per boot.
#[derive(Default)]
pub struct Network {
    /// The interface, or why there is none (not tried again).
    pub up: Option<Result<Configured, String>>,
    /// It is the root's (a network transport brought it up): used as it is, never taken down.
    pub roots: bool,
}

/// The interface a network root brought up: Tang and SSH use it as it is (no second DHCP on
/// it), and it stays up for the root.
pub fn adopt(init: &mut Init, up: &Configured) {
    init.luks.clevis = Network { up: Some(Ok(up.clone())), roots: true };
}

/// The time each Tang server has (ms).
fn timeout_ms(init: &Init) -> u64 {
    init.cmd.tang_timeout.or(init.conf.tang_timeout).unwrap_or(DEFAULT_TIMEOUT_S).saturating_mul(1000)
}

/// The clevis tokens of a container's LUKS2 header (the device, or a detached header).
pub fn tokens(header: &str) -> Vec<ClevisToken> {
    crate::luks2::read_header(header).map(|h| leanrd_contract::luks2::clevis_tokens(&h)).unwrap_or_default()
}

/// Decrypt each clevis token's JWE in turn and hand the secret to `try_key` (true: it opened
/// the container). The token that opened it, for the step log; None when none did (why is in
/// the notes).
pub fn unlock(
    init: &mut Init,
    dev: &str,
    tokens: &[ClevisToken],
    try_key: &mut dyn FnMut(&[u8]) -> bool,
) -> Option<String> {
    for t in tokens {
        let jwe = match &t.jwe {
            Ok(j) => j,
            Err(e) => {
                init.notes.push(format!("{dev}: clevis token {}: {e}", t.id));
                continue;
            }
        };
        let what = format!("clevis token {} ({})", t.id, describe(&jwe.pin));
        init.log.step(&format!("{dev}: trying its {what}"));
        match decrypt(init, jwe) {
            Ok(secret) => {
                let opened = try_key(&secret);
                let mut secret = secret;
                secret.fill(0);
                if opened {
                    return Some(what);
                }
                init.notes.push(format!(
                    "{dev}: its {what} decrypted, but the key does not open it (key slot {} removed?)",
                    t.keyslots.join(",")
                ));
            }
            Err(e) => {
                // On the console too: the prompt that follows says nothing of why.
                init.log.error(&format!("{dev}: {what}: {e}"));
                init.notes.push(format!("{dev}: {what}: {e}"));
            }
        }
    }
    None
}

/// After the tokens failed, before the prompt: when one of them needs a Tang server, a child
/// keeps trying them, each round bounded as the first was, [`PENDING_PAUSE_MS`] apart, for up
/// to [`PENDING_S`] s. Quiet: the prompt already said why the first attempt failed.
pub fn pending(init: &mut Init, tokens: &[ClevisToken]) -> Option<Pending> {
    let tang: Vec<Jwe> =
        tokens.iter().filter_map(|t| t.jwe.as_ref().ok()).filter(|j| j.pin.uses_tang()).cloned().collect();
    if tang.is_empty() {
        return None;
    }
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
    let had_net = matches!(init.luks.clevis.up, Some(Ok(_)));
    sys::mkdir_p("/run/leanrd");
    let pid = crate::process::fork().ok()?;
    if pid == 0 {
        drop(r);
        let until = sys::now_ms().saturating_add(PENDING_S * 1000);
        let mut noted = had_net;
        while sys::now_ms() < until {
            sys::sleep_ms(PENDING_PAUSE_MS);
            // A network that did not come up is tried again (a cable plugged in late).
            if matches!(init.luks.clevis.up, Some(Err(_))) {
                init.luks.clevis.up = None;
            }
            for j in &tang {
                let got = decrypt(init, j);
                if !noted && let Some(Ok(c)) = &init.luks.clevis.up {
                    net::write_note(PENDING_NET_NOTE, c);
                    noted = true;
                }
                if let Ok(mut secret) = got {
                    let mut line: Vec<u8> = Vec::with_capacity(secret.len() * 2 + 1);
                    for b in &secret {
                        line.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
                    }
                    line.push(b'\n');
                    secret.fill(0);
                    sys::write_all(&w, &line);
                    line.fill(0);
                    crate::process::exit(0);
                }
            }
        }
        crate::process::exit(1);
    }
    drop(w);
    init.log.step(&format!("clevis: Tang tried again in the background (pid {pid}) while the prompt waits"));
    Some(Pending { pid, fd: Some(r) })
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl Pending {
    /// The prompt is over: the child ended (it may have finished), the interface it brought
    /// up taken over, to be taken down or handed over with the rest before the switch.
    pub fn finish(self, init: &mut Init) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        let _ = crate::process::wait(self.pid);
        if let Some(c) = net::take_note(PENDING_NET_NOTE)
            && !matches!(init.luks.clevis.up, Some(Ok(_)))
        {
            init.luks.clevis.up = Some(Ok(c));
        }
    }
}

/// A JWE's secret, by its pin.
fn decrypt(init: &mut Init, jwe: &Jwe) -> Result<Vec<u8>, String> {
    match &jwe.pin {
        Pin::Tang(t) => {
            let start = sys::now_ms();
            let deadline = start.saturating_add(timeout_ms(init));
            let url = Url::parse(&t.url)?;
            let up = network(init, deadline)?;
            let addr = net::server_address(&url.host, &up, &mut init.log)?;
            let r = tang(jwe, t, &url, &addr, deadline);
            if r.is_ok() {
                init.log.step(&format!("tang: {} answered in {} ms", t.url, sys::now_ms() - start));
            }
            r.map_err(|e| {
                if sys::now_ms() >= deadline {
                    format!("{e} (after {} s: rd.leanrd.tang_timeout=)", (sys::now_ms() - start) / 1000)
                } else {
                    e
                }
            })
        }
        Pin::Sss { threshold, prime, shares } => {
            // Each share through its own pin, in order, until the threshold is met (as
            // clevis does); why each failed share failed, when too few open.
            let mut points = Vec::new();
            let mut failed = Vec::new();
            for (i, s) in shares.iter().enumerate() {
                if points.len() >= *threshold {
                    break;
                }
                match decrypt(init, s) {
                    Ok(p) => points.push(p),
                    Err(e) => failed.push(format!("share {} ({}): {e}", i + 1, describe(&s.pin))),
                }
            }
            if points.len() < *threshold {
                for p in points.iter_mut() {
                    p.fill(0);
                }
                return Err(format!(
                    "pin sss: {} of {} shares opened, {threshold} needed: {}",
                    points.len(),
                    shares.len(),
                    failed.join("; ")
                ));
            }
            let r = crate::sss::decrypt(jwe, *threshold, prime, &points);
            for p in points.iter_mut() {
                p.fill(0);
            }
            r
        }
        Pin::Tpm2(t) => {
            // The TPM's driver is loaded with the hardware's modules; its device may still be
            // coming.
            let dev = crate::tpm::Device::open(TPM_WAIT_MS)?;
            let mut rng = crate::tang::KernelRng::default();
            let mut nonce = |b: &mut [u8]| {
                rand_core::RngCore::fill_bytes(&mut rng, b);
                if rng.failed {
                    Err(String::from("the kernel gave no random numbers (getrandom failed)"))
                } else {
                    Ok(())
                }
            };
            let start = sys::now_ms();
            let r = crate::tpm2pin::decrypt(jwe, t, &mut |c| dev.transact(c), &mut nonce);
            if r.is_ok() {
                init.log.step(&format!("tpm2: unsealed by the TPM in {} ms", sys::now_ms() - start));
            }
            r
        }
        Pin::Other(n) => Err(format!("pin {n}: not unlocked by leanrd's /init (tang, tpm2 and sss are)")),
    }
}

/// A tang pin's secret from its server, at `addr` (the URL's host, resolved), by `deadline`.
pub fn tang(jwe: &Jwe, t: &Tang, url: &Url, addr: &str, deadline: u64) -> Result<Vec<u8>, String> {
    let path = format!("{}/rec/{}", url.path, t.kid);
    crate::tang::decrypt(jwe, t, &mut |x| rec(url, addr, &path, x, deadline))
}

/// One recovery request: `X` posted, the server's `Y` read back.
fn rec(url: &Url, addr: &str, path: &str, x: &EcKey, deadline: u64) -> Result<EcKey, String> {
    let r = http::post(url, addr, path, "application/jwk+json", x.to_json().as_bytes(), deadline)?;
    if r.status != 200 {
        return Err(format!("the server answered {} {} to POST {path}", r.status, r.reason));
    }
    reply_key(&r.body)
}

/// The server's answer to a recovery: an EC JWK.
pub fn reply_key(body: &[u8]) -> Result<EcKey, String> {
    EcKey::parse(body).map_err(|e| format!("the server's answer: {e}"))
}

/// The network for Tang: up once (`deadline` bounds the wait for an interface and its
/// address); a failure is remembered, not tried again.
fn network(init: &mut Init, deadline: u64) -> Result<Configured, String> {
    if init.luks.clevis.up.is_none() {
        init.mods.net = true;
        let r = crate::boot::network(init, deadline);
        init.luks.clevis.up = Some(r);
    }
    match &init.luks.clevis.up {
        Some(Ok(c)) => Ok(c.clone()),
        Some(Err(e)) => Err(format!("no network for Tang: {e}")),
        None => Err("no network for Tang".into()),
    }
}

/// Before the switch: the interface Tang used is handed over with `rd.neednet=1`, else taken
/// down (the root brings up its own network as it is configured to).
pub fn release_network(init: &mut Init) {
    let Some(Ok(c)) = init.luks.clevis.up.take() else { return };
    if init.luks.clevis.roots {
        return; // the root's: handed over by the root's own code
    }
    if init.cmd.neednet {
        net::hand_over(&c);
        return;
    }
    match net::take_down(&c) {
        Ok(()) => init.log.step(&format!("net: {} down again (it was up for Tang only)", c.iface)),
        Err(e) => init.log.error(&format!("net: {} could not be taken down: {e}", c.iface)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_answer_is_checked() {
        let k =
            reply_key(br#"{"alg":"ECMR","crv":"P-521","key_ops":["deriveKey"],"kty":"EC","x":"AQ","y":"Ag"}"#).unwrap();
        assert_eq!((k.crv.as_str(), k.x.as_slice()), ("P-521", [1u8].as_slice()));
        assert!(reply_key(b"<html>").unwrap_err().contains("not JSON"));
        assert!(reply_key(br#"{"kty":"oct","k":"AA"}"#).unwrap_err().contains("not EC"));
        assert!(reply_key(br#"{"kty":"EC","crv":"P-521","x":"!"}"#).unwrap_err().contains("base64url"));
        assert!(reply_key(b"[]").is_err());
    }

    /// A Tang server on loopback: the real tangd (Debian's `tang`), one process per
    /// connection on its standard input and output, as socat or systemd's socket runs it.
    /// `db`: its key directory. Serves `n` connections, then stops.
    fn tangd(db: &std::path::Path, n: usize) -> Option<(u16, std::thread::JoinHandle<()>)> {
        let tangd = std::path::Path::new("/usr/libexec/tangd");
        if !tangd.exists() {
            return leanrd_testkit::skip("no /usr/libexec/tangd (apt-get install tang)");
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let db = db.to_path_buf();
        let h = std::thread::spawn(move || {
            for _ in 0..n {
                let Ok((s, _)) = l.accept() else { return };
                let out = s.try_clone().unwrap();
                let _ = std::process::Command::new(tangd)
                    .arg(&db)
                    .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(s)))
                    .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(out)))
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        });
        Some((port, h))
    }

    /// A server that does `serve` with each of `n` connections.
    fn fake(n: usize, serve: fn(std::net::TcpStream)) -> (u16, std::thread::JoinHandle<()>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            for _ in 0..n {
                let Ok((s, _)) = l.accept() else { return };
                serve(s);
            }
        });
        (port, h)
    }

    fn jwe() -> (Jwe, Tang) {
        let j = Jwe::compact(crate::tang::tests::JWE).unwrap();
        let Pin::Tang(t) = j.pin.clone() else { panic!() };
        (j, t)
    }

    fn url(port: u16) -> Url {
        Url::parse(&format!("http://127.0.0.1:{port}")).unwrap()
    }

    #[test]
    fn tangd_answers_and_the_root_key_comes_back_also_after_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../contract/testdata/tang-db");
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
        let Some((port, h)) = tangd(dir.path(), 2) else { return };
        let (j, t) = jwe();
        let got = tang(&j, &t, &url(port), "127.0.0.1", sys::now_ms() + 10_000).unwrap();
        assert_eq!(got, b"secret-passphrase-123");
        // tangd-rotate-keys: the old keys hidden (a leading dot), new ones made. The old
        // exchange key is no longer advertised, but still answers for what was bound to it.
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            std::fs::rename(e.path(), dir.path().join(format!(".{name}"))).unwrap();
        }
        assert!(std::process::Command::new("/usr/libexec/tangd-keygen").arg(dir.path()).status().unwrap().success());
        let got = tang(&j, &t, &url(port), "127.0.0.1", sys::now_ms() + 10_000).unwrap();
        assert_eq!(got, b"secret-passphrase-123");
        h.join().unwrap();
    }

    #[test]
    fn a_hostile_or_silent_server_is_bounded() {
        use std::io::{Read, Write};
        let (j, t) = jwe();
        // Garbage.
        let (port, h) = fake(1, |mut s| {
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nnot a jwk!!");
        });
        let e = tang(&j, &t, &url(port), "127.0.0.1", sys::now_ms() + 5_000).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        h.join().unwrap();
        // Huge: an endless body, cut at the bound.
        let (port, h) = fake(1, |mut s| {
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
            let chunk = [b'x'; 65536];
            for _ in 0..64 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        let e = tang(&j, &t, &url(port), "127.0.0.1", sys::now_ms() + 5_000).unwrap_err();
        assert!(e.contains("more than 65536 bytes"), "{e}");
        h.join().unwrap();
        // Nothing at all: the connection is taken and held.
        let (port, h) = fake(1, |mut s| {
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            std::thread::sleep(std::time::Duration::from_millis(2500));
        });
        let start = sys::now_ms();
        let e = tang(&j, &t, &url(port), "127.0.0.1", start + 1_000).unwrap_err();
        assert!(e.contains("no whole reply in time"), "{e}");
        assert!(sys::now_ms() - start < 2_000, "the bound holds");
        h.join().unwrap();
        // Not there: refused at once.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let e = tang(&j, &t, &url(port), "127.0.0.1", sys::now_ms() + 5_000).unwrap_err();
        assert!(e.contains("refused"), "{e}");
        // An error status.
        let (port, h) = fake(1, |mut s| {
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        });
        let e = tang(&j, &t, &url(port), "127.0.0.1", sys::now_ms() + 5_000).unwrap_err();
        assert!(e.contains("404 Not Found"), "{e}");
        h.join().unwrap();
    }
}
