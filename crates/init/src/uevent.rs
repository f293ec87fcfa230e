//! Kernel uevents on a netlink socket: devices that appear after the start, and the
//! modaliases they ask drivers for.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use rustix::fd::{AsFd, OwnedFd};

use crate::sys;

/// A socket for kernel uevents, or `None` when the kernel gives none.
pub fn socket() -> Option<OwnedFd> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, netlink};
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        Some(netlink::KOBJECT_UEVENT),
    )
    .ok()?;
    rustix::net::bind(&fd, &netlink::SocketAddrNetlink::new(0, 1)).ok()?;
    Some(fd)
}

/// What arrived while waiting.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Events {
    /// Any event at all (a disk appearing has no MODALIAS).
    pub any: bool,
    /// The MODALIAS values received.
    pub aliases: Vec<String>,
}

/// Wait up to `ms` for uevents and take all that are queued.
pub fn receive<Fd: AsFd>(fd: Fd, ms: u64) -> Events {
    let fd = fd.as_fd();
    use rustix::event::{PollFd, PollFlags};
    let mut ev = Events::default();
    if !rustix::event::poll(&mut [PollFd::from_borrowed_fd(fd, PollFlags::IN)], Some(&sys::timespec_ms(ms)))
        .is_ok_and(|n| n > 0)
    {
        return ev;
    }
    ev.any = true;
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match rustix::net::recv(fd, &mut buf[..], rustix::net::RecvFlags::empty()) {
            Ok((n, _)) if n > 0 => n,
            _ => break,
        };
        for field in buf[..n].split(|&b| b == 0) {
            if let Some(a) = field.strip_prefix(b"MODALIAS=") {
                ev.aliases.push(String::from_utf8_lossy(a).into_owned());
            }
        }
    }
    ev
}
