//! idem-codegen: load an OpenAPI document, model its retry contract, audit it.
//!
//! The pipeline runs one way: [`load`] (YAML or JSON, OpenAPI 3.x or Swagger
//! 2.0 read as 3.0, multi-file `$ref`s, YAML merge keys, every node keeps its
//! position) → [`model`] (one [`model::Operation`] per path and
//! method, with its retry class, key policy, retry policy and phases) →
//! [`audit`] (rules over the model) → [`output`] (human, JSON, SARIF, GitHub),
//! and generation from the same model: [`generate`](mod@generate) (the client
//! SDK and the server scaffolding) and
//! [`docs`] (the integrator docs page). Generators read the model, never the
//! raw document.

pub mod audit;
pub mod baseline;
pub mod build;
#[cfg(feature = "cli")]
pub mod cli;
pub mod docs;
pub mod generate;
pub mod load;
pub mod model;
pub mod output;
pub mod probe;
pub mod source;
pub mod suggest;
pub mod tree;
pub mod vocab;
pub mod write;

pub use generate::{Generated, Options, generate};
