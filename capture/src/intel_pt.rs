//! Intel PT configuration.
