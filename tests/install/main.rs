//! Installing an OS image: `agent install` (image formats, verification, resume, refusals,
//! the first-boot copy) and the install disk chosen by what it is.

#[path = "../support/mod.rs"]
mod support;

mod image;
mod select;
