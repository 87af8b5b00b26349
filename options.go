package kdb

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// SyncMode says when an acknowledged write is durable.
type SyncMode int

const (
	// SyncAlways (the default): a write returns once it is on disk
	// (fdatasync); concurrent writes share one fsync. A crash loses nothing
	// acknowledged.
	SyncAlways SyncMode = iota
	// SyncInterval: writes return once written to the OS; the journal is
	// fsynced within Options.SyncInterval of each write (nothing runs while
	// nothing is written). A crash of the machine (not of the process) can
	// lose the writes of the last interval.
	SyncInterval
	// UnsafeSyncNever: the journal is never fsynced except at checkpoints
	// and Close. A machine crash can lose everything since the last
	// checkpoint.
	UnsafeSyncNever
)

// Options configures a DB. The zero value (or a nil *Options) is valid and
// means the defaults. Open refuses, with ErrInvalid: a negative
// SyncInterval, CheckpointBytes, MaxOpenSegments, CommitGroupOps or
// RecoveryTimeTarget; a SegmentSize, PageSize or CheckpointDirtyPages
// outside its range (below); an unknown Sync; a bad ArchiveDir. A negative
// ValueThreshold, CheckpointInterval or CloseWait has a meaning of its own
// (below).
type Options struct {
	// FS is the file system. Default: the operating system's. Tests pass a
	// crashable in-memory FS.
	FS vfs.FS
	// Logger receives the recovery report and events with no caller to
	// report to. Default: silent. Its handler may call the DB's Err, Stats and
	// Recovery: no event is logged under a lock those take. It must not
	// write to the DB, in the middle of which an event may be logged.
	Logger *slog.Logger
	// ReadOnly opens the store without taking the write lock or writing
	// anything: the state of the last checkpoint (a pending db.redo
	// overlaid in memory) plus the journal written since, replayed in
	// memory; a torn journal tail is reported, not cut: the handle shows
	// the store as it was at Open, never a later write. Writes return
	// ErrReadOnly. Another process may write and checkpoint the store
	// meanwhile: a read that meets its in-place writes returns ErrStale
	// (reopen), never ErrCorrupt, and Open retries by itself. Default: false.
	ReadOnly bool

	// PageSize is the page size of a new store (ignored for an existing
	// one): a power of two from 4096 to 65536. Default: 4096.
	PageSize int
	// SegmentSize is the journal segment size: 64 KiB to 1 GiB. Default:
	// 32 MiB. It bounds what one write may hold: each journal record (a
	// value kept in the journal, or a batch's record of its keys and
	// shorter values) at most SegmentSize/4 and 16 MiB (DB.MaxBatchSize),
	// and a whole batch, its records together, at most SegmentSize/2 (see
	// DB.Write). With 64 KiB segments a value is at most 16 KiB.
	SegmentSize int64
	// Sync is the durability mode. Default: SyncAlways.
	Sync SyncMode
	// SyncInterval is the longest a write stays not durable under
	// SyncInterval (the fsync runs that long after the first write not yet
	// synced). Under SyncAlways it is the longest a deferred transaction
	// (Defer, the broker's AckAsync) waits to be journaled (that commit is
	// synced), and the longest an unsynced commit (Txn.NoSync, a full Defer
	// queue's) waits for its fsync: so a deferred transaction is durable
	// within SyncInterval, or within about twice that when an unsynced
	// commit journaled it first. Default: 10ms. Negative: ErrInvalid.
	SyncInterval time.Duration
	// MaxOpenSegments bounds the file descriptors held by sealed journal
	// segments: beyond it the least recently read are closed, and opened
	// again when read. A store whose journal holds many segments (a large
	// backlog) then opens and runs within a low descriptor limit. Default:
	// 64, or an eighth of the process's descriptor limit (ulimit -n) if
	// that is lower, and at least 4. Negative: ErrInvalid.
	MaxOpenSegments int

	// ValueThreshold: values longer than this stay in the journal and the
	// index holds their location. Default: 512 bytes. Negative: never.
	ValueThreshold int

	// CheckpointInterval is the longest time between checkpoints while
	// there are changes. Default: 1 minute. Negative: no timed checkpoints.
	// The timer ticks at most every millisecond: a shorter interval acts
	// as 1 ms (a nanosecond's ticker kept a core busy on an idle store).
	CheckpointInterval time.Duration
	// CheckpointBytes starts a checkpoint once this much journal was
	// written since the last one. Default: 64 MiB. Negative: ErrInvalid.
	CheckpointBytes int64
	// CheckpointDirtyPages bounds the memory held for the next checkpoint:
	// a checkpoint starts once the mem tables hold this many versions of
	// keys (each may dirty a page when the checkpoint writes it into the
	// index) or this many pages' worth of bytes, or this many pages are
	// dirty; writers wait at twice that (docs/DESIGN.md, "The mem
	// tables"). 16 to 1<<30. Default: 3072 (12 MiB of 4 KiB pages; writers
	// wait at 24 MiB).
	CheckpointDirtyPages int
	// CommitGroupOps bounds the operations a commit leader gathers into one
	// group (one journal write and fsync, one apply to the mem tables); a
	// batch with more operations is committed alone. Each operation adds a
	// version, so this bounds how far one group can go past the writers'
	// wait at 2*CheckpointDirtyPages. Default: 1024. Negative: ErrInvalid.
	CommitGroupOps int
	// RecoveryTimeTarget, if set, makes checkpoints frequent enough that
	// replaying the journal written since the last one takes about this
	// long, at the replay rate measured on this machine (at the last
	// recovery, or by a short calibration). Default: 0, off. Negative:
	// ErrInvalid.
	RecoveryTimeTarget time.Duration

	// ArchiveDir, if set, receives journal segments that are no longer
	// needed instead of deleting them. It must lie inside the store's
	// directory: a relative path is taken from there, and one that
	// escapes it (by "..", or through a symbolic link), an absolute path
	// outside it (another disk's, say), one of the store's files, or an
	// existing file that is not a directory is ErrInvalid at Open.
	// Default: "" (delete).
	ArchiveDir string
	// SkipDamagedJournal makes recovery skip damaged journal regions
	// instead of failing; the recovery report lists what was lost.
	// Default: false.
	SkipDamagedJournal bool
	// ForceFreeListScan ignores db.free and rebuilds the free list by a
	// scan (benchmarks, kdbtool). Default: false.
	ForceFreeListScan bool
	// NoCheckpointOnClose skips the checkpoint Close normally takes, so the
	// next Open replays the journal (benchmarks, tests). Default: false.
	NoCheckpointOnClose bool
	// CheckpointBeforeServing makes Open take the checkpoint recovery asks
	// for (after replaying records, applying db.redo, rebuilding the free
	// list or cutting a torn tail) before it returns, as the design brief
	// orders it (docs/DESIGN.md, "Where we differ"). By default Open returns as soon as
	// the store is recovered and that checkpoint runs in the background
	// right after: the store is consistent and durable either way, and a
	// crash before it completes only means the next Open replays the same
	// journal again. Set it to make the time to open deterministic (tests)
	// or to have the next crash cheap from the moment Open returns.
	// Default: false. A store never checkpointed (a new one included)
	// gets its first checkpoint inside Open either way, so that its meta
	// names its journal before anything is acknowledged.
	CheckpointBeforeServing bool
	// CloseWait bounds how long Close waits for the Views (Get, View,
	// Export, broker reads) running when it is called. Views that outlast
	// it get ErrClosed from their next Snapshot or Iter call; the memory
	// they read stays mapped until the last of them returns, so nothing
	// faults. Negative: do not wait. Default: 10 s.
	CloseWait time.Duration
}

