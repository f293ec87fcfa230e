//! Passphrases over SSH, for a machine nobody sits at: Debian's dropbear, public keys only,
//! and every session is the unlock prompt and nothing else.
//!
//! - When /init first asks for a passphrase (or PIN), it listens on a unix socket
//!   ([`SOCKET`]) and forks a child that brings the network up (`ip=`, else DHCP: the
//!   network roots' code) and becomes dropbear. The console prompt is not held back: it shows
//!   at once, and the network comes up beside it.
//! - dropbear runs with password logins off (`-s`), no port forwarding (`-j -k`), at most 6
//!   authentication tries per connection (`-T`), idle sessions closed after 5 minutes (`-I`).
//!   Root's shell in the image is [`UNLOCK_PROGRAM`], a link to /init, the only entry of
//!   /etc/shells: whatever a client asks for (a shell, a command), it gets the prompt. The
//!   image has no shell at all unless `rescue` is in it, and even then SSH does not give one.
//! - That program ([`client_main`]) relays the session to the socket: /init's prompt
//!   ([`crate::prompt::Consoles`]) takes it as one more console, with the console's wording,
//!   and the first good answer on any of them wins. Standard input answers, so
//!   `printf 'PASS\n' | ssh -T root@HOST` unlocks from a script; on a terminal, echo is off.
//! - Before the switch to the root ([`stop`]), dropbear and every session are ended, and the
//!   interface is taken down (`rd.neednet=1`: handed over, as a network root's is).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use leanrd_contract::ssh::{HOST_KEYS, SOCKET, UNLOCK_NAME};
use leanrd_contract::{Capability, SEARCH_PATH};
use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::Init;
use crate::sys::{self, Errno, strerror};

/// Where the child that became dropbear notes the interface it configured, for [`stop`]:
/// `INDEX ADDRESS PREFIX NAME`.
const NET_NOTE: &str = "/run/leanrd/ssh-net";

/// The sessions /init keeps at once; more are closed as they come (dropbear bounds the
/// connections that have not logged in).
pub const MAX_SESSIONS: usize = 8;

/// The SSH server, once started.
pub struct Server {
    /// The child that became dropbear.
    pid: i32,
    /// The socket sessions reach the prompt by.
    listener: OwnedFd,
}

/// Whether `argv0` names the session program (`leanrd-unlock`, or `-leanrd-unlock` as a
/// login shell).
pub fn is_client(argv0: &str) -> bool {
    argv0.rsplit('/').next().unwrap_or("").trim_start_matches('-') == UNLOCK_NAME
}

/// The listening socket for a prompt about to be shown (a new descriptor of it): the server
/// started first when the image has it and this is the first prompt; None without SSH, or
/// when it could not start (why is on the console and in the notes).
pub fn listener(init: &mut Init) -> Option<OwnedFd> {
    let port = init.conf.ssh_port?;
    init.conf.layer(Capability::Ssh)?;
    if init.luks.ssh.is_none() {
        let r = start(init, port);
        if let Err(e) = &r {
            init.log.error(&format!("ssh: {e}"));
            init.notes.push(format!("the SSH server did not start: {e}"));
        }
        init.luks.ssh = Some(r);
    }
    let Some(Ok(s)) = &init.luks.ssh else { return None };
    rustix::io::fcntl_dupfd_cloexec(&s.listener, 0).ok()
}

fn start(init: &mut Init, port: u16) -> Result<Server, String> {
    let dropbear = SEARCH_PATH
        .iter()
        .map(|d| format!("{d}/dropbear"))
        .find(|p| sys::exists(p))
        .ok_or("dropbear is not in the image")?;
    let keys: Vec<&str> = HOST_KEYS.iter().copied().filter(|k| sys::exists(k)).collect();
    if keys.is_empty() {
        return Err(format!("no host key in the image ({})", HOST_KEYS.join(", ")));
    }
    sys::mkdir_p("/run/leanrd");
    sys::remove(SOCKET, false);
    let listener = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| format!("socket: {}", strerror(e)))?;
    let addr = SocketAddrUnix::new(SOCKET).map_err(|e| format!("{SOCKET}: {}", strerror(e)))?;
    rustix::net::bind(&listener, &addr).map_err(|e| format!("{SOCKET}: {}", strerror(e)))?;
    let _ = rustix::fs::chmod(SOCKET, rustix::fs::Mode::from_raw_mode(0o600));
    rustix::net::listen(&listener, MAX_SESSIONS as i32).map_err(|e| format!("{SOCKET}: {}", strerror(e)))?;
    // Pseudo-terminals for sessions that ask for one (an interactive ssh): echo is turned
    // off on them by the session program.
    sys::mkdir_p("/dev/pts");
    let _ =
        sys::mount("devpts", "/dev/pts", "devpts", rustix::mount::MountFlags::NOSUID, Some("mode=0620,ptmxmode=0666"));
    let port_s = format!("{port}");
    let mut args = alloc::vec!["dropbear", "-F", "-E", "-s", "-j", "-k", "-T", "6", "-I", "300", "-p", &port_s];
    for k in &keys {
        args.extend(["-r", k]);
    }
    let exec = crate::process::Exec::new(&dropbear, &args, &["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"]);
    // The network: brought up by the child, so that the console prompt shows at once; one
    // brought up for Tang already is used as it is.
    let have_net = matches!(&init.luks.clevis.up, Some(Ok(_)));
    init.mods.net = true;
    let pid = crate::process::fork().map_err(|e| format!("fork: {}", strerror(e)))?;
    if pid == 0 {
        if !have_net {
            let deadline = sys::now_ms().saturating_add(init.cmd.timeout.max(30).saturating_mul(1000));
            match crate::boot::network(init, deadline) {
                Ok(c) => {
                    crate::net::write_note(NET_NOTE, &c);
                    init.log.step(&format!(
                        "ssh: dropbear starting on {}:{port}",
                        crate::net::host(&crate::netconf::show(c.address))
                    ));
                }
                Err(e) => {
                    init.log.error(&format!("ssh: no network: {e}"));
                    crate::process::exit(1);
                }
            }
        }
        let e = exec.exec();
        init.log.error(&format!("ssh: {dropbear}: {}", strerror(e)));
        crate::process::exit(127);
    }
    init.log.step(&format!("ssh: dropbear (pid {pid}) starting on port {port}"));
    Ok(Server { pid, listener })
}

