//! The install the documentation gives, read from the documentation itself so that what is
//! tested is what a reader does: the fenced blocks marked `<!-- install -->` in README.md and
//! docs/*.md. A YAML block whose first line is `# <path>` is a file the reader writes at that
//! path; the lines of a sh block are commands they run, from the checkout's root.
//!
//! The tests lay that out in a folder standing for the checkout (deploy/ linked into it, so the
//! overlay's relative paths resolve as they do for the reader), substitute only the names of
//! the reader's world (the groups' namespace and the image they pushed) and run the commands
//! with the installed kubectl. A command the tests do not know how to run fails the test,
//! naming it: an install step nobody runs is an install step that may drift.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::ControlPlane;
use crate::manifests::deploy_dir;
use crate::renders::{assert_namespaces, documents};

/// What marks an install snippet: the line before its fence.
pub const MARKER: &str = "<!-- install -->";
/// The groups' namespace of the documentation's example.
pub const EXAMPLE_NAMESPACE: &str = "ingesters";
/// The repository the documentation's example pushes the image to.
pub const EXAMPLE_REPOSITORY: &str = "registry.example.com/baton";
/// The namespace deploy/ names for the groups as it ships: an install that leaves it anywhere
/// has missed a place.
pub const SHIPPED_NAMESPACE: &str = "default";
/// baton's own namespace, as deploy/ ships it.
pub const SYSTEM_NAMESPACE: &str = "baton-system";

/// The digest the documentation's example pins (a placeholder the reader replaces).
fn example_digest() -> String {
    format!("sha256:{}", "0".repeat(64))
}

fn repository_root() -> PathBuf {
    deploy_dir()
        .join("..")
        .canonicalize()
        .expect("the checkout's root")
}

/// A fenced block marked [`MARKER`].
#[derive(Debug, Clone)]
pub struct Snippet {
    /// The document, relative to the checkout's root (`README.md`, `docs/operations.md`).
    pub document: String,
    /// The line of its opening fence, from 1.
    pub line: usize,
    /// The fence's language (`sh`, `yaml`).
    pub language: String,
    /// Its lines, without the indentation of the fence.
    pub text: String,
}

impl Snippet {
    fn at(&self) -> String {
        format!("{}:{}", self.document, self.line)
    }
}

/// README.md and every docs/*.md, relative to the checkout's root, README first.
pub fn documents_read() -> Vec<String> {
    let root = repository_root();
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("an entry of docs/").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| format!("docs/{}", path.file_name().unwrap().to_str().unwrap()))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_owned());
    docs
}

/// The install snippets of `document` (relative to the checkout's root), in order.
pub fn snippets(document: &str) -> Vec<Snippet> {
    let text = std::fs::read_to_string(repository_root().join(document))
        .unwrap_or_else(|error| panic!("reading {document}: {error}"));
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        if lines[at].trim() != MARKER {
            at += 1;
            continue;
        }
        let fence = lines
            .get(at + 1)
            .filter(|line| line.trim_start().starts_with("```"))
            .unwrap_or_else(|| {
                panic!(
                    "{document}:{}: {MARKER} is followed by a fenced block",
                    at + 1
                )
            });
        let indent = &fence[..fence.len() - fence.trim_start().len()];
        let language = fence.trim_start().trim_start_matches('`').trim().to_owned();
        let body: Vec<&str> = lines[at + 2..]
            .iter()
            .take_while(|line| !line.trim_start().starts_with("```"))
            .copied()
            .collect();
        assert!(
            at + 2 + body.len() < lines.len(),
            "{document}:{}: the block after {MARKER} is closed",
            at + 2
        );
        let text = body
            .iter()
            .map(|line| format!("{}\n", line.strip_prefix(indent).unwrap_or(line.trim())))
            .collect();
        found.push(Snippet {
            document: document.to_owned(),
            line: at + 2,
            language,
            text,
        });
        at += 2 + body.len() + 1;
    }
    found
}

/// One command of an install snippet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `./scripts/image.sh`: the image, which the tests have built once per process
    /// (`baton_image::BatonImage`) where a node runs it.
    BuildImage,
    /// `kubectl <args>`, run with the installed kubectl from the checkout's root.
    Kubectl(Vec<String>),
}

