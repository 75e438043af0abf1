//! Authentication and authorization at the broker's front doors (issue 43).
//!
//! With `[security] users_file` set, every native and MQTT session must log in (HELLO version 2
//! credentials, MQTT CONNECT user name and password); the user's permissions are then checked
//! on each publish, subscribe (best effort, queue group, guaranteed, durable), request reply
//! subject and, for subscriptions whose wildcard overlaps a denied topic, on each delivery (the
//! outbox's gate). Without a users file nothing changes: the broker is open, as before.
//!
//! Password checks cost tens of milliseconds of a core (argon2id), so they run on threads of
//! their own, within a budget of `verify_per_second`: at normal priority at most
//! `NORMAL_PER_SECOND` a second and never while failures come in a flood ([`FloodWatch`]),
//! the rest under `SCHED_IDLE` ([`verifier`]); a failed login is answered only after
//! `failure_delay`, counted in `tidings_auth_failures_total`, and logged at most once a second.
//! UDP has no login: with a users file the UDP listener is not started.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tidings_auth::{Credentials, Failure, FloodWatch, User, Users, VerifyBudget};
use tokio::sync::watch;

mod verifier;
use verifier::{Priority, Verifier};

/// The `[security]` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    /// The users file (TOML, see `docs/security.md`); empty: no login, everything allowed.
    pub users_file: String,
    /// Password verifications a second, at most (each costs ~20 ms of a core with argon2id).
    pub verify_per_second: u32,
    /// How long a failed login waits before its refusal, to slow a guesser down.
    #[serde(with = "humantime_serde")]
    pub failure_delay: Duration,
    /// The user of the users file a session that brings no credentials at all is logged in as
    /// (NATS's `no_auth_user`, mosquitto's anonymous access with its own rules): its rules are
    /// what anonymous clients may do. Empty: such a session is refused.
    pub no_auth_user: String,
}

impl Default for SecurityConfig {
    fn default() -> SecurityConfig {
        SecurityConfig {
            users_file: String::new(),
            verify_per_second: 50,
            failure_delay: Duration::from_millis(500),
            no_auth_user: String::new(),
        }
    }
}

/// Password checks a second that may run at normal priority (when no flood is seen); the rest
/// run under `SCHED_IDLE`. A few a second at normal priority keep a person's login quick on a
/// busy broker and cost the data path little (the flood test passed at 1.27-1.30x with two a
/// second, all at normal priority); more, and a burst of checks at a flood's start, before it is
/// recognised, holds a core long enough to move the healthy clients' p99 (3-14x in the runs
/// where every check before the flood was seen ran at normal priority).
const NORMAL_PER_SECOND: u32 = 2;

/// The longest a password check waits for the verification budget: a flood beyond
/// `verify_per_second` for longer is refused unverified (reason `busy`), so that the logins
/// waiting, and the connections they hold, stay bounded (a second's worth of the budget).
const MAX_VERIFY_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabel {
    reason: &'static str,
}

/// The users in force and what logging in costs; shared by every session.
pub struct Guard {
    users: Mutex<Arc<Users>>,
    path: std::path::PathBuf,
    budget: Mutex<VerifyBudget>,
    /// The checks that may run at normal priority.
    normal: Mutex<VerifyBudget>,
    verifier: Verifier,
    /// Recent failures: a flood sends password checks to the idle pool.
    flood: Mutex<FloodWatch>,
    failure_delay: Duration,
    failures: Family<FailureLabel, Counter>,
    last_logged: Mutex<Option<Instant>>,
    /// Bumped on each reload, so sessions re-check their user.
    reloads: watch::Sender<u64>,
    /// Who a session without credentials is (`no_auth_user`), if anyone.
    no_auth_user: Option<String>,
}

/// The users file at `path`, refused when it does not list the `no_auth_user` the
/// configuration names (a typo there would otherwise refuse every anonymous client silently).
fn load_users(path: &std::path::Path, no_auth_user: Option<&str>) -> Result<Users, tidings_auth::AuthError> {
    let users = Users::load(path)?;
    match no_auth_user {
        Some(name) if users.get(name).is_none() => Err(tidings_auth::AuthError::File(format!(
            "[security] no_auth_user {name:?} is not a user of {}",
            path.display()
        ))),
        _ => Ok(users),
    }
}

impl Guard {
    /// Loads the users file `config` names; `None` when security is off.
    pub fn new(
        config: &SecurityConfig,
        registry: &mut Registry,
    ) -> Result<Option<Arc<Guard>>, tidings_auth::AuthError> {
        if config.users_file.is_empty() {
            return Ok(None);
        }
        let path = std::path::PathBuf::from(&config.users_file);
        let no_auth_user = Some(config.no_auth_user.clone()).filter(|name| !name.is_empty());
        let users = load_users(&path, no_auth_user.as_deref())?;
        let failures = Family::<FailureLabel, Counter>::default();
        registry.sub_registry_with_prefix("tidings").register(
            "auth_failures",
            "Logins refused, by reason",
            failures.clone(),
        );
        Ok(Some(Arc::new(Guard {
            users: Mutex::new(Arc::new(users)),
            path,
            budget: Mutex::new(VerifyBudget::new(config.verify_per_second, Instant::now())),
            normal: Mutex::new(VerifyBudget::new(NORMAL_PER_SECOND, Instant::now())),
            verifier: Verifier::start()
                .map_err(|e| tidings_auth::AuthError::File(format!("starting the password check threads: {e}")))?,
            flood: Mutex::new(FloodWatch::new(Instant::now())),
            failure_delay: config.failure_delay,
            failures,
            last_logged: Mutex::new(None),
            reloads: watch::channel(0).0,
            no_auth_user,
        })))
    }

