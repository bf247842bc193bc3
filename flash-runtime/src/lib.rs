//! flash-runtime
