//! Copies the README's axum handler into `OUT_DIR`, so that `tests/readme_axum.rs` compiles
//! and serves the very text a reader copies, not a look-alike that drifts from it.

use std::env;
use std::fs;
use std::path::Path;

/// How the fragment starts in the README: the only block tagged `rs` that uses axum.
const FRAGMENT_START: &str = "```rs\nuse axum::";

fn main() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    println!("cargo:rerun-if-changed={}", readme.display());
    let text = fs::read_to_string(&readme)
        .unwrap_or_else(|error| panic!("reading {}: {error}", readme.display()));
    let fragment = axum_fragment(&text).unwrap_or_else(|| {
        panic!(
            "{}: no code block starting with {FRAGMENT_START:?} and ending with ```",
            readme.display()
        )
    });
    let out_dir = env::var_os("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    let out = Path::new(&out_dir).join("readme_axum.rs");
    fs::write(&out, fragment).unwrap_or_else(|error| panic!("writing {}: {error}", out.display()));
}

/// The code of the block that starts with [`FRAGMENT_START`], without its fences.
fn axum_fragment(readme: &str) -> Option<&str> {
    let start = readme.find(FRAGMENT_START)? + "```rs\n".len();
    let end = start + readme[start..].find("\n```")? + 1;
    Some(&readme[start..end])
}
