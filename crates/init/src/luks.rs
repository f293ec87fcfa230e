//! Unlocking LUKS containers with cryptsetup: which to open, under which name, with which
//! key — from the image's crypttab entries, `rd.luks.*` and what the boot waits for — and the
//! passphrase, asked once on every console and tried on every container still locked (as
//! systemd-cryptsetup's password cache does).
//!
//! Which containers ([`plan`]):
//! - with `rd.luks.uuid=` (or `rd.luks.name=`): those, and any the root, /usr or the resume
//!   device names (by the container's UUID or the crypttab name it opens as);
//! - else the entries the generator marked needed (host-only: the root's, /usr's, the resume
//!   device's, Debian's `initramfs`), and any a waited-for device names;
//! - when nothing names one (a universal image booted with `root=UUID=` of the file system
//!   inside): every container there is. A `root=/dev/mapper/NAME` that no entry names is then
//!   the name of the one container there.
//!
//! The key, in order: a key file (in the image, or on a device waited for), the cached
//! passphrase, then the prompt (`tries=`, default 3; none with `headless`).

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use leanrd_contract::{Capability, Crypt, CryptKey, CryptOptions, DeviceRef, KEYMAP_DIR};
use rustix::fd::BorrowedFd;

use crate::Init;
use crate::cmdline::Cmdline;
use crate::devices::{self, Dev};
use crate::prompt::{Answer, Consoles, Secret};
use crate::sys;

/// What the unlocking remembers between passes of the wait loop.
#[derive(Default)]
pub struct State {
    /// The last passphrase that opened a container.
    cached: Option<Secret>,
    /// Containers (by UUID) the user gave up on, or that cannot be opened: not asked again.
    given_up: BTreeSet<String>,
    /// Their mapper names: a device waited for by one of these names is not asked of another
    /// container (the passphrase typed wrong until the tries ran out is the end of it).
    given_up_names: BTreeSet<String>,
    /// The network clevis brought up for a Tang server.
    pub clevis: crate::clevis::Network,
    /// The SSH server, once a prompt started it (or why it could not start).
    pub ssh: Option<Result<crate::ssh::Server, String>>,
    /// The keymap was applied (or could not be).
    keymap_done: bool,
    /// A Tang unlock racing the current prompt.
    pending: Option<crate::clevis::Pending>,
    /// The prompt's answer came from it.
    raced: bool,
}

/// One container to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job<'a> {
    /// The LUKS device.
    pub dev: &'a Dev,
    /// Its LUKS UUID, as its header gives it.
    pub uuid: String,
    /// The mapper name to open it as (/dev/mapper/NAME): `rd.luks.name=`'s, else crypttab's,
    /// else `luks-UUID`.
    pub name: String,
    /// Its key: `rd.luks.key=`'s for it, else for all, else crypttab's; else the passphrase.
    pub key: CryptKey,
    /// Its crypttab options: `rd.luks.options=`'s for it, else its crypttab entry's; with no
    /// entry, `rd.luks.options=`'s for all, else none.
    pub options: CryptOptions,
    /// Try its enrolled tokens first (crypttab names a token device, or nothing is known
    /// about it).
    pub token: bool,
}

/// Whether a device reference names this device.
fn names(want: &DeviceRef, d: &Dev, devno_of: &dyn Fn(&str) -> Option<(u32, u32)>) -> bool {
    devices::find(want, core::slice::from_ref(d), devno_of).is_some()
}

