// Package kdbtest holds crash and corruption helpers for tests of the lower
// packages: CrashAt simulates a power loss at the k-th mutating file-system
// operation of a workload, and FlipBit, ZeroRange, Truncate and CopyFile
// damage or copy files at a named path and offset.
//
// It imports vfs only and knows nothing of kdb's file formats.
//
// Concurrency: a Crasher and its FS are safe for concurrent use. The
// corruption helpers must not race with other writers of the same file.
//
// It writes no on-disk format of its own.
package kdbtest
