//! plymouth's splash: plymouthd started as soon as the display's driver is there (when the
//! command line says `splash` and the image has plymouth), spoken to on its socket directly
//! (no plymouth client: its request format is four fields, ply-boot-protocol.h's), asked for
//! passphrases ([`crate::prompt::Consoles`] polls the answer beside the serial consoles), told
//! the messages a user must see, told the new root before the switch (so that it keeps running
//! into the booted system, whose plymouth-start finds it there), and told to quit before a
//! diagnosis or a rescue shell takes the screen. A plymouthd that fails or dies costs the boot
//! nothing: the VT's prompt takes over.
//!
//! plymouthd finds its displays with libudev, which reads udev's database: with no udevd in
//! the image, /init writes the entries it checks (a DRM or frame-buffer device initialised and
//! on seat0) for the devices present before it starts.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use leanrd_contract::Capability;
use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::Init;
use crate::sys::{self, Errno, strerror};

/// plymouthd's socket, in the abstract namespace (PLY_BOOT_PROTOCOL_TRIMMED_ABSTRACT_SOCKET_PATH).
const SOCKET: &[u8] = b"/org/freedesktop/plymouthd";
/// Where the image has plymouthd.
const DAEMONS: [&str; 2] = ["/usr/sbin/plymouthd", "/sbin/plymouthd"];
/// Its pid file, where the booted system's plymouth units look.
const PID_FILE: &str = "/run/plymouth/pid";
/// How long the display's device has to appear once its driver is loaded.
const DISPLAY_WAIT_MS: u64 = 3_000;
/// How long plymouthd has to answer once started (its own device timeout is longer: it goes
/// on without a display and shows text).
const READY_MS: u64 = 5_000;
/// How long one request may take.
const REQUEST_MS: u64 = 2_000;

/// The replies (ply-boot-protocol.h).
const ACK: u8 = 0x06;
const NAK: u8 = 0x15;
const ANSWER: u8 = 0x02;
const NO_ANSWER: u8 = 0x05;
/// The largest answer taken (a passphrase).
const MAX_ANSWER: usize = 4096;

/// Whether plymouthd runs and owns the screen.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Whether plymouthd was started and has not failed or quit since.
pub fn running() -> bool {
    RUNNING.load(Ordering::Relaxed)
}

/// A request's bytes: the verb, then, with an argument, `\x02`, the argument's length with its
/// NUL, the argument and the NUL; without one, the verb and a NUL. An argument is cut to the
/// 254 bytes a length byte allows, at a character's boundary.
pub fn frame(verb: u8, arg: Option<&str>) -> Vec<u8> {
    let Some(arg) = arg else { return alloc::vec![verb, 0] };
    let mut end = arg.len().min(254);
    while !arg.is_char_boundary(end) {
        end -= 1;
    }
    // A NUL inside would end the argument early on plymouthd's side: cut there.
    let arg = &arg.as_bytes()[..end];
    let arg = &arg[..arg.iter().position(|&b| b == 0).unwrap_or(arg.len())];
    let mut f = alloc::vec![verb, 0x02, (arg.len() + 1) as u8];
    f.extend_from_slice(arg);
    f.push(0);
    f
}

/// What plymouthd sent in answer to a passphrase request, so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Not all of it yet.
    More,
    /// The answer typed (possibly empty).
    Answer(Vec<u8>),
    /// None was given (the prompt was dismissed, or plymouthd is quitting).
    NoAnswer,
    /// Not an answer: what it was.
    Bad(String),
}

/// Read the reply to a passphrase request: `\x02`, a 32-bit length in the machine's byte
/// order (plymouthd writes its `uint32_t`), the answer; or `\x05`, none.
pub fn parse_answer(buf: &[u8]) -> Reply {
    match buf.first() {
        None => Reply::More,
        Some(&NO_ANSWER) => Reply::NoAnswer,
        Some(&ANSWER) => {
            let Some(len) = buf.get(1..5) else { return Reply::More };
            let len = u32::from_ne_bytes([len[0], len[1], len[2], len[3]]) as usize;
            if len > MAX_ANSWER {
                return Reply::Bad(format!("an answer of {len} bytes"));
            }
            match buf.get(5..5 + len) {
                Some(a) => Reply::Answer(a.to_vec()),
                None => Reply::More,
            }
        }
        Some(&b) => Reply::Bad(format!("reply byte {b:#04x}")),
    }
}

