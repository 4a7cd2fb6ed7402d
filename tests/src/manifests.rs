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