    /// Reads the users file again (SIGHUP). A file that does not load changes nothing. Sessions
    /// whose user was removed or changed (password, permissions, role) are then closed.
    pub fn reload(&self) -> Result<usize, tidings_auth::AuthError> {
        let users = load_users(&self.path, self.no_auth_user.as_deref())?;
        let count = users.len();
        *self.users.lock() = Arc::new(users);
        self.reloads.send_modify(|n| *n += 1);
        Ok(count)
    }

    /// The users in force now.
    pub fn users(&self) -> Arc<Users> {
        Arc::clone(&self.users.lock())
    }

    /// A receiver that wakes on each reload.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// Authenticates `credentials` off the event loop, within the verification budget; a
    /// failure is counted, logged at a bounded rate, and answered after the failure delay.
    pub async fn login(&self, credentials: Credentials, client: &str) -> Result<Arc<User>, Failure> {
        if let (Credentials::None, Some(name)) = (&credentials, &self.no_auth_user) {
            // Checked at load and at each reload: the user is there.
            if let Some(user) = self.users().get(name) {
                return Ok(Arc::clone(user));
            }
        }
        let place = match credentials {
            Credentials::Password { .. } => self.budget.lock().reserve(Instant::now(), MAX_VERIFY_WAIT),
            _ => Some(Duration::ZERO),
        };
        let outcome = match place {
            // Beyond the queue a second's worth of the budget can serve: refused unverified.
            None => Err(Failure::Busy),
            Some(wait) => {
                tokio::time::sleep(wait).await;
                let users = self.users();
                let now = Instant::now();
                let priority = match !self.flood.lock().under_attack(now) && self.normal.lock().take(now).is_ok() {
                    true => Priority::Normal,
                    false => Priority::Idle,
                };
                let outcome = self.verifier.run(priority, move || users.authenticate(&credentials)).await;
                outcome.unwrap_or(Err(Failure::BadSecret))
            }
        };
        if let Err(failure) = outcome {
            self.refused(failure, client).await;
        }
        outcome
    }

    /// Counts and logs a failed login, and waits the failure delay before its answer: for
    /// every way of logging in (a password here, a SCRAM proof in the MQTT front door).
    pub async fn refused(&self, failure: Failure, client: &str) {
        self.flood.lock().failed(Instant::now());
        self.failures.get_or_create(&FailureLabel { reason: failure.name() }).inc();
        self.log_failure(failure, client);
        tokio::time::sleep(self.failure_delay).await;
    }

    fn log_failure(&self, failure: Failure, client: &str) {
        let mut last = self.last_logged.lock();
        if last.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            *last = Some(Instant::now());
            tracing::warn!(%client, reason = failure.name(), "login refused (logged at most once a second; see tidings_auth_failures_total)");
        }
    }
}

/// The text of a refused native login. A wrong password, an unknown user and a wrong token are
/// all "not authenticated" (a guesser learns nothing); a client certificate no user lists, or a
/// flood that filled the verification queue, is said as such.
pub fn refusal(failure: Failure) -> &'static str {
    match failure {
        Failure::Missing => "not authenticated: this broker requires a login (--user and --password, or --token)",
        Failure::UnknownUser | Failure::BadSecret => "not authenticated",
        Failure::UnknownCertificate => {
            "not authenticated: no user in the broker's users file lists a name of this client certificate"
        }
        Failure::Busy => "not authenticated: too many logins are waiting; try again later",
    }
}

/// The credentials a native HELLO carries, as the auth crate takes them.
pub fn credentials(auth: &tidings_wire::HelloAuth) -> Credentials {
    match auth {
        tidings_wire::HelloAuth::None => Credentials::None,
        tidings_wire::HelloAuth::Password { user, password } => {
            Credentials::Password { user: user.clone(), password: password.clone() }
        }
        tidings_wire::HelloAuth::Token(token) => Credentials::Token(token.clone()),
    }
}

/// The credentials of an MQTT CONNECT: user name and password, or a password alone as a
/// bearer token.
pub fn mqtt_credentials(connect: &tidings_wire::mqtt::Connect) -> Credentials {
    let password = connect.password.as_ref().map(|p| String::from_utf8_lossy(p).into_owned());
    match (&connect.username, password) {
        (Some(user), Some(password)) => Credentials::Password { user: user.clone(), password },
        (None, Some(token)) => Credentials::Token(token),
        (Some(_), None) | (None, None) => Credentials::None,
    }
}

/// The CONNACK for a refused MQTT login: 0x86 (bad user name or password; 3.1.1's 4) for
/// wrong credentials, 0x87 (not authorized; 3.1.1's 5) when none were given.
pub fn mqtt_refusal(failure: Failure) -> tidings_wire::mqtt::Packet {
    use tidings_wire::mqtt::{Connack, MqttReason, Packet};
    let reason = match failure {
        Failure::Missing | Failure::UnknownCertificate => MqttReason::NotAuthorized,
        Failure::UnknownUser | Failure::BadSecret => MqttReason::BadUserNameOrPassword,
        Failure::Busy => MqttReason::ServerUnavailable,
    };
    Packet::Connack(Connack { session_present: false, reason, properties: Default::default() })
}

/// A logged-in session's user, and the reload watch that re-checks it.
pub struct Login {
    /// Who the session is.
    pub user: Arc<User>,
    pub(crate) changes: watch::Receiver<u64>,
}
