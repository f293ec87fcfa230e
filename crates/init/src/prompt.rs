//! Asking for a passphrase on every console at once — the VT a keyboard types on and a
//! serial console — taking the first line typed on any of them. Nothing is echoed; Enter
//! ends a line, Backspace and Ctrl-U edit it, Ctrl-C or an empty line gives up (the boot goes
//! on to the diagnosis). While waiting, uevents are still handled, so that a USB keyboard
//! plugged in or enumerated late gets its driver. With SSH ([`crate::ssh`]), each session
//! that connects to the listening socket is one more console, greeted with the prompt.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::termios::{LocalModes, OptionalActions, SpecialCodeIndex, Termios};

use crate::sys::{self, Errno};

/// A line typed in secret; zeroed when dropped.
pub struct Secret(pub Vec<u8>);

impl Drop for Secret {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: a plain write through a valid &mut u8; volatile so it is not elided.
            unsafe { core::ptr::write_volatile(b, 0) };
        }
    }
}

/// How asking ended.
pub enum Answer {
    /// The line typed (not empty), without its Enter.
    Line(Secret),
    /// Ctrl-C or an empty line.
    Cancelled,
    /// Nothing was entered within the time allowed.
    TimedOut,
    /// No console could be opened.
    NoConsole,
    /// A key came from the race ([`Consoles::race_key`]) before anyone answered.
    Key(Secret),
}

/// What a byte did to the line being typed.
#[derive(Debug, PartialEq, Eq)]
pub enum Edit {
    /// The line goes on (the byte was kept, edited with, or ignored).
    More,
    /// Enter: the line is complete.
    Done,
    /// Ctrl-C or Ctrl-D: give up.
    Cancel,
}

/// The line editing: printable bytes (and UTF-8 sequences) are kept, Backspace/DEL remove
/// the last character, Ctrl-U the whole line; Enter ends it, Ctrl-C or Ctrl-D cancels.
/// Escape sequences (arrow keys) are dropped.
#[derive(Default)]
pub struct Line {
    /// The bytes typed so far (UTF-8 as typed), zeroed when cleared.
    pub(crate) buf: Vec<u8>,
    escape: u8,
}

impl Line {
    /// Take one byte typed, and say what it did.
    pub fn feed(&mut self, b: u8) -> Edit {
        if self.escape > 0 {
            // ESC [ ... final byte (0x40..0x7e); ESC X: two bytes.
            self.escape = match (self.escape, b) {
                (1, b'[') | (1, b'O') => 2,
                (2, 0x40..=0x7e) => 0,
                (2, _) => 2,
                _ => 0,
            };
            return Edit::More;
        }
        match b {
            b'\r' | b'\n' => Edit::Done,
            0x03 | 0x04 => Edit::Cancel,
            0x7f | 0x08 => {
                // Remove one character: its UTF-8 continuation bytes too.
                while let Some(c) = self.buf.pop() {
                    if c & 0xc0 != 0x80 {
                        break;
                    }
                }
                Edit::More
            }
            0x15 => {
                self.clear();
                Edit::More
            }
            0x1b => {
                self.escape = 1;
                Edit::More
            }
            b if b < 0x20 => Edit::More,
            b => {
                self.buf.push(b);
                Edit::More
            }
        }
    }

    /// Empty the line, zeroing what was typed.
    pub fn clear(&mut self) {
        Line::zero(&mut self.buf);
        self.buf.clear();
    }

    /// Zero bytes that held a secret.
    fn zero(b: &mut [u8]) {
        for x in b.iter_mut() {
            // SAFETY: as in Secret::drop.
            unsafe { core::ptr::write_volatile(x, 0) };
        }
    }
}

struct Tty {
    name: String,
    fd: OwnedFd,
    saved: Option<Termios>,
    line: Line,
    /// What a session sent after the line it answered with, for the next prompt.
    pending: Vec<u8>,
}

