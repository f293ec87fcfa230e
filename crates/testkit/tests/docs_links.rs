//! The documentation stands alone: every relative link of README.md and docs/*.md resolves to a
//! file of the repository (tracked by git, when the sources are a git checkout), and a link to
//! `FILE.md#ANCHOR` (or `#ANCHOR` in the same file) to a heading of that file, by GitHub's
//! anchor rule. Absolute links (`https://...`, `mailto:`) are not checked. README.md stays a
//! page one reads in three minutes: at most 200 lines, and it names the test command .ci/run
//! runs.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

const README_MAX_LINES: usize = 200;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and docs/*.md, by name.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .map(|d| d.map(|e| e.expect("a directory entry").path()).collect())
        .unwrap_or_default();
    docs.retain(|p| p.extension().is_some_and(|e| e == "md"));
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// GitHub's anchor for a heading: its text lowercased, punctuation dropped except `-` and `_`,
/// spaces made `-` (markup such as backticks is punctuation, and goes).
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines outside fenced code blocks, with their numbers (from 1).
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| t.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// The anchors of a file's headings (`#` headings outside code), a repeated heading numbered
/// `-1`, `-2`... as GitHub does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let a = anchor(line[hashes..].trim_end_matches('#'));
        let n = seen.entry(a.clone()).or_default();
        out.insert(if *n == 0 { a.clone() } else { format!("{a}-{n}") });
        *n += 1;
    }
    out
}

/// Text without its inline code spans (a link written in backticks is not a link); the line
/// breaks inside them are kept, so that lines still count.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].len() - rest[start..].trim_start_matches('`').len();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => {
                out.extend(after[..end].chars().filter(|c| *c == '\n'));
                rest = &after[end + ticks..];
            }
            None => {
                out.push_str(&rest[start..]);
                return out;
            }
        }
    }
    out + rest
}

/// The link targets of a file, with their line numbers: inline links and images
/// `[text](target "title")`, and reference definitions `[name]: target`. A paragraph is read
/// whole, as a code span or a link's text may go on over a line break.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut paragraphs: Vec<(usize, String)> = Vec::new();
    let mut last = 0;
    for (n, line) in prose(text) {
        match paragraphs.last_mut() {
            Some((_, p)) if n == last + 1 && !line.trim().is_empty() => {
                p.push('\n');
                p.push_str(line);
            }
            _ if line.trim().is_empty() => {}
            _ => paragraphs.push((n, line.to_string())),
        }
        last = if line.trim().is_empty() { 0 } else { n };
    }
    let mut out = Vec::new();
    for (n, paragraph) in paragraphs {
        let text = without_code(&paragraph);
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with('[')
                && let Some(end) = t.find("]:")
                && !t[..end].contains('(')
                && let Some(target) = t[end + 2..].split_whitespace().next()
            {
                out.push((n + i, target.trim_matches(['<', '>']).to_string()));
            }
        }
        let mut from = 0;
        while let Some(at) = text[from..].find("](").map(|a| from + a) {
            let after = &text[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let line = n + text[..at].matches('\n').count();
            out.push((line, target.trim_matches(['<', '>']).to_string()));
            from = at + 2 + end;
        }
    }
    out
}

/// `path` with `.` and `..` resolved, if it stays inside the repository.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The files git tracks (paths relative to the repository); None when this is no git checkout.
fn tracked(root: &Path) -> Option<BTreeSet<PathBuf>> {
    let o = Command::new("git").args(["ls-files", "-z"]).current_dir(root).output().ok()?;
    if !o.status.success() {
        return None;
    }
    Some(
        o.stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).as_ref()))
            .collect(),
    )
}

/// What is wrong with the links of `docs` (paths under `root`): one line per broken link.
fn problems(root: &Path, docs: &[PathBuf], tracked: Option<&BTreeSet<PathBuf>>) -> Vec<String> {
    let mut out = Vec::new();
    let mut headings: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut anchors_of = |file: &Path| -> BTreeSet<String> {
        headings
            .entry(file.to_path_buf())
            .or_insert_with(|| anchors(&fs::read_to_string(root.join(file)).unwrap_or_default()))
            .clone()
    };
    for doc in docs {
        let rel_doc = doc.strip_prefix(root).expect("a document of the repository").to_path_buf();
        let text = fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        for (line, target) in links(&text) {
            let at = format!("{}:{line}: {target}", rel_doc.display());
            if target.is_empty() {
                out.push(format!("{at}: an empty link"));
                continue;
            }
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, frag) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                rel_doc.clone()
            } else {
                let joined = rel_doc.parent().unwrap_or(Path::new("")).join(path);
                match normalise(&joined) {
                    Some(p) => p,
                    None => {
                        out.push(format!("{at}: points outside the repository"));
                        continue;
                    }
                }
            };
            let on_disk = root.join(&file);
            if !on_disk.exists() {
                out.push(format!("{at}: {} does not exist", file.display()));
                continue;
            }
            if let Some(t) = tracked
                && !t.contains(&file)
                && !t.iter().any(|p| p.starts_with(&file) && p != &file)
            {
                out.push(format!("{at}: {} is not in the repository (git does not track it)", file.display()));
                continue;
            }
            if let Some(frag) = frag {
                if file.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                if !anchors_of(&file).contains(frag) {
                    out.push(format!("{at}: {} has no heading with the anchor #{frag}", file.display()));
                }
            }
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = workspace();
    let docs = documents(&root);
    assert!(docs.len() > 1, "no docs/*.md under {}", root.display());
    // The parser finds the links there are (the README alone links to every docs/ file).
    let readme = fs::read_to_string(&docs[0]).expect("README.md");
    let n = links(&readme).iter().filter(|(_, t)| t.starts_with("docs/")).count();
    assert!(n >= docs.len() - 1, "only {n} links to docs/ found in README.md");
    let tracked = tracked(&root);
    let found = problems(&root, &docs, tracked.as_ref());
    assert!(found.is_empty(), "broken links in README.md and docs/*.md:\n{}", found.join("\n"));
}

#[test]
fn the_readme_is_at_most_200_lines() {
    let text = fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let n = text.lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines, more than {README_MAX_LINES}: move the details into docs/ and link them"
    );
}

#[test]
fn anchors_follow_github() {
    assert_eq!(anchor("`leanrd cpio` — create an archive"), "leanrd-cpio--create-an-archive");
    assert_eq!(anchor("Network roots (NFS, iSCSI, NVMe over TCP)"), "network-roots-nfs-iscsi-nvme-over-tcp");
    assert_eq!(anchor("Unified Kernel Images: `leanrd build --uki`"), "unified-kernel-images-leanrd-build---uki");
    assert_eq!(anchor("The seeds' table"), "the-seeds-table");
    assert_eq!(anchor("`waited N s for ...`"), "waited-n-s-for-");
    assert_eq!(anchor("`/init` (crates/init, `leanrd-init`)"), "init-cratesinit-leanrd-init");
    let a = anchors("# T\n\n## Boot\n\n```sh\n# not a heading\n```\n\n## Boot\n#nospace\n");
    assert_eq!(a, ["boot", "boot-1", "t"].map(String::from).into_iter().collect());
}

#[test]
fn links_are_found_outside_code_only() {
    let text = "See [a](a.md) and ![i](img/x.png \"title\"), not `[b](b.md)`.\n\
                ```\n[c](c.md)\n```\n[ref]: <d.md#x>\n[e](https://example.org/x) [f](#g)\n";
    let got: Vec<String> = links(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(got, ["a.md", "img/x.png", "d.md#x", "https://example.org/x", "#g"]);
    // A code span or a link's text over a line break.
    let text = "A [`leanrd\nverify`](#v), `a\n[b](b.md)` and [two\nlines](t.md).\n\n[p](p.md)\n";
    assert_eq!(links(text), [(2, "#v".to_string()), (4, "t.md".to_string()), (6, "p.md".to_string())]);
}

/// The check fails on a broken link: a missing file, a missing anchor, a link out of the tree.
#[test]
fn a_broken_link_is_found() {
    let root = std::env::temp_dir().join(format!("leanrd-docs-links-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(root.join("docs")).unwrap();
    fs::write(
        root.join("README.md"),
        "# R\n\n[guide](docs/guide.md#usage) [gone](docs/gone.md) [bad](docs/guide.md#nowhere)\n\
         [up](../outside.md) [self](#r) [web](https://example.org/404)\n",
    )
    .unwrap();
    fs::write(root.join("docs/guide.md"), "# Guide\n\n## Usage\n\n[back](../README.md#nope)\n").unwrap();
    let docs = documents(&root);
    let mut found = problems(&root, &docs, None);
    let tracked: BTreeSet<PathBuf> = ["README.md"].iter().map(PathBuf::from).collect();
    found.extend(problems(&root, &docs[..1], Some(&tracked)));
    fs::remove_dir_all(&root).unwrap();
    let want = [
        "README.md:3: docs/gone.md: docs/gone.md does not exist",
        "README.md:3: docs/guide.md#nowhere: docs/guide.md has no heading with the anchor #nowhere",
        "README.md:4: ../outside.md: points outside the repository",
        "docs/guide.md:5: ../README.md#nope: README.md has no heading with the anchor #nope",
        "README.md:3: docs/guide.md#usage: docs/guide.md is not in the repository (git does not track it)",
    ];
    for w in want {
        assert!(found.iter().any(|f| f == w), "{w:?} not in {found:#?}");
    }
    assert_eq!(found.len(), 8, "{found:#?}");
}

/// The README names the test command (the first line of the block under its `## Test`), and
/// .ci/run ends by running that very command.
#[test]
fn ci_runs_the_readmes_test_command() {
    let root = workspace();
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme.split("\n## Test\n").nth(1).expect("README.md has no \"## Test\" section");
    let block = section.split("```sh\n").nth(1).expect("no ```sh block under ## Test");
    let line = block.lines().next().unwrap_or("");
    let command = line.split('#').next().unwrap().trim().trim_start_matches("sudo ").trim();
    assert!(!command.is_empty(), "README.md's test block is empty");
    let ci = fs::read_to_string(root.join(".ci/run")).unwrap();
    let last = ci.lines().map(str::trim).rfind(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
    assert_eq!(last, command, ".ci/run's last command is not README.md's test command");
}

/// The code names a recipe's step uses: (step's first line, missing names). A step is a
/// numbered item; the files it names (`crates/...rs`) must exist, and each name it puts in
/// backticks (`Root::parse`, `RootKind::ALL`, `trailing_zeros`) must be a word of one of those
/// files, or of their crates' sources when the step names a file of the crate only in passing.
fn recipe_gaps(root: &Path, text: &str) -> Vec<String> {
    let Some(recipes) = text.split("\n## Recipes\n").nth(1) else {
        return vec!["docs/architecture.md has no Recipes section".into()];
    };
    let recipes = recipes.split("\n## ").next().unwrap_or_default();
    let mut steps: Vec<String> = Vec::new();
    for line in recipes.lines() {
        let starts = line.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if starts {
            steps.push(line.to_string());
        } else if line.starts_with("   ") && !steps.is_empty() {
            let last = steps.last_mut().unwrap();
            last.push(' ');
            last.push_str(line.trim());
        } else if line.starts_with('#') || line.trim().is_empty() {
            // A heading or a blank line ends a step only by the next one starting.
        }
    }
    let is_ident = |w: &str| {
        !w.is_empty()
            && w.split("::").all(|p| {
                p.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
    };
    let word_in = |hay: &str, w: &str| {
        hay.match_indices(w).any(|(i, _)| {
            let before = hay[..i].chars().next_back();
            let after = hay[i + w.len()..].chars().next();
            let edge = |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            edge(before) && (edge(after) || w.ends_with('_'))
        })
    };
    let mut gaps = Vec::new();
    for step in &steps {
        let mut files = Vec::new();
        let mut missing = Vec::new();
        for w in step.split(|c: char| c.is_whitespace() || "(),:;".contains(c)) {
            let w = w.trim_matches(|c: char| "`.[]".contains(c));
            if w.starts_with("crates/") && w.ends_with(".rs") && !w.contains("NAME") {
                if root.join(w).is_file() {
                    files.push(root.join(w));
                } else {
                    missing.push(format!("no file {w}"));
                }
            }
        }
        // A step about a feature file: the names are its keys, in the built-in feature files.
        if step.contains("features/NAME.toml") {
            let toml = fs::read_dir(root.join("features")).into_iter().flatten().flatten().map(|e| e.path());
            files.extend(toml.filter(|p| p.extension().is_some_and(|x| x == "toml")));
        }
        let texts: Vec<String> = files.iter().map(|f| fs::read_to_string(f).unwrap_or_default()).collect();
        let crates: BTreeSet<PathBuf> = files
            .iter()
            .filter(|f| f.strip_prefix(root).is_ok_and(|r| r.starts_with("crates")))
            .filter_map(|f| f.strip_prefix(root).ok()?.iter().take(3).collect::<PathBuf>().into())
            .collect();
        let names: Vec<&str> =
            step.split('`').skip(1).step_by(2).filter(|w| is_ident(w) && !w.contains("NAME")).collect();
        for name in names {
            let parts: Vec<&str> = name.split("::").collect();
            let in_files = |texts: &[String]| parts.iter().all(|p| texts.iter().any(|t| word_in(t, p)));
            if in_files(&texts) {
                continue;
            }
            let wider: Vec<String> = crates
                .iter()
                .flat_map(|c| fs::read_dir(root.join(c)).into_iter().flatten().flatten())
                .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
                .map(|e| fs::read_to_string(e.path()).unwrap_or_default())
                .collect();
            if !in_files(&wider) {
                missing.push(format!("`{name}`"));
            }
        }
        if files.is_empty() && step.contains("crates/") {
            missing.push("no file it names exists".into());
        }
        if !missing.is_empty() {
            let head: String = step.chars().take(70).collect();
            gaps.push(format!("{head}...: {}", missing.join(", ")));
        }
    }
    if steps.len() < 10 {
        gaps.push(format!("only {} recipe steps found", steps.len()));
    }
    gaps
}

#[test]
fn the_architecture_recipes_name_what_the_code_has() {
    let root = workspace();
    let text = fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let gaps = recipe_gaps(&root, &text);
    assert!(gaps.is_empty(), "docs/architecture.md's recipes name what the code lacks:\n{}", gaps.join("\n"));
}

#[test]
fn a_recipe_naming_what_is_gone_is_found() {
    let root = workspace();
    let text = fs::read_to_string(root.join("docs/architecture.md")).expect("docs/architecture.md");
    let renamed = text.replacen("`Root::parse`", "`Root::parse_root_spelling`", 1);
    assert!(renamed != text, "the recipe for a root kind no longer names Root::parse");
    let gaps = recipe_gaps(&root, &renamed);
    assert!(gaps.iter().any(|g| g.contains("parse_root_spelling")), "{gaps:?}");
    let moved = text.replacen("crates/compress/src/format.rs", "crates/compress/src/formats.rs", 1);
    assert!(recipe_gaps(&root, &moved).iter().any(|g| g.contains("no file crates/compress/src/formats.rs")));
}
