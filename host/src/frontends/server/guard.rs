//! The doors of every HTTP listener: `capstan serve` (API, AG-UI, web chat,
//! `/mcp`) and `capstan mcp --listen`.
//!
//! The threat is a web page in the user's browser. Through DNS rebinding
//! (`evil.example` first resolves to the attacker, then to 127.0.0.1) its
//! scripts reach a loopback server as if same-origin; through plain
//! cross-site requests (a form POST, `fetch` with `mode: "no-cors"`) they can
//! send commands without reading the answers. Three checks close both:
//!
//! 1. `Host` must name this server: the bound address, `localhost`, or a name
//!    the user configured (`--allow-host`, `[server] allowed_hosts`). A
//!    rebound name fails here (421).
//! 2. `Origin`, when present, must be this server's own origin (its host
//!    passes check 1) or one the user configured (`--allow-origin`,
//!    `[server] allowed_origins`). A cross-site request fails here (403).
//! 3. Everything but the static web chat files needs the token: a random one
//!    made at start-up (or `--token`), printed in the start-up URL. API
//!    clients send `Authorization: Bearer`; the browser trades the URL's
//!    `?token=` for an HttpOnly SameSite=Strict cookie, which no other site's
//!    requests carry and no script can read (401 otherwise).
//!
//! `--no-token` drops check 3 (with a warning); checks 1 and 2 always hold.
//!
//! Besides the server's token, `[[server.user]]` entries give people tokens
//! of their own ([`Doors::with_users`]). A request showing one carries a
//! [`RunUser`] extension: the runs it starts are that user's and count
//! against the user's quota in the database (crates/store `Quota`), on
//! every replica. User tokens open the run API, AG-UI and the web chat, not
//! `/mcp`, whose tools would start runs outside the quota.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::{Result, bail};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, ErrorKind};
use crate::plugins::services::approval::Via;

/// Who may come in, for one listener.
#[derive(Debug, Clone)]
pub struct Doors {
    bound: SocketAddr,
    /// Extra `Host` names: `name` (any port) or `name:port`, lowercase.
    hosts: Vec<String>,
    /// Extra origins, `scheme://host[:port]`, lowercase, no trailing slash.
    origins: Vec<String>,
    token: Option<String>,
    /// `[[server.user]]` tokens and whose they are.
    users: Vec<(String, RunUser)>,
    /// How the listener is started, for advice in errors.
    program: &'static str,
}

/// The `[[server.user]]` whose token a request showed (a request
/// extension): runs it starts are theirs, within their quota.
#[derive(Debug, Clone)]
pub struct RunUser {
    pub quota: capstan_store::Quota,
}

/// Who a token belongs to.
enum Holder<'a> {
    /// The server's own token: no limits.
    Server,
    User(&'a RunUser),
}

/// The token a listener will require: the user's, a fresh random one, or
/// none when they opted out.
#[derive(Debug, Clone)]
pub enum TokenChoice {
    Given(String),
    Generated(String),
    Disabled,
}

impl TokenChoice {
    /// From the flags: `--no-token` wins, then `--token`, else a random token.
    pub fn pick(given: Option<String>, no_token: bool) -> Result<Self> {
        match (given, no_token) {
            (_, true) => Ok(Self::Disabled),
            (Some(t), false) if t.trim().is_empty() => {
                bail!("the token is empty; pass a long random string to --token")
            }
            (Some(t), false) => Ok(Self::Given(t)),
            (None, false) => Ok(Self::Generated(random_token()?)),
        }
    }

    pub fn token(&self) -> Option<&str> {
        match self {
            Self::Given(t) | Self::Generated(t) => Some(t),
            Self::Disabled => None,
        }
    }