/// The containers to open now, in device order. `locked` are the LUKS devices that nothing
/// holds yet.
pub fn plan<'a>(
    cmd: &Cmdline,
    crypt: &[Crypt],
    locked: &[&'a Dev],
    wanted: &[&DeviceRef],
    devno_of: &dyn Fn(&str) -> Option<(u32, u32)>,
) -> Vec<Job<'a>> {
    let crypt: &[Crypt] = if cmd.no_crypttab { &[] } else { crypt };
    let mut jobs = Vec::new();
    let mut unasked = Vec::new();
    for &d in locked {
        let Some(uuid) = &d.probe.uuid else { continue };
        let is = |u: &Option<String>| u.as_deref().is_some_and(|u| u.eq_ignore_ascii_case(uuid));
        let entry = crypt.iter().find(|c| names(&c.entry.device, d, devno_of));
        let (mut name, mut key, mut options, needed) = match entry {
            Some(c) => (c.entry.name.clone(), c.entry.key.clone(), c.entry.options.clone(), c.needed),
            None => (format!("luks-{uuid}"), CryptKey::Passphrase, CryptOptions::default(), false),
        };
        for (u, n) in &cmd.luks_names {
            if u.eq_ignore_ascii_case(uuid) {
                name = n.clone();
            }
        }
        // rd.luks.options=/rd.luks.key= for this UUID win; one for all stands in for what
        // crypttab does not say (options) or for any key.
        let (mut own, mut all) = (None, None);
        for (u, o) in &cmd.luks_options {
            if is(u) {
                own = Some(o);
            } else if u.is_none() && entry.is_none() {
                all = Some(o);
            }
        }
        if let Some(o) = own.or(all) {
            options = o.clone();
        }
        let (mut own, mut all) = (None, None);
        for (u, k) in &cmd.luks_keys {
            if is(u) {
                own = Some(k);
            } else if u.is_none() {
                all = Some(k);
            }
        }
        if let Some(k) = own.or(all) {
            key = k.clone();
        }
        let mapper = DeviceRef::Mapper(name.clone());
        let by_wait = wanted.iter().any(|w| **w == mapper || names(w, d, devno_of));
        let by_cmdline = cmd.luks_uuids.iter().any(|u| u.eq_ignore_ascii_case(uuid));
        let asked = by_wait || if cmd.luks_uuids.is_empty() { needed } else { by_cmdline };
        let token = entry.is_none()
            || options.tpm2_device.is_some()
            || options.fido2_device.is_some()
            || options.pkcs11_uri.is_some();
        let job = Job { dev: d, uuid: uuid.clone(), name, key, options, token };
        if asked {
            jobs.push(job);
        } else {
            unasked.push((job, entry.is_some()));
        }
    }
    let told = !cmd.luks_uuids.is_empty() || crypt.iter().any(|c| c.needed);
    if jobs.is_empty() && !told {
        // Nothing says which: all of them. A /dev/mapper/NAME waited for that no entry names
        // is the name of the only container without an entry (not an LVM VG-LV name).
        let mut free = unasked.iter_mut().filter(|(_, e)| !e);
        if let (Some((job, _)), None) = (free.next(), free.next()) {
            for w in wanted {
                if let DeviceRef::Mapper(n) = w
                    && !n.contains('-')
                    && !crypt.iter().any(|c| c.entry.name == *n)
                {
                    job.name = n.clone();
                }
            }
        }
        jobs.extend(unasked.into_iter().map(|(j, _)| j));
    }
    jobs
}

/// Unlock what [`plan`] says; true when something was opened. `events` (the uevent socket)
/// is served while a prompt waits.
pub fn unlock(init: &mut Init, devs: &[Dev], wanted: &[&DeviceRef], events: Option<BorrowedFd<'_>>) -> bool {
    if init.cmd.no_luks || init.conf.layer(Capability::Luks).is_none() || sys::which("cryptsetup").is_none() {
        return false;
    }
    let locked: Vec<&Dev> = devs
        .iter()
        .filter(|d| d.is_luks())
        .filter(|d| !devs.iter().any(|h| h.slaves.contains(&d.name)))
        .filter(|d| d.probe.uuid.as_ref().is_some_and(|u| !init.luks.given_up.contains(u)))
        .collect();
    if locked.is_empty() {
        return false;
    }
    let all = wanted.len();
    let wanted: Vec<&DeviceRef> = wanted
        .iter()
        .copied()
        .filter(|w| !matches!(w, DeviceRef::Mapper(n) if init.luks.given_up_names.contains(n)))
        .collect();
    if wanted.is_empty() && all > 0 {
        return false; // what was waited for was given up: ask nothing else for it
    }
    // enter-initrd before a token is tried (a TPM driver loaded late is there by now).
    crate::tpm::enter(init);
    let jobs = plan(&init.cmd, &init.conf.crypt, &locked, &wanted, &devices::devno_of);
    let mut consoles: Option<Consoles> = None;
    let mut done = false;
    for job in jobs {
        if sys::exists(&format!("/dev/mapper/{}", job.name)) {
            continue;
        }
        // crypttab's tpm2-measure-pcr=: decided before it opens, so that cryptsetup puts the
        // key where it can be read back for the measurement.
        let measure = crate::tpm::measures_volume_key(init, &job.name, &job.options);
        if open(init, &job, measure, &mut consoles, events) {
            if measure {
                crate::tpm::measure_volume_key(init, &job.name, &job.uuid, &job.options);
            }
            done = true;
        } else {
            init.luks.given_up.insert(job.uuid.clone());
            init.luks.given_up_names.insert(job.name.clone());
        }
    }
    done
}

