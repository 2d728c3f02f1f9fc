//! Writing into the target root: root-confined path resolution and atomic writes.
//! (Work in progress: see the files stage issue.)