/// The consoles to ask on, in no-echo character mode while this lives.
pub struct Consoles {
    ttys: Vec<Tty>,
    /// SSH sessions connect here (see [`crate::ssh`]); each becomes a console named `ssh`.
    listener: Option<OwnedFd>,
    /// The prompt being shown, for a session that connects while it is.
    prompt: String,
    /// A pending clevis unlock racing the prompt ([`crate::clevis::Pending`]), and what it
    /// sent so far.
    key: Option<(OwnedFd, Vec<u8>)>,
    /// While plymouthd shows the splash ([`crate::plymouth`]): the passphrase request on its
    /// socket, and what it answered so far. The VT is plymouthd's then (both reading it would
    /// split the keys typed): it is opened only when plymouthd is gone.
    plymouth: Option<(OwnedFd, Vec<u8>)>,
    /// Where the last line answered was typed (`tty1`, `ttyS0`, `ssh`, `plymouth`).
    pub answered_on: String,
    /// plymouthd went away while asked (the consoles took over).
    pub plymouth_gone: bool,
}

/// The kernel's consoles (/sys/class/tty/console/active: `tty0` is the foreground VT) and the
/// first VT when the machine has VTs at all: a keyboard and a screen work even when the
/// kernel logs to a serial console only.
pub fn console_names() -> Vec<String> {
    let fg = || sys::read_string("/sys/class/tty/tty0/active").map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let mut names: Vec<String> = Vec::new();
    let active = sys::read_string("/sys/class/tty/console/active").unwrap_or_default();
    for n in active.split_whitespace() {
        let n = if n == "tty0" { fg().unwrap_or_else(|| "tty1".to_string()) } else { n.to_string() };
        if !names.contains(&n) {
            names.push(n);
        }
    }
    if let Some(vt) = fg()
        && !names.contains(&vt)
    {
        names.push(vt);
    }
    names
}

/// Write `text` to every console the kernel has (and the foreground VT): the diagnosis must
/// reach whoever watches, the serial console as well as the screen, not only /dev/console
/// (the last `console=`). Standard error when none can be opened. Never blocks: a serial line
/// held by flow control (`console=ttyS0,115200n8r` with nothing attached) loses the text
/// rather than stopping /init.
pub fn say_everywhere(text: &str) {
    let mut said = false;
    for name in console_names() {
        let path = alloc::format!("/dev/{name}");
        let flags = OFlags::WRONLY | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        if let Ok(fd) = rustix::fs::open(path.as_str(), flags, Mode::empty()) {
            said |= sys::write_all(&fd, text.as_bytes());
        }
    }
    if !said {
        sys::eprint(text);
    }
}

impl Consoles {
    /// Open every console [`console_names`] lists (else /dev/console), each put in no-echo
    /// character mode with pending input flushed; one that cannot be opened is left out.
    #[inline(never)] // out of line: a smaller /init (measured)
    pub fn open(listener: Option<OwnedFd>) -> Consoles {
        let mut names = console_names();
        if names.is_empty() {
            names.push("console".to_string());
        }
        if crate::plymouth::running() {
            names.retain(|n| !is_vt(n));
        }
        let ttys = names.into_iter().filter_map(open_tty).collect();
        Consoles {
            ttys,
            listener,
            prompt: String::new(),
            key: None,
            plymouth: None,
            answered_on: String::new(),
            plymouth_gone: false,
        }
    }

    /// plymouthd is gone: the VTs it had are asked on too, with the prompt, each back in text
    /// mode with its keyboard on (a daemon killed rather than quit leaves them as it had them);
    /// the consoles already asked say so.
    fn take_back_the_vts(&mut self) {
        let gone = "leanrd: plymouth: plymouthd is gone; the consoles take over";
        if crate::plymouth::running() {
            self.plymouth_gone = true;
            self.say_ttys(&alloc::format!("\r\n{gone}\r\n{}", self.prompt));
        }
        crate::plymouth::lost();
        self.plymouth = None;
        for name in console_names().into_iter().filter(|n| is_vt(n)) {
            if self.ttys.iter().any(|t| t.name == name) {
                continue;
            }
            if let Some(t) = open_tty(name) {
                let how = crate::keymap::text_again(t.fd.as_fd()).unwrap_or_else(|e| e);
                sys::write_all(&t.fd, alloc::format!("\r\n{gone} ({}: {how})\r\n{}", t.name, self.prompt).as_bytes());
                self.ttys.push(t);
            }
        }
    }
}

