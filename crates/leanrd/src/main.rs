//! leanrd: a fast, minimal, reflink-aware Linux initramfs builder.

/// Print a line on stdout, as `println!` does, except that a closed pipe (`leanrd inspect IMG |
/// head`) ends leanrd quietly with status 0 instead of a panic. SIGPIPE stays ignored (Rust's
/// default): a helper leanrd feeds through a pipe (loadkeys, ckbcomp) that exits early must be
/// an error leanrd reports, not a silent death.
macro_rules! outln {
    ($($t:tt)*) => { $crate::stdout_write(format_args!("{}\n", format_args!($($t)*))) };
}

/// [`outln!`] without the newline.
macro_rules! out {
    ($($t:tt)*) => { $crate::stdout_write(format_args!($($t)*)) };
}

/// What [`outln!`] and [`out!`] do.
fn stdout_write(args: std::fmt::Arguments) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("leanrd: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

mod build_uki;
mod cmd_advise;
mod cmd_analyze;
mod cmd_build;
mod cmd_cpio;
mod cmd_hooks;
mod cmd_inspect;
mod cmd_read;
mod cmd_verify;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use leanrd_init::params::roff;

const EXAMPLES: &str = "\
Examples:
  sudo leanrd build                       this machine's initramfs, proved before it is written
  sudo leanrd verify                      would the installed image boot this machine?
  leanrd ls /boot/initrd.img-$(uname -r)  what an image holds
  leanrd man build                        a command's page";

#[derive(Parser)]
#[command(name = "leanrd", version, about = "A fast, minimal, reflink-aware Linux initramfs builder", after_long_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a newc archive from a manifest, a directory tree or a path list.
    Cpio(cmd_cpio::CpioArgs),
    /// List the entries of an image (all segments, any compression).
    Ls(cmd_read::LsArgs),
    /// Extract an image into a directory.
    Extract(cmd_read::ExtractArgs),
    /// Check an image against the kernel's unpacking rules; exit 0 only if all of it unpacks.
    Check(cmd_read::CheckArgs),
    /// Measure every compression on an image or tree and recommend the fastest to load.
    Advise(cmd_advise::AdviseArgs),
    /// Segments, contents by kind, alignment and on-disk sharing (FIEMAP) of an image.
    Inspect(cmd_inspect::InspectArgs),
    /// Entries added, removed or changed between two images (exit 0 when equal).
    Diff(cmd_inspect::DiffArgs),
    /// Generate a minimal initramfs for a kernel.
    Build(Box<cmd_build::BuildArgs>),
    /// Prove that an image (any generator's) boots this machine: exit 0, or 1 with the
    /// missing link.
    Verify(cmd_verify::VerifyArgs),
    /// Write a UKI add-on: command line words or a device tree a UKI takes from the ESP, without
    /// being rebuilt.
    Addon(build_uki::AddonArgs),
    /// Have kernel installs and removals run leanrd (kernel-install plugin, Debian hooks).
    InstallHooks(cmd_hooks::HooksArgs),
    /// The boot's timeline from /init's step log, the kernel log and the journal: steps with
    /// their times, module loads, and an SVG chart (--svg).
    Analyze(cmd_analyze::AnalyzeArgs),
    /// Print a man page (roff) to stdout: leanrd(1), or leanrd-COMMAND(1) with its options and
    /// examples; `--dir DIR` writes them all.
    #[command(
        after_long_help = "Examples:\n  leanrd man | man -l -           leanrd(1)\n  leanrd man build | man -l -     \
                                 leanrd-build(1)\n  leanrd man init | man -l -      the kernel command line /init reads\n  \
                                 leanrd man --dir /tmp/man       every page"
    )]
    Man {
        /// The command whose page to print (ls, extract, build, ...); `init`: leanrd-init(7),
        /// the kernel command line /init reads; `config`: leanrd.toml(5); `features`:
        /// leanrd-features(5).
        command: Option<String>,
        /// Write leanrd.1, every leanrd-COMMAND.1, leanrd-init.7, leanrd.toml.5 and
        /// leanrd-features.5 into DIR instead.
        #[arg(long, value_name = "DIR", conflicts_with = "command")]
        dir: Option<std::path::PathBuf>,
    },
    /// Print shell completions to stdout.
    #[command(
        after_long_help = "Examples:\n  leanrd completions bash > ~/.local/share/bash-completion/completions/leanrd\n  \
                                 leanrd completions zsh > ~/.zfunc/_leanrd"
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// The man pages, made by clap_mangen from the same definitions as `--help`: one per command,
/// git style (leanrd-ls(1), ...), since clap_mangen lists subcommands on the main page only.
fn man(command: Option<&str>, dir: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let mut cmd = Cli::command();
    cmd.build();
    if let Some(d) = dir {
        std::fs::create_dir_all(d).with_context(|| format!("{}: cannot create", d.display()))?;
        let subs: Vec<clap::Command> = cmd.get_subcommands().filter(|c| c.get_name() != "help").cloned().collect();
        for c in std::iter::once(cmd).chain(subs) {
            let name = c.get_display_name().unwrap_or(c.get_name()).to_string();
            let mut buf = Vec::new();
            render_man(&c, &mut buf)?;
            let p = d.join(format!("{name}.1"));
            std::fs::write(&p, buf).with_context(|| format!("{}: cannot write", p.display()))?;
        }
        for (name, page) in
            [("leanrd-init.7", init_page()), ("leanrd.toml.5", config_page()), ("leanrd-features.5", features_page()?)]
        {
            let p = d.join(name);
            std::fs::write(&p, page).with_context(|| format!("{}: cannot write", p.display()))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    match command {
        Some("init") => {
            out!("{}", init_page());
            return Ok(ExitCode::SUCCESS);
        }
        Some("config") => {
            out!("{}", config_page());
            return Ok(ExitCode::SUCCESS);
        }
        Some("features") => {
            out!("{}", features_page()?);
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let page = match command {
        None => cmd,
        Some(c) => cmd.find_subcommand(c).cloned().with_context(|| format!("no command {c:?}: see `leanrd --help`"))?,
    };
    let mut buf = Vec::new();
    render_man(&page, &mut buf)?;
    out!("{}", String::from_utf8_lossy(&buf));
    Ok(ExitCode::SUCCESS)
}

/// leanrd-init(7): the kernel command line /init reads (leanrd_init's parameter table).
fn init_page() -> String {
    leanrd_init::params::man_page(env!("CARGO_PKG_VERSION"))
}

/// leanrd-features(5): the feature files, from leanrd_gen's FEATURE_KEYS and the built-ins.
fn features_page() -> anyhow::Result<String> {
    let mut s = format!(
        ".TH LEANRD\\-FEATURES 5 \"\" \"leanrd {}\" \"leanrd\"\n.SH NAME\nleanrd\\-features \\- what goes into a leanrd \
         image, and when\n.ad l\n.SH DESCRIPTION\n{}\n.SH KEYS\n",
        env!("CARGO_PKG_VERSION"),
        roff(
            "A feature is a TOML file saying what a capability needs (modules, programs, libraries, files) and when \
             it applies. The built-in ones are listed below; files in /etc/leanrd/features.d (features_dir in \
             leanrd.toml) add features, or replace a built-in one of the same name. Every key is optional; an \
             unknown key is an error naming the file and line."
        )
    );
    for k in leanrd_gen::features::FEATURE_KEYS {
        s += &format!(".TP\n\\fB{}\\fR = {}\n{}\n", roff(k.key), roff(k.value), roff(k.doc));
    }
    s += ".SH STACK LAYERS\nWhat \\fBstack\\fR names: the layers a root's block stack can have between its file \
          system and the hardware.\n";
    for d in leanrd_gen::LAYERS {
        s += &format!(".TP\n\\fB{}\\fR\n{}\n", roff(d.name), roff(d.doc));
    }
    s += ".SH BUILT\\-IN FEATURES\n";
    for (name, f) in leanrd_gen::features::load(None)? {
        let when = format!("{:?}", f.when).to_lowercase();
        s += &format!(".TP\n\\fB{}\\fR ({when})\n{}\n", roff(&name), roff(&f.description));
    }
    s += ".SH EXAMPLES\nA feature of one's own, /etc/leanrd/features.d/zram.toml: a swap in memory, always in the \
          image.\n.nf\ndescription = \"zram swap\"\nwhen = \"always\"\nmodules = [\"zram\"]\nbinaries = [\"zramctl\"]\n\
          .fi\n.SH FILES\n/etc/leanrd/features.d/*.toml\n.SH SEE ALSO\n\\fBleanrd\\-build\\fR(1), \\fBleanrd.toml\\fR(5)\n";
    Ok(s)
}

/// leanrd.toml(5): the configuration file, from leanrd_gen's SETTINGS.
fn config_page() -> String {
    let mut s = format!(
        ".TH LEANRD.TOML 5 \"\" \"leanrd {}\" \"leanrd\"\n.SH NAME\nleanrd.toml \\- leanrd's configuration file\n.ad l\n\
         .SH DESCRIPTION\n{}\n.SH SETTINGS\n",
        env!("CARGO_PKG_VERSION"),
        roff(
            "/etc/leanrd/leanrd.toml (or leanrd build --config FILE) holds defaults for leanrd build, in TOML. Every \
             key is optional, an unknown key is an error (named with its line), and an option on the command line \
             wins over the file (lists add up)."
        )
    );
    for x in leanrd_gen::request::SETTINGS {
        s += &format!(
            ".TP\n\\fB{}\\fR = {} (\\fB{}\\fR)\n{}\n",
            roff(x.key),
            roff(x.value),
            roff(x.flag),
            roff(&x.text())
        );
    }
    s += ".SH EXAMPLES\n.nf\n";
    for x in leanrd_gen::request::SETTINGS {
        s += &format!("{}\n", roff(x.example));
    }
    s += ".fi\n.SH FILES\n/etc/leanrd/leanrd.toml\n.SH SEE ALSO\n\\fBleanrd\\-build\\fR(1), \\fBleanrd\\-init\\fR(7)\n";
    s
}

/// One man page: clap_mangen's sections, then EXAMPLES (the command's long after-help) set
/// without filling, so each example stays on its own line (clap_mangen fills it as prose).
fn render_man(cmd: &clap::Command, w: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Write;
    let m = clap_mangen::Man::new(cmd.clone());
    m.render_title(w)?;
    m.render_name_section(w)?;
    m.render_synopsis_section(w)?;
    m.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        m.render_options_section(w)?;
    }
    if cmd.has_subcommands() {
        m.render_subcommands_section(w)?;
    }
    if let Some(ex) = cmd.get_after_long_help() {
        writeln!(w, ".SH EXAMPLES\n.nf")?;
        for line in ex.to_string().lines().skip_while(|l| l.trim_end().ends_with(':')) {
            let esc = line.replace('\\', "\\e").replace('-', "\\-");
            let esc = if esc.starts_with(['.', '\'']) { format!("\\&{esc}") } else { esc };
            writeln!(w, "{esc}")?;
        }
        writeln!(w, ".fi")?;
    }
    if cmd.get_version().or(cmd.get_long_version()).is_some() {
        m.render_version_section(w)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Cpio(a) => cmd_cpio::run(a),
        Cmd::Ls(a) => cmd_read::ls(a),
        Cmd::Extract(a) => cmd_read::extract(a),
        Cmd::Check(a) => cmd_read::check(a),
        Cmd::Advise(a) => cmd_advise::run(a),
        Cmd::Build(a) => cmd_build::run(*a),
        Cmd::Verify(a) => cmd_verify::run(a),
        Cmd::Addon(a) => build_uki::addon(a),
        Cmd::InstallHooks(a) => cmd_hooks::run(a),
        Cmd::Man { command, dir } => man(command.as_deref(), dir.as_deref()),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "leanrd", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Inspect(a) => cmd_inspect::inspect(a),
        Cmd::Analyze(a) => cmd_analyze::run(a),
        Cmd::Diff(a) => cmd_inspect::diff(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            // Broken pipe on stdout (e.g. `leanrd ls | head`) is not an error worth a word.
            let broken_pipe = |io: &std::io::Error| io.kind() == std::io::ErrorKind::BrokenPipe;
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(broken_pipe)
                    || c.downcast_ref::<leanrd_archive::Error>()
                        .and_then(leanrd_archive::Error::io)
                        .is_some_and(broken_pipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("leanrd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
