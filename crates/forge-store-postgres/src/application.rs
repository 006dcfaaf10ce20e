//! Setting up an application's own role and database from an administrator's URL, for
//! development and tests: what an operator would otherwise do by hand before the first start.

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use crate::{OpenError, db_error, provision_system};

/// Creates, as the administrator `admin_url`, the login role `role` (no superuser, no
/// `BYPASSRLS`, no password: for trust or peer authentication, as on a development machine) and
/// the database `database` owned by it, each only if missing; provisions the system role and
/// functions and the schema in that database ([`provision_system`]); and returns the URL to
/// connect as `role`.
/// Both names must be plain lowercase identifiers. Idempotent.
pub async fn provision_application(
    admin_url: &str,
    role: &str,
    database: &str,
) -> Result<String, OpenError> {
    for name in [role, database] {
        let plain = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return Err(OpenError::SystemRole {
                problem: format!("{name:?} is not a plain lowercase identifier"),
            });
        }
    }
    let admin: PgConnectOptions = admin_url.parse().map_err(OpenError::Url)?;
    let mut conn = PgConnection::connect_with(&admin.clone().application_name("forge-provision"))
        .await
        .map_err(|e| OpenError::Connect(db_error(e)))?;
    let fail = |e: sqlx::Error| OpenError::Migrate(db_error(e));
    let has_role: Option<(i32,)> = sqlx::query_as("SELECT 1 FROM pg_roles WHERE rolname = $1")
        .bind(role)
        .fetch_optional(&mut conn)
        .await
        .map_err(fail)?;
    if has_role.is_none() {
        // Checked above to be a plain identifier.
        let create = format!("CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS");
        if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(create))
            .execute(&mut conn)
            .await
        {
            // Another process created it first.
            if !e.to_string().contains("already exists") {
                return Err(fail(e));
            }
        }
    }
    let has_db: Option<(i32,)> = sqlx::query_as("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(database)
        .fetch_optional(&mut conn)
        .await
        .map_err(fail)?;
    if has_db.is_none() {
        let create = format!("CREATE DATABASE {database} OWNER {role}");
        if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(create))
            .execute(&mut conn)
            .await
            && !e.to_string().contains("already exists")
        {
            return Err(fail(e));
        }
    }
    let _ = conn.close().await;
    let url = |user: &str| {
        format!(
            "postgres://{user}@{}:{}/{database}",
            admin.get_host(),
            admin.get_port()
        )
    };
    let admin_of_database = admin.clone().database(database);
    let admin_user = admin_of_database.get_username().to_owned();
    let admin_db_url = match admin_url.split_once('@') {
        // Keep the administrator's credentials; point it at the new database.
        Some((credentials, _)) => format!(
            "{credentials}@{}:{}/{database}",
            admin.get_host(),
            admin.get_port()
        ),
        None => url(&admin_user),
    };
    provision_system(&admin_db_url, role).await?;
    Ok(url(role))
}
