// Package errfs injects failures into a vfs.FS: a Rule decides, before each
// operation, whether it fails and with which error. A failed operation does
// not happen: a failed WriteAt writes nothing, a failed OpenFile creates
// nothing. Two exceptions model the kernel:
//   - A failed Sync on a MemFS drops the file's pending (unsynced) writes, as
//     Linux may after a failed fsync: the data is gone from the page cache
//     and a later Sync succeeds without it. Engines must not retry.
//   - A failed Close still closes the underlying file, as close(2) does.
//
// It knows nothing of kdb's file formats and writes no format of its own.
//
// Concurrency: an FS and its files are safe for concurrent use. Rules are
// evaluated one operation at a time, under the FS's lock, in the order
// operations are counted.
package errfs
