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
