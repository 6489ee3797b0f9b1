//! Schemas as Terraform reads them: a block of attributes, each with a cty type written as
//! JSON (`"string"`, `["list","string"]`, `"dynamic"`).

use crate::tfplugin6::schema::{Attribute, Block};
use crate::tfplugin6::{Schema, StringKind};

/// How an attribute is set.
#[derive(Clone, Copy)]
pub enum Mode {
    Required,
    Optional,
    Computed,
}

pub fn attr(name: &str, ty: &str, mode: Mode, description: &str) -> Attribute {
    let (required, optional, computed) = match mode {
        Mode::Required => (true, false, false),
        Mode::Optional => (false, true, false),
        Mode::Computed => (false, false, true),
    };
    Attribute {
        name: name.to_string(),
        r#type: ty.as_bytes().to_vec(),
        nested_type: None,
        description: description.to_string(),
        required,
        optional,
        computed,
        sensitive: false,
        description_kind: StringKind::Plain as i32,
        deprecated: false,
    }
}

pub fn sensitive(mut a: Attribute) -> Attribute {
    a.sensitive = true;
    a
}

pub fn schema(version: i64, description: &str, attributes: Vec<Attribute>) -> Schema {
    Schema {
        version,
        block: Some(Block {
            version,
            attributes,
            block_types: Vec::new(),
            description: description.to_string(),
            description_kind: StringKind::Plain as i32,
            deprecated: false,
        }),
    }
}

/// The cty type of a list of objects with these (name, type) attributes.
pub fn list_of_objects(fields: &[(&str, &str)]) -> String {
    let inner: Vec<String> = fields
        .iter()
        .map(|(n, t)| {
            format!(
                "{}:{}",
                serde_json::to_string(n).unwrap(),
                object_type_json(t)
            )
        })
        .collect();
    format!("[\"list\",[\"object\",{{{}}}]]", inner.join(","))
}

/// The cty type of one object with these attributes.
pub fn object_of(fields: &[(&str, &str)]) -> String {
    let list = list_of_objects(fields);
    // ["list", X] → X
    list["[\"list\",".len()..list.len() - 1].to_string()
}

fn object_type_json(t: &str) -> String {
    if t.starts_with('[') || t.starts_with('"') {
        t.to_string()
    } else {
        format!("\"{t}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_types_are_valid_json() {
        let t = list_of_objects(&[("a", "string"), ("b", "number")]);
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert_eq!(
            v,
            serde_json::json!(["list", ["object", {"a": "string", "b": "number"}]])
        );
        let o: serde_json::Value = serde_json::from_str(&object_of(&[("a", "bool")])).unwrap();
        assert_eq!(o, serde_json::json!(["object", {"a": "bool"}]));
    }
}