    /// Refuses the combinations that would expose commands to the network.
    pub fn check_bind(&self, addr: SocketAddr, program: &str) -> Result<()> {
        if !addr.ip().is_loopback() && self.token().is_none() {
            bail!(
                "refusing to listen on {addr} without a token: anyone who can reach it could run \
                 commands in your workspaces. Drop --no-token (a token is then made for you), or \
                 bind 127.0.0.1 ({program})"
            );
        }
        if self.token().is_none() {
            crate::errln!(
                "{program}: WARNING: --no-token: any program on this machine can drive Capstan \
                 through {addr} (run commands, read workspaces). Host and Origin are still checked, \
                 so web pages cannot."
            );
        }
        Ok(())
    }
}

/// 32 random bytes from the OS, hex: 256 bits, not guessable.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    if let Err(e) = getrandom::fill(&mut bytes) {
        bail!("cannot make a random token ({e}); pass one with --token");
    }
    Ok(hex::encode(bytes))
}

impl Doors {
    pub fn new(
        bound: SocketAddr,
        hosts: &[String],
        origins: &[String],
        token: Option<String>,
        program: &'static str,
    ) -> Self {
        let clean = |s: &String| s.trim().trim_end_matches('/').to_ascii_lowercase();
        Self {
            bound,
            hosts: hosts.iter().map(clean).collect(),
            origins: origins.iter().map(clean).collect(),
            token,
            users: Vec::new(),
            program,
        }
    }

    /// Adds `[[server.user]]` tokens (with the users' quotas). They are
    /// checked only while the server has a token of its own: `--no-token`
    /// lets every local program in, with no user and no limit.
    pub fn with_users(mut self, users: Vec<(String, capstan_store::Quota)>) -> Self {
        self.users = users
            .into_iter()
            .map(|(token, quota)| (token, RunUser { quota }))
            .collect();
        self
    }

