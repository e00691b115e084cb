//! Offline evaluation of the answer layer's providers against labeled data that lives outside
//! the repository (see `../shared/data`); nothing here runs on the request path.

pub mod verifier;