/// The modules the LUKS layer lists (dm-crypt, ciphers, the keyboard), once.
fn prepare(init: &mut Init) {
    if let Some(l) = init.conf.layer(Capability::Luks) {
        let m = l.modules.clone();
        init.mods.load_many(&m, &mut init.log);
    }
}

/// `cryptsetup open` arguments for a job, before the key arguments.
pub fn open_args(job: &Job) -> Vec<String> {
    let o = &job.options;
    let mut a: Vec<String> = vec!["open".into(), "--type".into(), "luks".into()];
    for (on, flag) in [
        (o.discard, "--allow-discards"),
        (o.no_read_workqueue, "--perf-no_read_workqueue"),
        (o.no_write_workqueue, "--perf-no_write_workqueue"),
        (o.same_cpu_crypt, "--perf-same_cpu_crypt"),
        (o.submit_from_crypt_cpus, "--perf-submit_from_crypt_cpus"),
        (o.readonly, "--readonly"),
    ] {
        if on {
            a.push(flag.into());
        }
    }
    if let Some(h) = &o.header {
        a.extend(["--header".into(), h.clone()]);
    }
    if let Some(s) = o.key_slot {
        a.extend(["--key-slot".into(), format!("{s}")]);
    }
    a.extend([job.dev.path(), job.name.clone()]);
    a
}

/// How one cryptsetup run went.
enum Tried {
    Opened,
    /// The key did not fit (cryptsetup's exit status 2).
    WrongKey,
    /// Anything else: not worth another key.
    Failed(String),
}

fn try_key(args: &[String], key_args: &[&str], input: Option<&[u8]>) -> Tried {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    // Options go before the positional device and name.
    let at = all.len() - 2;
    for (i, k) in key_args.iter().enumerate() {
        all.insert(at + i, k);
    }
    let r = match input {
        Some(i) => sys::run_input("cryptsetup", &all, i),
        None => crate::process::run_status("cryptsetup", &all),
    };
    sys::reap();
    match r {
        Ok(st) => match sys::exit_code(st) {
            Some(0) => Tried::Opened,
            Some(2) => Tried::WrongKey,
            _ => Tried::Failed(match sys::describe_status(st) {
                Err(how) => format!("cryptsetup failed ({how})"),
                Ok(()) => "cryptsetup failed".into(),
            }),
        },
        Err(e) => Tried::Failed(e.to_string()),
    }
}

/// The key file arguments (offset and size as crypttab gives them).
fn keyfile_args<'a>(path: &'a str, o: &CryptOptions, nums: &'a mut [String; 2]) -> Vec<&'a str> {
    let mut a = vec!["--key-file", path];
    if let Some(off) = o.keyfile_offset {
        nums[0] = format!("--keyfile-offset={off}");
    }
    if let Some(size) = o.keyfile_size {
        nums[1] = format!("--keyfile-size={size}");
    }
    a.extend(nums.iter().filter(|n| !n.is_empty()).map(String::as_str));
    a
}

