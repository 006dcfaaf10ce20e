//! What differs between the SQL databases Forge stores in, as one small trait a store adapter
//! implements for a marker type of its own; everything else in this crate is written once for
//! every dialect.

/// A SQL database's differences from the others, as the shared layer needs them.
pub trait Dialect {
    /// The sqlx database the dialect is spoken to.
    type Database: sqlx::Database;

    /// A statement of one row and one boolean column: whether the table `table` (a name this
    /// crate writes, never input) exists in the schema Forge uses.
    fn table_exists(table: &str) -> String;
}