/// A connection to plymouthd, each read and write bounded.
fn connect() -> Result<OwnedFd, Errno> {
    let fd = rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    let t = Some(core::time::Duration::from_millis(REQUEST_MS));
    rustix::net::sockopt::set_socket_timeout(&fd, rustix::net::sockopt::Timeout::Recv, t)?;
    rustix::net::sockopt::set_socket_timeout(&fd, rustix::net::sockopt::Timeout::Send, t)?;
    rustix::net::connect(&fd, &SocketAddrUnix::new_abstract_name(SOCKET)?)?;
    Ok(fd)
}

/// One request that plymouthd acknowledges.
fn request(verb: u8, arg: Option<&str>) -> Result<(), String> {
    let fd = connect().map_err(|e| format!("connect: {}", strerror(e)))?;
    if !sys::write_all(&fd, &frame(verb, arg)) {
        return Err("the request could not be sent".into());
    }
    let mut b = [0u8; 1];
    match rustix::io::read(&fd, &mut b) {
        Ok(1) if b[0] == ACK => Ok(()),
        Ok(1) if b[0] == NAK => Err("refused".into()),
        Ok(1) => Err(format!("reply byte {:#04x}", b[0])),
        Ok(_) => Err("closed without a reply".into()),
        Err(e) => Err(strerror(e)),
    }
}

/// Send a passphrase request with `prompt`; the connection, to poll for the [`Reply`].
pub fn ask(prompt: &str) -> Result<OwnedFd, String> {
    let fd = connect().map_err(|e| format!("connect: {}", strerror(e)))?;
    if !sys::write_all(&fd, &frame(b'*', Some(prompt))) {
        return Err("the request could not be sent".into());
    }
    Ok(fd)
}

/// plymouthd is gone (its socket closed while asked): the consoles take over.
pub fn lost() {
    RUNNING.store(false, Ordering::Relaxed);
}

/// Show `text` on the splash (a line under the prompt), when plymouthd runs.
pub fn message(text: &str) {
    if running() && request(b'M', Some(text.trim_end())).is_err() {
        lost();
    }
}

/// Before the switch: plymouthd moves into the new root (mounted at `root`), so that it goes
/// on showing the splash in the booted system, whose plymouth units find it running.
pub fn newroot(init: &mut Init, root: &str) {
    if !running() {
        return;
    }
    match request(b'R', Some(root)) {
        Ok(()) => init.log.step(&format!("plymouth: plymouthd told the new root ({root}); it keeps the splash")),
        Err(e) => init.log.error(&format!("plymouth: update-root-fs: {e}")),
    }
}

/// Quit, the splash not kept: the text console is shown again (a diagnosis, a rescue shell).
pub fn quit(init: &mut Init) {
    if !running() {
        return;
    }
    RUNNING.store(false, Ordering::Relaxed);
    match request(b'Q', Some("")) {
        Ok(()) => init.log.step("plymouth: plymouthd quit; the consoles are the screen again"),
        Err(e) => {
            // Gone already (killed, crashed): the screen it left is given back to the text
            // console, or the diagnosis would be written under its last frame.
            let vt = crate::prompt::open_vt();
            let how = match vt.map(|vt| crate::keymap::text_again(vt.as_fd())) {
                Some(Ok(how)) => format!("the VT back to {how}"),
                Some(Err(e)) => format!("the VT: {e}"),
                None => "no VT".into(),
            };
            init.log.error(&format!("plymouth: quit: {e}; {how}"));
        }
    }
}

/// The displays plymouthd can draw on: /dev/dri/card* (a DRM driver), else /dev/fb* (efifb,
/// vesafb).
fn displays() -> Vec<String> {
    let mut v: Vec<String> = sys::list_dir("/dev/dri")
        .unwrap_or_default()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with("card"))
        .map(|n| format!("/dev/dri/{n}"))
        .collect();
    if v.is_empty() {
        v = sys::list_dir("/dev")
            .unwrap_or_default()
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| n.strip_prefix("fb").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())))
            .map(|n| format!("/dev/{n}"))
            .collect();
    }
    v.sort();
    v
}

/// Whether the machine has a display controller on PCI (class 0x03: VGA, XGA, 3D, other), whose
/// driver may still be binding.
fn display_controller() -> Option<String> {
    sys::list_dir("/sys/bus/pci/devices").unwrap_or_default().into_iter().map(|(d, _)| d).find(|d| {
        sys::read_string(&format!("/sys/bus/pci/devices/{d}/class")).is_some_and(|c| c.trim().starts_with("0x03"))
    })
}

