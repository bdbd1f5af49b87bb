//! A parsed JSON document.

use super::number::Decimal;

/// A JSON value. Objects keep their members in document order.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A number: the integer, if it is one that fits i64 (no fraction or
    /// exponent); else the number as written (boxed: a `Value` stays 32
    /// bytes, as when this was a double, and webdis's replies hold only
    /// integers).
    Number(Option<i64>, Option<Box<Decimal>>),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object, members in document order, keys unique.
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The integer, if this is an integer literal that fits i64.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(i, _) => *i,
            _ => None,
        }
    }

    /// The non-negative integer, if this is one.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i64().and_then(|i| u64::try_from(i).ok())
    }

    /// The number as written (`-0` as 0), if this is a number.
    pub fn as_decimal(&self) -> Option<Decimal> {
        match self {
            Value::Number(Some(i), _) => Some(Decimal::integer(*i)),
            Value::Number(None, d) => d.as_deref().copied(),
            _ => None,
        }
    }

    /// The number as a double (see `Decimal::to_f64`), if this is a number.
    pub fn as_f64(&self) -> Option<f64> {
        self.as_decimal().map(|d| d.to_f64())
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The members, if this is an object.
    pub fn as_object(&self) -> Option<&[(String, Value)]> {
        match self {
            Value::Object(members) => Some(members),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}