impl Step {
    /// Whether this is a `kubectl apply`.
    pub fn is_apply(&self) -> bool {
        matches!(self, Step::Kubectl(args) if args.first().is_some_and(|verb| verb == "apply"))
    }

    /// The folder a `kubectl apply … -k <folder>` applies.
    pub fn kustomization(&self) -> Option<&str> {
        let Step::Kubectl(args) = self else {
            return None;
        };
        args.iter()
            .position(|arg| arg == "-k" || arg == "--kustomize")
            .and_then(|at| args.get(at + 1))
            .map(String::as_str)
    }
}

/// The steps of a sh snippet: one command a line, `# …` comments dropped. Only what the tests
/// can run without a shell is accepted (no quoting, variables, pipes or continuations).
fn steps(snippet: &Snippet) -> Vec<Step> {
    let mut steps = Vec::new();
    for (offset, line) in snippet.text.lines().enumerate() {
        let at = format!("{}:{}", snippet.document, snippet.line + 1 + offset);
        let command = match line.find('#') {
            Some(comment) if comment == 0 || line[..comment].ends_with(char::is_whitespace) => {
                &line[..comment]
            }
            _ => line,
        }
        .trim();
        if command.is_empty() {
            continue;
        }
        assert!(
            !command.contains(['\'', '"', '$', '|', '\\', ';', '&', '<', '>', '`']),
            "{at}: `{command}`: the tests run install commands without a shell (write it without \
             quoting, variables, pipes or continuations, or teach tests/src/install_docs.rs)"
        );
        let words: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
        match words[0].as_str() {
            "./scripts/image.sh" | "scripts/image.sh" if words.len() == 1 => {
                steps.push(Step::BuildImage)
            }
            "kubectl" => steps.push(Step::Kubectl(words[1..].to_vec())),
            _ => panic!(
                "{at}: `{command}` is not an install step the tests know how to run (teach \
                 tests/src/install_docs.rs)"
            ),
        }
    }
    steps
}

/// The install a document gives, laid out in a folder standing for the checkout: the files its
/// snippets write and the commands they run.
#[derive(Debug)]
pub struct DocumentedInstall {
    /// The document, relative to the checkout's root.
    pub document: String,
    /// The folder standing for the checkout (deploy/ linked into it).
    pub root: PathBuf,
    /// The files the snippets write, relative to `root`, as written there.
    pub files: Vec<(PathBuf, String)>,
    /// The commands, in order.
    pub steps: Vec<Step>,
}

/// The documents that give an install (at least one snippet marked [`MARKER`]).
pub fn documents_with_an_install() -> Vec<String> {
    documents_read()
        .into_iter()
        .filter(|document| !snippets(document).is_empty())
        .collect()
}

impl DocumentedInstall {
    /// Lays out the install of `document` in `folder` (created, or written over: an upgrade
    /// writes the same files again), naming `namespace` where the document names its example's
    /// groups' namespace and `image` (`repository@sha256:…`) where it names the image it
    /// pushed. `extra_patches` (kustomize `patches:` items) are added to the one
    /// kustomization.yaml it writes, after its own.
    pub fn lay_out(
        document: &str,
        folder: &Path,
        namespace: &str,
        image: &str,
        extra_patches: &[&str],
    ) -> Self {
        let snippets = snippets(document);
        assert!(!snippets.is_empty(), "{document} has no {MARKER} snippet");
        std::fs::create_dir_all(folder).unwrap();
        let link = folder.join("deploy");
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(repository_root().join("deploy"), &link).unwrap();
        }
        let (repository, digest) = image.split_once('@').expect("an image by digest");
        let mut install = DocumentedInstall {
            document: document.to_owned(),
            root: folder.to_owned(),
            files: Vec::new(),
            steps: Vec::new(),
        };
        for snippet in &snippets {
            match snippet.language.as_str() {
                "sh" => install.steps.extend(steps(snippet)),
                "yaml" => {
                    let first = snippet.text.lines().next().unwrap_or_default();
                    let path = first
                        .strip_prefix("# ")
                        .filter(|path| !path.contains(' '))
                        .unwrap_or_else(|| {
                            panic!(
                                "{}: a YAML install snippet starts with `# <the file it is>`",
                                snippet.at()
                            )
                        });
                    install
                        .files
                        .push((PathBuf::from(path), snippet.text.clone()));
                }
                other => panic!(
                    "{}: an install snippet in `{other}`: the tests read sh and yaml",
                    snippet.at()
                ),
            }
        }
        let all_files: String = install
            .files
            .iter()
            .map(|(_, text)| text.as_str())
            .collect();
        let placeholder_digest = example_digest();
        for (example, what) in [
            (EXAMPLE_NAMESPACE, "the groups' namespace"),
            (EXAMPLE_REPOSITORY, "the repository pushed to"),
            (placeholder_digest.as_str(), "the image's digest"),
        ] {
            assert!(
                all_files.contains(example),
                "{document}'s install names {what} as `{example}`, which the tests replace"
            );
        }
        let kustomizations = install
            .files
            .iter()
            .filter(|(path, _)| path.ends_with("kustomization.yaml"))
            .count();
        assert!(
            extra_patches.is_empty() || kustomizations == 1,
            "{document}'s install writes one kustomization.yaml to add patches to"
        );
        for (path, text) in &install.files {
            let mut text = text
                .replace(EXAMPLE_NAMESPACE, namespace)
                .replace(EXAMPLE_REPOSITORY, repository)
                .replace(&placeholder_digest, digest);
            if path.ends_with("kustomization.yaml") && !extra_patches.is_empty() {
                let patches = extra_patches.concat();
                text = match text.split_once("patches:\n") {
                    Some((before, after)) => format!("{before}patches:\n{patches}{after}"),
                    None => format!("{text}patches:\n{patches}"),
                };
            }
            let at = folder.join(path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(&at, text).unwrap();
        }
        install
    }

