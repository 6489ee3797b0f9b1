//! YAML text → a small tree with the line of every node, so an error in a task file can name
//! where it is. SkyPilot reads its files with PyYAML (YAML 1.1); the loader here is YAML 1.2,
//! and the readers in this module accept 1.1's `yes`/`no`/`on`/`off` where they take a
//! boolean.

use saphyr::{LoadableYamlNode, MarkedYamlOwned, ScalarOwned, YamlDataOwned};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Yaml {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Keys in file order.
    Map(Vec<(String, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub value: Yaml,
    /// 1-based.
    pub line: usize,
}

impl Node {
    /// What it is, for messages (never a string's text: it may be a secret).
    pub fn kind(&self) -> &'static str {
        match self.value {
            Yaml::Null => "nothing (null)",
            Yaml::Bool(_) => "a boolean",
            Yaml::Int(_) => "an integer",
            Yaml::Float(_) => "a number",
            Yaml::Str(_) => "a string",
            Yaml::Seq(_) => "a list",
            Yaml::Map(_) => "a mapping",
        }
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Yaml::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// The one document of `text` (`None` when it is empty); `Err((line, message))` when it is
/// not YAML or holds several documents.
pub(crate) fn load(text: &str) -> Result<Option<Node>, (usize, String)> {
    let docs = MarkedYamlOwned::load_from_str(text)
        .map_err(|e| (e.marker().line(), e.info().to_string()))?;
    let mut docs = docs.into_iter();
    let Some(first) = docs.next() else {
        return Ok(None);
    };
    if let Some(second) = docs.next() {
        return Err((
            second.span.start.line(),
            "one task per file; this one holds several YAML documents (a SkyPilot pipeline)"
                .to_string(),
        ));
    }
    node(first).map(|n| match n.value {
        Yaml::Null => None,
        _ => Some(n),
    })
}

fn node(y: MarkedYamlOwned) -> Result<Node, (usize, String)> {
    let line = y.span.start.line().max(1);
    let value = match y.data {
        YamlDataOwned::Value(s) => match s {
            ScalarOwned::Null => Yaml::Null,
            ScalarOwned::Boolean(b) => Yaml::Bool(b),
            ScalarOwned::Integer(i) => Yaml::Int(i),
            ScalarOwned::FloatingPoint(f) => Yaml::Float(f.into_inner()),
            ScalarOwned::String(s) => Yaml::Str(s),
        },
        YamlDataOwned::Representation(s, _, _) => Yaml::Str(s),
        YamlDataOwned::Tagged(_, inner) => return node(*inner),
        YamlDataOwned::Sequence(items) => {
            Yaml::Seq(items.into_iter().map(node).collect::<Result<_, _>>()?)
        }
        YamlDataOwned::Mapping(m) => {
            let mut out = Vec::with_capacity(m.len());
            for (k, v) in m {
                let key_line = k.span.start.line().max(1);
                let key = match node(k)?.value {
                    Yaml::Str(s) => s,
                    Yaml::Int(i) => i.to_string(),
                    Yaml::Float(x) => x.to_string(),
                    Yaml::Bool(b) => b.to_string(),
                    _ => return Err((key_line, "a mapping key must be a plain value".into())),
                };
                let mut v = node(v)?;
                // An empty value (`key:`) is marked where the next key starts; use the key's.
                if v.value == Yaml::Null {
                    v.line = key_line;
                }
                out.push((key, v));
            }
            Yaml::Map(out)
        }
        YamlDataOwned::Alias(_) | YamlDataOwned::BadValue => {
            return Err((line, "an alias or value this reader does not take".into()));
        }
    };
    Ok(Node { value, line })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_the_three_accelerator_forms() {
        let n = load("name: a\nresources:\n  accelerators: {V100:1, A100:1}\n  x: [A100:8]\n  y: {V100: 2}\n")
            .expect("yaml")
            .expect("a document");
        let r = n.get("resources").expect("resources");
        assert_eq!(r.line, 3);
        let set = r.get("accelerators").expect("set");
        assert_eq!(set.line, 3);
        let Yaml::Map(items) = &set.value else {
            panic!("a set is a mapping of null values: {set:?}")
        };
        let keys: Vec<&str> = items.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["V100:1", "A100:1"]);
        assert!(items.iter().all(|(_, v)| v.value == Yaml::Null));
        assert_eq!(
            r.get("x").map(|x| &x.value),
            Some(&Yaml::Seq(vec![Node {
                value: Yaml::Str("A100:8".into()),
                line: 4
            }]))
        );
        assert_eq!(
            r.get("y").and_then(|y| y.get("V100")).map(|v| &v.value),
            Some(&Yaml::Int(2))
        );
    }

    #[test]
    fn errors_and_empty_files() {
        assert_eq!(load("").expect("empty"), None);
        assert_eq!(load("# only a comment\n").expect("empty"), None);
        let (line, _) = load("a: 1\nb: [1, 2\n").expect_err("unclosed");
        assert!(line >= 2, "{line}");
        let (line, msg) = load("a: 1\n---\nb: 2\n").expect_err("two documents");
        assert_eq!(line, 3, "where the second document's content starts");
        assert!(msg.contains("several"), "{msg}");
    }
}
