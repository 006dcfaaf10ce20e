//! Bearer-token authentication: a JWT becomes a [`Scope`].
//!
//! Keys are an HS256 shared secret, or RS256 / ES256 public keys from a JWKS document (selected by
//! the token's `kid`). The token must carry `exp` and `sub` (the principal); the tenant and roles
//! come from claims:
//!
//! - **plain**: `tenant_id` (a string) and `roles` (an array of strings, optional);
//! - **Supabase**: `app_metadata.tenant_id` and `app_metadata.roles`, as a Supabase project's access
//!   hook or admin API sets them (`app_metadata` is not writable by the user).
//!
//! Only the configured algorithms are accepted (never `none`), `iss` and `aud` are checked when
//! configured, `nbf` when present, and 30 s of clock skew is tolerated. A JWKS read from a file
//! ([`Authenticator::jwks_file`]) is read again when the file changes (checked at most every few
//! seconds, and at once for a `kid` it does not know), so keys rotate without a restart. A
//! WebSocket session ends when its token expires ([`Authenticated::expires_at`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use forge_core::scope::Scope;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::{Mutex, RwLock};
use serde::Deserialize;

/// Why a request was not authenticated. The message is safe to show to the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No bearer token.
    #[error("missing bearer token")]
    Missing,
    /// The token is past its `exp`.
    #[error("the token has expired")]
    Expired,
    /// The token is malformed, badly signed, or lacks a required claim.
    #[error("invalid token: {0}")]
    Invalid(String),
}

impl AuthError {
    /// The RFC 6750 `WWW-Authenticate` value for a 401 carrying this error.
    pub fn challenge(&self) -> String {
        match self {
            AuthError::Missing => "Bearer realm=\"forge\"".into(),
            other => format!(
                "Bearer realm=\"forge\", error=\"invalid_token\", error_description=\"{}\"",
                other.to_string().replace('"', "'")
            ),
        }
    }
}

/// Why auth could not be configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthConfigError {
    /// The secret is too short to be an HS256 key worth the name.
    #[error("the JWT secret must be at least 32 bytes")]
    WeakSecret,
    /// The JWKS document does not parse or holds no usable key.
    #[error("JWKS: {0}")]
    Jwks(String),
}

/// Where tenant and roles are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClaimsMode {
    /// `tenant_id` and `roles` at the top level.
    #[default]
    Plain,
    /// Supabase: `app_metadata.tenant_id` and `app_metadata.roles`.
    Supabase,
}

enum Keys {
    Secret(Box<DecodingKey>),
    Jwks(Vec<(Option<String>, Algorithm, DecodingKey)>),
}

/// Where a JWKS came from, to read it again when it changes.
struct JwksSource {
    path: PathBuf,
    modified: Option<SystemTime>,
    checked: Instant,
}

/// How often a JWKS file is checked for a change.
const JWKS_RECHECK: Duration = Duration::from_secs(5);

/// A verified token: who it speaks for, and until when.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// The caller's scope.
    pub scope: Scope,
    /// The token's `exp`, in Unix seconds.
    pub expires_at: i64,
}

/// Verifies bearer tokens.
pub struct Authenticator {
    keys: Arc<RwLock<Keys>>,
    source: Option<Arc<Mutex<JwksSource>>>,
    mode: ClaimsMode,
    issuer: Option<String>,
    audience: Option<String>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("mode", &self.mode)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    exp: i64,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    roles: Option<Vec<String>>,
    #[serde(default)]
    app_metadata: Option<AppMetadata>,
}

#[derive(Deserialize)]
struct AppMetadata {
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    roles: Option<Vec<String>>,
}

impl Authenticator {
    /// Verifies HS256 tokens signed with `secret` (at least 32 bytes).
    pub fn hs256(secret: &[u8]) -> Result<Self, AuthConfigError> {
        if secret.len() < 32 {
            return Err(AuthConfigError::WeakSecret);
        }
        let key = DecodingKey::from_secret(secret).map_err(|_| AuthConfigError::WeakSecret)?;
        Ok(Self::with_keys(Keys::Secret(Box::new(key))))
    }