/// Open one container; false when it stays locked (why is in the notes).
/// `measure`: its volume key is to be measured, so it goes to dm-crypt's table rather than
/// the kernel keyring (`--disable-keyring`), as with LUKS1, where it can be read back.
fn open(
    init: &mut Init,
    job: &Job,
    measure: bool,
    consoles: &mut Option<Consoles>,
    events: Option<BorrowedFd<'_>>,
) -> bool {
    let dev = job.dev.path();
    init.log.step(&format!("{}{dev} as {}", leanrd_contract::steplog::UNLOCKING, job.name));
    prepare(init);
    let mut args = open_args(job);
    if measure {
        args.insert(args.len() - 2, "--disable-keyring".into());
    }
    // An enrolled token (TPM2, FIDO2, PKCS#11) through cryptsetup's plugins, when the image
    // has them: no passphrase when it opens (a TPM's PCRs as sealed); else on to the keys,
    // without cryptsetup trying the tokens again at every one.
    if init.conf.layer(Capability::Token).is_some() {
        if job.token {
            // TPM2 tokens sealed with a PIN are tried only with one typed: each other token
            // alone, with nothing on cryptsetup's input (it would ask for a PIN there).
            let tokens = crate::luks2::read_tokens(job.options.header.as_deref().unwrap_or(&dev));
            let pinned: Vec<String> =
                tokens.iter().filter(|t| t.is_tpm2() && t.pin).map(|t| t.id.to_string()).collect();
            // cryptsetup's FIDO2 plugin waits for a touch, saying so on its own standard error
            // only: said here on every console and on the splash (dracut #2304: the prompt's
            // text missing under plymouth).
            if tokens.iter().any(|t| t.is_fido2()) {
                let touch = format!("{}: touch the FIDO2 security key to unlock it", job.name);
                init.log.step(&touch);
                crate::prompt::say_everywhere(&format!("leanrd: {touch}\r\n"));
                crate::plymouth::message(&touch);
            }
            let tried = if pinned.is_empty() {
                matches!(try_key(&args, &["--token-only"], None), Tried::Opened)
            } else {
                tokens.iter().filter(|t| !(t.is_tpm2() && t.pin)).any(|t| {
                    let id = t.id.to_string();
                    matches!(try_key(&args, &["--token-only", "--token-id", &id], Some(b"")), Tried::Opened)
                })
            };
            if tried {
                return opened(init, job, "its enrolled token");
            }
            init.log.step(&format!("no token opened {dev} (a TPM's PCRs changed, or none enrolled)"));
            if !pinned.is_empty() && !job.options.headless {
                let mut attempt = |pin: &Secret| {
                    let tried =
                        pinned.iter().map(|id| try_key(&args, &["--token-only", "--token-id", id], Some(&pin.0)));
                    // Whatever failed (a wrong PIN, PCRs that changed), the PIN is asked again.
                    tried.into_iter().find(|t| matches!(t, Tried::Opened)).unwrap_or(Tried::WrongKey)
                };
                let dev = job.dev.path();
                if ask(init, &Asking::of(job, &dev), Asked::TpmPin, consoles, events, &mut attempt).is_some() {
                    return opened(init, job, &format!("its TPM2 token and the PIN typed{}", typed_on(consoles)));
                }
            }
        }
        args.insert(args.len() - 2, "--disable-external-tokens".into());
    }
    // clevis tokens (Tang), decrypted by /init itself: the secret is the passphrase of the
    // token's key slot.
    let mut clevis = Vec::new();
    if init.conf.layer(Capability::Clevis).is_some() {
        let tokens = crate::clevis::tokens(job.options.header.as_deref().unwrap_or(&dev));
        clevis = tokens.clone();
        if !tokens.is_empty() {
            let mut attempt = |secret: &[u8]| matches!(try_key(&args, &["--key-file=-"], Some(secret)), Tried::Opened);
            if let Some(how) = crate::clevis::unlock(init, &dev, &tokens, &mut attempt) {
                return opened(init, job, &format!("its {how}"));
            }
        }
    }
    let mut nums = [String::new(), String::new()];
    // A key file: in the image, or on a device that may come late.
    match &job.key {
        CryptKey::Passphrase => {}
        CryptKey::File(p) => match try_key(&args, &keyfile_args(p, &job.options, &mut nums), None) {
            Tried::Opened => return opened(init, job, &format!("key file {p}")),
            Tried::WrongKey => init.notes.push(format!("key file {p} does not open {dev}")),
            Tried::Failed(e) => init.notes.push(format!("{e} for {dev} with key file {p}")),
        },
        CryptKey::OnDevice { path, device } => {
            if let Some(r) = key_on_device(init, job, path, device, &args, events) {
                return r;
            }
        }
    }
    if job.options.try_empty_password && matches!(try_key(&args, &["--key-file=-"], Some(b"")), Tried::Opened) {
        return opened(init, job, "the empty passphrase");
    }
    if let Some(c) = &init.luks.cached {
        let secret = Secret(c.0.clone());
        if matches!(try_key(&args, &["--key-file=-"], Some(&secret.0)), Tried::Opened) {
            return opened(init, job, "the passphrase already given");
        }
    }
    if job.options.headless {
        init.notes.push(format!("{dev} ({}): no key opened it, and headless forbids asking", job.name));
        return false;
    }
    // A Tang server that did not answer may yet: it races the prompt.
    init.luks.pending = crate::clevis::pending(init, &clevis);
    init.luks.raced = false;
    let dev = job.dev.path();
    let r = ask(init, &Asking::of(job, &dev), Asked::Passphrase, consoles, events, &mut |p| {
        try_key(&args, &["--key-file=-"], Some(&p.0))
    });
    if let Some(c) = consoles.as_mut() {
        c.race_key(None);
    }
    if let Some(p) = init.luks.pending.take() {
        p.finish(init);
    }
    match r {
        Some(_) if init.luks.raced => opened(init, job, "its clevis token (Tang answered after the prompt appeared)"),
        Some(secret) => {
            init.luks.cached = Some(secret);
            opened(init, job, &format!("the passphrase typed{}", typed_on(consoles)))
        }
        None => false,
    }
}

