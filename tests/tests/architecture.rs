//! docs/ARCHITECTURE.md's import rule, checked on dlock-core's source: each room (a file or
//! folder under `src/`) imports only rooms below it, so that no room depends on one that
//! depends on it. The one allowed exception is `scripts::every_script`, the list of every
//! folder's scripts. A room that imports upward fails here with the file and the import.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The rooms from the bottom up: a room may import the rooms of a lower rank.
const RANKS: &[(&str, u32)] = &[
    ("kind", 0),
    ("fence", 0),
    ("redact", 0),
    ("background", 0),
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

/// The rooms `scripts/mod.rs` may name: its list of every folder's scripts.
const SCRIPT_FOLDERS: &[&str] = &[
    "lock",
    "client",
    "fair",
    "rw",
    "multi",
    "semaphore",
    "fenced",
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
            let Some(&target_rank) = ranks.get(target.as_str()) else {
                continue; // a root item (`crate::LockClient`) or a public module's re-export
            };
            let listed = relative == Path::new("scripts/mod.rs")
                && SCRIPT_FOLDERS.contains(&target.as_str());
            if target != room && target_rank >= rank && !listed {
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
