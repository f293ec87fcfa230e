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
  sudo leanrd analyze                             this boot: /run/initramfs/leanrd.log (root's only) and the journal
  sudo leanrd analyze --svg boot.svg              the same, drawn
  sudo journalctl -b -1 -o short-monotonic | leanrd analyze -      the previous boot
  leanrd analyze serial.log                       a serial console captured with the kernel's timestamps
  leanrd analyze leanrd.log journal.txt --svg t.svg   several sources, merged by time";

#[derive(Args)]
#[command(after_long_help = EXAMPLES)]
pub(crate) struct AnalyzeArgs {
    /// Logs to read (`-` for stdin): /init's record (/run/initramfs/leanrd.log), `dmesg`,
    /// `journalctl -o short-monotonic` (with systemd's lines up to multi-user), a serial
    /// capture. Without any: the record and this boot's journal (or dmesg).
    logs: Vec<PathBuf>,
    /// Also draw the timeline as an SVG file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// The chart's title (default: the sources' file names).
    #[arg(long, value_name = "TEXT", requires = "svg")]
    title: Option<String>,
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
                } else if let Some(what) = s.strip_prefix(steplog::ASKING) {
                    let what = what.split(" of ").next().unwrap_or(what);
                    tl.marks.push((format!("{what} asked"), t));
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
    // No kernel line for it (a console with `quiet`, the record alone): /init began with its
    // first step.
    if tl.run_init.is_none() {
        tl.run_init = tl.steps.first().map(|s| s.0);
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
        let phase = |a, b| fmt_span(a, b, 3);
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

    /// The chart: the whole boot on top (kernel, initramfs, the root's systemd up to
    /// multi-user), and below it the initramfs in detail on its own time scale (kernel and
    /// unpack, /init, each module load in its lane, the landmarks). Hand-written SVG: a few
    /// rectangles, lines and texts, for which a drawing crate would add only a dependency.
    fn svg(&self, title: &str) -> String {
        let end = self.end().max(0.001);
        let mut s = String::new();
        let mut y = 40.0;
        let kernel = || {
            Row::new("kernel").bar(Some(0.0), self.run_init, "#c8c8c8", "kernel").bar_pair(
                self.unpack,
                "#8c8c8c",
                "unpack",
            )
        };
        // The whole boot.
        let whole = vec![
            kernel(),
            Row::new("initramfs").bar(self.run_init, self.switch, "#7fa7d9", "initramfs"),
            Row::new("root's systemd").bar(self.switch.or(self.systemd), self.multi_user, "#8cc68c", "to multi-user"),
        ];
        let top_marks: Vec<(String, f64)> =
            self.multi_user.map(|t| ("multi-user.target".to_string(), t)).into_iter().collect();
        y = panel(&mut s, y, "the whole boot", (0.0, end), &whole, &top_marks);
        // The initramfs in detail: from boot to switch_root (or the last step).
        let detail_end = self.switch.or(self.steps.last().map(|x| x.0)).unwrap_or(end).max(0.001);
        let mut rows = vec![kernel(), Row::new("/init").bar(self.run_init, self.switch, "#7fa7d9", "/init")];
        for lane in 0..self.lanes() {
            let mut r = Row::new(&format!("modules, lane {}", lane + 1));
            for (m, a, b, _) in self.modules.iter().filter(|m| m.3 == lane) {
                r = r.bar(Some(*a), Some(*b), "#f0b45a", m);
            }
            rows.push(r);
        }
        let mut marks = self.marks.clone();
        marks.extend(self.switch.map(|t| ("switch_root".to_string(), t)));
        y = panel(&mut s, y + 20.0, "the initramfs in detail", (0.0, detail_end), &rows, &marks);
        let (busy, sum) = self.module_time();
        let modules = if self.modules.is_empty() {
            "module loads not in the log".to_string()
        } else {
            format!("{} modules, {busy:.2} s wall, {sum:.2} s summed", self.modules.len())
        };
        let _ = writeln!(
            s,
            r##"<text x="10" y="{:.1}" fill="#333">kernel → /init {} · initramfs {} ({modules}) · root to multi-user {}</text>"##,
            y + 16.0,
            fmt_span(Some(0.0), self.run_init, 2),
            fmt_span(self.run_init, self.switch, 2),
            fmt_span(self.switch.or(self.systemd), self.multi_user, 2)
        );
        let head = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{:.0}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
            LEFT + WIDTH + 30.0,
            y + 30.0,
            esc(title)
        );
        head + &s + "</svg>\n"
    }
}

/// One row of a panel: a label and its bars (start, end, colour, label).
struct Row {
    label: String,
    bars: Vec<(f64, f64, &'static str, String)>,
}

impl Row {
    fn new(label: &str) -> Row {
        Row { label: label.to_string(), bars: Vec::new() }
    }
    fn bar(mut self, a: Option<f64>, b: Option<f64>, fill: &'static str, label: &str) -> Row {
        if let (Some(a), Some(b)) = (a, b) {
            self.bars.push((a, b, fill, label.to_string()));
        }
        self
    }
    fn bar_pair(self, ab: Option<(f64, f64)>, fill: &'static str, label: &str) -> Row {
        self.bar(ab.map(|x| x.0), ab.map(|x| x.1), fill, label)
    }
}

/// Draw a panel at `y` over the time span `(t0, t1)`: a heading, an axis with "nice" ticks,
/// the rows, and the landmarks as dashed lines labelled below. Returns the next free `y`.
fn panel(s: &mut String, y: f64, heading: &str, (t0, t1): (f64, f64), rows: &[Row], marks: &[(String, f64)]) -> f64 {
    const ROW: f64 = 22.0;
    let span = (t1 - t0).max(0.001);
    let x = |t: f64| LEFT + (t - t0).clamp(0.0, span) / span * WIDTH;
    let _ = writeln!(s, r#"<text x="10" y="{:.1}" font-weight="bold">{}</text>"#, y + 12.0, esc(heading));
    let top = y + 34.0;
    let bottom = top + rows.len() as f64 * ROW;
    let step = [0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0]
        .into_iter()
        .find(|st| span / st <= 12.0)
        .unwrap_or(120.0);
    let mut t = (t0 / step).ceil() * step;
    while t <= t1 + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{top:.1}" x2="{0:.1}" y2="{bottom:.1}" stroke="#ddd"/><text x="{0:.1}" y="{1:.1}" text-anchor="middle" fill="#555">{t:.2} s</text>"##,
            x(t),
            top - 4.0
        );
        t += step;
    }
    for (i, r) in rows.iter().enumerate() {
        let ry = top + i as f64 * ROW;
        let _ = writeln!(s, r#"<text x="10" y="{:.1}">{}</text>"#, ry + ROW - 7.0, esc(&r.label));
        for (a, b, fill, label) in &r.bars {
            let w = (x(*b) - x(*a)).max(1.0);
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{fill}"><title>{} ({:.3} s, {:.3} to {:.3})</title></rect>"#,
                x(*a),
                ry + 3.0,
                ROW - 6.0,
                esc(label),
                b - a,
                a,
                b
            );
            if w > 7.0 * label.chars().count() as f64 {
                let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, x(*a) + 3.0, ry + ROW - 7.0, esc(label));
            }
        }
    }
    let mut marks: Vec<&(String, f64)> = marks.iter().collect();
    marks.sort_by(|a, b| a.1.total_cmp(&b.1));
    for (i, (m, t)) in marks.iter().enumerate() {
        let ly = bottom + 16.0 + i as f64 * 16.0;
        let right = x(*t) > LEFT + WIDTH * 0.7;
        let (tx, anchor) = if right { (x(*t) - 3.0, "end") } else { (x(*t) + 3.0, "start") };
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{top:.1}" x2="{0:.1}" y2="{1:.1}" stroke="#c0392b" stroke-dasharray="3,2"/><text x="{tx:.1}" y="{ly:.1}" text-anchor="{anchor}" fill="#c0392b">{t:.3} s {2}</text>"##,
            x(*t),
            ly - 10.0,
            esc(m)
        );
    }
    bottom + 16.0 * marks.len() as f64 + 10.0
}