/// A passphrase for something that is not a LUKS container (a ZFS encryption root), asked
/// at the same prompt (every console, plymouth, SSH), the passphrase that opened the last
/// container tried first. `attempt` says whether an answer fits: true (it opened), false (a
/// wrong key: asked again, `tries` times), or Err (not worth another try). The answer that
/// fitted, or None (why is in the notes).
pub(crate) fn ask_passphrase(
    init: &mut Init,
    what: &Asking<'_>,
    events: Option<BorrowedFd<'_>>,
    attempt: &mut dyn FnMut(&Secret) -> Result<bool, String>,
) -> Option<String> {
    let mut tried = |p: &Secret| match attempt(p) {
        Ok(true) => Tried::Opened,
        Ok(false) => Tried::WrongKey,
        Err(e) => Tried::Failed(e),
    };
    if let Some(c) = init.luks.cached.as_ref().map(|c| Secret(c.0.clone()))
        && matches!(tried(&c), Tried::Opened)
    {
        return Some("the passphrase that opened the last LUKS container".into());
    }
    let mut consoles = None;
    let r = ask(init, what, Asked::Passphrase, &mut consoles, events, &mut tried);
    let on = typed_on(&consoles);
    r.map(|secret| {
        init.luks.cached = Some(secret);
        format!("the passphrase typed{on}")
    })
}

/// Where the last answer was typed, when the splash was up: plymouth's prompt, or a console
/// after plymouthd went away (the consoles' alone are as they always were: nothing said).
fn typed_on(consoles: &Option<Consoles>) -> String {
    match consoles.as_ref() {
        Some(c) if c.answered_on == "plymouth" => " on plymouth's splash".to_string(),
        Some(c) if c.plymouth_gone => format!(" on {} (plymouthd gone)", c.answered_on),
        _ => String::new(),
    }
}

/// What a prompt asks for.
#[derive(Clone, Copy)]
enum Asked {
    /// A passphrase of a key slot.
    Passphrase,
    /// The PIN of a TPM2 token (`systemd-cryptenroll --tpm2-with-pin=yes`).
    TpmPin,
}

impl Asked {
    fn noun(self) -> &'static str {
        match self {
            Asked::Passphrase => "passphrase",
            Asked::TpmPin => "TPM2 PIN",
        }
    }
}

fn opened(init: &mut Init, job: &Job, how: &str) -> bool {
    init.log.step(&format!(
        "{}{}/dev/mapper/{} with {how}",
        job.dev.path(),
        leanrd_contract::steplog::UNLOCKED,
        job.name
    ));
    true
}

