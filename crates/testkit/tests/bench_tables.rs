//! The benchmark tables of README.md and docs/*.md are what bench/results gives: `python3
//! bench/tables.py --check` (run from the workspace's root) makes every marked table again from
//! the newest raw results of its bench and fails, with a diff, when a file differs (or a table
//! has no place, or two). bench/test_tables.py checks tables.py itself on results it makes.

use std::process::Command;

/// Run `python3 ARGS` in the workspace's root; Err with its output when it fails.
fn python(args: &[&str]) -> Option<Result<(), String>> {
    if !leanrd_testkit::have("python3") {
        return leanrd_testkit::skip("python3 not installed");
    }
    let ws = leanrd_testkit::boot::workspace();
    let o = Command::new("python3")
        .args(args)
        .current_dir(&ws)
        .output()
        .unwrap_or_else(|e| panic!("python3 {args:?} in {}: {e}", ws.display()));
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    Some(if o.status.success() { Ok(()) } else { Err(out) })
}

#[test]
fn doc_tables_are_made_from_the_raw_results() {
    if let Some(Err(out)) = python(&["bench/tables.py", "--check"]) {
        panic!(
            "the benchmark tables of README.md and docs/*.md are not what bench/results gives \
             (python3 bench/tables.py writes them):\n{out}"
        );
    }
}

#[test]
fn tables_py_renders_the_newest_results() {
    if let Some(Err(out)) = python(&["bench/test_tables.py"]) {
        panic!("bench/test_tables.py:\n{out}");
    }
}
