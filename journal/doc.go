// Package journal is kdb's write-ahead log: an ordered sequence of
// checksummed records in segment files named db-<N>.log.
//
// It owns the segment files, their headers, the record framing, the
// checksum chain, group commit and the tail recovery done on Open (a torn
// batch at the tail of the last segment is truncated; damage anywhere else is
// ErrCorrupt naming the segment and offset, or skipped and reported when
// Options.SkipDamaged is set).
//
// It must not know what records mean: RecordType and payloads are opaque,
// except for the reserved internal types (RecordType 0xF0 and above) it
// writes itself (segment seal and close mark records). It never imports
// pagefile or index, and it does all file I/O through vfs.
//
// Concurrency: a Journal is safe for concurrent use. Writes run in the
// caller's goroutine, one at a time (Write); an fdatasync (SyncTo) runs
// while the next batches are written and covers every batch written before
// it began, so appenders from many goroutines share fdatasyncs (group
// commit). Read and Iterate run concurrently with Write and with each
// other; Iterate sees only records that are acknowledged (durable under
// SyncAlways), Read every record written, so that a caller may read a
// record it applied before its fdatasync (an unsynced commit).
//
// Format: docs/FORMAT.md §4 "Journal".
// Design: docs/DESIGN.md, "Journal".
package journal
