//! docs/ARCHITECTURE.md's import rule, checked on dlock-core's source: each room (a file or
//! folder under `src/`) imports only rooms below it, so that no room depends on one that
//! depends on it, with no exception. A room that imports upward fails here with the file
//! and the import.
//!
//! And docs/PROTOCOL.md against the code: the lock's release modes and the messages of the
//! hand-off that the page lists are the ones the Lua scripts and the client's core
//! (`dlock_core::protocol`) know, each set in full.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The rooms from the bottom up: a room may import the rooms of a lower rank.
const RANKS: &[(&str, u32)] = &[
    ("kind", 0),
    ("fence", 0),
    ("redact", 0),
    ("background", 0),
    ("protocol", 0),
    ("error", 1),
    ("names", 2),
    ("lease", 2),
    ("scripts", 3),
    ("redis", 4),
    ("sync", 5),
    ("client", 6),
    ("lock", 7),
    ("fair", 8),
    ("rw", 8),
    ("semaphore", 8),
    ("multi", 8),
    ("redlock", 8),
    ("fenced", 8),
    ("inspect", 9),
    ("private", 10),
];

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without comments and without its `#[cfg(test)]` module, if it ends with one.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `file` is a module declared under `#[cfg(test)]` by its parent.
fn is_test_module(src: &Path, file: &Path) -> bool {
    let name = file.file_stem().unwrap().to_str().unwrap();
    let dir = file.parent().unwrap();
    let parents = [
        dir.with_extension("rs"),
        dir.join("mod.rs"),
        src.join("lib.rs"),
    ];
    parents.iter().any(|parent| {
        std::fs::read_to_string(parent)
            .is_ok_and(|text| text.contains(&format!("#[cfg(test)]\nmod {name};")))
    })
}

#[test]
fn rooms_import_only_rooms_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dlock-core/src");
    let ranks: BTreeMap<&str, u32> = RANKS.iter().copied().collect();
    // The modules lib.rs declares inline (`pub mod limits { … }`): the public surface,
    // above every room, so a room that imports through one imports lib.rs.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let surface: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod ")?.strip_suffix(" {"))
        .collect();
    assert!(
        surface.contains(&"limits"),
        "lib.rs's inline modules were not found: {surface:?}"
    );
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut checked = 0;
    let mut upward = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let room = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap()
            .trim_end_matches(".rs");
        let Some(&rank) = ranks.get(room) else {
            // lib.rs (the public surface, above every room) and test-only files.
            assert!(
                room == "lib" || room == "naming_tests",
                "{} is in no room of the import order: add it to RANKS and docs/ARCHITECTURE.md",
                relative.display()
            );
            continue;
        };
        if is_test_module(&src, file) {
            continue;
        }
        checked += 1;
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let mut rest = code.as_str();
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let target: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if surface.contains(&target.as_str()) {
                upward.push(format!(
                    "{} imports crate::{target} (lib.rs)",
                    relative.display()
                ));
                continue;
            }
            let Some(&target_rank) = ranks.get(target.as_str()) else {
                continue; // a root item (`crate::LockClient`) or a public module's re-export
            };
            if target != room && target_rank >= rank {
                upward.push(format!("{} imports crate::{target}", relative.display()));
            }
        }
    }
    assert!(
        checked > 80,
        "only {checked} files checked: is the source where it was?"
    );
    assert!(
        upward.is_empty(),
        "imports against the order:\n{}",
        upward.join("\n")
    );
}

/// The words in backticks at the start of each row of the table of docs/PROTOCOL.md whose
/// header row starts with `| {first_column} |`, up to the first `:` or space.
fn protocol_column(first_column: &str) -> std::collections::BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md"))
        .unwrap();
    let header = format!("| {first_column} |");
    let mut lines = doc
        .lines()
        .skip_while(|line| !line.starts_with(&header))
        .skip(2);
    let mut found = std::collections::BTreeSet::new();
    for line in lines.by_ref().take_while(|line| line.starts_with('|')) {
        let cell = line.split('|').nth(1).unwrap().trim();
        let word = cell.trim_matches('`');
        let word = word.split([':', ' ']).next().unwrap();
        found.insert(word.to_owned());
    }
    found
}

/// The text of `dlock-core/src/<path>`.
fn core_source(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../dlock-core/src")
            .join(path),
    )
    .unwrap()
}

/// Every `"<word>" =>` in `text`: the arms of a match on strings.
fn quoted_arms(text: &str) -> std::collections::BTreeSet<String> {
    text.match_indices("\" =>")
        .filter_map(|(at, _)| {
            let before = &text[..at];
            let start = before.rfind('"')?;
            let word = &before[start + 1..];
            word.chars()
                .all(|c| c.is_ascii_lowercase())
                .then(|| word.to_owned())
        })
        .collect()
}

/// Every `'<word>'` after `prefix` in `text` (`mode == 'one'` → `one`).
fn quoted_after(text: &str, prefix: &str) -> std::collections::BTreeSet<String> {
    text.match_indices(prefix)
        .filter_map(|(at, _)| {
            let rest = &text[at + prefix.len()..];
            let rest = rest.strip_prefix('\'')?;
            Some(rest[..rest.find('\'')?].to_owned())
        })
        .collect()
}

