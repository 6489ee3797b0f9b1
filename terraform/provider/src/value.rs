//! Terraform values on the wire: cty's MessagePack encoding, read and written as
//! [`rmpv::Value`] trees. Objects are maps keyed by attribute name, null is nil, and a value
//! Terraform does not know yet (during plan) is a MessagePack extension. A `dynamic`
//! attribute carries its own type: `[type as JSON bytes, value]`. Values the provider does
//! not interpret (a `job` object) pass through untouched, so Terraform sees exactly the type
//! it sent and a second plan finds no change.

use rmpv::Value;

use crate::tfplugin6::DynamicValue;

/// cty's marker for an unknown value: extension 0 (extension 12 carries refinements).
const UNKNOWN_EXT: i8 = 0;
const REFINED_UNKNOWN_EXT: i8 = 12;

/// Why a value from Terraform could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    #[error("malformed MessagePack from Terraform: {0}")]
    MsgPack(String),
    #[error("malformed JSON state from Terraform: {0}")]
    Json(#[from] serde_json::Error),
    #[error("`{0}` is not known yet")]
    Unknown(String),
}

/// Decodes a value Terraform sent (MessagePack, or JSON for stored state).
pub fn decode(dv: Option<&DynamicValue>) -> Result<Value, ValueError> {
    let Some(dv) = dv else { return Ok(Value::Nil) };
    if !dv.msgpack.is_empty() {
        let mut bytes = dv.msgpack.as_slice();
        return rmpv::decode::read_value(&mut bytes)
            .map_err(|e| ValueError::MsgPack(e.to_string()));
    }
    if !dv.json.is_empty() {
        let json: serde_json::Value = serde_json::from_slice(&dv.json)?;
        return Ok(from_json(&json));
    }
    Ok(Value::Nil)
}

/// Encodes a value for Terraform.
pub fn encode(v: &Value) -> DynamicValue {
    let mut msgpack = Vec::new();
    rmpv::encode::write_value(&mut msgpack, v).expect("writing to a Vec cannot fail");
    DynamicValue {
        msgpack,
        json: Vec::new(),
    }
}

/// A value Terraform will know only after apply.
pub fn unknown() -> Value {
    Value::Ext(UNKNOWN_EXT, vec![0])
}

pub fn is_unknown(v: &Value) -> bool {
    matches!(v, Value::Ext(UNKNOWN_EXT | REFINED_UNKNOWN_EXT, _))
}

/// True when `v` or anything inside it is unknown.
pub fn has_unknown(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().any(has_unknown),
        Value::Map(pairs) => pairs.iter().any(|(_, v)| has_unknown(v)),
        other => is_unknown(other),
    }
}

/// Attribute `name` of an object value; `None` when the object is null or lacks it.
pub fn get<'a>(obj: &'a Value, name: &str) -> Option<&'a Value> {
    obj.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(name))
        .map(|(_, v)| v)
}

/// A string attribute; `Ok(None)` when null, an error when not known yet.
pub fn string(obj: &Value, name: &str) -> Result<Option<String>, ValueError> {
    match get(obj, name) {
        None | Some(Value::Nil) => Ok(None),
        Some(v) if is_unknown(v) => Err(ValueError::Unknown(name.to_string())),
        Some(v) => Ok(v.as_str().map(str::to_string)),
    }
}

/// A number attribute; `Ok(None)` when null, an error when not known yet.
pub fn number(obj: &Value, name: &str) -> Result<Option<f64>, ValueError> {
    match get(obj, name) {
        None | Some(Value::Nil) => Ok(None),
        Some(v) if is_unknown(v) => Err(ValueError::Unknown(name.to_string())),
        Some(v) => Ok(as_f64(v)),
    }
}

/// Sets attribute `name` of an object value (added when missing).
pub fn set(obj: &mut Value, name: &str, v: Value) {
    if !obj.is_map() {
        *obj = Value::Map(Vec::new());
    }
    let Value::Map(pairs) = obj else {
        unreachable!()
    };
    match pairs.iter_mut().find(|(k, _)| k.as_str() == Some(name)) {
        Some((_, slot)) => *slot = v,
        None => pairs.push((Value::from(name), v)),
    }
}

/// An object value from attribute pairs.
pub fn object<'a>(pairs: impl IntoIterator<Item = (&'a str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

pub fn opt_str(s: Option<&str>) -> Value {
    s.map_or(Value::Nil, Value::from)
}

pub fn num(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        Value::from(x as i64)
    } else {
        Value::F64(x)
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => i.as_f64(),
        Value::F32(x) => Some(f64::from(*x)),
        Value::F64(x) => Some(*x),
        // cty writes numbers beyond 64 bits as decimal strings.
        Value::String(s) => s.as_str()?.parse().ok(),
        _ => None,
    }
}

/// The value inside a `dynamic` attribute, as JSON: `Ok(None)` when null, an error naming
/// the attribute when any part of it is unknown.
pub fn dynamic_json(obj: &Value, name: &str) -> Result<Option<serde_json::Value>, ValueError> {
    let Some(v) = get(obj, name) else {
        return Ok(None);
    };
    if has_unknown(v) {
        return Err(ValueError::Unknown(name.to_string()));
    }
    match v {
        Value::Nil => Ok(None),
        Value::Array(pair) if pair.len() == 2 => {
            let ty = match &pair[0] {
                Value::Binary(b) => serde_json::from_slice(b).unwrap_or_default(),
                Value::String(s) => {
                    serde_json::from_str(s.as_str().unwrap_or("null")).unwrap_or_default()
                }
                _ => serde_json::Value::Null,
            };
            Ok(Some(typed_json(&pair[1], &ty)))
        }
        other => Ok(Some(to_json(other))),
    }
}

