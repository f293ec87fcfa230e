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
mod cmd_build;
mod cmd_cpio;
mod cmd_hooks;
mod cmd_inspect;
mod cmd_read;
mod cmd_verify;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "leanrd", version, about = "A fast, minimal, reflink-aware Linux initramfs builder")]
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
    /// Have kernel installs and removals run leanrd (kernel-install plugin, Debian hooks).
    InstallHooks(cmd_hooks::HooksArgs),
    /// Print the man page (roff) to stdout.
    Man,
    /// Print shell completions to stdout.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
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
        Cmd::InstallHooks(a) => cmd_hooks::run(a),
        Cmd::Man => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map(|_| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "leanrd", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Inspect(a) => cmd_inspect::inspect(a),
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
