//! Passwords out of addresses, for error messages, logs and `Debug` output.

pub(crate) fn list(urls: &[String]) -> String {
    let shown: Vec<String> = urls.iter().map(|u| redact(u)).collect();
    shown.join(", ")
}

/// `url` with any password replaced by `***`, for error messages and logs.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            redact("redis://app:s3cr@t@127.0.0.1:6379/0"),
            "redis://app:***@127.0.0.1:6379/0"
        );
        assert_eq!(redact("rediss://:pw@127.0.0.1"), "rediss://:***@127.0.0.1");
        assert_eq!(redact("not a url"), "not a url");
    }
}