/// Before the switch: dropbear and every session ended, the socket gone, the interface
/// taken down (with `rd.neednet=1`, handed over).
pub fn stop(init: &mut Init) {
    let Some(Ok(s)) = init.luks.ssh.take() else { return };
    let _ = rustix::process::kill_process(pid_of(s.pid), rustix::process::Signal::KILL);
    // Its sessions (each a child of its own that may have left its process group) and the
    // session programs: every process running dropbear or /init but PID 1.
    let mut ended = 0;
    for (name, _) in sys::list_dir("/proc").unwrap_or_default() {
        let Ok(pid) = name.parse::<i32>() else { continue };
        if pid <= 1 {
            continue;
        }
        let exe = sys::readlink(&format!("/proc/{pid}/exe")).unwrap_or_default();
        let argv0 = sys::read(&format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0.split(|&b| b == 0).next().unwrap_or(&[])).into_owned();
        if exe.ends_with("/dropbear") || is_client(&argv0) {
            let _ = rustix::process::kill_process(pid_of(pid), rustix::process::Signal::KILL);
            ended += 1;
        }
    }
    let _ = crate::process::wait(s.pid);
    crate::process::reap();
    drop(s.listener);
    sys::remove(SOCKET, false);
    init.log.step(&format!("ssh: server stopped ({ended} processes ended)"));
    let Some(c) = crate::net::take_note(NET_NOTE) else { return };
    let iface = c.iface.clone();
    if init.cmd.neednet {
        return; // the child's lease stays; rd.neednet=1's own bring-up hands it over
    }
    match crate::net::take_down(&c) {
        Ok(()) => init.log.step(&format!("net: {iface} down again (it was up for SSH only)")),
        Err(e) => init.log.error(&format!("net: {iface} could not be taken down: {e}")),
    }
}

fn pid_of(pid: i32) -> rustix::process::Pid {
    rustix::process::Pid::from_raw(pid).unwrap_or(rustix::process::Pid::INIT)
}

/// The session program: relay standard input to /init's prompt and its words back, until
/// /init closes the session. Never returns.
pub fn client_main() -> ! {
    // SAFETY: fds 0 and 1 are the session's channel, which dropbear opened for this program;
    // nothing here closes them.
    let (stdin, stdout) = unsafe { (rustix::fd::BorrowedFd::borrow_raw(0), rustix::fd::BorrowedFd::borrow_raw(1)) };
    let sock = match connect() {
        Ok(s) => s,
        Err(e) => {
            let msg = match e {
                Errno::NOENT | Errno::CONNREFUSED => {
                    "leanrd: nothing is being asked for now (the root may be unlocked already)\n".to_string()
                }
                e => format!("leanrd: cannot reach the prompt: {}\n", strerror(e)),
            };
            sys::write_all(stdout, msg.as_bytes());
            crate::process::exit(1);
        }
    };
    // On a terminal (an interactive ssh with a pty): no echo of the passphrase.
    let saved = rustix::termios::tcgetattr(stdin).ok();
    if let Some(t) = &saved {
        let mut quiet = t.clone();
        quiet.local_modes.remove(rustix::termios::LocalModes::ECHO);
        let _ = rustix::termios::tcsetattr(stdin, rustix::termios::OptionalActions::Now, &quiet);
    }
    let mut stdin_open = true;
    let mut buf = [0u8; 1024];
    loop {
        let mut fds = alloc::vec![PollFd::new(&sock, PollFlags::IN)];
        if stdin_open {
            fds.push(PollFd::from_borrowed_fd(stdin, PollFlags::IN));
        }
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(_) => break,
        }
        let (from_sock, from_stdin) =
            (!fds[0].revents().is_empty(), fds.get(1).is_some_and(|f| !f.revents().is_empty()));
        drop(fds);
        if from_sock {
            match rustix::io::read(&sock, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    sys::write_all(stdout, &buf[..n]);
                }
            }
        }
        if from_stdin {
            match rustix::io::read(stdin, &mut buf) {
                Ok(0) | Err(_) => {
                    // The answer is all sent (a pipe's end): hear /init out.
                    stdin_open = false;
                    let _ = rustix::net::shutdown(&sock, rustix::net::Shutdown::Write);
                }
                Ok(n) => {
                    sys::write_all(&sock, &buf[..n]);
                }
            }
            buf.fill(0);
        }
    }
    if let Some(t) = &saved {
        let _ = rustix::termios::tcsetattr(stdin, rustix::termios::OptionalActions::Now, t);
    }
    crate::process::exit(0);
}

fn connect() -> Result<OwnedFd, Errno> {
    let fd = rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    rustix::net::connect(&fd, &SocketAddrUnix::new(SOCKET)?)?;
    let _ = fd.as_fd();
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_program_is_known_by_its_name() {
        assert!(is_client("/usr/lib/leanrd/leanrd-unlock"));
        assert!(is_client("-leanrd-unlock"), "as a login shell");
        assert!(is_client("leanrd-unlock"));
        assert!(!is_client("/init") && !is_client("modprobe") && !is_client("leanrd-unlock2"));
    }
}
