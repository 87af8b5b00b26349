package journal

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"
)

// RecordType is the caller's tag for a record. The journal does not
// interpret it, except that values from MinReservedType up are its own.
type RecordType uint8

// Record is one entry of the journal.
type Record struct {
	Type    RecordType
	Payload []byte
}

// Damage is a region of the journal that Open skipped (Options.SkipDamaged):
// the bytes [From, To) of one segment, lost. From is the start of the batch
// that holds the first damaged byte, so no batch is delivered in part.
type Damage struct {
	From, To Location
	Reason   string
}

// OpenReport says what Open found.
type OpenReport struct {
	// Segments is the number of segments found (including a torn one removed).
	Segments int
	// TailLocation is the position just after the last acknowledged record.
	TailLocation Location
	// TornBytesTruncated is the number of bytes dropped from the tail of the
	// last segment (a torn or partial batch); 0 if the log ended cleanly.
	TornBytesTruncated int64
	// TornAt is where the torn tail began (zero if none). Offset 0 means a
	// last segment whose header was never completed; it was removed.
	TornAt Location
	// Skipped lists the damaged regions skipped (only with SkipDamaged).
	Skipped []Damage
	// Records and Batches count the user records and batches verified
	// (from Options.VerifyFrom on, if set).
	Records, Batches int64
	// Unverified is the number of segments before Options.VerifyFrom whose
	// records Open did not verify (only their headers).
	Unverified int
	// Duration is the time Open took.
	Duration time.Duration
}

// Stats are counters since Open.
type Stats struct {
	Appends   int64 // Append and Write calls that passed validation, failed ones included
	Batches   int64 // batches written
	Records   int64 // records written
	Bytes     int64 // bytes written to segments, frames and headers
	Writes    int64 // WriteAt calls
	Fsyncs    int64 // file fdatasyncs
	DirSyncs  int64 // directory fsyncs
	Commits   int64 // batch writes (one WriteAt each)
	Rotations int64 // segments created
	Removed   int64 // segments removed or archived
	// SegmentCloses and SegmentReopens count the sealed segments closed to
	// stay within Options.MaxOpenSegments and opened again by a read.
	SegmentCloses  int64
	SegmentReopens int64
}

// Journal is an open write-ahead journal.
//
// Writes run in the caller's goroutine: Write encodes and writes a batch
// under wmu; SyncTo fdatasyncs under smu, without wmu, so that the next
// batch is written while the previous one's fdatasync runs (a pipeline of
// two), and one fdatasync covers every batch written before it began.
//
// Invariants:
//
//   - w is guarded by wmu (Open sets it before the journal is shared).
//     w.synced <= w.off; bytes of the active segment in [w.synced, w.off)
//     may vanish in a crash. w.synced only grows, and only after an
//     fdatasync of w.seg that began when w.off was at least the new value.
//
//   - Every frame carries, in its synced field, a w.synced of the time it
//     was written: proof, on recovery, that the bytes before it were durable.
//
//   - A segment other than the active one is sealed and wholly durable.
//
//   - Under SyncAlways the published tail (mu.tail, segment.end) never
//     passes a synced byte; under the other policies it is what was written.
//     segment.written (what Read serves) is what was written, always.
//
//   - mu.segs holds consecutive segment ids in ascending order; the last one
//     is the active segment.
//
//   - Once mu.err is set, every writing call returns it. A failed write or
//     fsync is never retried.
//
//   - After an fdatasync of the active segment failed, no fdatasync of it
//     runs or counts: the failed one may have dropped the dirty pages it
//     reported (Linux does), and a later one would then succeed without
//     them. fsyncMu is held across each fdatasync of the active segment
//     and the recording of its failure (fail), and a sync that finds the
//     journal failed does not run. (Without it, a rotation's fdatasync
//     racing a failed SyncTo sealed the segment and so acknowledged the
//     batches whose pages the failure dropped.)
//
// Lock order: rmMu → smu → wmu → fsyncMu → mu → segment.rw. No lock but
// smu and fsyncMu (and segment.rw, shared, against RemoveBefore) is held
// across a SyncTo's fdatasync; wmu is held across the fdatasyncs of a
// rotation.
//
// A Journal is safe for concurrent use.
type Journal struct {
	dir  string
	opts Options

	wake chan struct{} // buffered(1): Close stops the SyncInterval syncer
	// unsynced (buffered(1)): under SyncInterval, a batch written since
	// the syncer last took it, which it makes durable within SyncInterval.
	unsynced chan struct{}
	done     chan struct{} // closed when the syncer goroutine exits
	rmMu     sync.Mutex    // serialises RemoveBefore
	smu      sync.Mutex    // serialises SyncTo's fdatasyncs
	// fsyncMu serialises every fdatasync of the active segment with the
	// recording of its failure (see the invariants).
	fsyncMu sync.Mutex
	wmu     sync.Mutex // guards w

	w struct {
		seg       *segment
		off       int64  // next write offset in seg
		synced    int64  // durable prefix of seg
		prev      uint64 // sum of the last frame in seg (seed if none)
		prevOff   int64  // offset of the last frame written to seg, or -1
		buf       []byte
		sinceMark bool  // records written since the last close mark
		alloc     int64 // preallocated size of seg's file (allocStep)
	}

	fds *fdCache // the sealed segments' descriptors (fds.go)

	mu struct {
		sync.Mutex
		err     error
		closing bool
		closed  bool
		segs    []*segment
		tail    Location
		skipped []Damage
		stats   Stats
	}
}

