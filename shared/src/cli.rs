//! Command line shared by both binaries: where the configuration comes from and what to print.

use std::path::PathBuf;

use baton_config::{CONFIG_FILE_ENV, Config, ConfigError};

#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArgs {
    /// YAML configuration file (overrides built-in defaults; environment variables override it).
    #[arg(long, env = CONFIG_FILE_ENV, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration as YAML and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Print the reference of every configuration key as Markdown and exit.
    #[arg(long)]
    pub print_config_reference: bool,
}

/// What `main` should do after reading its arguments.
#[derive(Debug)]
pub enum Startup {
    /// Run with this configuration.
    Run(Box<Config>),
    /// Print this and exit successfully.
    Print(String),
}

impl ConfigArgs {
    pub fn startup(&self) -> Result<Startup, ConfigError> {
        if self.print_config_reference {
            return Ok(Startup::Print(baton_config::reference_markdown()));
        }
        let config = Config::load(self.config.as_deref())?;
        if self.print_config {
            return Ok(Startup::Print(config.to_yaml()));
        }
        Ok(Startup::Run(Box::new(config)))
    }
}

/// A warning for each `BATON_` variable of the environment that is not configuration and does
/// not look like a Service's link variable (those Kubernetes gives every pod): most likely a
/// misspelt top-level key, which is ignored rather than stopping a pod that shares its
/// environment with the platform.
fn unread_variables() -> Vec<String> {
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    baton_config::ignored_variables(names)
        .into_iter()
        .filter(|variable| !variable.service_link)
        .map(|variable| {
            format!(
                "environment variable {} is not read: no configuration key is named so \
                 (--print-config-reference lists them)",
                variable.name
            )
        })
        .collect()
}

/// The environment variable tokio reads for its number of worker threads; baton's default is 1.
const WORKER_THREADS_ENV: &str = "TOKIO_WORKER_THREADS";

/// The async runtime: one worker thread unless `TOKIO_WORKER_THREADS` says otherwise. Both
/// binaries wait on the API server, not on the CPU (the webhook serves admission on its HTTP
/// server's own threads), and each worker thread that allocates gets its own glibc malloc arena
/// which keeps what it freed: with one worker instead of two the controller watching 9,000 pods
/// holds 7 MiB less and the webhook 5 MiB less (docs/benchmarks.md, Memory), and on a node with
/// many cores tokio would start one worker per core.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os(WORKER_THREADS_ENV).is_none() {
        builder.worker_threads(1);
    }
    builder.enable_all().build()
}

/// A baton binary's whole `main`: the one TLS crypto provider installed before anything else,
/// the shared command line (`--config`, `--print-config`, `--print-config-reference`, `--help`,
/// `--version`) parsed, then [`run_binary`].
pub fn main<F, Fut>(name: &'static str, about: &'static str, run: F) -> std::process::ExitCode
where
    F: FnOnce(Config) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use clap::{Args, FromArgMatches};
    crate::crypto::install_default_provider();
    let command = clap::Command::new(name)
        .version(env!("CARGO_PKG_VERSION"))
        .about(about);
    let matches = ConfigArgs::augment_args(command).get_matches();
    let args = ConfigArgs::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    run_binary(name, &args, run)
}

/// The life of a baton binary after its arguments are parsed: print what was asked for, or
/// load the configuration, set up logging and the runtime, and run `run` to the end. Exit codes:
/// 0 on a clean stop, 2 for a bad configuration (the message names the key), 1 when `run` fails.
pub fn run_binary<F, Fut>(name: &str, args: &ConfigArgs, run: F) -> std::process::ExitCode
where
    F: FnOnce(Config) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use std::process::ExitCode;
    let config = match args.startup() {
        Ok(Startup::Run(config)) => config,
        Ok(Startup::Print(text)) => {
            print!("{text}");
            for warning in unread_variables() {
                eprintln!("{name}: {warning}");
            }
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("{name}: {error}");
            return ExitCode::from(2);
        }
    };
    crate::telemetry::init(&config.log);
    for warning in unread_variables() {
        tracing::warn!("{warning}");
    }
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{name}: starting the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(*config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "{name} stopped");
            ExitCode::FAILURE
        }
    }
}