    /// Verifies RS256 / ES256 tokens against the keys of a JWKS document.
    pub fn jwks(document: &str) -> Result<Self, AuthConfigError> {
        Ok(Self::with_keys(parse_jwks(document)?))
    }

    /// Verifies RS256 / ES256 tokens against the JWKS in a file, read again whenever it changes
    /// (a new version that does not parse is ignored: the last good keys stay).
    pub fn jwks_file(path: impl Into<PathBuf>) -> Result<Self, AuthConfigError> {
        let path = path.into();
        let document = std::fs::read_to_string(&path).map_err(|e| {
            AuthConfigError::Jwks(format!("failed to read {}: {e}", path.display()))
        })?;
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let mut auth = Self::with_keys(parse_jwks(&document)?);
        auth.source = Some(Arc::new(Mutex::new(JwksSource {
            path,
            modified,
            checked: Instant::now(),
        })));
        Ok(auth)
    }

    /// Reads the JWKS file again if it changed since it was last read; `force` skips the wait
    /// between checks (an unknown `kid`).
    fn refresh(&self, force: bool) {
        let Some(source) = &self.source else {
            return;
        };
        let mut source = source.lock();
        if !force && source.checked.elapsed() < JWKS_RECHECK {
            return;
        }
        if force && source.checked.elapsed() < Duration::from_millis(200) {
            return;
        }
        source.checked = Instant::now();
        let modified = std::fs::metadata(&source.path)
            .and_then(|m| m.modified())
            .ok();
        if modified == source.modified {
            return;
        }
        if let Ok(keys) = std::fs::read_to_string(&source.path)
            .map_err(|e| AuthConfigError::Jwks(e.to_string()))
            .and_then(|d| parse_jwks(&d))
        {
            *self.keys.write() = keys;
            source.modified = modified;
        }
    }
}

fn parse_jwks(document: &str) -> Result<Keys, AuthConfigError> {
    {
        let set: JwkSet =
            serde_json::from_str(document).map_err(|e| AuthConfigError::Jwks(e.to_string()))?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            let alg = match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                _ => continue,
            };
            let key =
                DecodingKey::from_jwk(jwk).map_err(|e| AuthConfigError::Jwks(e.to_string()))?;
            keys.push((jwk.common.key_id.clone(), alg, key));
        }
        if keys.is_empty() {
            return Err(AuthConfigError::Jwks("no RSA or EC key".into()));
        }
        Ok(Keys::Jwks(keys))
    }
}

impl Authenticator {
    fn with_keys(keys: Keys) -> Self {
        Self {
            keys: Arc::new(RwLock::new(keys)),
            source: None,
            mode: ClaimsMode::Plain,
            issuer: None,
            audience: None,
        }
    }

    /// Reads tenant and roles the Supabase way.
    pub fn mode(mut self, mode: ClaimsMode) -> Self {
        self.mode = mode;
        self
    }

    /// Requires this `iss`.
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Requires this `aud`.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// The scope of an `Authorization` header value.
    pub fn authenticate_header(&self, header: Option<&str>) -> Result<Scope, AuthError> {
        self.verify_header(header).map(|a| a.scope)
    }

    /// The scope and expiry of an `Authorization` header value.
    pub fn verify_header(&self, header: Option<&str>) -> Result<Authenticated, AuthError> {
        let header = header.map(str::trim).filter(|h| !h.is_empty());
        let Some(header) = header else {
            return Err(AuthError::Missing);
        };
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .ok_or_else(|| AuthError::Invalid("the authorization scheme must be Bearer".into()))?;
        self.verify(token.trim())
    }

    /// The scope of a token.
    pub fn authenticate(&self, token: &str) -> Result<Scope, AuthError> {
        self.verify(token).map(|a| a.scope)
    }

    /// The scope and expiry of a token.
    pub fn verify(&self, token: &str) -> Result<Authenticated, AuthError> {
        self.refresh(false);
        match self.verify_with_current_keys(token) {
            Err(AuthError::Invalid(why)) if why == NO_KEY && self.source.is_some() => {
                // A key rotated in since the last check: look again now.
                self.refresh(true);
                self.verify_with_current_keys(token)
            }
            other => other,
        }
    }

