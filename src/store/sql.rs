//! The small SQL surface both backends share: owned parameter values, statements and rows.
//!
//! Statements are written once, in the dialect common to SQLite and PostgreSQL (`?N`
//! placeholders, `ON CONFLICT`, `RETURNING`, `CAST`); the Postgres backend rewrites the
//! placeholders. Everything is owned so a batch can cross to the Postgres worker thread.

use super::StoreError;

/// A parameter or column value. Integers carry booleans (0/1) and times (ms since the epoch).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(i64::from(v))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Int(i64::from(v))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Real(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Builds a parameter list: `params![a, b, c]`.
macro_rules! params {
    ($($v:expr),* $(,)?) => { vec![$($crate::store::sql::Value::from($v)),*] };
}
pub(crate) use params;

/// Whether a statement returns rows (SELECT, `RETURNING`) or only a count of changed rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Rows,
    Count,
    /// A query that must return a row, or the whole transaction is rolled back with
    /// [`StoreError::Fenced`]: the leader's fence, checked in each write's own transaction.
    Guard,
}

/// One statement with its parameters.
#[derive(Debug, Clone)]
pub struct Stmt {
    pub sql: String,
    pub params: Vec<Value>,
    pub shape: Shape,
}

impl Stmt {
    pub fn query(sql: impl Into<String>, params: Vec<Value>) -> Stmt {
        Stmt {
            sql: sql.into(),
            params,
            shape: Shape::Rows,
        }
    }

    pub fn exec(sql: impl Into<String>, params: Vec<Value>) -> Stmt {
        Stmt {
            sql: sql.into(),
            params,
            shape: Shape::Count,
        }
    }

    pub fn guard(sql: impl Into<String>, params: Vec<Value>) -> Stmt {
        Stmt {
            sql: sql.into(),
            params,
            shape: Shape::Guard,
        }
    }

    /// Whether the statement may change the database: anything but a plain `SELECT` (an
    /// `INSERT … RETURNING` returns rows and writes).
    pub fn writes(&self) -> bool {
        let head = self.sql.trim_start();
        self.shape == Shape::Count
            || !head
                .get(..6)
                .is_some_and(|h| h.eq_ignore_ascii_case("select"))
    }
}

/// What one statement of a batch gave back.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Rows(Vec<Row>),
    Count(u64),
}

impl Outcome {
    /// A guard's rows, or [`StoreError::Fenced`] when it found none.
    pub fn guarded(rows: Vec<Row>) -> Result<Outcome, StoreError> {
        if rows.is_empty() {
            return Err(StoreError::Fenced(None));
        }
        Ok(Outcome::Rows(rows))
    }

    pub fn rows(self) -> Vec<Row> {
        match self {
            Outcome::Rows(r) => r,
            Outcome::Count(_) => Vec::new(),
        }
    }

    pub fn count(&self) -> u64 {
        match self {
            Outcome::Rows(r) => r.len() as u64,
            Outcome::Count(n) => *n,
        }
    }
}

/// One result row, with typed accessors that name the column on a mismatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value, StoreError> {
        self.0
            .get(i)
            .ok_or_else(|| StoreError::Invalid(format!("row has no column {i}")))
    }

    fn mismatch(&self, i: usize, want: &str) -> StoreError {
        StoreError::Invalid(format!(
            "column {i}: expected {want}, found {:?}",
            self.0.get(i)
        ))
    }

    pub fn text(&self, i: usize) -> Result<String, StoreError> {
        self.opt_text(i)?.ok_or_else(|| self.mismatch(i, "text"))
    }

    pub fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(s) => Ok(Some(s.clone())),
            _ => Err(self.mismatch(i, "text")),
        }
    }

    pub fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.opt_int(i)?
            .ok_or_else(|| self.mismatch(i, "an integer"))
    }

    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            _ => Err(self.mismatch(i, "an integer")),
        }
    }

    pub fn real(&self, i: usize) -> Result<f64, StoreError> {
        self.opt_real(i)?
            .ok_or_else(|| self.mismatch(i, "a number"))
    }

    pub fn opt_real(&self, i: usize) -> Result<Option<f64>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Real(v) => Ok(Some(*v)),
            // SQLite keeps integral REALs as integers in some paths.
            Value::Int(v) => Ok(Some(*v as f64)),
            _ => Err(self.mismatch(i, "a number")),
        }
    }

    pub fn flag(&self, i: usize) -> Result<bool, StoreError> {
        Ok(self.int(i)? != 0)
    }

    pub fn u32(&self, i: usize) -> Result<u32, StoreError> {
        u32::try_from(self.int(i)?).map_err(|_| self.mismatch(i, "a count"))
    }
}

/// How many of `total` migrations a database reports as applied (`applied`), refusing a
/// database written by a newer tern.
pub fn applied_migrations(applied: i64, total: usize) -> Result<usize, StoreError> {
    let applied = usize::try_from(applied).unwrap_or(0);
    if applied > total {
        return Err(StoreError::Invalid(format!(
            "database schema version {applied} is newer than this tern ({total})"
        )));
    }
    Ok(applied)
}

/// `?N` → `$N` for PostgreSQL. Our statements carry no `?` inside string literals.
pub fn numbered_placeholders(sql: &str) -> String {
    sql.replace('?', "$")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_convert_and_rows_name_mismatches() {
        let p: Vec<Value> = params![1i64, 2u32, true, 0.5, "a", None::<i64>, Some("b")];
        assert_eq!(
            p,
            vec![
                Value::Int(1),
                Value::Int(2),
                Value::Int(1),
                Value::Real(0.5),
                Value::Text("a".into()),
                Value::Null,
                Value::Text("b".into()),
            ]
        );
        let row = Row(p);
        assert_eq!(row.real(0).expect("int reads as real"), 1.0);
        assert!(row.flag(2).expect("flag"));
        assert_eq!(row.opt_int(5).expect("null"), None);
        let err = row.int(4).expect_err("text is not an integer");
        assert!(err.to_string().contains("column 4"), "{err}");
        assert!(row.text(9).is_err());
        assert_eq!(applied_migrations(2, 3).expect("older is fine"), 2);
        let newer = applied_migrations(4, 3).expect_err("newer is refused");
        assert!(newer.to_string().contains("version 4 is newer"), "{newer}");
        assert_eq!(
            numbered_placeholders("UPDATE t SET a = ?2 WHERE b = ?1"),
            "UPDATE t SET a = $2 WHERE b = $1"
        );
    }
}