// Append writes recs as one atomic batch: after a crash, Open finds all of
// them or none. It returns their locations once they are acknowledged under
// the sync policy (SyncAlways: durable). Concurrent Appends share
// fdatasyncs: one covers every batch written before it began. An error
// from a write or sync fails the journal for good: this and every later
// call returns it. Append(nil) does nothing.
func (j *Journal) Append(recs ...Record) ([]Location, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	locs, end, err := j.Write(recs...)
	if err != nil {
		return nil, err
	}
	if j.opts.Sync == SyncAlways {
		if err := j.SyncTo(end); err != nil {
			return nil, err
		}
	}
	return locs, nil
}

// Write writes recs as one atomic batch (as Append) and returns their
// locations and end, the location just after the batch, to pass to
// SyncTo. Does not sync: under SyncAlways the batch is durable, and
// visible to Read and Iterate, once a SyncTo(end) (or a later one)
// returns; under the other policies it is visible at once. Concurrent
// Writes are serialised; each is one WriteAt.
func (j *Journal) Write(recs ...Record) (locs []Location, end Location, err error) {
	if len(recs) == 0 {
		return nil, Location{}, nil
	}
	if j.opts.ReadOnly {
		return nil, Location{}, ErrReadOnly
	}
	var size int64
	for i, r := range recs {
		if r.Type >= MinReservedType {
			return nil, Location{}, fmt.Errorf("%w: record %d has type %#x", ErrReservedType, i, r.Type)
		}
		if len(r.Payload) > j.opts.MaxRecordSize {
			return nil, Location{}, fmt.Errorf("%w: record %d has %d bytes, maximum %d", ErrRecordTooLarge, i, len(r.Payload), j.opts.MaxRecordSize)
		}
		size += frameSize(len(r.Payload))
	}
	if size > j.batchRoom() {
		return nil, Location{}, fmt.Errorf("%w: %d bytes of frames, a segment holds %d", ErrBatchTooLarge, size, j.batchRoom())
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if err := j.writable(true); err != nil {
		return nil, Location{}, err
	}
	return j.writeBatch(recs, size)
}

// batchRoom is the most frame bytes one batch can take: a fresh segment
// minus its header and the seal record.
func (j *Journal) batchRoom() int64 {
	return j.opts.SegmentSize - segHeaderSize - frameSize(0)
}

// writable returns why the journal takes no writes, if it does not.
// isAppend counts the call in Stats.Appends.
func (j *Journal) writable(isAppend bool) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if isAppend {
		j.mu.stats.Appends++
	}
	switch {
	case j.mu.closing || j.mu.closed:
		return ErrClosed
	case j.mu.err != nil:
		return j.mu.err
	}
	return nil
}

// Sync makes every record written so far durable (useful under
// SyncInterval and UnsafeSyncNever). On return they are durable.
func (j *Journal) Sync() error {
	if j.opts.ReadOnly {
		return ErrReadOnly
	}
	j.wmu.Lock()
	end := Location{j.w.seg.id, j.w.off}
	j.wmu.Unlock()
	return j.SyncTo(end)
}

// Tail returns the position just after the last acknowledged record. The
// next batch is written there, or at the start of the next segment if it
// does not fit.
func (j *Journal) Tail() Location {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.tail
}

// Segments describes the segments, oldest first.
func (j *Journal) Segments() []SegmentInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]SegmentInfo, 0, len(j.mu.segs))
	for _, s := range j.mu.segs {
		info := SegmentInfo{ID: s.id, Size: s.size, Sealed: s.sealed, Verified: !s.unverified}
		if s.unverified {
			out = append(out, info)
			continue
		}
		info.End = Location{s.id, s.end}
		info.First = info.End
		if s.last >= 0 {
			info.First = Location{s.id, segHeaderSize}
			info.Last = Location{s.id, s.last}
		}
		out = append(out, info)
	}
	return out
}

// Stats returns the counters.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	st := j.mu.stats
	j.mu.Unlock()
	st.SegmentCloses, st.SegmentReopens = j.fds.closes.Load(), j.fds.reopens.Load()
	return st
}

// Err returns the sticky error that failed the journal, or nil.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.err
}

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Close waits for the writes in progress, writes a close mark (unless the journal
// failed or nothing was appended), syncs, and closes the files. On return
// every acknowledged record is durable. It returns the sticky error if the
// journal failed. Calls after Close return ErrClosed.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.mu.closing || j.mu.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.mu.closing = true
	j.mu.Unlock()
	if !j.opts.ReadOnly {
		select {
		case j.wake <- struct{}{}:
		default:
		}
		<-j.done
		j.smu.Lock()
		j.wmu.Lock()
		j.finish()
		j.wmu.Unlock()
		j.smu.Unlock()
	}
	j.mu.Lock()
	j.mu.closed = true
	segs := j.mu.segs
	err := j.mu.err
	j.mu.Unlock()
	for _, s := range segs {
		if cerr := s.close(); cerr != nil && err == nil && !j.opts.ReadOnly {
			err = fmt.Errorf("journal: close %s: %w", s.id, cerr)
		}
	}
	return err
}

// fail makes err the journal's sticky error (the first one wins) and
// returns the sticky error.
func (j *Journal) fail(err error) error {
	j.mu.Lock()
	first := j.mu.err == nil
	if first {
		j.mu.err = err
	}
	sticky := j.mu.err
	j.mu.Unlock()
	// Logged once j.mu is released: a Logger may call back into the
	// journal (Stats, Err), which takes it.
	if first && j.opts.Logger != nil {
		j.opts.Logger.Error("journal failed", "dir", j.dir, "err", err)
	}
	return sticky
}

func (j *Journal) path(id SegmentID) string { return filepath.Join(j.dir, id.String()) }
