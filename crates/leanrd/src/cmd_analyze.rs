//! `leanrd analyze`: the boot's timeline from the step log /init writes and the kernel's and
//! systemd's logs: the steps with their times and durations, and `--svg` a chart of them
//! (kernel and initramfs unpack, each module load as a bar in its lane, device found, unlock,
//! mount, switch_root, the root's systemd up to multi-user).
//!
//! Every source shares one clock: the kernel's timestamps and /init's record both count
//! CLOCK_MONOTONIC from boot, and `journalctl -o short-monotonic` prints the same.

use std::fmt::Write as _;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use clap::Args;
use leanrd_contract::steplog;

const EXAMPLES: &str = "\
Examples:
  leanrd analyze                                  this boot: /run/initramfs/leanrd.log and the journal
  leanrd analyze --svg boot.svg                   the same, drawn
  journalctl -b -1 -o short-monotonic | leanrd analyze -      the previous boot
  leanrd analyze serial.log                       a serial console captured with the kernel's timestamps
  leanrd analyze leanrd.log journal.txt --svg t.svg   several sources, merged by time";

#[derive(Args)]
#[command(after_long_help = EXAMPLES)]
pub struct AnalyzeArgs {
    /// Logs to read (`-` for stdin): /init's record (/run/initramfs/leanrd.log), `dmesg`,
    /// `journalctl -o short-monotonic` (with systemd's lines up to multi-user), a serial
    /// capture. Without any: the record and this boot's journal (or dmesg).
    logs: Vec<PathBuf>,
    /// Also draw the timeline as an SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// Who wrote a line.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    /// /init's step (its record, or the kernel log's `leanrd:` lines).
    Step,
    Kernel,
    /// The root's (or an initramfs') systemd and its units.
    Systemd,
}

#[derive(Debug, Clone)]
struct Line {
    t: f64,
    who: Who,
    text: String,
}

/// One source's lines. A file whose first stamped line is /init's first step is its record;
/// otherwise lines are the kernel's (dmesg, a serial capture) or the journal's
/// (`HOST IDENT[PID]: text`).
fn parse(text: &str) -> Vec<Line> {
    let stamped: Vec<(f64, &str)> = text.lines().filter_map(steplog::timestamped).collect();
    let record = stamped.first().is_some_and(|(_, m)| m.starts_with(steplog::STARTED));
    let mut out = Vec::new();
    for (t, msg) in stamped {
        let msg = msg.trim_end_matches('\r');
        let (who, text) = if record {
            (Who::Step, msg)
        } else {
            match journal_ident(msg) {
                Some(("kernel", m)) => kernel_line(m),
                Some((ident, m)) if ident.starts_with("systemd") => (Who::Systemd, m),
                Some(_) => continue,
                None => kernel_line(msg),
            }
        };
        out.push(Line { t, who, text: text.to_string() });
    }
    out
}

/// A kernel log line: /init's steps start with `leanrd: `; systemd logging to kmsg with
/// `systemd[1]: `.
fn kernel_line(m: &str) -> (Who, &str) {
    if let Some(s) = m.strip_prefix(steplog::KMSG_PREFIX) {
        (Who::Step, s)
    } else if let Some(s) = m.strip_prefix("systemd[1]: ") {
        (Who::Systemd, s)
    } else {
        (Who::Kernel, m)
    }
}

/// `HOST IDENT[PID]: text` (journalctl's short formats): the identifier and the text.
fn journal_ident(m: &str) -> Option<(&str, &str)> {
    let (host, rest) = m.split_once(' ')?;
    if host.is_empty() || host.ends_with(':') {
        return None;
    }
    let (ident, text) = rest.split_once(": ")?;
    let name = ident.split('[').next()?;
    let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c));
    ok.then_some((name, text))
}

/// The boot's phases and events, as found.
#[derive(Debug, Default)]
struct Timeline {
    unpack: Option<(f64, f64)>,
    run_init: Option<f64>,
    /// (label, time) of /init's landmarks and the kernel's mounts, in time order.
    marks: Vec<(String, f64)>,
    /// (module, start, end, lane).
    modules: Vec<(String, f64, f64, usize)>,
    switch: Option<f64>,
    /// The root's systemd starting, and multi-user reached.
    systemd: Option<f64>,
    multi_user: Option<f64>,
    /// Every step, for the listing.
    steps: Vec<(f64, String)>,
    errors: Vec<(f64, String)>,
}

