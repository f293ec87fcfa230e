//! How the network is to be configured, from the command line: the kernel's `ip=` (and
//! dracut's `ip=IFACE:dhcp`), `BOOTIF=` (the PXE interface, by MAC). Pure parsing, tested
//! on the host; [`crate::net`] carries it out.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// An IPv4 address, in network order.
pub type Ipv4 = [u8; 4];

/// Parse a dotted IPv4 address.
pub fn ipv4(s: &str) -> Option<Ipv4> {
    let mut out = [0u8; 4];
    let mut parts = s.split('.');
    for o in &mut out {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *o = p.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// An IPv4 address in dotted-decimal form (`10.0.0.5`).
pub fn show(a: Ipv4) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

/// The prefix length of a netmask (`255.255.255.0` → 24); None if it is not contiguous.
pub fn prefix_len(mask: Ipv4) -> Option<u8> {
    let m = u32::from_be_bytes(mask);
    let n = m.leading_ones();
    (m.checked_shl(n).unwrap_or(0) == 0).then_some(n as u8)
}

/// The classful netmask the kernel assumes when `ip=` gives none.
pub fn default_mask(a: Ipv4) -> Ipv4 {
    match a[0] {
        0..=127 => [255, 0, 0, 0],
        128..=191 => [255, 255, 0, 0],
        _ => [255, 255, 255, 0],
    }
}

/// How to configure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// DHCP (`dhcp`, `on`, `any`, `both`, and `bootp`/`rarp`, which are taken as DHCP).
    Dhcp,
    /// A static address.
    Static(Static),
    /// `off`/`none`: no configuration from the initramfs.
    Off,
    /// `dhcp6`/`auto6`: IPv6 only, which the kernel does itself (SLAAC) once the link is up.
    Auto6,
}

/// A static configuration: the kernel's `client-ip:server-ip:gw-ip:netmask:hostname:device:...`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Static {
    /// The address (client-ip).
    pub address: Ipv4,
    /// The subnet's prefix length, from the netmask (the address class's when none is given).
    pub prefix: u8,
    /// The default gateway (gw-ip); None: no default route.
    pub gateway: Option<Ipv4>,
    /// The DNS servers (dns0-ip, dns1-ip); empty: none.
    pub dns: Vec<Ipv4>,
}

/// One `ip=` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpParam {
    /// The interface it is for, when it names one.
    pub device: Option<String>,
    /// How to configure that interface (or all of them).
    pub method: Method,
    /// The host name to use (and to send with DHCP).
    pub hostname: Option<String>,
    /// The NFS server (server-ip): it wins over the one DHCP names, as for the kernel.
    pub server: Option<Ipv4>,
}

fn method_word(w: &str) -> Option<Method> {
    match w {
        "" | "dhcp" | "on" | "any" | "both" | "bootp" | "rarp" => Some(Method::Dhcp),
        "off" | "none" => Some(Method::Off),
        "dhcp6" | "auto6" => Some(Method::Auto6),
        _ => None,
    }
}

impl IpParam {
    /// Parse an `ip=` value (without `ip=`). Forms:
    /// - `dhcp`, `on`, `any`, `off`, `none`, `dhcp6`, `auto6`;
    /// - dracut's `IFACE:dhcp` (and the other method words);
    /// - the kernel's `client-ip:server-ip:gw-ip:netmask:hostname:device:autoconf:dns0:dns1:ntp0`,
    ///   where an empty client-ip means `autoconf` (DHCP unless it says off).
    pub fn parse(v: &str) -> Result<IpParam, String> {
        let only = |device: Option<String>, method| IpParam { device, method, hostname: None, server: None };
        if let Some(m) = method_word(v) {
            return Ok(only(None, m));
        }
        let f: Vec<&str> = v.split(':').collect();
        if f.len() == 2
            && let Some(m) = method_word(f[1])
            && ipv4(f[0]).is_none()
        {
            return Ok(only(Some(f[0].to_string()), m));
        }
        let at = |i: usize| f.get(i).copied().unwrap_or("");
        let addr = |i: usize, what: &str| -> Result<Option<Ipv4>, String> {
            match at(i) {
                "" => Ok(None),
                s => ipv4(s).map(Some).ok_or_else(|| format!("ip={v}: {what} \"{s}\" is not an IPv4 address")),
            }
        };
        if f.len() > 10 {
            return Err(format!("ip={v}: more than 10 fields"));
        }
        let device = (!at(5).is_empty()).then(|| at(5).to_string());
        let hostname = (!at(4).is_empty()).then(|| at(4).to_string());
        let server = addr(1, "server-ip")?;
        let client = addr(0, "client-ip")?;
        let auto = at(6);
        let auto_method =
            method_word(auto).ok_or_else(|| format!("ip={v}: autoconf \"{auto}\" is not dhcp, on, off or none"))?;
        addr(9, "ntp0-ip")?;
        let dns: Vec<Ipv4> = [addr(7, "dns0-ip")?, addr(8, "dns1-ip")?].into_iter().flatten().collect();
        // No client address, or autoconf asked for besides one (DHCP then; an address alone
        // is static):
        // the autoconf method, with the host name and server given.
        let Some(address) = client.filter(|_| matches!(auto, "" | "off" | "none")) else {
            return Ok(IpParam { device, method: auto_method, hostname, server });
        };
        let mask = addr(3, "netmask")?.unwrap_or_else(|| default_mask(address));
        let prefix = prefix_len(mask).ok_or_else(|| format!("ip={v}: netmask {} is not contiguous", show(mask)))?;
        Ok(IpParam {
            device,
            method: Method::Static(Static { address, prefix, gateway: addr(2, "gw-ip")?, dns }),
            hostname,
            server,
        })
    }
}