    /// The folders the install applies (`kubectl apply … -k <folder>`), relative to `root`.
    pub fn applied_kustomizations(&self) -> Vec<&str> {
        self.steps
            .iter()
            .filter(|step| step.is_apply())
            .filter_map(Step::kustomization)
            .collect()
    }

    /// What `kubectl kustomize <folder>` renders, from the checkout's root.
    pub fn render(&self, folder: &str) -> Vec<Value> {
        let (ok, rendered) = self.kubectl(None, &["kustomize", folder]);
        assert!(
            ok,
            "{}: kubectl kustomize {folder} failed:\n{rendered}",
            self.document
        );
        documents(&rendered)
    }

    /// The installed kubectl with `args`, from the checkout's root (against `control_plane`
    /// when given): its success and output.
    pub fn kubectl(&self, control_plane: Option<&ControlPlane>, args: &[&str]) -> (bool, String) {
        run_in(&self.root, args, control_plane)
    }

    /// Runs the `kubectl apply` steps, as written, against `control_plane`; panics with
    /// kubectl's output when one fails.
    pub fn apply(&self, control_plane: &ControlPlane) {
        for step in self.steps.iter().filter(|step| step.is_apply()) {
            let Step::Kubectl(args) = step else {
                unreachable!("an apply is a kubectl step")
            };
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (ok, output) = self.kubectl(Some(control_plane), &args);
            assert!(
                ok,
                "{}: `kubectl {}` failed:\n{output}",
                self.document,
                args.join(" ")
            );
        }
    }

    /// The kubectl steps after the applies (the waits), as written.
    pub fn waits(&self) -> Vec<Vec<String>> {
        let last_apply = self
            .steps
            .iter()
            .rposition(Step::is_apply)
            .expect("the install applies something");
        self.steps[last_apply + 1..]
            .iter()
            .map(|step| match step {
                Step::Kubectl(args) => args.clone(),
                Step::BuildImage => panic!("{}: the image is built after the apply", self.document),
            })
            .collect()
    }
}

