//! busbar-config