/// The chart's left margin (row labels) and the width of its time axis, in SVG units.
const LEFT: f64 = 170.0;
const WIDTH: f64 = 1000.0;

/// `b - a` in seconds with `digits` decimals, `?` where either end is unknown.
fn fmt_span(a: Option<f64>, b: Option<f64>, digits: usize) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.digits$} s", b - a),
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

pub(crate) fn run(a: AnalyzeArgs) -> Result<ExitCode> {
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
            eprintln!(
                "leanrd: {name}: no lines with a kernel timestamp ([ seconds ]); ignored (journalctl needs \
                 -o short-monotonic)"
            );
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
        let names: Vec<String> = sources
            .iter()
            .map(|s| std::path::Path::new(&s.0).file_name().map_or(s.0.clone(), |n| n.to_string_lossy().into_owned()))
            .collect();
        let title = a.title.clone().unwrap_or_else(|| format!("boot timeline: {}", names.join(" + ")));
        let f = leanrd_archive::output::AtomicFile::create(svg)?;
        std::io::Write::write_all(&mut f.file(), tl.svg(&title).as_bytes())
            .with_context(|| format!("{}: cannot write", svg.display()))?;
        f.commit_atomic(0o644)?;
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
[    1.200] mounted /dev/vda1 (ext4, ro) on /sysroot
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
        assert!(svg.contains("t &amp; &lt;test&gt;") && svg.contains("<title>ext4 (0.150 s, 0.950 to 1.100)</title>"));
        assert_eq!(svg.matches("modules, lane").count(), 2);
        assert!(svg.contains("the initramfs in detail") && svg.contains("multi-user.target"));
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
