//! Environment variables that are set but not UTF-8. Their own test binary with a single
//! test, because the process environment is shared by every test of a binary; the only
//! code of the workspace allowed `unsafe`, which setting the environment is.
#![allow(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;

use dlock_config::{Config, ConfigError, ADDRESS_ENV, CONFIG_ENV, PASSWORD_ENV, USERNAME_ENV};

fn not_utf8() -> OsString {
    OsString::from_vec(b"hunter\xff2".to_vec())
}

fn set(variable: &str, value: impl AsRef<OsStr>) {
    // SAFETY: this binary's only test runs alone in its process, and no thread it starts
    // reads or writes the environment meanwhile.
    unsafe { std::env::set_var(variable, value) }
}

fn unset(variable: &str) {
    // SAFETY: as in `set`.
    unsafe { std::env::remove_var(variable) }
}

#[test]
fn a_variable_that_is_not_utf8_is_an_error_naming_it() {
    // Also behind a `${VAR}` reference: an error, not "unset" (its default would win).
    set("DLOCK_TEST_RAW_HOST", not_utf8());
    let err = Config::from_toml_str(
        "[redis.single]\naddress = \"redis://${DLOCK_TEST_RAW_HOST:-127.0.0.1}:6379\"\n",
    )
    .unwrap_err();
    unset("DLOCK_TEST_RAW_HOST");
    assert_eq!(
        err.to_string(),
        "<string>:2:20: environment variable DLOCK_TEST_RAW_HOST (used as ${DLOCK_TEST_RAW_HOST}) is not UTF-8 text"
    );
    // A file's references are filled in from the process environment.
    set("DLOCK_TEST_HOST", "127.0.0.9");
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(
        &mut file,
        b"[redis.single]\naddress = \"redis://${DLOCK_TEST_HOST}:6379\"\n",
    )
    .unwrap();
    let config = Config::from_file(file.path()).unwrap();
    unset("DLOCK_TEST_HOST");
    assert_eq!(config.to_string(), "single redis://127.0.0.9:6379");

    let config =
        Config::from_toml_str("[redis.single]\naddress = \"redis://127.0.0.1:6379\"\n").unwrap();
    for variable in [PASSWORD_ENV, USERNAME_ENV, ADDRESS_ENV] {
        set(variable, not_utf8());
        let err = config.clone().with_env_overrides().unwrap_err();
        unset(variable);
        assert!(
            matches!(err, ConfigError::Environment { variable: v, .. } if v == variable),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!("environment variable {variable}: not UTF-8 text (invalid byte at offset 6); set it to UTF-8 or unset it")
        );
    }

    // With the variables unset or UTF-8 again, the overrides apply.
    set(PASSWORD_ENV, "from-env");
    let config = config.with_env_overrides().unwrap();
    unset(PASSWORD_ENV);
    assert_eq!(
        config.connection.password.as_ref().map(|p| p.expose()),
        Some("from-env")
    );

    // A file name need not be UTF-8: DLOCK_CONFIG naming such a file loads it.
    let dir = tempfile::tempdir().unwrap();
    let mut name = dir.path().as_os_str().to_owned().into_vec();
    name.extend_from_slice(b"/dlock-\xff.toml");
    let path = OsString::from_vec(name);
    std::fs::write(
        &path,
        "[redis.single]\naddress = \"redis://127.0.0.1:6380\"\n",
    )
    .unwrap();
    set(CONFIG_ENV, &path);
    let loaded = Config::from_env();
    unset(CONFIG_ENV);
    assert_eq!(loaded.unwrap().to_string(), "single redis://127.0.0.1:6380");

    // Set but empty (`DLOCK_CONFIG= dlock list`): said so, not a missing file "".
    set(CONFIG_ENV, "");
    let empty = Config::from_env();
    unset(CONFIG_ENV);
    assert_eq!(
        empty.unwrap_err().to_string(),
        "environment variable DLOCK_CONFIG: is set but empty; point it at a dlock TOML file"
    );
}
