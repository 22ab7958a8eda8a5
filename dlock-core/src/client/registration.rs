//! A client's name and self-description in Redis, for operators.
//!
//! An owner field says only `<client id>:<n>`; to tell an operator which service holds a
//! lock, every client names its connections (`CLIENT SETNAME`, shown by `CLIENT LIST`)
//! and keeps a small description of itself — name, host, process id, dlock version — in
//! an expiring key ([`client_key`]) that `dlock inspect` reads next to the owner id. A
//! background task writes both again every third of [`REGISTRATION_TTL`]: the key
//! outlives a crashed client by at most that long, and a connection the client re-opened
//! (which starts without a name) gets its name back. Neither is needed to lock: a user
//! without `+client|setname` or without the key pattern only loses the description
//! (logged at debug level).
//!
//! One connection stays unnamed: the dedicated pub/sub connection of a single, master /
//! replicas or Sentinel client, which redis-rs opens without a way to send a command
//! other than (un)subscribing. `CLIENT LIST` shows it with `flags=P`; it carries no lock
//! state. (A cluster client subscribes on its named command connections.)

use std::sync::Arc;
use std::time::Duration;

use crate::error::{LockError, Result};
use crate::names::check_text;
use crate::redis::Backend;

/// How long a client's description lives without being written again; it is rewritten
/// every third of this.
pub const REGISTRATION_TTL: Duration = Duration::from_secs(30);

/// What a [`LockClient`](crate::LockClient) says about itself in Redis, as read back by
/// [`Lock::inspect`](crate::Lock::inspect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDescription {
    /// The client name ([`LockClientBuilder::client_name`](crate::LockClientBuilder::client_name)).
    pub name: String,
    /// The host the client runs on, as the machine names itself.
    pub host: String,
    /// The client's process id.
    pub pid: u32,
    /// The dlock-core version of the client.
    pub version: String,
}

impl ClientDescription {
    /// The description of a client named `name` in this process.
    pub(crate) fn of_this_process(name: &str) -> ClientDescription {
        ClientDescription {
            name: name.to_owned(),
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// One `field=value` line per field: no value can hold a line break (names are
    /// checked, host names are cleaned), so this needs no escaping.
    pub(crate) fn encode(&self) -> String {
        format!(
            "name={}\nhost={}\npid={}\nversion={}",
            self.name, self.host, self.pid, self.version
        )
    }

    /// The description in `text` as [`encode`](Self::encode) wrote it; `None` for
    /// anything else (a key some other program wrote).
    pub(crate) fn decode(text: &str) -> Option<ClientDescription> {
        let mut fields = text.lines().map(|line| line.split_once('='));
        let mut next = |name: &str| match fields.next() {
            Some(Some((key, value))) if key == name => Some(value.to_owned()),
            _ => None,
        };
        Some(ClientDescription {
            name: next("name")?,
            host: next("host")?,
            pid: next("pid")?.parse().ok()?,
            version: next("version")?,
        })
    }
}

/// The machine's name (Linux: `/proc/sys/kernel/hostname`; elsewhere `HOSTNAME` or
/// `COMPUTERNAME`), without control characters; `"unknown"` when none is found.
fn host_name() -> String {
    let found = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let clean: String = found.trim().chars().filter(|c| !c.is_control()).collect();
    if clean.is_empty() {
        "unknown".to_owned()
    } else {
        clean
    }
}

/// Checks a client name: what `CLIENT SETNAME` accepts (printable ASCII without spaces,
/// not empty), at most [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes.
pub(crate) fn check_client_name(name: &str) -> Result<()> {
    check_text("client name", name)?;
    if name.is_empty() {
        return Err(LockError::invalid_name(
            "client name",
            name,
            "a client name must not be empty".to_owned(),
        ));
    }
    if let Some((at, c)) = name.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(LockError::invalid_name(
            "client name",
            name,
            format!(
                "Redis takes client names of printable ASCII without spaces; found {c:?} at byte {at}"
            ),
        ));
    }
    Ok(())
}

/// The default client name: `dlock-` and the first 8 characters of the client id.
pub(crate) fn default_client_name(id: &str) -> String {
    format!("dlock-{}", id.get(..8).unwrap_or(id))
}

/// A client's encoded description and the key it lives under.
#[derive(Clone)]
pub(crate) struct Description {
    pub(crate) key: Arc<str>,
    pub(crate) text: Arc<str>,
}

/// The background task: names the client's connections and writes its description (if
/// it keeps one), every third of [`REGISTRATION_TTL`], until the client is dropped.
pub(crate) async fn run(backend: Backend, name: Arc<str>, description: Option<Description>) {
    let ttl_ms = u64::try_from(REGISTRATION_TTL.as_millis()).unwrap_or(u64::MAX);
    loop {
        let mut set_name = redis::cmd("CLIENT");
        set_name.arg("SETNAME").arg(&*name);
        if let Err(error) = backend.query::<()>(&set_name).await {
            tracing::debug!(%error, "dlock: could not name the client's connection (CLIENT SETNAME)");
        }
        if let Some(Description { key, text }) = &description {
            let mut describe = redis::cmd("SET");
            describe.arg(&**key).arg(&**text).arg("PX").arg(ttl_ms);
            if let Err(error) = backend.query::<()>(&describe).await {
                tracing::debug!(%error, %key, "dlock: could not write the client's description");
            }
        }
        tokio::time::sleep(REGISTRATION_TTL / 3).await;
    }
}

/// Deletes the description under `key` when the client goes, if a runtime is there to
/// send it; otherwise it expires within [`REGISTRATION_TTL`].
pub(crate) fn unregister(backend: &Backend, key: &str) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    let (backend, key) = (backend.clone(), key.to_owned());
    tokio::spawn(async move {
        if let Err(error) = backend.query::<()>(redis::cmd("DEL").arg(&key)).await {
            tracing::debug!(%error, %key, "dlock: could not delete the client's description");
        }
    });
}

/// The key under which client `client_id` describes itself (see
/// `client::registration`): `dlock:client:<key prefix>{<anchor>}:<client id>`, the anchor
/// being the client id's, so that the clients of one deployment spread over the slots and
/// anyone who knows an owner field (`<client id>:<n>`) can find its client.
pub(crate) fn client_key(prefix: &str, client_id: &str) -> String {
    format!(
        "dlock:client:{prefix}{{{}}}:{client_id}",
        crate::names::slot_anchor(client_id.as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_description_reads_back_as_written() {
        let description = ClientDescription::of_this_process("billing-7");
        assert_eq!(
            ClientDescription::decode(&description.encode()),
            Some(description)
        );
        assert_eq!(ClientDescription::decode("name=a\nhost=b"), None);
        assert_eq!(
            ClientDescription::decode("name=a\nhost=b\npid=x\nversion=1"),
            None
        );
    }

    #[test]
    fn client_names_are_what_client_setname_accepts() {
        check_client_name("billing-7").unwrap();
        for bad in ["", "two words", "tab\there", "naïve"] {
            assert!(check_client_name(bad).is_err(), "{bad:?}");
        }
        let error = check_client_name("two words").unwrap_err().to_string();
        assert!(error.contains("at byte 3"), "{error}");
        assert_eq!(default_client_name("0123456789abcdef"), "dlock-01234567");
    }
}
