package kdb

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/internal/vfs"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/recovery"
)

// DB is an open store.
//
// The write path (commit.go): a batch is encoded as journal records and
// queued; the writer at the head of the queue leads: it writes the batches
// waiting as one journal batch, waits for its fdatasync, hands the lead on,
// applies them to the index in journal order in one index Update, and only
// then answers the writers. Readers see a change only once
// it is durable (AckAsync's acks excepted: see there).
//
// Lock order: writeMu → the commit queue's locks (cq) → DB.mu → (journal,
// index and page file locks). No DB lock is held
// across an fsync except writeMu, which a writer holds while it waits for
// its own commit.
//
// Invariants:
//   - applied is the location of the last journal record applied to the
//     index. It is written only by a commit leader inside an index Update and
//     read by checkpoints under the index's writer lock, so a checkpoint's
//     replay position always matches its pages exactly.
//   - Once mu.err is set, every write returns it; the handle is failed.
//
// A DB is safe for concurrent use.
type DB struct {
	dir  string
	opts Options
	lock vfs.Locker // nil when ReadOnly
	pf   *pagefile.File
	ix   *index.Store
	j    *journal.Journal

	maxRecord int // largest journal record payload
	maxGroup  int // largest journal batch a commit leader builds, in bytes

	// writeMu: Write holds it shared while its batch commits; Update holds
	// it exclusively, so an Update's reads and writes are serializable.
	writeMu sync.RWMutex
	// gcMu: reads of values kept in the journal hold it shared; journal GC
	// holds it while it removes segments.
	gcMu sync.RWMutex
	// ckMu serializes checkpoints.
	ckMu sync.Mutex

	cq     commitQueue // the writers' queue and the leader role: commit.go
	ckKick chan struct{}
	quit   chan struct{}
	wg     sync.WaitGroup

	applied journal.Location // see Invariants

	broker brokerState // the message store's writers: broker.go

	mu struct {
		sync.Mutex
		closed    bool
		err       error
		ckDone    *sync.Cond       // broadcast after each checkpoint
		applied   journal.Location // a copy of DB.applied, for checkpointDue
		ckApplied journal.Location
		ckBytes   int64 // journal bytes at the last checkpoint
		lastCk    time.Time
		replayBps float64
		// recoveryCk: recovery asked for a checkpoint that has not run
		// yet; the checkpointer takes it at once (checkpointDue).
		recoveryCk bool
		recovery   RecoveryReport
		stats      Stats
	}
}

