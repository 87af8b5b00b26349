// Package vfs is the single file-system seam of kdb: every byte the engine
// reads or writes goes through an FS.
//
// It owns three implementations: OS (the real one: pwrite, fdatasync,
// fallocate, flock, directory fsync and read-only mmap), MemFS (in memory,
// able to produce a power-loss image at any moment) and, in vfs/errfs,
// a fault injector that wraps either. Intercept is the pre-operation hook
// that errfs and internal/kdbtest build on. The helpers WriteFileAtomic,
// ReadFile and Exists work on any FS.
//
// It must not know about kdb's file formats.
//
// Concurrency: an FS and its Files are safe for concurrent use.
//
// It writes no on-disk format of its own. The crash model and what each
// implementation guarantees are in docs/DESIGN.md, "The file-system seam".
package vfs
