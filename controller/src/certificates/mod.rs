//! The webhook's certificate: issued, renewed and rotated by the leader controller into one
//! Secret, and its CA injected into labelled webhook configurations.

pub mod plan;
pub mod pki;