    fn verify_with_current_keys(&self, token: &str) -> Result<Authenticated, AuthError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| AuthError::Invalid("malformed token".into()))?;
        let keys = self.keys.read();
        let (alg, key) = match &*keys {
            Keys::Secret(key) => (Algorithm::HS256, key.as_ref()),
            Keys::Jwks(keys) => keys
                .iter()
                .find(|(kid, alg, _)| {
                    *alg == header.alg
                        && (header.kid.is_none() || kid.as_ref() == header.kid.as_ref())
                })
                .map(|(_, alg, key)| (*alg, key))
                .ok_or_else(|| AuthError::Invalid(NO_KEY.into()))?,
        };
        let mut validation = Validation::new(alg);
        validation.leeway = 30;
        validation.set_required_spec_claims(&["exp", "sub"]);
        validation.validate_nbf = true;
        match &self.audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &self.issuer {
            validation.set_issuer(&[iss]);
        }
        let data = jsonwebtoken::decode::<Claims>(token, key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            match e.kind() {
                ErrorKind::ExpiredSignature => AuthError::Expired,
                ErrorKind::ImmatureSignature => AuthError::Invalid("token not valid yet".into()),
                ErrorKind::InvalidSignature => AuthError::Invalid("bad signature".into()),
                ErrorKind::InvalidAlgorithm => AuthError::Invalid("algorithm not accepted".into()),
                ErrorKind::MissingRequiredClaim(c) => {
                    AuthError::Invalid(format!("missing claim {c}"))
                }
                ErrorKind::InvalidIssuer => AuthError::Invalid("wrong issuer".into()),
                ErrorKind::InvalidAudience => AuthError::Invalid("wrong audience".into()),
                _ => AuthError::Invalid("malformed token".into()),
            }
        })?;
        drop(keys);
        let claims = data.claims;
        let expires_at = claims.exp;
        let (tenant, roles) = match self.mode {
            ClaimsMode::Plain => (claims.tenant_id, claims.roles),
            ClaimsMode::Supabase => {
                let meta = claims.app_metadata;
                (
                    meta.as_ref().and_then(|m| m.tenant_id.clone()),
                    meta.and_then(|m| m.roles),
                )
            }
        };
        let tenant = tenant.ok_or_else(|| AuthError::Invalid("missing claim tenant_id".into()))?;
        let sub = claims
            .sub
            .ok_or_else(|| AuthError::Invalid("missing claim sub".into()))?;
        let roles = roles.unwrap_or_default();
        let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
        let scope = Scope::parse(&tenant, &sub, &roles)
            .map_err(|e| AuthError::Invalid(format!("unusable identity: {e}")))?;
        if scope.tenant_id().is_reserved() {
            return Err(AuthError::Invalid(format!(
                "tenant ids starting with {:?} are reserved",
                forge_core::scope::RESERVED_TENANT_PREFIX
            )));
        }
        Ok(Authenticated { scope, expires_at })
    }
}

const NO_KEY: &str = "no key for this token";

/// Signs an HS256 token for `scope`, valid for `ttl_secs`: for development (`forge token`) and
/// tests.
pub fn sign_hs256(
    secret: &[u8],
    scope: &Scope,
    ttl_secs: i64,
    now_unix: i64,
) -> Result<String, AuthConfigError> {
    let claims = serde_json::json!({
        "sub": scope.principal_id().as_str(),
        "tenant_id": scope.tenant_id().as_str(),
        "roles": scope.role_ids().iter().map(|r| r.as_str()).collect::<Vec<_>>(),
        "iat": now_unix,
        "exp": now_unix + ttl_secs,
    });
    // A token for a server that would refuse its secret is no token: the same rule as
    // [`Authenticator::hs256`].
    if secret.len() < 32 {
        return Err(AuthConfigError::WeakSecret);
    }
    let key =
        jsonwebtoken::EncodingKey::from_secret(secret).map_err(|_| AuthConfigError::WeakSecret)?;
    jsonwebtoken::encode(&jsonwebtoken::Header::new(Algorithm::HS256), &claims, &key)
        .map_err(|e| AuthConfigError::Jwks(e.to_string()))
}