// Limits on what callers pass in.
const (
	// MaxIndexNameSize bounds an index name.
	MaxIndexNameSize = 255
	// MaxKeySize bounds a key (the index's node layout allows this much at
	// the smallest page size the root accepts).
	MaxKeySize = 512
	// MaxValueSize bounds a value, at every Options.SegmentSize; the
	// segment size bounds it further (see Options.SegmentSize): a value is
	// at most SegmentSize/4 (16 KiB with 64 KiB segments), and one kept in
	// the batch record (up to Options.ValueThreshold) shares that bound
	// with its key and the batch's other operations. At the default 32 MiB
	// segments a value of MaxValueSize fits when it is kept in the journal
	// (over ValueThreshold, as by default), not when kept in the batch
	// record. An empty value is valid.
	MaxValueSize = 8 << 20
)

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.FS == nil {
		r.FS = vfs.OS
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if r.SegmentSize == 0 {
		r.SegmentSize = 32 << 20
	}
	if r.SyncInterval == 0 {
		r.SyncInterval = 10 * time.Millisecond
	}
	if r.ValueThreshold == 0 {
		r.ValueThreshold = 512
	}
	if r.CheckpointInterval == 0 {
		r.CheckpointInterval = time.Minute
	}
	if r.CheckpointBytes == 0 {
		r.CheckpointBytes = 64 << 20
	}
	if r.CheckpointDirtyPages == 0 {
		r.CheckpointDirtyPages = 3072
	}
	if r.CommitGroupOps == 0 {
		r.CommitGroupOps = 1024
	}
	if r.CloseWait == 0 {
		r.CloseWait = 10 * time.Second
	}
	return r
}

