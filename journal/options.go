package journal

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// SyncPolicy says when Append's records are made durable.
type SyncPolicy int

const (
	// SyncAlways (the default): Append returns once its batch is on disk
	// (written and fdatasync'ed; concurrent appends share one write and one
	// fdatasync). A crash loses no acknowledged record.
	SyncAlways SyncPolicy = iota
	// SyncInterval: Append returns once its batch is written to the OS;
	// the active segment is fdatasync'ed within Options.SyncInterval of the
	// write (nothing runs while nothing is written). A crash of the machine
	// (not only of the process) can lose the records acknowledged during
	// the last interval; a lost batch is lost whole.
	SyncInterval
	// UnsafeSyncNever: Append returns once its batch is written to the OS;
	// the journal syncs only on segment rotation, Sync and Close. A machine
	// crash can lose every record acknowledged since the last of those; a
	// lost batch is lost whole.
	UnsafeSyncNever
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case UnsafeSyncNever:
		return "unsafe-never"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Options configures a Journal. The zero value is valid.
type Options struct {
	// FS is the file system. Default: vfs.OS.
	FS vfs.FS
	// SegmentSize is the size at which the active segment is sealed and the
	// next begins (a segment's file is preallocated in 1 MiB steps up to
	// it). At most 2 GiB. Default: 32 MiB.
	SegmentSize int64
	// Sync is the sync policy. Default: SyncAlways.
	Sync SyncPolicy
	// SyncInterval bounds how long a batch stays not durable under
	// SyncInterval: the background fdatasync runs that long after the
	// first batch written since the last one. Default: 10ms.
	SyncInterval time.Duration
	// MaxRecordSize bounds a record's payload on Append. Reading accepts
	// up to max(MaxRecordSize, 16 MiB) (readMax): a journal written with
	// a larger bound, or larger segments, still reads at the default. A
	// length above that is corruption, checked before anything is
	// allocated, and never a torn tail (a crash tears a frame its writer
	// wrote, within its bound): reopen such a journal with the
	// MaxRecordSize it was written with. It must leave room for a frame in
	// a segment. Default: 16 MiB, or less if SegmentSize requires it.
	MaxRecordSize int
	// StoreID is the ID of the store the journal belongs to: written in
	// the header of every segment created, and a segment whose header
	// names another store is ErrCorrupt (FORMAT.md §4.2). Zero: nothing
	// written, nothing checked.
	StoreID [16]byte
	// SkipDamaged makes Open skip damaged regions instead of failing with
	// ErrCorrupt; OpenReport.Skipped lists exactly what was skipped.
	// Default: false.
	SkipDamaged bool
	// VerifyFrom makes Open verify records only from this location on: the
	// caller's replay position, the last record it already holds (a
	// batch's last record). Segments wholly before it are opened and their
	// headers checked, but their records are verified only when first
	// needed: Read verifies each frame it returns, Iterate and Verify
	// verify such a segment whole. So the cost of Open follows the journal
	// to replay, not the journal retained. If the frame at VerifyFrom is
	// not a verifying batch end, its segment is verified from its start.
	// The caller vouches that the journal was durable up to VerifyFrom
	// (it recorded the position after a sync): a last segment that ends
	// or is torn at or before it is ErrCorrupt, not a torn tail, and Open
	// fails before it changes anything (with SkipDamaged such damage is
	// listed and new records go to a new segment, after VerifyFrom).
	// Verification from it is ignored with SkipDamaged. Default: the zero
	// Location (verify all).
	VerifyFrom Location
	// Need is the range of segments the caller's state requires: its
	// replay position's segment and the segments holding records it still
	// refers to. If the journal has any segment it must begin at or before
	// Need.First, and it must reach Need.Last; else Open fails with an
	// error wrapping ErrCorrupt that names the missing segments (a gap
	// between two segments is always ErrCorrupt). With SkipDamaged the
	// missing segments are listed in OpenReport.Skipped instead, and their
	// ids are never reused: a new segment is numbered after Need.Last.
	// Default: the zero Need, no requirement.
	Need Need
	// Deliver, if set, receives during Open's own verifying pass every
	// user record after VerifyFrom (strictly after it; every record if
	// VerifyFrom is zero), in journal order, so that a caller replaying the
	// journal need not read it a second time. A batch is delivered only
	// once its end frame has verified, whole, and never in part; internal
	// records are not delivered. The payload aliases Open's read buffer and
	// is valid only until Deliver returns. An error from Deliver fails Open
	// with that error.
	//
	// Open can still fail after it has delivered records (damage found
	// further on, a later segment missing, a failed sync of the tail): the
	// caller must keep what it built from them private until Open returns
	// successfully, and discard it otherwise. On success every delivered
	// record is durable (unless ReadOnly: the tail Open found is synced
	// before it returns).
	//
	// With Deliver set and a non-zero VerifyFrom, Open also checks that
	// VerifyFrom is a record of the journal: its segment must exist
	// (ErrNotFound otherwise), and if it lies within the segment's records,
	// a frame must begin there (ErrCorrupt otherwise, unless SkipDamaged).
	// Default: nil.
	Deliver func(loc Location, r Record) error
	// ArchiveDir, if set, makes RemoveBefore move segments into this
	// directory instead of deleting them. Default: "" (delete).
	ArchiveDir string
	// ReadOnly opens the journal without creating, truncating or writing
	// anything (for kdbtool inspect): a torn tail is reported, not
	// truncated, and writing calls return ErrReadOnly. Default: false.
	ReadOnly bool
	// MaxOpenSegments bounds the descriptors the journal keeps for sealed
	// segments (every segment but the last): beyond it, the least recently
	// read are closed and opened again (read-only) when next read, so a
	// journal of any length needs at most MaxOpenSegments + 2 descriptors
	// (the last segment's, and one being created or scanned), plus one for
	// each concurrent read that is reopening a closed segment. Default: 64,
	// or an eighth of the process's descriptor limit (RLIMIT_NOFILE) if
	// that is lower, and at least 4.
	MaxOpenSegments int
	// Logger receives events that have no caller to report to (a failed
	// background sync). Default: nil, silent.
	Logger *slog.Logger
}

// Need is a range of segments that must exist (Options.Need). A zero bound
// requires nothing.
type Need struct {
	First, Last SegmentID
}

const (
	defaultSegmentSize   = 32 << 20
	defaultMaxRecordSize = 16 << 20
	defaultSyncInterval  = 10 * time.Millisecond
	// minSegmentSize leaves room for the header, one frame and the seal.
	minSegmentSize = 4096
)

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.OS
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = defaultSegmentSize
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = defaultSyncInterval
	}
	if o.MaxOpenSegments == 0 {
		o.MaxOpenSegments = defaultMaxOpenSegments()
	}
	if o.MaxRecordSize == 0 {
		o.MaxRecordSize = defaultMaxRecordSize
		if m := maxPayloadFor(o.SegmentSize); int64(o.MaxRecordSize) > m {
			o.MaxRecordSize = int(max(m, 0))
		}
	}
	return o
}