/// The installed kubectl (the control plane's release, when given) with `args` in `folder`.
fn run_in(folder: &Path, args: &[&str], control_plane: Option<&ControlPlane>) -> (bool, String) {
    let mut command = match control_plane {
        Some(control_plane) => {
            let mut command = std::process::Command::new(control_plane.kubectl());
            command.env("KUBECONFIG", control_plane.kubeconfig_path());
            command
        }
        None => std::process::Command::new(crate::control_plane::tool("kubectl")),
    };
    command.args(args).current_dir(folder);
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("kubectl runs (tests/control-plane/install.sh): {error}"));
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// Where a string of `objects` is exactly [`SHIPPED_NAMESPACE`]: `kind/name` and the field's
/// JSON pointer, one a place; none when the install named its namespace everywhere.
pub fn shipped_namespace_left(objects: &[Value]) -> Vec<String> {
    fn walk(value: &Value, pointer: String, found: &mut Vec<String>) {
        match value {
            Value::String(text) if text == SHIPPED_NAMESPACE => found.push(pointer),
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    walk(item, format!("{pointer}/{index}"), found);
                }
            }
            Value::Object(fields) => {
                for (key, field) in fields {
                    let key = key.replace('~', "~0").replace('/', "~1");
                    walk(field, format!("{pointer}/{key}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    for object in objects {
        let mut places = Vec::new();
        walk(object, String::new(), &mut places);
        found.extend(places.into_iter().map(|place| {
            format!(
                "{}/{} {place}",
                object["kind"].as_str().unwrap_or("?"),
                object["metadata"]["name"].as_str().unwrap_or("?")
            )
        }));
    }
    found
}

/// The image of every container (and init container) of every Deployment among `objects`:
/// `Deployment/name container` and its image.
pub fn deployment_images(objects: &[Value]) -> Vec<(String, String)> {
    let mut images = Vec::new();
    for object in objects
        .iter()
        .filter(|object| object["kind"] == "Deployment")
    {
        let spec = &object["spec"]["template"]["spec"];
        for list in ["initContainers", "containers"] {
            for container in spec[list].as_array().into_iter().flatten() {
                images.push((
                    format!(
                        "Deployment/{} {}",
                        object["metadata"]["name"].as_str().unwrap_or("?"),
                        container["name"].as_str().unwrap_or("?")
                    ),
                    container["image"].as_str().unwrap_or_default().to_owned(),
                ));
            }
        }
    }
    images
}

/// Asserts that `objects` (rendered, or read back from the API server) are baton installed as
/// the documentation's install sets it: both Deployments, every container on `image`, baton's
/// own objects in [`SYSTEM_NAMESPACE`] and `namespace` in every place that names the groups'.
pub fn assert_installed_as_set(objects: &[Value], namespace: &str, image: &str) {
    let images = deployment_images(objects);
    let deployments: std::collections::BTreeSet<&str> = images
        .iter()
        .map(|(container, _)| container.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        deployments.into_iter().collect::<Vec<_>>(),
        ["Deployment/baton-controller", "Deployment/baton-webhook"]
    );
    for (container, running) in &images {
        assert_eq!(running, image, "{container}'s image");
    }
    assert_namespaces(objects, SYSTEM_NAMESPACE, namespace);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(text: &str) -> Snippet {
        Snippet {
            document: "README.md".to_owned(),
            line: 10,
            language: "sh".to_owned(),
            text: text.to_owned(),
        }
    }

    #[test]
    fn a_sh_snippet_is_its_commands_without_comments() {
        let steps = steps(&sh("./scripts/image.sh   # the image\n\n\
             kubectl apply --server-side -k my-overlay\n\
             # a comment alone\n\
             kubectl -n baton-system rollout status deployment/baton-controller\n"));
        assert_eq!(
            steps,
            [
                Step::BuildImage,
                Step::Kubectl(
                    ["apply", "--server-side", "-k", "my-overlay"]
                        .map(str::to_owned)
                        .to_vec()
                ),
                Step::Kubectl(
                    [
                        "-n",
                        "baton-system",
                        "rollout",
                        "status",
                        "deployment/baton-controller"
                    ]
                    .map(str::to_owned)
                    .to_vec()
                ),
            ]
        );
        assert!(steps[1].is_apply());
        assert_eq!(steps[1].kustomization(), Some("my-overlay"));
        assert!(!steps[2].is_apply());
    }

    #[test]
    #[should_panic(expected = "README.md:12: `skopeo copy a b` is not an install step the tests")]
    fn a_command_the_tests_cannot_run_fails_naming_its_line() {
        steps(&sh("./scripts/image.sh\nskopeo copy a b\n"));
    }

    #[test]
    #[should_panic(expected = "README.md:11: `kubectl apply -k \"my overlay\"`: the tests run")]
    fn a_command_that_needs_a_shell_fails_naming_its_line() {
        steps(&sh("kubectl apply -k \"my overlay\"\n"));
    }
}