/// The foreground VT (or tty1), opened for ioctls only; None on a machine without VTs.
pub fn open_vt() -> Option<OwnedFd> {
    let name = console_names().into_iter().find(|n| is_vt(n)).unwrap_or_else(|| "tty1".to_string());
    let flags = OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    rustix::fs::open(alloc::format!("/dev/{name}").as_str(), flags, Mode::empty()).ok()
}

/// A VT's name (`tty1`), not a serial line's (`ttyS0`, `ttyAMA0`, `ttyUSB0`).
fn is_vt(name: &str) -> bool {
    name.strip_prefix("tty").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A console opened for asking: no echo, character mode, pending input flushed. None when it
/// cannot be opened.
fn open_tty(name: String) -> Option<Tty> {
    let path = alloc::format!("/dev/{name}");
    let flags = OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = rustix::fs::open(path.as_str(), flags, Mode::empty()).ok()?;
    let saved = rustix::termios::tcgetattr(&fd).ok();
    if let Some(t) = &saved {
        let mut raw = t.clone();
        raw.local_modes.remove(LocalModes::ECHO | LocalModes::ICANON | LocalModes::ISIG | LocalModes::IEXTEN);
        raw.special_codes[SpecialCodeIndex::VMIN] = 1;
        raw.special_codes[SpecialCodeIndex::VTIME] = 0;
        let _ = rustix::termios::tcsetattr(&fd, OptionalActions::Now, &raw);
        let _ = rustix::termios::tcflush(&fd, rustix::termios::QueueSelector::IFlush);
    }
    Some(Tty { name, fd, saved, line: Line::default(), pending: Vec::new() })
}

impl Consoles {
    /// Take the SSH sessions waiting on the listener (at most [`crate::ssh::MAX_SESSIONS`]
    /// at once; more are closed), each greeted with the prompt.
    fn accept(&mut self) {
        let Some(l) = &self.listener else { return };
        while let Ok(fd) =
            rustix::net::accept_with(l, rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK)
        {
            if self.ttys.iter().filter(|t| t.name == "ssh").count() >= crate::ssh::MAX_SESSIONS {
                sys::write_all(&fd, b"leanrd: too many sessions\r\n");
                continue;
            }
            sys::write_all(&fd, self.prompt.as_bytes());
            self.ttys.push(Tty { name: "ssh".into(), fd, saved: None, line: Line::default(), pending: Vec::new() });
        }
    }

    /// Race the prompt with a key from `fd` (a line of hex; see [`crate::clevis::pending`]);
    /// None ends the race.
    pub fn race_key(&mut self, fd: Option<OwnedFd>) {
        self.key = fd.map(|f| (f, Vec::new()));
    }

    /// What the key source sent, when its line is whole: the key; the source is dropped
    /// when it ends or sends what is not a line of hex.
    fn read_key(&mut self) -> Option<Secret> {
        let (fd, got) = self.key.as_mut()?;
        let mut buf = [0u8; 256];
        match rustix::io::read(&*fd, &mut buf) {
            Ok(n) if n > 0 && got.len() + n <= 4096 => got.extend_from_slice(&buf[..n]),
            Err(Errno::INTR) | Err(Errno::AGAIN) => return None,
            _ => {
                if let Some((_, mut g)) = self.key.take() {
                    g.fill(0);
                }
                return None;
            }
        }
        buf.fill(0);
        let end = got.iter().position(|&b| b == b'\n')?;
        let nib = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        let key: Option<Vec<u8>> = got[..end].chunks(2).map(|p| Some(nib(p[0])? << 4 | nib(*p.get(1)?)?)).collect();
        let (_, mut g) = self.key.take()?;
        g.fill(0);
        key.filter(|k| !k.is_empty()).map(Secret)
    }

    /// What plymouthd answered, once whole (None: more to come). Anything but an answer
    /// (its socket closed: it died or quit; no answer; garbage) ends its part.
    fn read_plymouth(&mut self) -> Option<crate::plymouth::Reply> {
        use crate::plymouth::{Reply, parse_answer};
        let (fd, got) = self.plymouth.as_mut()?;
        let mut buf = [0u8; 512];
        let r = match rustix::io::read(&*fd, &mut buf) {
            Ok(n) if n > 0 => {
                got.extend_from_slice(&buf[..n]);
                buf.fill(0);
                // parse_answer refuses a length past its bound: `got` cannot grow past it.
                match parse_answer(got) {
                    Reply::More => return None,
                    r => r,
                }
            }
            Err(Errno::INTR) | Err(Errno::AGAIN) => return None,
            _ => Reply::Bad("closed".into()),
        };
        if let Some((_, mut g)) = self.plymouth.take() {
            g.fill(0);
        }
        Some(r)
    }

    /// Write to the consoles only (not the splash).
    fn say_ttys(&self, text: &str) {
        for t in &self.ttys {
            sys::write_all(&t.fd, text.as_bytes());
        }
    }

    /// The consoles open, by kernel name (tty1, ttyS0).
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.ttys.iter().map(|t| t.name.as_str()).collect();
        if crate::plymouth::running() {
            v.push("plymouth");
        }
        v
    }

    /// A file descriptor of a VT (for the keymap ioctls), if one is open.
    pub fn vt(&self) -> Option<BorrowedFd<'_>> {
        self.ttys.iter().find(|t| is_vt(&t.name)).map(|t| t.fd.as_fd())
    }

    /// Write to every console (and to the splash: a line under its prompt).
    pub fn say(&self, text: &str) {
        self.say_ttys(text);
        let line = text.trim();
        if !line.is_empty() {
            crate::plymouth::message(line.strip_prefix("leanrd: ").unwrap_or(line));
        }
    }

    /// Ask: the first line typed on any console. `events`, when given, is polled too and
    /// `on_event` called when it is readable. `timeout_ms` 0: no limit.
    #[inline(never)] // out of line: a smaller /init (measured)
    pub fn ask(
        &mut self,
        prompt: &str,
        timeout_ms: u64,
        events: Option<BorrowedFd<'_>>,
        on_event: &mut dyn FnMut(),
    ) -> Answer {
        if self.ttys.is_empty() && self.listener.is_none() && !crate::plymouth::running() {
            return Answer::NoConsole;
        }
        for t in self.ttys.iter_mut() {
            t.line.clear();
        }
        self.prompt = prompt.to_string();
        self.say_ttys(prompt);
        self.plymouth = None;
        if crate::plymouth::running() {
            match crate::plymouth::ask(prompt.trim_end()) {
                Ok(fd) => self.plymouth = Some((fd, Vec::new())),
                Err(_) => self.take_back_the_vts(),
            }
        }
        let start = sys::now_ms();
        let mut buf = [0u8; 64];
        loop {
            let left = if timeout_ms == 0 {
                None
            } else {
                match timeout_ms.checked_sub(sys::now_ms() - start) {
                    Some(l) if l > 0 => Some(l),
                    _ => {
                        self.say("\r\n");
                        return Answer::TimedOut;
                    }
                }
            };
            let mut fds: Vec<PollFd<'_>> = self.ttys.iter().map(|t| PollFd::new(&t.fd, PollFlags::IN)).collect();
            if let Some(l) = &self.listener {
                fds.push(PollFd::new(l, PollFlags::IN));
            }
            if let Some((k, _)) = &self.key {
                fds.push(PollFd::new(k, PollFlags::IN));
            }
            if let Some((p, _)) = &self.plymouth {
                fds.push(PollFd::new(p, PollFlags::IN));
            }
            if let Some(e) = &events {
                fds.push(PollFd::from_borrowed_fd(*e, PollFlags::IN));
            }
            // What a session sent past its last line is taken at once (`printf 'a\nb\n' |
            // ssh`: the second answer is there already).
            let pending = self.ttys.iter().any(|t| !t.pending.is_empty());
            let ts = if pending { Some(sys::timespec_ms(0)) } else { left.map(sys::timespec_ms) };
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(_) => sys::sleep_ms(100),
            }
            let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
            drop(fds);
            let listener_at = self.ttys.len();
            let key_at = listener_at + usize::from(self.listener.is_some());
            let plymouth_at = key_at + usize::from(self.key.is_some());
            if events.is_some() && ready.last() == Some(&true) {
                on_event();
            }
            if self.plymouth.is_some() && ready.get(plymouth_at).copied().unwrap_or(false) {
                match self.read_plymouth() {
                    Some(crate::plymouth::Reply::Answer(a)) => {
                        let a = Secret(a);
                        self.answered_on = "plymouth".into();
                        self.say_ttys("\r\n");
                        return if a.0.is_empty() { Answer::Cancelled } else { Answer::Line(a) };
                    }
                    Some(_) => self.take_back_the_vts(),
                    None => {}
                }
            }
            if self.key.is_some()
                && ready.get(key_at).copied().unwrap_or(false)
                && let Some(k) = self.read_key()
            {
                self.say("\r\n");
                return Answer::Key(k);
            }
            let mut closed = Vec::new();
            for (i, t) in self.ttys.iter_mut().enumerate() {
                let remote = t.name == "ssh";
                let mut data = core::mem::take(&mut t.pending);
                if ready[i] {
                    match rustix::io::read(&t.fd, &mut buf) {
                        // A session that ended (a console never reads 0 in character mode).
                        Ok(0) | Err(_) if remote => closed.push(i),
                        Ok(n) => data.extend_from_slice(&buf[..n]),
                        Err(_) => {}
                    }
                    buf.fill(0);
                }
                for (k, &b) in data.iter().enumerate() {
                    match t.line.feed(b) {
                        Edit::More => {}
                        // A session cannot give up for the console: its Ctrl-C or empty line
                        // is nothing (it may close instead).
                        Edit::Cancel if remote => t.line.clear(),
                        Edit::Done if remote && t.line.buf.is_empty() => {}
                        Edit::Cancel => {
                            Line::zero(&mut data);
                            self.say("\r\n");
                            return Answer::Cancelled;
                        }
                        Edit::Done => {
                            if remote {
                                t.pending = data[k + 1..].to_vec();
                            }
                            Line::zero(&mut data);
                            let line = core::mem::take(&mut t.line.buf);
                            self.answered_on = t.name.clone();
                            self.say("\r\n");
                            return if line.is_empty() { Answer::Cancelled } else { Answer::Line(Secret(line)) };
                        }
                    }
                }
                Line::zero(&mut data);
            }
            for i in closed.into_iter().rev() {
                self.ttys.remove(i);
            }
            if self.listener.is_some() && ready.get(listener_at).copied().unwrap_or(false) {
                self.accept();
            }
        }
    }
}

