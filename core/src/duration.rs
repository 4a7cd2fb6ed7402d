//! Durations in the syntaxes baton meets, each parsed and printed in one place:
//! - [`go`]: Go's `time.ParseDuration` (`12h`, `1.5h`, `1h0m0s`): the min-time label and
//!   the zone-aware disruption budget's `crossZoneEvictionDelay`, as the Go operator reads them;
//! - [`prometheus`]: Prometheus' `model.ParseDuration` (`1h`, `2d`, `1w`): the
//!   delayed-downscale annotation;
//! - people's own, in baton's configuration file: `baton_config::Duration` (humantime: `30s`,
//!   `1h30m`, `90d`), which lives with the configuration; the core reads the plain
//!   `std::time::Duration`s the configuration hands it.

pub mod go;
pub mod prometheus;
