//! The one HTTP request /init makes: a POST to a Tang server, over plain TCP, bounded in time
//! and size. httparse (no_std) reads the reply's head; the rest is the few lines HTTP/1.1's
//! framing needs (Content-Length, chunked, or to the close), hand-written because no HTTP
//! client crate runs without std.
//!
//! Every bound holds whatever the server does: a reply larger than [`MAX_REPLY`] is cut off
//! and refused, a server that says nothing or trickles is given up at the deadline.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use rustix::event::{PollFd, PollFlags};
use rustix::fd::OwnedFd;
use rustix::net::{AddressFamily, SocketFlags, SocketType};

use crate::sys::{self, Errno, strerror};

/// The largest reply read: a Tang reply is a JWK of some 300 bytes.
pub const MAX_REPLY: usize = 64 * 1024;

/// An `http://` URL, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// The host as written: a name, an IPv4 address, or an IPv6 one without its brackets.
    pub host: String,
    /// The port (80 when not written).
    pub port: u16,
    /// The path, without a trailing `/` (clevis appends `/rec/KID` to the URL as written).
    pub path: String,
}

impl Url {
    /// `http://HOST[:PORT][/PATH]`; `https://` is refused with why.
    pub fn parse(u: &str) -> Result<Url, String> {
        let rest = match u.split_once("://") {
            Some((s, r)) if s.eq_ignore_ascii_case("http") => r,
            Some((s, _)) if s.eq_ignore_ascii_case("https") => {
                return Err(format!(
                    "{u}: https is not supported by leanrd's /init (use http: Tang's replies need no secrecy)"
                ));
            }
            _ => return Err(format!("{u}: not an http:// URL")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| format!("{u}: an IPv6 address without its ]"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            None | Some("") => 80,
            Some(p) => p.parse().map_err(|_| format!("{u}: port {p} is not a number"))?,
        };
        if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/') {
            return Err(format!("{u}: no host"));
        }
        Ok(Url { host: host.into(), port, path: path.into() })
    }
}

/// What a reply said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The status line's reason.
    pub reason: String,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// The reply in `buf`: Ok(None) while it is not whole yet (`closed`: the server closed the
/// connection, so what is here is all there will be).
pub fn parse_reply(buf: &[u8], closed: bool) -> Result<Option<Reply>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut headers);
    let head = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if closed && buf.is_empty() => {
            return Err("the server closed the connection without a reply".into());
        }
        Ok(httparse::Status::Partial) if closed => return Err("the reply ends within its head".into()),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("not an HTTP reply ({e})")),
    };
    let status = r.code.unwrap_or(0);
    let reason = r.reason.unwrap_or("").to_string();
    let header = |name: &str| {
        r.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    let rest = &buf[head..];
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        match dechunk(rest)? {
            Some(b) => b,
            None if closed => return Err("the reply ends within a chunk".into()),
            None => return Ok(None),
        }
    } else if let Some(len) = header("content-length") {
        let len: usize = len.parse().map_err(|_| format!("Content-Length {len} is not a number"))?;
        if len > MAX_REPLY {
            return Err(format!("a body of {len} bytes (more than {MAX_REPLY})"));
        }
        if rest.len() < len {
            if closed {
                return Err(format!("the reply ends after {} of its {len} bytes", rest.len()));
            }
            return Ok(None);
        }
        rest[..len].to_vec()
    } else if closed {
        rest.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(Reply { status, reason, body }))
}