impl Drop for Consoles {
    fn drop(&mut self) {
        for t in &self.ttys {
            if let Some(s) = &t.saved {
                let _ = rustix::termios::tcsetattr(&t.fd, OptionalActions::Now, s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(bytes: &[u8]) -> (Vec<u8>, Edit) {
        let mut l = Line::default();
        for &b in bytes {
            match l.feed(b) {
                Edit::More => {}
                e => return (l.buf.clone(), e),
            }
        }
        (l.buf.clone(), Edit::More)
    }

    #[test]
    fn line_editing() {
        assert_eq!(typed(b"secret\r"), (b"secret".to_vec(), Edit::Done));
        assert_eq!(typed(b"secrex\x7ft\n"), (b"secret".to_vec(), Edit::Done));
        assert_eq!(typed(b"wrong\x15right\r"), (b"right".to_vec(), Edit::Done));
        assert_eq!(typed(b"abc\x03"), (b"abc".to_vec(), Edit::Cancel));
        assert_eq!(typed("zö\x08y\r".as_bytes()), (b"zy".to_vec(), Edit::Done), "backspace removes a whole ö");
        assert_eq!(typed(b"a\x1b[Ab\x1bOCc\r"), (b"abc".to_vec(), Edit::Done), "arrow keys are dropped");
        assert_eq!(typed(b"\r"), (Vec::new(), Edit::Done));
    }
}