fn timeline(mut lines: Vec<Line>) -> Timeline {
    lines.sort_by(|a, b| a.t.total_cmp(&b.t));
    // The same step from the record and the kernel log: keep one.
    lines.dedup_by(|b, a| a.who == b.who && a.text == b.text && (b.t - a.t).abs() < 0.01);
    let mut tl = Timeline::default();
    let mut unpack_start = None;
    for l in &lines {
        let (t, s) = (l.t, l.text.as_str());
        match l.who {
            Who::Kernel => {
                if s.starts_with("Trying to unpack rootfs image") || s.starts_with("Unpacking initramfs") {
                    unpack_start = Some(t);
                } else if s.starts_with("Freeing initrd memory") {
                    tl.unpack = Some((unpack_start.unwrap_or(t), t));
                } else if s.starts_with("Run /init as init process") {
                    tl.run_init = Some(t);
                } else if (s.contains("mounted filesystem") || s.contains("Ending clean mount"))
                    && tl.switch.is_none()
                    && !tl.marks.iter().any(|(m, _)| m.starts_with("mount"))
                {
                    tl.marks.push((format!("mount ({})", s.split(':').next().unwrap_or(s)), t));
                }
            }
            Who::Step => {
                tl.steps.push((t, s.to_string()));
                if let Some(e) = s.strip_prefix("error: ") {
                    tl.errors.push((t, e.to_string()));
                } else if let Some((m, ms)) = steplog::parse_module_loaded(s) {
                    tl.modules.push((m.to_string(), t - ms as f64 / 1000.0, t, 0));
                } else if let Some(d) = s.strip_prefix(steplog::ROOT_FOUND) {
                    tl.marks.push((format!("root device {d}"), t));
                } else if s.starts_with(steplog::ASKING) {
                    tl.marks.push(("passphrase asked".into(), t));
                } else if s.contains(steplog::UNLOCKED) {
                    tl.marks.push(("unlocked".into(), t));
                } else if s == steplog::ROOT_MOUNTED {
                    tl.marks.retain(|(m, _)| !m.starts_with("mount ("));
                    tl.marks.push(("root mounted".into(), t));
                } else if s == steplog::SWITCHING {
                    tl.switch = Some(t);
                }
            }
            Who::Systemd => {
                if s.starts_with("systemd ") && s.contains(" running in system mode") {
                    // The last one is the root's (dracut's initramfs runs a systemd too).
                    if tl.run_init.is_some_and(|r| t >= r) || tl.run_init.is_none() {
                        tl.systemd = Some(t);
                    }
                } else if tl.multi_user.is_none()
                    && (s.starts_with("Reached target multi-user.target")
                        || s.starts_with("Reached target Multi-User System")
                        || s.starts_with("Reached target graphical.target"))
                {
                    tl.multi_user = Some(t);
                }
            }
        }
    }
    // Without /init's steps (another generator's image), the initramfs ends where the
    // root's systemd starts.
    if tl.switch.is_none() && tl.steps.is_empty() {
        tl.switch = tl.systemd;
    }
    // Lanes: each load in the first lane free at its start (interval partitioning).
    tl.modules.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut lane_end: Vec<f64> = Vec::new();
    for m in &mut tl.modules {
        let lane = match lane_end.iter().position(|&e| e <= m.1 + 1e-9) {
            Some(i) => i,
            None => {
                lane_end.push(0.0);
                lane_end.len() - 1
            }
        };
        lane_end[lane] = m.2;
        m.3 = lane;
    }
    tl.marks.sort_by(|a, b| a.1.total_cmp(&b.1));
    tl
}

impl Timeline {
    fn lanes(&self) -> usize {
        self.modules.iter().map(|m| m.3 + 1).max().unwrap_or(0)
    }

