//! The modules' READMEs and the examples against the modules' variables and outputs.

use super::*;

// ---------------------------------------------------------------------------------------------
// READMEs and examples

/// Names in the first column (`| \`name\` |`) of the table under a README heading.
fn readme_table(readme: &str, heading: &str) -> BTreeSet<String> {
    let Some(start) = readme.find(&format!("\n{heading}\n")) else {
        return BTreeSet::new();
    };
    readme[start + heading.len() + 2..]
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

fn declared(files: &[TfFile], kind: &str) -> BTreeSet<String> {
    owned(
        blocks(files, kind, &[])
            .into_iter()
            .map(|(_, b)| labels(b)[0]),
    )
}

#[test]
fn module_readmes_document_every_variable_and_output() {
    for name in ["aws-controller", "gcp-controller"] {
        let dir = module(name);
        let files = tf_files(&dir);
        let file = format!("terraform/modules/{name}/README.md");
        let readme = std::fs::read_to_string(dir.join("README.md"))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        for (kind, heading) in [("variable", "## Variables"), ("output", "## Outputs")] {
            assert_same_set(
                &file,
                &format!("the {kind}s in the table under '{heading}' and the module's {kind}s"),
                &readme_table(&readme, heading),
                &declared(&files, kind),
            );
        }
    }
}

/// `module.tern.NAME` references in an example's expressions.
fn module_outputs_used(files: &[TfFile]) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (_, b) in blocks(files, "output", &[]) {
        let value = attr(b, "value").map(text).unwrap_or_default();
        if let Some(rest) = value.strip_prefix("module.tern.") {
            used.insert(rest.to_owned());
        }
    }
    used
}

#[test]
fn examples_call_the_modules_with_real_variables_and_outputs() {
    let meta = [
        "source",
        "version",
        "providers",
        "count",
        "for_each",
        "depends_on",
    ];
    for name in ["aws-controller", "gcp-controller"] {
        let module_files = tf_files(&module(name));
        let example = tf_files(&repo().join("terraform/examples").join(name));
        let (file, call) = the_block(&example, "module", &["tern"]);
        assert_eq!(
            attr(call, "source").map(text),
            Some(format!("\"../../modules/{name}\"")),
            "{file}: the example must use its module"
        );
        let passed = owned(
            call.body()
                .attributes()
                .map(|a| a.key())
                .filter(|k| !meta.contains(k)),
        );
        let variables = declared(&module_files, "variable");
        let unknown: Vec<&String> = passed.difference(&variables).collect();
        assert!(
            unknown.is_empty(),
            "{file}: no such module variables: {unknown:?}"
        );
        let required = owned(
            blocks(&module_files, "variable", &[])
                .into_iter()
                .filter(|(_, b)| attr(b, "default").is_none())
                .map(|(_, b)| labels(b)[0]),
        );
        let unset: Vec<&String> = required.difference(&passed).collect();
        assert!(
            unset.is_empty(),
            "{file}: required variables not passed: {unset:?}"
        );
        let outputs = declared(&module_files, "output");
        let missing: Vec<String> = module_outputs_used(&example)
            .into_iter()
            .filter(|o| !outputs.contains(o))
            .collect();
        assert!(
            missing.is_empty(),
            "{file}: no such module outputs: {missing:?}"
        );
    }
}