// Open opens (or creates) the store in dir and recovers it: see
// docs/DESIGN.md. opts may be nil. A second process opening the same store
// gets ErrLocked at once.
func Open(dir string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	archive := o.ArchiveDir
	if archive != "" {
		var err error
		if archive, err = insideDir(dir, archive); err != nil {
			return nil, err
		}
	}
	db := &DB{
		dir:    dir,
		opts:   o,
		ckKick: make(chan struct{}, 1),
		quit:   make(chan struct{}),
	}
	db.mu.ckDone = sync.NewCond(&db.mu.Mutex)
	db.maxRecord = int(min(16<<20, o.SegmentSize/4))
	db.maxGroup = int(o.SegmentSize / 2)

	if !o.ReadOnly {
		if err := o.FS.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("kdb: create %s: %w", dir, err)
		}
		lk, err := o.FS.Lock(filepath.Join(dir, "lock"))
		if err != nil {
			if errors.Is(err, vfs.ErrLocked) {
				return nil, fmt.Errorf("%w: %s: %w", ErrLocked, dir, err)
			}
			return nil, fmt.Errorf("kdb: lock %s: %w", dir, err)
		}
		db.lock = lk
	}

	sync := journal.SyncAlways
	switch o.Sync {
	case SyncInterval:
		sync = journal.SyncInterval
	case UnsafeSyncNever:
		sync = journal.UnsafeSyncNever
	}
	replay := newReplayer(db)
	st, rep, err := recovery.Run(dir, recovery.Options{
		PageFile: pagefile.Options{FS: o.FS, PageSize: o.PageSize, ReadOnly: o.ReadOnly,
			ForceScan: o.ForceFreeListScan, Logger: o.Logger},
		Index: index.Options{Logger: o.Logger},
		Journal: journal.Options{FS: o.FS, SegmentSize: o.SegmentSize, Sync: sync,
			SyncInterval: o.SyncInterval, MaxRecordSize: db.maxRecord, SkipDamaged: o.SkipDamagedJournal,
			ArchiveDir: archive, ReadOnly: o.ReadOnly, Logger: o.Logger},
		Apply:      replay.apply,
		ReplayFrom: replayFrom,
	})
	if err != nil {
		db.unlock()
		return nil, wrapErr(fmt.Errorf("kdb: open %s: %w", dir, err))
	}
	db.pf, db.ix, db.j, db.applied = st.PageFile, st.Index, st.Journal, st.LastApplied
	db.mu.recovery = newRecoveryReport(rep)
	if err := db.setReplayRate(rep); err != nil {
		_ = st.Close()
		db.unlock()
		return nil, err
	}
	db.mu.ckApplied = rep.ReplayFrom
	db.mu.applied = db.applied
	db.mu.recoveryCk = rep.NeedsCheckpoint
	db.mu.ckBytes = db.j.Stats().Bytes
	db.mu.lastCk = time.Now()
	if ks := db.ix.MaxKeySize() - len(userTreePrefix) - MaxIndexNameSize; ks < MaxKeySize {
		_ = st.Close()
		db.unlock()
		return nil, fmt.Errorf("%w: page size %d allows keys of %d bytes, need %d", ErrInvalid, db.pf.PageSize(), ks, MaxKeySize)
	}
	if rep.NeedsCheckpoint && o.CheckpointBeforeServing {
		if err := db.checkpoint(); err != nil {
			_ = st.Close()
			db.unlock()
			return nil, fmt.Errorf("kdb: open %s: checkpoint after recovery: %w", dir, err)
		}
	}
	o.Logger.Info("kdb: recovered", db.mu.recovery.logAttrs()...)
	if !o.ReadOnly {
		kick := db.mu.recoveryCk // no other goroutine yet
		db.wg.Add(1)
		go db.checkpointer()
		if kick {
			db.kickCheckpoint() // see Options.CheckpointBeforeServing
		}
	}
	return db, nil
}