    /// Time spent loading modules (union of the bars) and the sum of their durations.
    fn module_time(&self) -> (f64, f64) {
        let mut busy = 0.0;
        let mut cur: Option<(f64, f64)> = None;
        for &(_, s, e, _) in &self.modules {
            match cur {
                Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    busy += ce - cs;
                    cur = Some((s, e));
                }
                None => cur = Some((s, e)),
            }
        }
        if let Some((cs, ce)) = cur {
            busy += ce - cs;
        }
        (busy, self.modules.iter().map(|m| m.2 - m.1).sum())
    }

    fn end(&self) -> f64 {
        [self.multi_user, self.systemd, self.switch, self.steps.last().map(|s| s.0), self.run_init]
            .into_iter()
            .flatten()
            .fold(0.0, f64::max)
    }

    fn report(&self) -> String {
        let mut o = String::new();
        let mut rows: Vec<(f64, String)> = Vec::new();
        if let Some((s, e)) = self.unpack {
            rows.push((e, format!("kernel: initramfs unpacked ({:.3} s from {s:.3})", e - s)));
        }
        if let Some(t) = self.run_init {
            rows.push((t, "kernel: runs /init".into()));
        }
        for (t, s) in &self.steps {
            rows.push((*t, s.clone()));
        }
        if self.steps.is_empty() {
            rows.extend(self.marks.iter().map(|(m, t)| (*t, format!("kernel: {m}"))));
        }
        if let Some(t) = self.systemd {
            rows.push((t, "systemd: the root's systemd starts".into()));
        }
        if let Some(t) = self.multi_user {
            rows.push((t, "systemd: multi-user.target reached".into()));
        }
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        let _ = writeln!(o, "{:>9} {:>9}  step", "at s", "+prev s");
        let mut prev = None;
        for (t, s) in &rows {
            let d = prev.map_or(String::new(), |p: f64| format!("+{:.3}", t - p));
            let _ = writeln!(o, "{t:>9.3} {d:>9}  {s}");
            prev = Some(*t);
        }
        let _ = writeln!(o);
        let phase = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.3} s", b - a),
            _ => "?".into(),
        };
        let _ = writeln!(o, "kernel until /init        {}", phase(Some(0.0), self.run_init));
        let _ = writeln!(o, "initramfs (/init)         {}", phase(self.run_init, self.switch));
        if !self.modules.is_empty() {
            let (busy, sum) = self.module_time();
            let _ = writeln!(
                o,
                "  module loads            {} modules, {busy:.3} s of wall time ({sum:.3} s summed, up to {} at once)",
                self.modules.len(),
                self.lanes()
            );
        }
        let _ = writeln!(o, "root system to multi-user {}", phase(self.switch.or(self.systemd), self.multi_user));
        let _ = writeln!(o, "total                     {}", phase(Some(0.0), self.multi_user.or(Some(self.end()))));
        for (t, e) in &self.errors {
            let _ = writeln!(o, "error at {t:.3}: {e}");
        }
        o
    }

    /// The chart. Hand-written SVG: a handful of rectangles, lines and texts, for which a
    /// drawing crate would add nothing but a dependency.
    fn svg(&self, title: &str) -> String {
        let end = self.end().max(0.001);
        let (left, width, row) = (170.0, 1000.0, 22.0);
        let x = |t: f64| left + t / end * width;
        let lanes = self.lanes();
        let rows = 3 + lanes;
        let top = 40.0;
        let marks_top = top + rows as f64 * row + 10.0;
        let height = marks_top + (self.marks.len() + 4) as f64 * 16.0 + 30.0;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="12">"#,
            left + width + 30.0
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(s, r#"<text x="10" y="20" font-size="15" font-weight="bold">{}</text>"#, esc(title));
        // Axis: a tick every "nice" step.
        let step = [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0]
            .into_iter()
            .find(|s| end / s <= 12.0)
            .unwrap_or(120.0);
        let bottom = top + rows as f64 * row;
        let mut t = 0.0;
        while t <= end + 1e-9 {
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{bottom}" stroke="#ddd"/><text x="{0:.1}" y="{1}" text-anchor="middle" fill="#555">{t:.1} s</text>"##,
                x(t),
                top - 4.0
            );
            t += step;
        }
        let bar = |s: &mut String, r: usize, a: f64, b: f64, fill: &str, label: &str| {
            let y = top + r as f64 * row + 3.0;
            let w = (x(b) - x(a)).max(1.0);
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{y:.1}" width="{w:.1}" height="{:.1}" fill="{fill}"><title>{} ({:.3} s)</title></rect>"#,
                x(a),
                row - 6.0,
                esc(label),
                b - a
            );
            if w > 7.0 * label.len() as f64 {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" fill="black">{}</text>"#,
                    x(a) + 3.0,
                    y + row - 10.0,
                    esc(label)
                );
            }
        };
        let name = |s: &mut String, r: usize, label: &str| {
            let _ = writeln!(s, r#"<text x="10" y="{:.1}">{}</text>"#, top + r as f64 * row + row - 7.0, esc(label));
        };
        name(&mut s, 0, "kernel");
        if let Some(r) = self.run_init {
            bar(&mut s, 0, 0.0, r, "#c8c8c8", "kernel");
        }
        if let Some((a, b)) = self.unpack {
            bar(&mut s, 0, a, b, "#8c8c8c", "unpack");
        }
        name(&mut s, 1, "initramfs /init");
        if let (Some(a), Some(b)) = (self.run_init, self.switch) {
            bar(&mut s, 1, a, b, "#7fa7d9", "initramfs");
        }
        for lane in 0..lanes {
            name(&mut s, 2 + lane, &format!("modules, lane {}", lane + 1));
        }
        for (m, a, b, lane) in &self.modules {
            bar(&mut s, 2 + lane, *a, *b, "#f0b45a", m);
        }
        name(&mut s, 2 + lanes, "root's systemd");
        if let (Some(a), Some(b)) = (self.switch.or(self.systemd), self.multi_user) {
            bar(&mut s, 2 + lanes, a, b, "#8cc68c", "to multi-user");
        }
        // Landmarks: a line across the chart and a label below it.
        let mut marks: Vec<(String, f64)> = self.marks.clone();
        marks.extend(self.switch.map(|t| ("switch_root".to_string(), t)));
        marks.extend(self.multi_user.map(|t| ("multi-user.target".to_string(), t)));
        marks.sort_by(|a, b| a.1.total_cmp(&b.1));
        for (i, (m, t)) in marks.iter().enumerate() {
            let y = marks_top + i as f64 * 16.0 + 12.0;
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1:.1}" stroke="#c0392b" stroke-dasharray="3,2"/><text x="{2:.1}" y="{y:.1}" fill="#c0392b">{3:.3} s {4}</text>"##,
                x(*t),
                y - 10.0,
                x(*t) + 3.0,
                t,
                esc(m)
            );
        }
        let y = marks_top + marks.len() as f64 * 16.0 + 24.0;
        let (busy, sum) = self.module_time();
        let _ = writeln!(
            s,
            r##"<text x="10" y="{y:.1}" fill="#333">kernel → /init {} · initramfs {} ({} modules, {busy:.2} s wall, {sum:.2} s summed) · to multi-user {}</text>"##,
            fmt_span(Some(0.0), self.run_init),
            fmt_span(self.run_init, self.switch),
            self.modules.len(),
            fmt_span(self.switch.or(self.systemd), self.multi_user)
        );
        s.push_str("</svg>\n");
        s
    }
}

