//! busbar-xml