/// `BOOTIF=01-52-54-00-12-34-56` (pxelinux's form: the ARP hardware type, then the MAC), or a
/// bare MAC with `-` or `:`.
pub fn bootif(v: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = v.split(['-', ':']).collect();
    let mac = match parts.len() {
        7 if parts[0] == "01" => &parts[1..],
        6 => &parts[..],
        _ => return None,
    };
    let mut out = [0u8; 6];
    for (o, p) in out.iter_mut().zip(mac) {
        if p.len() != 2 {
            return None;
        }
        *o = u8::from_str_radix(p, 16).ok()?;
    }
    Some(out)
}

/// A MAC as sysfs writes it (`52:54:00:12:34:56`).
pub fn show_mac(m: &[u8; 6]) -> String {
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_masks() {
        assert_eq!(ipv4("10.0.2.15"), Some([10, 0, 2, 15]));
        for bad in ["10.0.2", "10.0.2.256", "1.2.3.4.5", "a.b.c.d", "", "1..2.3", "01234.1.1.1"] {
            assert_eq!(ipv4(bad), None, "{bad}");
        }
        assert_eq!(prefix_len([255, 255, 255, 0]), Some(24));
        assert_eq!(prefix_len([255, 255, 255, 255]), Some(32));
        assert_eq!(prefix_len([0, 0, 0, 0]), Some(0));
        assert_eq!(prefix_len([255, 0, 255, 0]), None);
    }

    #[test]
    fn every_form_of_ip() {
        let p = |s| IpParam::parse(s).unwrap();
        assert_eq!(p("dhcp"), IpParam { device: None, method: Method::Dhcp, hostname: None, server: None });
        assert_eq!(p("off").method, Method::Off);
        assert_eq!(p("eth1:dhcp").device.as_deref(), Some("eth1"));
        assert_eq!(p(":::::ens3:dhcp").device.as_deref(), Some("ens3"));
        // DHCP with the server and host name given: kept (the server wins over DHCP's).
        let d = p(":10.0.0.1:::box:eth0:dhcp");
        assert_eq!((d.method, d.server, d.hostname.as_deref()), (Method::Dhcp, Some([10, 0, 0, 1]), Some("box")));
        // A client address with autoconf on: DHCP (as the kernel does).
        assert_eq!(p("10.0.2.5::::::dhcp").method, Method::Dhcp);
        assert_eq!(p("::::::off").method, Method::Off);
        let s = p("10.0.2.15:10.0.2.2:10.0.2.1:255.255.255.0:box:eth0:off:10.0.2.3:10.0.2.4:10.0.2.5");
        assert_eq!(s.device.as_deref(), Some("eth0"));
        assert_eq!((s.hostname.as_deref(), s.server), (Some("box"), Some([10, 0, 2, 2])));
        assert_eq!(
            s.method,
            Method::Static(Static {
                address: [10, 0, 2, 15],
                prefix: 24,
                gateway: Some([10, 0, 2, 1]),
                dns: vec![[10, 0, 2, 3], [10, 0, 2, 4]],
            })
        );
        // No netmask: the class's.
        let Method::Static(s) = p("172.16.0.9").method else { panic!() };
        assert_eq!(s.prefix, 16);
    }

    #[test]
    fn bad_ip_values_say_why() {
        let e = |s| IpParam::parse(s).unwrap_err();
        assert_eq!(e("10.0.2.x::::::off"), "ip=10.0.2.x::::::off: client-ip \"10.0.2.x\" is not an IPv4 address");
        assert_eq!(e("10.0.2.5:::255.0.255.0"), "ip=10.0.2.5:::255.0.255.0: netmask 255.0.255.0 is not contiguous");
        assert_eq!(
            e(":::::eth0:carrier-pigeon"),
            "ip=:::::eth0:carrier-pigeon: autoconf \"carrier-pigeon\" is not dhcp, on, off or none"
        );
        assert!(e("1:2:3:4:5:6:7:8:9:10:11").contains("more than 10 fields"));
    }

    #[test]
    fn bootif_takes_the_pxe_form() {
        assert_eq!(bootif("01-52-54-00-12-34-56"), Some([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        assert_eq!(bootif("52:54:00:12:34:56"), Some([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        assert_eq!(bootif("06-52-54-00-12-34-56"), None);
        assert_eq!(bootif("52:54:00:12:34"), None);
        assert_eq!(show_mac(&[0x52, 0x54, 0, 0x12, 0x34, 0x56]), "52:54:00:12:34:56");
    }
}