fn fmt_span(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2} s", b - a),
        _ => "?".into(),
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// This boot's sources when none are named: /init's record and the journal (or dmesg).
fn default_sources() -> Vec<(String, String)> {
    let mut v = Vec::new();
    if let Ok(t) = std::fs::read_to_string(steplog::SAVED) {
        v.push((steplog::SAVED.to_string(), t));
    }
    let run = |cmd: &str, args: &[&str]| {
        Command::new(cmd).args(args).output().ok().filter(|o| o.status.success() && !o.stdout.is_empty())
    };
    if let Some(o) = run("journalctl", &["-b", "-o", "short-monotonic", "--no-pager"]) {
        v.push(("journalctl -b".into(), String::from_utf8_lossy(&o.stdout).into_owned()));
    } else if let Some(o) = run("dmesg", &[]) {
        v.push(("dmesg".into(), String::from_utf8_lossy(&o.stdout).into_owned()));
    }
    v
}

pub fn run(a: AnalyzeArgs) -> Result<ExitCode> {
    let sources = if a.logs.is_empty() {
        default_sources()
    } else {
        let mut v = Vec::new();
        for p in &a.logs {
            let mut bytes = Vec::new();
            if p.as_os_str() == "-" {
                std::io::stdin().read_to_end(&mut bytes).context("standard input")?;
            } else {
                bytes = std::fs::read(p).with_context(|| format!("{}: cannot read", p.display()))?;
            }
            v.push((p.display().to_string(), String::from_utf8_lossy(&bytes).into_owned()));
        }
        v
    };
    let mut lines = Vec::new();
    for (name, text) in &sources {
        let l = parse(text);
        if l.is_empty() {
            eprintln!("leanrd: {name}: no lines with a kernel timestamp ([ seconds ]); ignored");
        }
        lines.extend(l);
    }
    if lines.is_empty() {
        bail!(
            "no timestamped lines to analyze (give /run/initramfs/leanrd.log, `journalctl -b -o short-monotonic`, \
             `dmesg` or a serial capture with the kernel's timestamps)"
        );
    }
    let tl = timeline(lines);
    out!("{}", tl.report());
    if let Some(svg) = &a.svg {
        let title = format!("boot timeline: {}", sources.iter().map(|s| s.0.as_str()).collect::<Vec<_>>().join(" + "));
        let f = leanrd_archive::output::AtomicFile::create(svg)?;
        std::io::Write::write_all(&mut f.file(), tl.svg(&title).as_bytes())
            .with_context(|| format!("{}: cannot write", svg.display()))?;
        f.commit(0o644)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &str = "\
[    0.612] leanrd-init 0.1.0 for 6.1.0-56-amd64: console=ttyS0 root=UUID=x
[    0.613] module tables read: 5000 modules, 0 loaded
[    0.700] loaded virtio_pci (80 ms)
[    0.702] loaded crc32c_generic (60 ms)
[    0.760] loaded virtio_blk (50 ms)
[    0.900] root is /dev/vda1
[    1.100] loaded ext4 (150 ms)
[    1.200] mounted /dev/vda1 (ext4, ro, ) on /sysroot
[    1.201] root mounted
[    1.250] switching to the new root
";

    const JOURNAL: &str = "\
[    0.301000] host kernel: Trying to unpack rootfs image as initramfs...
[    0.550000] host kernel: Freeing initrd memory: 30000K
[    0.600000] host kernel: Run /init as init process
[    0.612500] host kernel: leanrd: leanrd-init 0.1.0 for 6.1.0-56-amd64: console=ttyS0 root=UUID=x
[    1.400000] host systemd[1]: systemd 252.39-1~deb12u1 running in system mode (+PAM)
[    1.500000] host systemd-journald[120]: Journal started
[    4.800000] host systemd[1]: Reached target multi-user.target - Multi-User System.
";

    #[test]
    fn record_and_journal_merge_into_one_timeline() {
        let mut lines = parse(RECORD);
        lines.extend(parse(JOURNAL));
        let tl = timeline(lines);
        assert_eq!(tl.unpack, Some((0.301, 0.55)));
        assert_eq!((tl.run_init, tl.switch, tl.systemd, tl.multi_user), (Some(0.6), Some(1.25), Some(1.4), Some(4.8)));
        // The first step came twice (record and kernel log): once.
        assert_eq!(tl.steps.iter().filter(|s| s.1.starts_with("leanrd-init")).count(), 1);
        // virtio_pci and crc32c_generic overlap: two lanes; virtio_blk and ext4 reuse the first.
        let lanes: Vec<(&str, usize)> = tl.modules.iter().map(|m| (m.0.as_str(), m.3)).collect();
        assert_eq!(lanes, [("virtio_pci", 0), ("crc32c_generic", 1), ("virtio_blk", 0), ("ext4", 0)]);
        let (busy, sum) = tl.module_time();
        assert!((sum - 0.34).abs() < 1e-9 && busy < sum, "{busy} {sum}");
        let marks: Vec<&str> = tl.marks.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(marks, ["root device /dev/vda1", "root mounted"]);
        let r = tl.report();
        assert!(r.contains("initramfs (/init)         0.650 s"), "{r}");
        assert!(r.contains("root system to multi-user 3.550 s"), "{r}");
        let svg = tl.svg("t & <test>");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("t &amp; &lt;test&gt;") && svg.contains("<title>ext4 (0.150 s)</title>"));
        assert_eq!(svg.matches("modules, lane").count(), 2);
    }

    #[test]
    fn another_generators_boot_ends_its_initramfs_at_the_roots_systemd() {
        let dmesg = "\
[    0.300000] Trying to unpack rootfs image as initramfs...
[    0.900000] Freeing initrd memory: 34000K
[    0.950000] Run /init as init process
[    2.500000] EXT4-fs (vda1): mounted filesystem with ordered data mode. Quota mode: none.
[    3.000000] systemd[1]: systemd 252.39-1~deb12u1 running in system mode (+PAM)
";
        let tl = timeline(parse(dmesg));
        assert_eq!((tl.run_init, tl.switch, tl.systemd), (Some(0.95), Some(3.0), Some(3.0)));
        assert_eq!(tl.marks[0].0, "mount (EXT4-fs (vda1))");
        assert!(tl.report().contains("initramfs (/init)         2.050 s"));
        assert!(parse("no timestamps here\n").is_empty());
    }
}