    /// Whose token `given` is; `None`: nobody's. Every token is compared
    /// in full, whichever matches.
    fn holder(&self, given: &str) -> Option<Holder<'_>> {
        let token = self.token.as_deref()?;
        let mut found =
            constant_time_eq(given.as_bytes(), token.as_bytes()).then_some(Holder::Server);
        for (t, user) in &self.users {
            if constant_time_eq(given.as_bytes(), t.as_bytes()) && found.is_none() {
                found = Some(Holder::User(user));
            }
        }
        found
    }

    /// The cookie the web chat keeps the token in. Cookies ignore ports, so
    /// the port is in the name: two servers on one machine do not clash.
    pub fn cookie_name(&self) -> String {
        format!("capstan_token_{}", self.bound.port())
    }

    /// `Set-Cookie` for a browser that showed the right `?token=`.
    pub fn cookie_for(&self, given: &str) -> Option<HeaderValue> {
        self.holder(given)?;
        HeaderValue::from_str(&format!(
            "{}={given}; HttpOnly; SameSite=Strict; Path=/",
            self.cookie_name()
        ))
        .ok()
    }

    /// Whether `host[:port]` names this server.
    fn host_allowed(&self, authority: &str) -> bool {
        let authority = authority.trim().to_ascii_lowercase();
        let Some((host, port)) = split_authority(&authority) else {
            return false;
        };
        let host = host.trim_end_matches('.');
        let builtin_name = host == "localhost"
            || match host.parse::<IpAddr>() {
                // Bound to every address: any address of this machine.
                Ok(ip) => ip == self.bound.ip() || self.bound.ip().is_unspecified(),
                Err(_) => false,
            };
        if builtin_name && port.is_none_or(|p| p == self.bound.port()) {
            return true;
        }
        self.hosts.iter().any(|allowed| {
            allowed == &authority || (!allowed.contains(':') && allowed.as_str() == host)
        })
    }

    /// Whether an `Origin` header value may call this server.
    fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        if self.origins.contains(&origin) {
            return true;
        }
        let (scheme, rest) = match origin.split_once("://") {
            Some(parts) => parts,
            None => return false, // `null`, or garbage
        };
        let default_port = match scheme {
            "http" => 80,
            "https" => 443,
            _ => return false,
        };
        if rest.contains('/') {
            return false;
        }
        // An origin without a port means the scheme's port; only then may the
        // Host rule compare it with the bound port.
        match split_authority(rest) {
            Some((host, None)) => self.host_allowed(&format!("{host}:{default_port}")),
            Some(_) => self.host_allowed(rest),
            None => false,
        }
    }

    fn host_error(&self, given: Option<&str>) -> ApiError {
        let port = self.bound.port();
        ApiError::new(
            ErrorKind::MisdirectedRequest,
            format!(
                "this server answers to {} and localhost:{port}, not to Host {}. If you reach it \
                 through another name on purpose, start it with `{} --allow-host NAME` (or list \
                 NAME in `[server] allowed_hosts` in capstan.toml); a web page that rebinds a \
                 name to this address is refused here",
                self.bound,
                given
                    .map(|h| format!("{h:?}"))
                    .unwrap_or_else(|| "(none)".into()),
                self.program
            ),
        )
    }

    fn origin_error(&self, origin: &str) -> ApiError {
        ApiError::forbidden(format!(
            "requests from origin {origin:?} are refused: only pages served by this server (http://{}) \
             may call it. To allow another frontend, start it with `{} --allow-origin {origin}` \
             (or `[server] allowed_origins` in capstan.toml)",
            self.bound, self.program
        ))
    }

    /// Checks 1 and 2, on every route.
    pub fn check_host_and_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        match host {
            Some(h) if self.host_allowed(h) => {}
            other => return Err(self.host_error(other)),
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("(not text)");
            if !self.origin_allowed(origin) {
                return Err(self.origin_error(origin));
            }
        }
        Ok(())
    }

    /// Check 3: the credential a request shows (and the user it belongs
    /// to, if a `[[server.user]]`'s), or 401 saying what to send.
    pub fn credential(&self, headers: &HeaderMap) -> Result<(Via, Option<RunUser>), ApiError> {
        if self.token.is_none() {
            return Ok((Via::HttpNoToken, None));
        }
        let user = |h: Holder<'_>| match h {
            Holder::Server => None,
            Holder::User(u) => Some(u.clone()),
        };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(given) = bearer {
            return match self.holder(given.trim()) {
                Some(h) => Ok((Via::HttpToken, user(h))),
                None => Err(ApiError::new(
                    ErrorKind::Unauthorized,
                    format!(
                        "the bearer token is wrong; send the token `{}` printed at start-up (or \
                         the one given with --token, or your own from [[server.user]])",
                        self.program
                    ),
                )),
            };
        }
        let name = self.cookie_name();
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v);
        match cookie.and_then(|given| self.holder(given)) {
            Some(h) => Ok((Via::HttpCookie, user(h))),
            None => Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!(
                    "this server needs its token: API clients send `Authorization: Bearer \
                     <token>`; in a browser, open the URL `{}` printed at start-up \
                     (http://{}/?token=...)",
                    self.program, self.bound
                ),
            )),
        }
    }
}

/// `host` and optional port of an authority (`[::1]:80`, `name:80`, `name`).
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            p => Some((host, Some(p.strip_prefix(':')?.parse().ok()?))),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None if authority.is_empty() => None,
        None => Some((authority, None)),
    }
}

