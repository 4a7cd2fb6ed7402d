//! Logging set up from the configuration.

use baton_config::{LogConfig, LogFormat};
use tracing_subscriber::EnvFilter;

/// Installs the global tracing subscriber. `RUST_LOG`, when set, wins over `log.level` so a
/// person debugging can raise one module's level without editing the config.
pub fn init(log: &LogConfig) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if let Err(error) = result {
        eprintln!("logging was already initialised: {error}");
    }
}
