//! Secrets given to Capstan at start-up: a listener's token, a store URL's
//! password. Every process of the machine reads a process's arguments (`ps`,
//! `/proc/PID/cmdline`), so these come from the environment or a file; one
//! given as a flag's value still works (scripts rely on it) but is warned
//! about, never echoed, and `capstan doctor` names a running Capstan that
//! shows one.

use std::path::Path;

use anyhow::{Context as _, Result, bail};

/// Whether `--NAME` (as `--NAME VALUE` or `--NAME=VALUE`) is among this
/// process's arguments, as opposed to its value coming from the environment.
pub fn on_command_line(name: &str) -> bool {
    let flag = format!("--{name}");
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| {
            let a = a.to_string_lossy();
            a == flag || a.starts_with(&format!("{flag}="))
        })
}

/// The token: `--NAME-file` (its first line), else `--NAME` / the variable.
/// Warns when the token was typed on the command line.
pub fn token(
    given: Option<String>,
    file: Option<&Path>,
    name: &str,
    var: &str,
) -> Result<Option<String>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read --{name}-file {}; write the token on its first line \
                     (`openssl rand -hex 16 > FILE; chmod 600 FILE`)",
                path.display()
            )
        })?;
        let token = text.lines().next().unwrap_or_default().trim().to_owned();
        if token.is_empty() {
            bail!(
                "--{name}-file {} is empty: write a long random string on its first line \
                 (`openssl rand -hex 16 > FILE`)",
                path.display()
            );
        }
        return Ok(Some(token));
    }
    if given.is_some() && on_command_line(name) {
        warn_visible(
            &format!("--{name}"),
            &format!("{var}=... or --{name}-file FILE"),
        );
    }
    Ok(given)
}

/// Warns when the store URL was typed on the command line with a password.
pub fn check_store_url(url: Option<&str>, name: &str, var: &str) {
    if url.is_some_and(url_has_password) && on_command_line(name) {
        warn_visible(
            &format!("the password in --{name}"),
            &format!("{var} or a `[store] url` in capstan.toml"),
        );
    }
}

fn warn_visible(what: &str, instead: &str) {
    crate::term::warn(format_args!(
        "{what} is on the command line, where every process of this machine can read it \
         (ps, /proc/PID/cmdline); pass it as {instead} instead"
    ));
}

/// Whether a URL carries a password (`scheme://user:password@host`).
pub fn url_has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.split_once(':').is_some_and(|(_, p)| !p.is_empty()))
}

/// Whether a command line (NUL-separated, as `/proc/PID/cmdline`) of a
/// Capstan process shows a secret: a token flag's value or a URL password.
pub fn shows_secret(cmdline: &[u8]) -> Option<&'static str> {
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    for a in &args {
        if a == "--token" || a.starts_with("--token=") {
            return Some("a token (--token)");
        }
        if url_has_password(a) {
            return Some("a password in a URL");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_and_token_flags_are_found() {
        assert!(url_has_password("postgres://u:pw@db:5432/capstan"));
        assert!(url_has_password(
            "postgresql://u:p%40w@db/x?sslmode=require"
        ));
        assert!(!url_has_password("postgres://u@db/x"));
        assert!(!url_has_password("postgres://db/x?password=@"));
        assert!(!url_has_password("/var/lib/capstan.db"));
        assert_eq!(
            shows_secret(b"capstan\0serve\0--token\0T\0"),
            Some("a token (--token)")
        );
        assert_eq!(
            shows_secret(b"capstan\0serve\0--store=postgres://a:b@h/d\0"),
            Some("a password in a URL")
        );
        assert_eq!(shows_secret(b"capstan\0serve\0--token-file\0/t\0"), None);
    }
}