/// A known value as JSON, read with its cty type: cty writes a number that has no exact
/// float64 form (0.104) as a decimal string, which only the type tells from a string.
fn typed_json(v: &Value, ty: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    let kind = ty.as_array().and_then(|a| a.first()).and_then(J::as_str);
    match (v, ty.as_str(), kind) {
        (Value::String(s), Some("number"), _) => s
            .as_str()
            .and_then(|t| t.parse::<f64>().ok())
            .map_or_else(|| to_json(v), J::from),
        (Value::Array(items), _, Some("tuple")) => {
            let types = ty[1].as_array().cloned().unwrap_or_default();
            J::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| typed_json(x, types.get(i).unwrap_or(&J::Null)))
                    .collect(),
            )
        }
        (Value::Array(items), _, Some("list" | "set")) => {
            J::Array(items.iter().map(|x| typed_json(x, &ty[1])).collect())
        }
        (Value::Map(pairs), _, Some("object" | "map")) => J::Object(
            pairs
                .iter()
                .filter_map(|(k, x)| {
                    let k = k.as_str()?;
                    let t = if kind == Some("map") {
                        &ty[1]
                    } else {
                        &ty[1][k]
                    };
                    Some((k.to_string(), typed_json(x, t)))
                })
                .collect(),
        ),
        _ => to_json(v),
    }
}

/// A known value as JSON (numbers stay integers where they are whole).
pub fn to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Nil => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Integer(i) => i
            .as_i64()
            .map(J::from)
            .or_else(|| i.as_u64().map(J::from))
            .unwrap_or(J::Null),
        Value::F32(_) | Value::F64(_) => as_f64(v).map_or(J::Null, J::from),
        Value::String(s) => J::from(s.as_str().unwrap_or_default()),
        Value::Binary(b) => J::from(String::from_utf8_lossy(b).into_owned()),
        Value::Array(items) => J::Array(items.iter().map(to_json).collect()),
        Value::Map(pairs) => J::Object(
            pairs
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), to_json(v))))
                .collect(),
        ),
        Value::Ext(..) => J::Null,
    }
}

/// JSON (stored state) as a MessagePack value.
pub fn from_json(j: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match j {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => n
            .as_i64()
            .map(Value::from)
            .unwrap_or_else(|| Value::F64(n.as_f64().unwrap_or(0.0))),
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => Value::Array(items.iter().map(from_json).collect()),
        J::Object(map) => Value::Map(
            map.iter()
                .map(|(k, v)| (Value::from(k.as_str()), from_json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_round_trip_through_msgpack() {
        let v = object([("name", Value::from("a")), ("n", num(3.0)), ("x", num(0.5))]);
        let back = decode(Some(&encode(&v))).unwrap();
        assert_eq!(back, v);
        assert_eq!(string(&back, "name").unwrap().as_deref(), Some("a"));
        assert_eq!(number(&back, "x").unwrap(), Some(0.5));
        assert_eq!(string(&back, "missing").unwrap(), None);
    }

    #[test]
    fn unknown_values_are_reported_by_name() {
        let v = object([("name", unknown())]);
        let err = string(&v, "name").unwrap_err();
        assert_eq!(err.to_string(), "`name` is not known yet");
        let dynamic = object([(
            "job",
            Value::Array(vec![
                Value::Binary(br#"["object",{"a":"string"}]"#.to_vec()),
                object([("a", unknown())]),
            ]),
        )]);
        assert!(dynamic_json(&dynamic, "job").is_err());
    }

    #[test]
    fn a_dynamic_value_is_read_without_its_type() {
        let v = object([(
            "job",
            Value::Array(vec![
                Value::Binary(br#"["object",{"a":"number","b":["tuple",["string"]]}]"#.to_vec()),
                object([("a", num(2.0)), ("b", Value::Array(vec![Value::from("x")]))]),
            ]),
        )]);
        let j = dynamic_json(&v, "job").unwrap().unwrap();
        assert_eq!(j, serde_json::json!({"a": 2, "b": ["x"]}));
    }

    #[test]
    fn inexact_numbers_sent_as_strings_are_numbers_by_type() {
        let v = object([(
            "job",
            Value::Array(vec![
                Value::Binary(br#"["object",{"s":"number","t":"string","o":["tuple",[["object",{"x":"number"}]]]}]"#.to_vec()),
                object([
                    ("s", Value::from("0.104")),
                    ("t", Value::from("1")),
                    ("o", Value::Array(vec![object([("x", Value::from("2.5"))])])),
                ]),
            ]),
        )]);
        let j = dynamic_json(&v, "job").unwrap().unwrap();
        assert_eq!(
            j,
            serde_json::json!({"s": 0.104, "t": "1", "o": [{"x": 2.5}]})
        );
    }

    #[test]
    fn json_state_is_read_too() {
        let dv = DynamicValue {
            msgpack: Vec::new(),
            json: br#"{"name":"a","progress":0.25}"#.to_vec(),
        };
        let v = decode(Some(&dv)).unwrap();
        assert_eq!(number(&v, "progress").unwrap(), Some(0.25));
    }
}
