//! busbar-libxml