// readMax is the largest record payload Open and the readers accept:
// MaxRecordSize, and at least the default (whatever segment size a
// journal is reopened with, the records a default writer wrote read).
func (o Options) readMax() int { return max(o.MaxRecordSize, defaultMaxRecordSize) }

// maxPayloadFor returns the largest payload a segment of size segSize can
// hold in a one-record batch (room is left for the seal record).
func maxPayloadFor(segSize int64) int64 {
	return (segSize-segHeaderSize-frameSize(0))&^(recAlign-1) - recHeaderSize
}

func (o Options) validate() error {
	switch {
	case o.SegmentSize < minSegmentSize || o.SegmentSize > maxSegmentSize:
		return fmt.Errorf("%w: SegmentSize %d not in [%d, %d]", ErrBadOptions, o.SegmentSize, minSegmentSize, maxSegmentSize)
	case o.Sync < SyncAlways || o.Sync > UnsafeSyncNever:
		return fmt.Errorf("%w: unknown Sync policy %d", ErrBadOptions, o.Sync)
	case o.SyncInterval < 0:
		return fmt.Errorf("%w: negative SyncInterval", ErrBadOptions)
	case o.MaxOpenSegments < 1:
		return fmt.Errorf("%w: MaxOpenSegments %d below 1", ErrBadOptions, o.MaxOpenSegments)
	case o.MaxRecordSize <= 0 || int64(o.MaxRecordSize) > maxPayloadFor(o.SegmentSize):
		return fmt.Errorf("%w: MaxRecordSize %d not in [1, %d] for SegmentSize %d", ErrBadOptions, o.MaxRecordSize, maxPayloadFor(o.SegmentSize), o.SegmentSize)
	}
	return nil
}