/// Compares without an early exit, so the time taken does not reveal how much
/// of a guessed token was right. (Eight lines; not worth a crate.)
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Middleware for every route: Host and Origin.
pub async fn host_and_origin(
    State(doors): State<Arc<Doors>>,
    req: Request,
    next: Next,
) -> Response {
    match doors.check_host_and_origin(req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Middleware for every route but the static web chat: the token. The
/// credential shown rides along as a request extension ([`Via`]), so an
/// approval records which door it came through.
pub async fn token(State(doors): State<Arc<Doors>>, mut req: Request, next: Next) -> Response {
    match doors.credential(req.headers()) {
        Ok((_, Some(user))) if req.uri().path().starts_with("/mcp") => {
            ApiError::forbidden(format!(
                "the token of [[server.user]] `{}` opens the run API, AG-UI and the web chat, not \
             /mcp (its tools would start runs outside the user's quota); MCP clients use the \
             server's own token",
                user.quota.user
            ))
            .into_response()
        }
        Ok((via, user)) => {
            req.extensions_mut().insert(via);
            if let Some(user) = user {
                req.extensions_mut().insert(user);
            }
            next.run(req).await
        }
        Err(e) => {
            let mut resp = e.into_response();
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doors() -> Doors {
        Doors::new(
            "127.0.0.1:7878".parse().unwrap(),
            &["capstan.lan".into(), "proxy.example:443".into()],
            &["https://app.example.com/".into()],
            Some("t0k".into()),
            "capstan serve",
        )
    }

    #[test]
    fn hosts() {
        let d = doors();
        for ok in [
            "127.0.0.1:7878",
            "localhost:7878",
            "localhost",
            "LOCALHOST.:7878",
            "capstan.lan:9",
            "proxy.example:443",
        ] {
            assert!(d.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example:7878",
            "127.0.0.1:7879",
            "localhost:1",
            "10.0.0.1:7878",
            "proxy.example:80",
            "",
            "127.0.0.1:x",
        ] {
            assert!(!d.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn origins() {
        let d = doors();
        for ok in [
            "http://127.0.0.1:7878",
            "http://localhost:7878",
            "https://app.example.com",
        ] {
            assert!(d.origin_allowed(ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://evil.example:7878",
            "http://localhost",
            "null",
            "file://",
            "http://127.0.0.1:7878/x",
        ] {
            assert!(!d.origin_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn credentials() {
        let d = doors();
        let mut h = HeaderMap::new();
        assert!(d.credential(&h).is_err());
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer t0k"),
        );
        assert_eq!(d.credential(&h).unwrap().0, Via::HttpToken);
        assert!(d.credential(&h).unwrap().1.is_none());
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer nope"),
        );
        assert!(d.credential(&h).is_err());
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; capstan_token_7878=t0k"),
        );
        assert_eq!(d.credential(&h).unwrap().0, Via::HttpCookie);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("capstan_token_7879=t0k"),
        );
        assert!(d.credential(&h).is_err());
        assert!(d.cookie_for("t0k").is_some() && d.cookie_for("t0").is_none());
    }

    #[test]
    fn user_tokens_name_their_user() {
        let quota = |user: &str| capstan_store::Quota {
            user: user.into(),
            max_running: Some(1),
            ..Default::default()
        };
        let d = doors().with_users(vec![
            ("alice-token-0123456789".into(), quota("alice")),
            ("bob-token-0123456789ab".into(), quota("bob")),
        ]);
        let bearer = |t: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
            );
            d.credential(&h)
                .map(|(via, user)| (via, user.map(|u| u.quota.user)))
        };
        assert_eq!(
            bearer("alice-token-0123456789").unwrap(),
            (Via::HttpToken, Some("alice".into()))
        );
        assert_eq!(
            bearer("bob-token-0123456789ab").unwrap(),
            (Via::HttpToken, Some("bob".into()))
        );
        assert_eq!(bearer("t0k").unwrap(), (Via::HttpToken, None));
        assert!(bearer("alice-token-012345678").is_err());
        // The browser of a user keeps the user's token.
        let cookie = d.cookie_for("bob-token-0123456789ab").unwrap();
        assert!(
            cookie
                .to_str()
                .unwrap()
                .contains("=bob-token-0123456789ab;")
        );
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("capstan_token_7878=bob-token-0123456789ab"),
        );
        assert_eq!(d.credential(&h).unwrap().1.unwrap().quota.user, "bob");
        // Without a server token, nobody is a user.
        let open = Doors::new(
            "127.0.0.1:7878".parse().unwrap(),
            &[],
            &[],
            None,
            "capstan serve",
        )
        .with_users(vec![("alice-token-0123456789".into(), quota("alice"))]);
        assert!(open.cookie_for("alice-token-0123456789").is_none());
    }
}
