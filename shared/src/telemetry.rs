//! Logging set up from the configuration.
//!
//! The filter is a [`Targets`] list (`level`, `target=level`, comma-separated: what
//! `log.level` accepts), not an `EnvFilter`: no span or field directives to match per event,
//! and no regular expressions compiled at start (that code stayed resident in every process).

use baton_config::{LogConfig, LogFormat};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the global tracing subscriber. `RUST_LOG`, when set, wins over `log.level` so a
/// person debugging can raise one module's level without editing the config.
pub fn init(log: &LogConfig) {
    let from_env = std::env::var("RUST_LOG").ok().map(|value| {
        let parsed = value.parse::<Targets>();
        (value, parsed)
    });
    let (filter, rejected) = match from_env {
        Some((_, Ok(filter))) => (filter, None),
        Some((value, Err(error))) => (level(&log.level), Some((value, error))),
        None => (level(&log.level), None),
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let result = match log.format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(filter)
            .with(fmt.json().flatten_event(true))
            .try_init(),
    };
    if let Err(error) = result {
        eprintln!("logging was already initialised: {error}");
    }
    if let Some((value, error)) = rejected {
        tracing::warn!(
            rust_log = %value, %error,
            "RUST_LOG is not a list of `level` or `target=level` directives; using log.level"
        );
    }
}

/// `log.level`, which the configuration checked already; "info" if it still does not parse.
fn level(level: &str) -> Targets {
    level
        .parse()
        .unwrap_or_else(|_| Targets::new().with_default(tracing::Level::INFO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;
    use tracing::level_filters::LevelFilter;

    #[test]
    fn log_level_directives_set_the_default_and_per_target_levels() {
        let filter = level("warn,baton_webhook=debug,kube::runtime=off");
        assert!(filter.would_enable("anything", &Level::WARN));
        assert!(!filter.would_enable("anything", &Level::INFO));
        assert!(filter.would_enable("baton_webhook::evictions", &Level::DEBUG));
        assert!(!filter.would_enable("baton_webhook", &Level::TRACE));
        assert!(!filter.would_enable("kube::runtime::watcher", &Level::ERROR));
        assert_eq!(filter.default_level(), Some(LevelFilter::WARN));
    }

    #[test]
    fn an_unparsable_level_falls_back_to_info() {
        let filter = level("baton[span{field=1}]=debug");
        assert!(filter.would_enable("anything", &Level::INFO));
        assert!(!filter.would_enable("anything", &Level::DEBUG));
    }
}