/// udev's database entry for a device of `class` named `name` whose `dev` is `devno` (None: a
/// connector, which has no node).
pub fn udev_entry(class: &str, name: &str, devno: Option<&str>, usec: u64) -> (String, String) {
    let file = match devno {
        Some(d) => format!("/run/udev/data/c{d}"),
        None => format!("/run/udev/data/+{class}:{name}"),
    };
    // Render nodes are not a seat's (udev's 71-seat.rules tags cards and connectors).
    let seat = !name.starts_with("render");
    let mut text = format!("I:{usec}\n");
    if seat {
        text.push_str("G:seat\nQ:seat\n");
    }
    text.push_str("G:uaccess\nQ:uaccess\n");
    (file, text)
}

/// The entries libudev reads for the DRM and frame-buffer devices present, unless udev's own
/// are there.
fn write_udev_entries() {
    sys::mkdir_p("/run/udev/data");
    let usec = sys::now_ms().saturating_mul(1000);
    for (class, dir) in [("drm", "/sys/class/drm"), ("graphics", "/sys/class/graphics")] {
        for (name, _) in sys::list_dir(dir).unwrap_or_default() {
            let devno = sys::read_string(&format!("{dir}/{name}/dev")).map(|d| d.trim().to_string());
            let (file, text) = udev_entry(class, &name, devno.as_deref(), usec);
            if !sys::exists(&file) {
                let _ = sys::write_file_mode(&file, &text, 0o644);
            }
        }
    }
}