/// A chunked body: Ok(None) while the last chunk has not come.
fn dechunk(mut b: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let line = core::str::from_utf8(&b[..eol]).map_err(|_| "a chunk size that is not text".to_string())?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(hex, 16).map_err(|_| format!("chunk size \"{hex}\" is not hexadecimal"))?;
        if size > MAX_REPLY || out.len() + size > MAX_REPLY {
            return Err(format!("a chunked body of more than {MAX_REPLY} bytes"));
        }
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if b.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Connect to `addr` (an IPv4 or IPv6 literal) by `deadline` (sys::now_ms's clock).
fn connect(addr: &str, port: u16, deadline: u64) -> Result<OwnedFd, Errno> {
    use rustix::net::{SocketAddrV4, SocketAddrV6};
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    let (fd, started) = if let Some(a) = crate::netconf::ipv4(addr) {
        let fd = rustix::net::socket_with(AddressFamily::INET, SocketType::STREAM, flags, None)?;
        let r = rustix::net::connect(&fd, &SocketAddrV4::new(a.into(), port));
        (fd, r)
    } else if let Ok(a) = addr.parse::<core::net::Ipv6Addr>() {
        let fd = rustix::net::socket_with(AddressFamily::INET6, SocketType::STREAM, flags, None)?;
        let r = rustix::net::connect(&fd, &SocketAddrV6::new(a, port, 0, 0));
        (fd, r)
    } else {
        return Err(Errno::INVAL);
    };
    match started {
        Ok(()) => return Ok(fd),
        Err(e) if e == Errno::INPROGRESS => {}
        Err(e) => return Err(e),
    }
    wait(&fd, PollFlags::OUT, deadline)?;
    rustix::net::sockopt::socket_error(&fd)??;
    Ok(fd)
}

/// Wait until `fd` is ready for `what`, or the deadline.
fn wait(fd: &OwnedFd, what: PollFlags, deadline: u64) -> Result<(), Errno> {
    loop {
        let left = deadline.saturating_sub(sys::now_ms());
        if left == 0 {
            return Err(Errno::TIMEDOUT);
        }
        let mut p = [PollFd::new(fd, what)];
        match rustix::event::poll(&mut p, Some(&sys::timespec_ms(left))) {
            Ok(0) => return Err(Errno::TIMEDOUT),
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// POST `body` to `addr:port` (the URL's host, resolved) at `path`, by `deadline`; the reply,
/// whatever its status.
pub fn post(
    url: &Url,
    addr: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
    deadline: u64,
) -> Result<Reply, String> {
    let at = crate::net::host_port(addr, url.port);
    let fd = connect(addr, url.port, deadline).map_err(|e| match e {
        Errno::TIMEDOUT => format!("{at}: no answer (connection timed out)"),
        e => format!("{at}: {}", strerror(e)),
    })?;
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nAccept: application/jwk+json\r\nConnection: close\r\n\r\n",
        crate::net::host_port(&url.host, url.port),
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let mut sent = 0;
    while sent < req.len() {
        wait(&fd, PollFlags::OUT, deadline).map_err(|e| format!("{at}: sending: {}", strerror(e)))?;
        match rustix::net::send(&fd, &req[sent..], rustix::net::SendFlags::NOSIGNAL) {
            Ok(n) => sent += n,
            Err(Errno::AGAIN) | Err(Errno::INTR) => {}
            Err(e) => return Err(format!("{at}: sending: {}", strerror(e))),
        }
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(r) = parse_reply(&buf, false).map_err(|e| format!("{at}: {e}"))? {
            return Ok(r);
        }
        wait(&fd, PollFlags::IN, deadline).map_err(|e| match e {
            Errno::TIMEDOUT => format!("{at}: no whole reply in time ({} bytes came)", buf.len()),
            e => format!("{at}: {}", strerror(e)),
        })?;
        match rustix::net::recv(&fd, &mut chunk, rustix::net::RecvFlags::empty()) {
            Ok((0, _)) => {
                return parse_reply(&buf, true)
                    .map_err(|e| format!("{at}: {e}"))?
                    .ok_or_else(|| format!("{at}: the reply ends early"));
            }
            Ok((n, _)) => {
                if buf.len() + n > MAX_REPLY + 8192 {
                    return Err(format!("{at}: a reply of more than {MAX_REPLY} bytes"));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(Errno::AGAIN) | Err(Errno::INTR) => {}
            Err(e) => return Err(format!("{at}: {}", strerror(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://10.0.2.2:7500").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("10.0.2.2", 7500, ""));
        let u = Url::parse("HTTP://tang.example/tang/").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("tang.example", 80, "/tang"));
        let u = Url::parse("http://[fd00::1]:8080/x").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("fd00::1", 8080, "/x"));
        assert!(Url::parse("https://t").unwrap_err().contains("https is not supported"));
        for bad in ["t:80", "http://", "http://h:x", "http://[::1", "http://:80/"] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn replies() {
        let r = parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", false).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, b"{}".as_slice()));
        assert_eq!(parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}", false), Ok(None));
        assert!(
            parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}", true).unwrap_err().contains("2 of its 5")
        );
        assert_eq!(parse_reply(b"HTTP/1.1 200 OK\r\n\r\nabc", false), Ok(None));
        assert_eq!(parse_reply(b"HTTP/1.1 200 OK\r\n\r\nabc", true).unwrap().unwrap().body, b"abc");
        let c = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_reply(c, false).unwrap().unwrap().body, b"abcde");
        assert_eq!(parse_reply(&c[..c.len() - 7], false), Ok(None));
        let r = parse_reply(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n", false).unwrap().unwrap();
        assert_eq!((r.status, r.reason.as_str()), (404, "Not Found"));
        assert!(parse_reply(b"SSH-2.0-OpenSSH\r\n", false).unwrap_err().contains("not an HTTP reply"));
        assert!(parse_reply(b"", true).unwrap_err().contains("closed the connection without a reply"));
        assert!(parse_reply(b"HTTP/1.1 200", true).unwrap_err().contains("ends within its head"));
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n", false).is_err());
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffff\r\n", false).is_err());
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false).is_err());
        // Every prefix of every reply: no panic.
        for whole in [&c[..], b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"] {
            for n in 0..whole.len() {
                let _ = parse_reply(&whole[..n], false);
                let _ = parse_reply(&whole[..n], true);
            }
        }
    }
}
