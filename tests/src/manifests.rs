//! deploy/'s manifests as the tests read them: every YAML document under `deploy/`, as JSON
//! values, without rendering kustomize (the objects are the same; only names and namespaces
//! differ once rendered).

use std::path::{Path, PathBuf};

/// The repository's `deploy/` folder.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Every document of kind `kind` in deploy/'s YAML files.
pub fn deploy_objects(kind: &str) -> Vec<serde_json::Value> {
    fn yaml_files(dir: &Path, found: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir)
            .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                yaml_files(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "yaml") {
                found.push(path);
            }
        }
    }
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    files.sort();
    files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file)
                .unwrap_or_else(|error| panic!("reading {}: {error}", file.display()));
            serde_saphyr::from_multiple::<serde_json::Value>(&text)
                .unwrap_or_else(|error| panic!("parsing {}: {error}", file.display()))
        })
        .filter(|document| document["kind"] == kind)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The source files named in `text`: `core/…rs`, `tests/tests/…rs`,
    /// `operations/…libsonnet` and the like.
    fn named_sources(text: &str) -> Vec<String> {
        const ROOTS: [&str; 8] = [
            "core/",
            "controller/",
            "webhook/",
            "shared/",
            "plugin/",
            "config/",
            "tests/",
            "operations/",
        ];
        text.split(|c: char| !(c.is_ascii_alphanumeric() || "_/.-".contains(c)))
            .filter(|word| word.ends_with(".rs") || word.ends_with(".libsonnet"))
            .filter_map(|word| {
                ROOTS
                    .iter()
                    .filter_map(|root| word.find(root).map(|at| &word[at..]))
                    .min_by_key(|path| std::cmp::Reverse(path.len()))
            })
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_source_file_the_manifests_and_docs_name_exists() {
        let root = deploy_dir().join("..");
        let mut texts = Vec::new();
        for dir in ["deploy", "docs", "charts", "operations"] {
            let mut stack = vec![root.join(dir)];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir).expect("a folder") {
                    let path = entry.expect("an entry").path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if path.extension().is_some_and(|ext| {
                        ["yaml", "md", "tpl", "libsonnet"].iter().any(|e| ext == *e)
                    }) {
                        texts.push(path);
                    }
                }
            }
        }
        texts.push(root.join("README.md"));
        let mut missing = Vec::new();
        for text in &texts {
            let content = std::fs::read_to_string(text).expect("readable");
            for named in named_sources(&content) {
                if !root.join(&named).exists() {
                    missing.push(format!("{} names {named}", text.display()));
                }
            }
        }
        assert!(missing.is_empty(), "{missing:#?}");
        assert!(
            named_sources(
                "checked by tests/tests/rbac.rs, and `core/src/pods.rs`, \
                 'baton/operations/baton/baton.libsonnet'"
            ) == [
                "tests/tests/rbac.rs",
                "core/src/pods.rs",
                "operations/baton/baton.libsonnet"
            ]
        );
    }
}