/// Start plymouthd and show the splash, when the command line asks and the image has it.
pub fn start(init: &mut Init) {
    if !init.cmd.splash_wanted() {
        return;
    }
    let Some(layer) = init.conf.layer(Capability::Plymouth) else {
        init.log.step("plymouth: the command line asks for a splash; the image has no plymouth");
        return;
    };
    let Some(daemon) = DAEMONS.iter().find(|d| sys::exists(d)) else {
        init.log.error("plymouth: plymouthd is not in the image");
        return;
    };
    let t0 = sys::now_ms();
    let modules = layer.modules.clone();
    init.mods.load_many(&modules, &mut init.log);
    // A machine with no display controller (a server on its serial console) does not wait.
    let controller = display_controller();
    let wait_ms = if displays().is_empty() && controller.is_none() { 0 } else { DISPLAY_WAIT_MS };
    let found = loop {
        let d = displays();
        if !d.is_empty() || sys::now_ms() - t0 >= wait_ms {
            break d;
        }
        sys::sleep_ms(50);
    };
    if found.is_empty() {
        let on = controller.map(|c| format!(" (display controller {c})")).unwrap_or_default();
        init.log.step(&format!("plymouth: no display (no /dev/dri/card*, no /dev/fb*) in {wait_ms} ms{on}: no splash"));
        return;
    }
    // The console font while the VTs are still text (KDFONTOP refuses a VT in graphics mode),
    // on the display's console: the diagnosis and a shell after plymouthd quits use it.
    crate::font::load(init);
    write_udev_entries();
    sys::mkdir_p("/run/plymouth");
    // Its console session (--attach-to-session) is a pseudo-terminal.
    if !sys::exists("/dev/pts/ptmx") {
        sys::mkdir_p("/dev/pts");
        let _ = sys::mount(
            "devpts",
            "/dev/pts",
            "devpts",
            rustix::mount::MountFlags::NOSUID,
            Some("mode=0620,ptmxmode=0666"),
        );
    }
    if !sys::exists("/dev/ptmx") {
        let _ = rustix::fs::symlink("pts/ptmx", "/dev/ptmx");
    }
    // Daemonised: the first process ends once the daemon listens (bounded here all the same).
    let args = ["plymouthd", "--mode=boot", "--pid-file", PID_FILE, "--attach-to-session"];
    let exec = crate::process::Exec::new(daemon, &args, &["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TERM=linux"]);
    let pid = match crate::process::fork() {
        Ok(0) => {
            // Its output to nowhere: /init's console file descriptors end at the switch.
            if let Ok(null) = rustix::fs::open("/dev/null", rustix::fs::OFlags::RDWR, rustix::fs::Mode::empty()) {
                let _ = rustix::stdio::dup2_stdin(&null);
                let _ = rustix::stdio::dup2_stdout(&null);
                let _ = rustix::stdio::dup2_stderr(&null);
            }
            let e = exec.exec();
            sys::eprint(&format!("leanrd: plymouth: {daemon}: {}\n", strerror(e)));
            crate::process::exit(127)
        }
        Ok(pid) => rustix::process::Pid::from_raw(pid),
        Err(e) => {
            init.log.error(&format!("plymouth: fork: {}", strerror(e)));
            return;
        }
    };
    let started = sys::now_ms();
    let mut exited = None;
    let ready = loop {
        if request(b'P', None).is_ok() {
            break true;
        }
        // The first process ends once the daemon is up (0), or with the reason it is not.
        if exited.is_none()
            && let Ok(Some((_, st))) = rustix::process::waitpid(pid, rustix::process::WaitOptions::NOHANG)
        {
            exited = Some(st.as_raw());
            if let Err(how) = crate::process::describe_status(st.as_raw()) {
                init.log.error(&format!(
                    "plymouth: {daemon}: {how}: no splash (plymouth.debug=stream:/dev/ttyS0 says why)"
                ));
                return;
            }
        }
        if sys::now_ms() - started >= READY_MS {
            break false;
        }
        sys::sleep_ms(50);
    };
    if !ready {
        init.log.error(&format!("plymouth: {daemon} did not answer in {} s: no splash", READY_MS / 1000));
        return;
    }
    RUNNING.store(true, Ordering::Relaxed);
    // The daemon's own pid (the first process forked it): the root's systemd, finding the
    // splash running, hears from this one.
    let daemon_pid = sys::read_string(PID_FILE).map(|p| p.trim().to_string()).unwrap_or_else(|| "unknown".into());
    match request(b'$', None) {
        Ok(()) => init.log.step(&format!(
            "plymouth: the splash is up on {} (plymouthd pid {daemon_pid}, {} ms after its driver was asked for)",
            found.join(" "),
            sys::now_ms() - t0
        )),
        Err(e) => init.log.error(&format!("plymouth: show-splash: {e}; its prompts are still used")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_as_the_plymouth_client_sends_them() {
        assert_eq!(frame(b'P', None), b"P\0");
        assert_eq!(frame(b'M', Some("hi")), b"M\x02\x03hi\0");
        assert_eq!(frame(b'Q', Some("")), b"Q\x02\x01\0");
        // Cut to 254 bytes at a character's boundary; a NUL ends the argument.
        let long = "ä".repeat(200);
        let f = frame(b'*', Some(&long));
        assert_eq!(f[2] as usize, f.len() - 3);
        assert!(f.len() - 3 <= 255 && core::str::from_utf8(&f[3..f.len() - 1]).is_ok());
        assert_eq!(frame(b'M', Some("a\0b")), b"M\x02\x02a\0");
    }

    #[test]
    fn answers() {
        assert_eq!(parse_answer(b""), Reply::More);
        assert_eq!(parse_answer(b"\x02\x03"), Reply::More);
        let mut a = alloc::vec![ANSWER];
        a.extend_from_slice(&6u32.to_ne_bytes());
        assert_eq!(parse_answer(&a), Reply::More);
        a.extend_from_slice(b"secret");
        assert_eq!(parse_answer(&a), Reply::Answer(b"secret".to_vec()));
        assert_eq!(parse_answer(b"\x05"), Reply::NoAnswer);
        assert!(matches!(parse_answer(b"\x06"), Reply::Bad(_)));
        let mut huge = alloc::vec![ANSWER];
        huge.extend_from_slice(&u32::MAX.to_ne_bytes());
        assert!(matches!(parse_answer(&huge), Reply::Bad(_)));
    }

    #[test]
    fn udev_entries_as_plymouth_checks_them() {
        let (f, t) = udev_entry("drm", "card0", Some("226:0"), 5);
        assert_eq!(f, "/run/udev/data/c226:0");
        assert!(t.starts_with("I:5\n") && t.contains("G:seat\n"), "{t}");
        let (f, t) = udev_entry("drm", "renderD128", Some("226:128"), 5);
        assert_eq!(f, "/run/udev/data/c226:128");
        assert!(!t.contains("seat"), "{t}");
        let (f, t) = udev_entry("drm", "card0-Virtual-1", None, 5);
        assert_eq!(f, "/run/udev/data/+drm:card0-Virtual-1");
        assert!(t.contains("G:seat"), "{t}");
    }
}