#[test]
fn the_protocol_page_lists_the_modes_and_messages_the_code_knows() {
    // Messages: what the scripts publish (the `what` of `tell`), what the client parses.
    let lua: String = [
        "lock/scripts/handoff.lua",
        "lock/scripts/force_unlock.lua",
        "lock/scripts/release.lua",
    ]
    .iter()
    .map(|path| core_source(path))
    .collect();
    // The fourth argument of every `tell(...)`: a quoted kind, or `message` (the
    // runner-up's, set just above it).
    let mut published = quoted_after(&lua, "local message = ");
    for (at, _) in lua.match_indices("tell(") {
        if lua[..at].ends_with("function ") {
            continue;
        }
        let call = &lua[at + "tell(".len()..];
        let what = call.splitn(4, ", ").nth(3).unwrap_or_default();
        if let Some(quoted) = what.strip_prefix('\'') {
            published.insert(quoted[..quoted.find('\'').unwrap()].to_owned());
        }
    }
    let published: std::collections::BTreeSet<String> = published
        .into_iter()
        .map(|what| what.trim_end_matches(':').to_owned())
        .collect();
    // What the client's sans-IO core parses: an arm of `Message::parse` per kind (the
    // read-write lock's `writers:` goes on a shared channel, not an owner's).
    let core = core_source("protocol.rs");
    let parsed: std::collections::BTreeSet<String> = quoted_arms(&core)
        .into_iter()
        .filter(|kind| kind != "writers")
        .collect();
    let listed: std::collections::BTreeSet<String> = dlock::protocol::MESSAGE_KINDS
        .iter()
        .map(|kind| kind.to_string())
        .collect();
    let documented = protocol_column("message");
    assert_eq!(
        listed, documented,
        "protocol::MESSAGE_KINDS / PROTOCOL.md lists"
    );
    assert_eq!(
        published, documented,
        "messages the scripts publish / PROTOCOL.md lists"
    );
    assert_eq!(
        parsed, documented,
        "messages the client parses / PROTOCOL.md lists"
    );

    // Release modes: what release.lua tells apart, what the client sends.
    let release = core_source("lock/scripts/release.lua");
    let mut compared = quoted_after(&release, "mode == ");
    compared.extend(quoted_after(&release, "mode ~= "));
    let sent: std::collections::BTreeSet<String> = ["one", "withdraw", "leave", "undo"]
        .into_iter()
        .filter(|mode| core_source("lock/release_ops.rs").contains(&format!("(\"{mode}\"")))
        .map(str::to_owned)
        .collect();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md"))
        .unwrap();
    let documented: std::collections::BTreeSet<String> =
        quoted_after(&doc.replace('`', "'"), "release.lua' ")
            .into_iter()
            .collect();
    assert_eq!(
        compared, documented,
        "modes release.lua knows / PROTOCOL.md lists"
    );
    assert_eq!(
        sent, documented,
        "modes the client sends / PROTOCOL.md lists"
    );
}

/// The backticked names in `cell`, each by its last path segment (`Call::then` → `then`,
/// `local::Turn::{next_in_line, released}` → both).
fn named_in(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|code| {
            let code = code.trim_end_matches('}');
            let (path, list) = code.split_once('{').unwrap_or(("", code));
            let _ = path;
            list.split(',')
                .map(|name| {
                    let name = name.trim();
                    name.rsplit("::").next().unwrap_or(name).to_owned()
                })
                .collect::<Vec<_>>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// Whether `word` occurs in `text` as an identifier of its own.
fn has_identifier(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let part_of_name = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !part_of_name(before) && !part_of_name(after)
    })
}

/// docs/PROTOCOL.md's table of the client's core names, for each decision, functions of
/// `protocol.rs`, the client code that performs them and the simulator's: every name it
/// gives is one the code has, so the table cannot drift from what decides.
#[test]
fn the_protocol_page_names_the_cores_functions_and_their_callers() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md"))
        .unwrap();
    let core = core_source("protocol.rs");
    let mut client = String::new();
    let mut files = Vec::new();
    source_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../dlock-core/src"),
        &mut files,
    );
    for file in files {
        client.push_str(&std::fs::read_to_string(file).unwrap());
    }
    let sim = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/src/model.rs"))
        .unwrap();
    let rows: Vec<&str> = doc
        .lines()
        .skip_while(|line| !line.starts_with("| decision |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    assert!(rows.len() >= 6, "the core's table has {} rows", rows.len());
    let mut missing = Vec::new();
    for row in rows {
        let cells: Vec<&str> = row.split('|').collect();
        for (cell, text, place) in [
            (cells[2], &core, "protocol.rs"),
            (cells[3], &client, "dlock-core"),
            (cells[4], &sim, "sim/src/model.rs"),
        ] {
            for name in named_in(cell) {
                if !has_identifier(text, &name) {
                    missing.push(format!("{name} ({place})"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "PROTOCOL.md names what the code does not have: {missing:?}"
    );
}