/// What a prompt is for: the name it is opened as, the device (or dataset) and crypttab's
/// `tries=` and `timeout=`.
pub(crate) struct Asking<'a> {
    pub name: &'a str,
    pub dev: &'a str,
    pub options: &'a CryptOptions,
}

impl<'a> Asking<'a> {
    fn of(job: &'a Job<'_>, dev: &'a str) -> Asking<'a> {
        Asking { name: &job.name, dev, options: &job.options }
    }
}

/// The prompt for `asked` on every console, `tries=` times (0: until it opens or is given
/// up), each answer handed to `attempt`; the answer that opened the container, or None (why
/// is in the notes).
fn ask(
    init: &mut Init,
    job: &Asking<'_>,
    asked: Asked,
    consoles: &mut Option<Consoles>,
    events: Option<BorrowedFd<'_>>,
    attempt: &mut dyn FnMut(&Secret) -> Tried,
) -> Option<Secret> {
    let dev = job.dev;
    let what = asked.noun();
    if consoles.is_none() {
        *consoles = Some(Consoles::open(crate::ssh::listener(init)));
    }
    let c = consoles.as_mut()?;
    if let Some(fd) = init.luks.pending.as_mut().and_then(|p| p.fd.take()) {
        c.race_key(Some(fd));
    }
    if !init.luks.keymap_done {
        init.luks.keymap_done = true;
        apply_keymap(init, c);
    }
    crate::font::load(init);
    init.log.step(&format!("{}{what} of {} on {}", leanrd_contract::steplog::ASKING, job.name, c.names().join(", ")));
    let tries = job.options.tries;
    let mut n = 0u32;
    loop {
        n += 1;
        let prompt = format!("Enter {what} for {} ({dev}): ", job.name);
        let (mods, log) = (&mut init.mods, &mut init.log);
        let mut on_event = || {
            if let Some(fd) = events {
                let ev = crate::uevent::receive(fd, 0);
                mods.add_aliases(ev.aliases, log);
                mods.settle(1_000, log, &mut || false);
            }
        };
        let answer = c.ask(&prompt, job.options.timeout.saturating_mul(1000), events, &mut on_event);
        let secret = match answer {
            Answer::Line(s) => s,
            // The race's key: it opens, or it is not counted as a try.
            Answer::Key(k) => {
                if matches!(attempt(&k), Tried::Opened) {
                    c.say(&format!("leanrd: {} unlocked by its clevis token (Tang answered)\r\n", job.name));
                    init.luks.raced = true;
                    return Some(k);
                }
                init.notes.push(format!("{dev}: the key Tang sent late does not open it"));
                n -= 1;
                continue;
            }
            Answer::Cancelled => {
                init.notes.push(format!("the {what} for {dev} ({}) was not given", job.name));
                return None;
            }
            Answer::TimedOut => {
                init.notes.push(format!("no {what} for {dev} ({}) within {} s", job.name, job.options.timeout));
                return None;
            }
            Answer::NoConsole => {
                init.notes.push(format!("{dev} ({}): no console to ask for its {what} on", job.name));
                return None;
            }
        };
        match attempt(&secret) {
            Tried::Opened => {
                c.say(&format!("leanrd: {} unlocked\r\n", job.name));
                return Some(secret);
            }
            Tried::WrongKey if tries == 0 || n < tries => {
                let left = if tries == 0 { String::new() } else { format!(" ({} left)", tries - n) };
                c.say(&format!("leanrd: wrong {what} for {}{left}\r\n", job.name));
            }
            Tried::WrongKey => {
                c.say(&format!("leanrd: wrong {what} for {}\r\n", job.name));
                init.notes.push(format!("{dev} ({}): wrong {what}, {tries} tries", job.name));
                return None;
            }
            Tried::Failed(e) => {
                init.notes.push(format!("{e} for {dev} ({})", job.name));
                return None;
            }
        }
    }
}

/// The keymap the command line or the image names, applied through a VT.
fn apply_keymap(init: &mut Init, c: &Consoles) {
    let Some(name) = init.cmd.keymap.clone().or(init.conf.keymap.clone()) else { return };
    let path = format!("{KEYMAP_DIR}/{name}.bmap");
    let Ok(data) = sys::read(&path) else {
        init.notes.push(format!("keymap {name}: {path} is not in the image; the kernel's US keymap is used"));
        return;
    };
    // With the splash up the VT is plymouthd's, not one of the consoles asked on: it is
    // opened for the keymap alone (plymouth reads the keys it translates).
    let own = if c.vt().is_none() { crate::prompt::open_vt() } else { None };
    let Some(vt) = c.vt().or(own.as_ref().map(|f| rustix::fd::AsFd::as_fd(f))) else {
        init.log.step(&format!("keymap {name}: no virtual terminal to load it through"));
        return;
    };
    match crate::keymap::apply(vt, &data) {
        Ok(n) => init.log.step(&format!("keymap {name} loaded ({n} entries)")),
        Err(e) => init.notes.push(format!("keymap {name}: {e}")),
    }
}

/// Where a key file's device is mounted while its key is read.
const KEY_MOUNT: &str = "/run/leanrd/keydev";

/// A key file on another device: wait for the device (`keyfile-timeout=`, default 10 s),
/// mount it read-only, try the key. None: go on to the passphrase.
fn key_on_device(
    init: &mut Init,
    job: &Job,
    path: &str,
    device: &DeviceRef,
    args: &[String],
    events: Option<BorrowedFd<'_>>,
) -> Option<bool> {
    let dev = job.dev.path();
    let wait_ms = job.options.keyfile_timeout.unwrap_or(10).saturating_mul(1000);
    let start = sys::now_ms();
    let found = loop {
        let devs = devices::scan();
        if let Some(d) = devices::find(device, &devs, &devices::devno_of) {
            break Some(d.clone());
        }
        if sys::now_ms() - start >= wait_ms {
            break None;
        }
        match events {
            Some(fd) => {
                let ev = crate::uevent::receive(fd, 250);
                init.mods.add_aliases(ev.aliases, &mut init.log);
            }
            None => sys::sleep_ms(250),
        }
        init.mods.coldplug(1_000, &mut init.log, &mut || false);
    };
    let Some(keydev) = found else {
        init.notes.push(format!("{device} (holding the key for {dev}) did not appear within {} s", wait_ms / 1000));
        return None;
    };
    let flags =
        rustix::mount::MountFlags::RDONLY | rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV;
    if let Err(e) = crate::root::mount_at(init, &keydev, KEY_MOUNT, None, flags, None) {
        init.notes.push(format!("key device for {dev}: {e}"));
        return None;
    }
    let file = format!("{KEY_MOUNT}/{}", path.trim_start_matches('/'));
    let mut nums = [String::new(), String::new()];
    let r = try_key(args, &keyfile_args(&file, &job.options, &mut nums), None);
    let _ = rustix::mount::unmount(KEY_MOUNT, rustix::mount::UnmountFlags::DETACH);
    match r {
        Tried::Opened => Some(opened(init, job, &format!("key file {path} on {}", keydev.path()))),
        Tried::WrongKey => {
            init.notes.push(format!("key file {path} on {} does not open {dev}", keydev.path()));
            None
        }
        Tried::Failed(e) => {
            init.notes.push(format!("{e} for {dev} with key file {path} on {}", keydev.path()));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::tests::{dev, fs};
    use leanrd_contract::CryptEntry;

    fn luks(name: &str, uuid: &str, partuuid: &str) -> Dev {
        dev(name, (8, 3), Some("sda"), 3, fs(crate::probe::LUKS, uuid, None, Some(partuuid), None))
    }

    fn entry(name: &str, device: &str, needed: bool) -> Crypt {
        let (e, _) = CryptEntry::from_fields(&[name, device, "none", "luks,discard"]).unwrap();
        Crypt { entry: e, needed }
    }

    fn jobs(cmdline: &str, crypt: &[Crypt], locked: &[&Dev], wanted: &[&str]) -> Vec<(String, String)> {
        let cmd = Cmdline::parse(cmdline);
        let wanted: Vec<DeviceRef> = wanted.iter().map(|w| DeviceRef::parse(w).unwrap()).collect();
        let w: Vec<&DeviceRef> = wanted.iter().collect();
        plan(&cmd, crypt, locked, &w, &|_| None).into_iter().map(|j| (j.dev.name.clone(), j.name)).collect()
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn which_containers_and_names() {
        let (a, b) = (luks("sda3", "aaaa", "p-3"), luks("sdb1", "bbbb", "p-b1"));
        let both = [&a, &b];
        let tab = [entry("sda3_crypt", "UUID=AAAA", false), entry("data", "PARTUUID=p-b1", false)];
        // The Debian installer's way: root=/dev/mapper/sda3_crypt, crypttab names it.
        assert_eq!(jobs("", &tab, &both, &["/dev/mapper/sda3_crypt"]), [pair("sda3", "sda3_crypt")]);
        // Root by the UUID inside, nothing named: all, each under its crypttab name.
        assert_eq!(jobs("", &tab, &both, &["UUID=inside"]), [pair("sda3", "sda3_crypt"), pair("sdb1", "data")]);
        // Host-only: the needed entry only.
        let host = [entry("sda3_crypt", "UUID=aaaa", true), entry("data", "PARTUUID=p-b1", false)];
        assert_eq!(jobs("", &host, &both, &["UUID=inside"]), [pair("sda3", "sda3_crypt")]);
        // rd.luks.uuid= narrows, rd.luks.name= renames; rd.luks.crypttab=0 drops the names.
        assert_eq!(jobs("rd.luks.uuid=luks-bbbb", &tab, &both, &["UUID=inside"]), [pair("sdb1", "data")]);
        assert_eq!(jobs("rd.luks.name=bbbb=home", &host, &both, &["UUID=x"]), [pair("sdb1", "home")]);
        assert_eq!(
            jobs("rd.luks.crypttab=0", &host, &both, &["UUID=x"]),
            [pair("sda3", "luks-aaaa"), pair("sdb1", "luks-bbbb")]
        );
        // A container named as the root itself (root=UUID=<the LUKS UUID>, or its partition).
        assert_eq!(jobs("", &[], &both, &["UUID=bbbb"]), [pair("sdb1", "luks-bbbb")]);
        assert_eq!(jobs("", &[], &both, &["PARTUUID=p-3"]), [pair("sda3", "luks-aaaa")]);
        // Universal, no crypttab, root=/dev/mapper/NAME: the one container is NAME...
        assert_eq!(jobs("", &[], &[&a], &["/dev/mapper/cryptroot"]), [pair("sda3", "cryptroot")]);
        // ...but not an LVM name (VG-LV), and not when two could be it.
        assert_eq!(jobs("", &[], &[&a], &["/dev/mapper/vg-root"]), [pair("sda3", "luks-aaaa")]);
        assert_eq!(
            jobs("", &[], &both, &["/dev/mapper/cryptroot"]),
            [pair("sda3", "luks-aaaa"), pair("sdb1", "luks-bbbb")]
        );
    }

    #[test]
    fn keys_and_options_from_the_command_line() {
        let a = luks("sda3", "aaaa", "p-3");
        let tab = [entry("sda3_crypt", "UUID=aaaa", true)];
        let cmd = Cmdline::parse("rd.luks.key=/k rd.luks.key=aaaa=/r.key:LABEL=KEYS rd.luks.options=tries=0");
        let j = plan(&cmd, &tab, &[&a], &[], &|_| None);
        assert_eq!(
            j[0].key,
            CryptKey::OnDevice { path: "/r.key".into(), device: DeviceRef::Label("KEYS".into()) },
            "the key for this UUID wins"
        );
        assert!(j[0].options.discard && j[0].options.tries == 3, "crypttab's options stand against a general one");
        let cmd = Cmdline::parse("rd.luks.key=/k rd.luks.options=tries=0,readonly");
        let j = plan(&cmd, &[], &[&a], &[], &|_| None);
        assert_eq!(j[0].key, CryptKey::File("/k".into()));
        assert!(j[0].options.readonly && j[0].options.tries == 0);
        assert_eq!(
            open_args(&j[0]),
            ["open", "--type", "luks", "--readonly", "/dev/sda3", "luks-aaaa"].map(String::from)
        );
    }
}