// minPageSize is the smallest page that holds two keys of MaxKeySize with
// the longest index name; maxCheckpointDirtyPages keeps
// 2*CheckpointDirtyPages*PageSize (64 KiB pages) far from overflowing.
const (
	minPageSize             = 4096
	maxCheckpointDirtyPages = 1 << 30
)

func (o *Options) validate() error {
	switch {
	case o.PageSize != 0 && (o.PageSize < minPageSize || o.PageSize > 65536 || o.PageSize&(o.PageSize-1) != 0):
		// Below 4096 a page cannot hold two keys of MaxKeySize: Open
		// failed only after creating the store's files.
		return fmt.Errorf("%w: PageSize %d: want a power of two in [%d, 65536]", ErrInvalid, o.PageSize, minPageSize)
	case o.SyncInterval < 0:
		return fmt.Errorf("%w: SyncInterval %v: negative", ErrInvalid, o.SyncInterval)
	case o.Sync < SyncAlways || o.Sync > UnsafeSyncNever:
		return fmt.Errorf("%w: Sync %d", ErrInvalid, o.Sync)
	case o.SegmentSize < 64<<10 || o.SegmentSize > 1<<30:
		return fmt.Errorf("%w: SegmentSize %d: want 64 KiB to 1 GiB", ErrInvalid, o.SegmentSize)
	case o.CheckpointDirtyPages < 16 || o.CheckpointDirtyPages > maxCheckpointDirtyPages:
		// Above the bound, the mem tables' limits in bytes overflowed and
		// every write waited for room for ever.
		return fmt.Errorf("%w: CheckpointDirtyPages %d: want 16 to %d", ErrInvalid, o.CheckpointDirtyPages, maxCheckpointDirtyPages)
	case o.MaxOpenSegments < 0:
		return fmt.Errorf("%w: MaxOpenSegments %d: negative", ErrInvalid, o.MaxOpenSegments)
	case o.CommitGroupOps < 1:
		return fmt.Errorf("%w: CommitGroupOps %d: at least 1", ErrInvalid, o.CommitGroupOps)
	case o.CheckpointBytes < 0:
		return fmt.Errorf("%w: CheckpointBytes %d", ErrInvalid, o.CheckpointBytes)
	case o.RecoveryTimeTarget < 0:
		return fmt.Errorf("%w: RecoveryTimeTarget %v: negative (0 is off)", ErrInvalid, o.RecoveryTimeTarget)
	}
	return nil
}