// setReplayRate sets the replay rate used by RecoveryTimeTarget: the one
// this recovery measured, else the one the last checkpoint recorded.
func (db *DB) setReplayRate(rep *recovery.Report) error {
	am, err := decodeAppMeta(db.pf.Meta().App)
	if err != nil {
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.mu.replayBps = float64(am.replayBps)
	if r := rep.ReplayRate(); r > 0 {
		db.mu.replayBps = r
	}
	return nil
}

// replayFrom turns the checkpoint's meta into the location of the last
// journal record it covers.
func replayFrom(m pagefile.Meta) journal.Location {
	return journal.Location{Segment: journal.SegmentID(m.ReplaySegment), Offset: int64(m.ReplayOffset)}
}

// insideDir resolves p (relative to dir, or absolute) and refuses a path that
// escapes dir.
func insideDir(dir, p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	p = filepath.Clean(p)
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == "." || rel == ".." || len(rel) >= 3 && rel[:3] == ".."+string(filepath.Separator) {
		return "", fmt.Errorf("%w: %q is not inside the store directory %s", ErrInvalid, p, dir)
	}
	return p, nil
}

func (db *DB) unlock() {
	if db.lock != nil {
		_ = db.lock.Close()
		db.lock = nil
	}
}

// Dir returns the store's directory.
func (db *DB) Dir() string { return db.dir }

// Close waits for writes in progress, takes a final checkpoint (unless the
// handle failed, is read-only, or Options.NoCheckpointOnClose), and closes
// the files. On return everything acknowledged is durable.
func (db *DB) Close() error {
	db.writeMu.Lock()
	db.mu.Lock()
	if db.mu.closed {
		db.mu.Unlock()
		db.writeMu.Unlock()
		return ErrClosed
	}
	db.mu.closed = true
	failed := db.mu.err
	db.mu.ckDone.Broadcast()
	db.mu.Unlock()
	db.writeMu.Unlock()

	close(db.quit)
	db.wg.Wait()
	db.stopAsync()
	var errs []error
	if failed == nil && !db.opts.ReadOnly && !db.opts.NoCheckpointOnClose {
		if err := db.checkpoint(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, db.j.Close(), db.pf.Close())
	db.unlock()
	if failed != nil {
		errs = append(errs, failed)
	}
	return wrapErr(errors.Join(errs...))
}

// fail marks the handle failed by err (the first failure wins) and returns
// the failure.
func (db *DB) fail(err error) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.mu.err == nil {
		db.mu.err = fmt.Errorf("%w: %w", ErrFailed, wrapErr(err))
		db.opts.Logger.Error("kdb: handle failed", "err", err)
	}
	db.mu.ckDone.Broadcast()
	return db.mu.err
}

// writable returns why the DB cannot take writes, if it cannot.
//
// The caller must hold db.mu.
func (db *DB) writableLocked() error {
	switch {
	case db.mu.closed:
		return ErrClosed
	case db.mu.err != nil:
		return db.mu.err
	case db.opts.ReadOnly:
		return ErrReadOnly
	}
	return nil
}

// Err returns the failure that killed the handle, or nil.
func (db *DB) Err() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.mu.err
}

// Write applies the batch atomically. On return (nil) it is durable under
// the sync mode (SyncAlways: on disk) and visible to readers. Concurrent
// Writes share one journal write and one fsync.
func (db *DB) Write(b *Batch) error {
	if b.err != nil {
		return b.err
	}
	if len(b.ops) == 0 {
		return nil
	}
	db.writeMu.RLock()
	defer db.writeMu.RUnlock()
	return db.commit(b.ops)
}

// Put sets key to value in the named index. On return it is durable.
func (db *DB) Put(index string, key, value []byte) error {
	var b Batch
	b.Put(index, key, value)
	return db.Write(&b)
}

// Delete removes key from the named index. On return it is durable.
func (db *DB) Delete(index string, key []byte) error {
	var b Batch
	b.Delete(index, key)
	return db.Write(&b)
}

// encode builds the journal records of a batch: a value record for each
// value above the threshold, then the batch record.
func (db *DB) encode(ops []op) (*commitReq, error) {
	req := &commitReq{ops: make([]op, len(ops)), done: make(chan struct{}, 1)}
	copy(req.ops, ops)
	nvals := 0
	for i := range req.ops {
		o := &req.ops[i]
		if o.kind == opPut && db.opts.ValueThreshold >= 0 && len(o.value) > db.opts.ValueThreshold {
			o.kind, o.ref, o.size = opPutJournal, nvals, len(o.value)
			nvals++
			req.recs = append(req.recs, journal.Record{Type: recValue, Payload: o.value})
			req.size += len(o.value) + 64
		}
	}
	// Allocated at its exact size: the payload stays alive until the batch
	// is committed, and append's doubling would waste up to half of it.
	payload := encodeBatch(make([]byte, 0, encodedBatchSize(req.ops)), req.ops)
	req.recs = append(req.recs, journal.Record{Type: recBatch, Payload: payload})
	req.size += len(payload) + 64
	for _, r := range req.recs {
		if len(r.Payload) > db.maxRecord {
			return nil, fmt.Errorf("%w: batch record of %d bytes (max %d): split the batch", ErrInvalid, len(r.Payload), db.maxRecord)
		}
	}
	if req.size > db.maxGroup {
		return nil, fmt.Errorf("%w: batch of %d bytes (max %d): split the batch", ErrInvalid, req.size, db.maxGroup)
	}
	return req, nil
}
