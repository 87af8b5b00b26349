package kdb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/internal/storefile"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/recovery"
	"github.com/kdb-project/kdb/vfs"
)

// DB is an open store.
//
// The write path (commit.go): a batch is encoded as journal records and
// queued; the writer at the head of the queue leads: it writes the batches
// waiting as one journal batch, waits for its fdatasync, hands the lead on,
// applies them in journal order to the mem tables (mem.go), and only then
// answers the writers. Readers see a change only once it is durable
// (NoSync transactions excepted: see Txn.NoSync). A checkpoint writes the
// mem tables into the index pages.
//
// Lock order and concurrency rules: see the package documentation
// (doc.go).
//
// Invariants:
//   - applied is the location of the last journal record applied to the
//     mem tables. It is written only by a commit leader holding the active
//     mem table's mu, and read by a checkpoint's flush under the same
//     lock, so a checkpoint's replay position always matches its pages
//     exactly.
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
	// updater is the ID of the goroutine running an Update's function, 0
	// if none: see lifecycle.go.
	updater atomic.Uint64
	// doners marks the goroutines running a deferred transaction's done
	// function: see lifecycle.go.
	doners doneMarks
	// views registers the running Views, for Close and journal GC: see
	// lifecycle.go.
	views viewRegistry
	// ckMu serializes checkpoints.
	ckMu sync.Mutex

	cq     commitQueue // the writers' queue and the leader role: commit.go
	ckKick chan struct{}
	quit   chan struct{}
	wg     sync.WaitGroup

	applied journal.Location // see Invariants

	// txMu serializes submissions: a Submit's function and the queueing
	// of every batch (ordered.go); fl is the overlay of the writes in
	// flight.
	txMu sync.Mutex
	// detaching (under txMu): the batches queued now are a Submit's,
	// waited for whenever its Commit is (commitReq.detached).
	detaching bool
	// settleNext (under txMu): the counts of the deferred transactions
	// whose writes the next batch queued carries (commitReq.settle).
	settleNext []*deferFin
	fl         inflight
	// dq holds the deferred transactions (deferred.go).
	dq deferredQueue
	// txSnap is the Snapshot the next transaction's function reads
	// through (runTxn), kept between transactions with its tree names;
	// under txMu (Submit) or writeMu held exclusively (Update).
	txSnap *Snapshot
	// txIx is the index snapshot transactions read (pinnedIndex); under
	// txMu or writeMu held exclusively, as txSnap.
	txIx pinnedIndex

	compaction compaction // compact.go
	mem        mem        // the mem tables: mem.go
	// viewSeqsBuf is the applier's copy of the Views' S, and applyIx its
	// index snapshot (pinnedIndex), both under the active mem table's mu.
	viewSeqsBuf []uint64
	applyIx     pinnedIndex

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
// docs/DESIGN.md. opts may be nil. A second handle opening the same store,
// of this process or another, gets ErrLocked at once.
//
// dir and its missing parents are created. A directory that holds other
// files but no store gets a new store among them (Import, by contrast,
// refuses a directory that is not empty). A dir that is a file fails with
// the file system's error ("not a directory"), which wraps none of the
// package's errors.
//
// With Options.ReadOnly, Open creates nothing (a missing store fails with
// the file system's error) and the handle is a snapshot frozen at Open:
// it never sees later writes of the store's writer, in this process or
// another; open it again to see them. A ReadOnly open retries when a
// checkpoint of the writing process spoiled its reads.
func Open(dir string, opts *Options) (*DB, error) {
	if opts != nil && opts.ReadOnly {
		return openReadOnly(dir, opts)
	}
	return open(dir, opts)
}

func open(dir string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: Open: empty directory name (\".\" names the current one)", ErrInvalid)
	}
	if o.FS == vfs.OS {
		// ".." resolved where the kernel resolves it (after a symbolic
		// link), not removed as text: else a "link/../x" would open
		// another directory than the one every system call on it reaches.
		dir = vfs.CleanPath(dir)
	} else {
		dir = filepath.Clean(dir)
	}
	if o.FS == vfs.OS && !filepath.IsAbs(dir) {
		// The store's files are opened again by name at every new segment,
		// checkpoint and journal GC: a relative name would follow the
		// process's working directory, and after a Chdir the handle would
		// write its segments and db.free into another directory (another
		// store's), both stores then failing to open.
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("kdb: open %s: %w", dir, err)
		}
		dir = abs
	}
	if o.FS == vfs.OS {
		// Else MkdirAll's "file exists", which says nothing of why.
		if l := danglingLink(dir); l == dir {
			return nil, fmt.Errorf("%w: open %s: a symbolic link to nothing: make the directory it names, or name another", ErrInvalid, dir)
		} else if l != "" {
			return nil, fmt.Errorf("%w: open %s: %s is a symbolic link to nothing: make the directory it names, or name another", ErrInvalid, dir, l)
		}
	}
	archive := o.ArchiveDir
	if archive != "" {
		var err error
		if archive, err = archiveDir(o.FS, dir, archive); err != nil {
			return nil, err
		}
	}
	db := &DB{
		dir:    dir,
		opts:   o,
		ckKick: make(chan struct{}, 1),
		quit:   make(chan struct{}),
	}
	db.compaction.kick = make(chan struct{}, 1)
	db.mem.init()
	db.mu.ckDone = sync.NewCond(&db.mu.Mutex)
	db.maxRecord = int(min(16<<20, o.SegmentSize/4))
	db.maxGroup = int(o.SegmentSize / 2)

	sync := journal.SyncAlways
	switch o.Sync {
	case SyncInterval:
		sync = journal.SyncInterval
	case UnsafeSyncNever:
		sync = journal.UnsafeSyncNever
	}
	replay := newReplayer(db)
	_, rep, err := recovery.Run(dir, recovery.Options{
		FS:       o.FS,
		ReadOnly: o.ReadOnly,
		PageFile: pagefile.Options{PageSize: o.PageSize, ForceScan: o.ForceFreeListScan, Logger: o.Logger},
		Index:    index.Options{Logger: o.Logger},
		Journal: journal.Options{SegmentSize: o.SegmentSize, Sync: sync,
			SyncInterval: o.SyncInterval, MaxRecordSize: db.maxRecord, SkipDamaged: o.SkipDamagedJournal,
			ArchiveDir: archive, MaxOpenSegments: o.MaxOpenSegments, Logger: o.Logger},
		Apply: replay.apply,
		Refs:  segmentRefs,
		Recovered: func(st *recovery.State, rep *recovery.Report) error {
			if err := replay.end(); err != nil {
				return err
			}
			return db.adopt(st, rep)
		},
		Checkpoint:              db.checkpoint,
		CheckpointBeforeServing: o.CheckpointBeforeServing,
	})
	if err != nil {
		return nil, openErr(dir, err)
	}
	o.Logger.Info("kdb: recovered", db.mu.recovery.logAttrs()...)
	if !o.ReadOnly {
		db.wg.Add(2)
		go db.checkpointer()
		go db.compactor()
		if rep.NeedsCheckpoint && !rep.Checkpointed {
			db.kickCheckpoint() // see Options.CheckpointBeforeServing
		}
	}
	return db, nil
}

// openErr maps an error of recovery.Run onto the root's sentinels. A
// locked store is ErrLocked naming the holder (vfs's message says whether
// this process or another one).
func openErr(dir string, err error) error {
	if errors.Is(err, recovery.ErrLocked) {
		return fmt.Errorf("%w: %s: %w", ErrLocked, dir, err)
	}
	return wrapErr(fmt.Errorf("kdb: open %s: %w", dir, err))
}

// adopt takes over the State recovery opened (recovery.Options.Recovered),
// before the recovery checkpoint, which runs on these fields. Its error
// fails the Open, and recovery closes the State again.
func (db *DB) adopt(st *recovery.State, rep *recovery.Report) error {
	db.lock = st.Lock
	db.pf, db.ix, db.j, db.applied = st.PageFile, st.Index, st.Journal, st.LastApplied
	db.mu.recovery = newRecoveryReport(rep)
	if err := db.noteLostValues(rep.Journal.Skipped); err != nil {
		return err
	}
	if err := db.setReplayRate(rep); err != nil {
		return err
	}
	db.mu.ckApplied = rep.ReplayFrom
	db.mu.applied = db.applied
	// The checkpoint that clears recoveryCk fills in RecoveryReport's
	// Checkpointed; until it runs, the checkpointer takes it at once.
	db.mu.recoveryCk = rep.NeedsCheckpoint
	db.mu.ckBytes = db.j.Stats().Bytes
	db.mu.lastCk = time.Now()
	if ks := db.ix.MaxKeySize() - len(userTreePrefix) - MaxIndexNameSize; ks < MaxKeySize {
		return fmt.Errorf("%w: page size %d allows keys of %d bytes, need %d", ErrInvalid, db.pf.PageSize(), ks, MaxKeySize)
	}
	return nil
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

// segmentRefs returns the oldest and newest journal segment holding a value
// the index refers to (0, 0: none), from the first and last key of the
// segment refs tree (FORMAT.md §5.4).
func segmentRefs(ix *index.Store) (oldest, newest journal.SegmentID, err error) {
	err = ix.View(func(tx *index.Tx) error {
		t, err := tx.OpenTree([]byte(segRefsTree))
		if err != nil || t == nil {
			return err
		}
		c := t.Cursor()
		seg := func(k []byte, ok bool) (journal.SegmentID, error) {
			if err := c.Err(); err != nil || !ok {
				return 0, err
			}
			if len(k) != 4 {
				return 0, fmt.Errorf("%w: segment refs key of %d bytes", ErrCorrupt, len(k))
			}
			return journal.SegmentID(binary.BigEndian.Uint32(k)), nil
		}
		k, _, ok := c.First()
		if oldest, err = seg(k, ok); err != nil {
			return err
		}
		k, _, ok = c.Last()
		newest, err = seg(k, ok)
		return err
	})
	return oldest, newest, wrapErr(err)
}

// noteLostValues adds to each skipped journal range that is whole missing
// segments (SkipDamagedJournal) how many values the index still refers to
// in them: reading those is ErrCorrupt. Called by Open only.
func (db *DB) noteLostValues(skipped []journal.Damage) error {
	return wrapErr(db.ix.View(func(tx *index.Tx) error {
		t, err := tx.OpenTree([]byte(segRefsTree))
		if err != nil || t == nil {
			return err
		}
		for i, d := range skipped {
			if d.From.Offset != 0 || d.To.Offset != 0 || i >= len(db.mu.recovery.Skipped) {
				continue
			}
			var n, bytes uint64
			var k [4]byte
			for seg := d.From.Segment; seg < d.To.Segment; seg++ {
				binary.BigEndian.PutUint32(k[:], uint32(seg))
				v, ok, err := t.Get(k[:])
				if err != nil {
					return err
				}
				if ok && len(v) == 16 {
					n += binary.LittleEndian.Uint64(v)
					bytes += binary.LittleEndian.Uint64(v[8:])
				}
			}
			if n > 0 {
				db.mu.recovery.Skipped[i] += fmt.Sprintf("; the index refers to %d values (%d bytes) kept there: reading them is ErrCorrupt", n, bytes)
			}
		}
		return nil
	}))
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

// archiveDir checks Options.ArchiveDir and returns its path: inside dir
// (insideDir), not a name of the store's own files (whose first component
// it would be created under), not an existing file that is not a
// directory, and, on the OS's file system, not a link out of dir. Each of
// these used to open and fail later, at every checkpoint.
func archiveDir(fsys vfs.FS, dir, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: ArchiveDir %q: a NUL byte", ErrInvalid, p)
	}
	p, err := insideDir(dir, p)
	if err != nil {
		return "", err
	}
	rel, _ := filepath.Rel(dir, p)
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	if storefile.Is(first) { // a name the store writes, or writes through (db.free.tmp, db-N.log.tmp)
		return "", fmt.Errorf("%w: ArchiveDir %q: %s is one of the store's files", ErrInvalid, p, first)
	}
	if _, isDir, err := fsys.Stat(p); err == nil && !isDir {
		return "", fmt.Errorf("%w: ArchiveDir %q exists and is not a directory", ErrInvalid, p)
	}
	if fsys == vfs.OS {
		// The deepest part of p that exists, with its links resolved.
		real, rest := p, ""
		for {
			r, err := filepath.EvalSymlinks(real)
			if err == nil {
				real = filepath.Join(r, rest)
				break
			}
			parent := filepath.Dir(real)
			if parent == real {
				return p, nil
			}
			rest, real = filepath.Join(filepath.Base(real), rest), parent
		}
		if realDir, err := filepath.EvalSymlinks(dir); err == nil {
			if _, err := insideDir(realDir, real); err != nil {
				return "", fmt.Errorf("%w: ArchiveDir %q leads out of the store's directory, to %s", ErrInvalid, p, real)
			}
		}
	}
	return p, nil
}

func (db *DB) unlock() {
	if db.lock != nil {
		_ = db.lock.Close()
		db.lock = nil
	}
}

// Dir returns the store's directory: on the OS's file system an absolute
// path (a relative one given to Open is taken from the working directory
// at Open).
func (db *DB) Dir() string { return db.dir }

// Sync makes every write applied so far durable: the commits of
// Txn.NoSync and Broker.AckAsync, and under Options.Sync other than
// SyncAlways every write. It costs one fdatasync, shared with the writers
// syncing at the same time, and nothing when everything is durable
// already. A failure fails the handle.
func (db *DB) Sync() error {
	db.mu.Lock()
	err := db.writableLocked()
	db.mu.Unlock()
	if err != nil {
		return err
	}
	// Deferred transactions are ordered before Sync: commit them first.
	if err := db.syncDeferred(); err != nil {
		return err
	}
	if err := db.j.Sync(); err != nil {
		return db.fail(err)
	}
	return nil
}

// testHookCloseFiles, if set (by tests only), runs in Close after its
// final checkpoint, just before the files are closed.
var testHookCloseFiles func()

// Close waits for writes in progress, takes a final checkpoint (unless the
// handle failed, is read-only, or Options.NoCheckpointOnClose), and closes
// the files. On return everything acknowledged is durable.
//
// Views that begin after Close began get ErrClosed. Close waits for the
// running ones up to Options.CloseWait (counted from its call); those still
// running then get ErrClosed from their next Snapshot or Iter call, and the
// page file they read stays mapped until the last of them returns: Close
// never unmaps memory under a running View. Called inside an Update's
// function, Close returns ErrInvalid at once.
func (db *DB) Close() error {
	deadline := time.Now().Add(db.opts.CloseWait)
	if err := db.nested("Close"); err != nil {
		return err
	}
	if db.views.inView() {
		// Else it waits CloseWait for the View it runs in, then closes
		// under it.
		return fmt.Errorf("%w: Close called inside a View's function would wait for that View to end: call it after View returns", ErrInvalid)
	}
	db.closeDeferred()
	if err := db.lockWrite("Close"); err != nil {
		return err
	}
	if !db.drainUntil(deadline) {
		db.opts.Logger.Warn("kdb: Close: writes still in flight after CloseWait are abandoned", "wait", db.opts.CloseWait)
	}
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
	db.stopViews()
	db.txIx.drop()
	db.writeMu.Unlock()
	db.abandonDeferred()

	close(db.quit)
	db.wg.Wait()
	db.stopAsync()
	st := db.mem.lockActive() // no applier runs any more
	db.applyIx.drop()
	st.active.mu.Unlock()
	var errs []error
	if failed == nil && !db.opts.ReadOnly && !db.opts.NoCheckpointOnClose {
		if err := db.checkpoint(); err != nil {
			errs = append(errs, err)
		}
	}
	if testHookCloseFiles != nil {
		testHookCloseFiles()
	}
	lingering := db.closeViews(deadline, func() {
		if err := db.pf.Close(); err != nil {
			db.opts.Logger.Error("kdb: close db.data after the last View", "err", err)
		}
	})
	errs = append(errs, db.j.Close())
	if !lingering {
		errs = append(errs, db.pf.Close())
	} else {
		db.opts.Logger.Warn("kdb: Close: Views still running after CloseWait get ErrClosed; db.data is closed when the last returns", "wait", db.opts.CloseWait)
	}
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
	first := db.mu.err == nil
	if first {
		db.mu.err = fmt.Errorf("%w: %w", ErrFailed, wrapErr(err))
	}
	db.mu.ckDone.Broadcast()
	failed := db.mu.err
	db.mu.Unlock()
	// Logged once db.mu is released: a Logger may call back into the DB
	// (Err, Stats, Recovery), which takes it.
	if first {
		db.opts.Logger.Error("kdb: handle failed", "err", err)
	}
	return failed
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
// Writes share one journal write and one fsync. Called inside an Update's
// or a Submit's function, or a deferred transaction's, Write returns
// ErrInvalid at once: use the Txn there.
//
// A batch too large for the journal is ErrInvalid ("split the batch"),
// with nothing written: its batch record (keys, and values up to
// Options.ValueThreshold, with a few bytes each) at most MaxBatchSize
// (Options.SegmentSize/4, at most 16 MiB), each value kept in the journal
// at most as much, and all of them together, with 64 bytes each, at most
// Options.SegmentSize/2. Txn.Fits tells a transaction the same.
func (db *DB) Write(b *Batch) error { return db.write(b, false) }

// write is Write; with own, b's ops are given away (see commitAsync).
func (db *DB) write(b *Batch, own bool) error {
	if b == nil {
		return fmt.Errorf("%w: Write: nil batch", ErrInvalid)
	}
	if b.err != nil {
		return b.err
	}
	if len(b.ops) == 0 {
		// Nothing to write, but a closed, failed or read-only handle says so.
		db.mu.Lock()
		defer db.mu.Unlock()
		return db.writableLocked()
	}
	if err := db.rlockWrite("Write"); err != nil {
		return err
	}
	defer db.writeMu.RUnlock()
	return db.commitHost(b.ops, false, own, true)
}

// Put sets key to value in the named index. On return it is durable.
func (db *DB) Put(index string, key, value []byte) error {
	b := Batch{pooled: true}
	b.Put(index, key, value)
	return db.write(&b, true)
}

// Delete removes key from the named index. On return it is durable.
func (db *DB) Delete(index string, key []byte) error {
	b := Batch{pooled: true}
	b.Delete(index, key)
	return db.write(&b, true)
}

// encode prepares the journal records of a batch (in ops itself with own,
// else in a copy): a value record for each
// value above the threshold, and the size of the batch record, which it
// checks; the batch record itself is built by seal, outside txMu.
func (db *DB) encode(ops []op, own bool) (*commitReq, error) {
	// Two tokens may wait: a detached request's leader token that a
	// writer took the role from, and then its answer (commit.go).
	req := &commitReq{ops: ops, done: make(chan struct{}, 2)}
	req.recs = req.recBuf[:0]
	if !own {
		if len(ops) <= pooledOps {
			req.ops = append(newOps(), ops...)
		} else {
			req.ops = make([]op, len(ops))
			copy(req.ops, ops)
		}
	}
	nvals, maxVal := 0, 0
	for i := range req.ops {
		o := &req.ops[i]
		if db.inJournal(o) {
			if o.kind == opPut {
				o.kind = opPutJournal
			}
			o.ref, o.size = nvals, len(o.value)
			nvals++
			req.recs = append(req.recs, journal.Record{Type: recValue, Payload: o.value})
			req.size += len(o.value) + 64
			maxVal = max(maxVal, len(o.value))
		}
	}
	req.batchSize = encodedBatchSize(req.ops)
	req.size += req.batchSize + 64
	if err := db.checkBounds(req.batchSize, maxVal, req.size, len(req.ops)); err != nil {
		return nil, err
	}
	return req, nil
}

// inJournal reports whether encode gives o's value a value record of its
// own.
func (db *DB) inJournal(o *op) bool {
	return (o.kind == opPut && db.opts.ValueThreshold >= 0 && len(o.value) > db.opts.ValueThreshold) || o.kind == opMoveJournal
}

// checkBounds checks a batch's encoded sizes (of nops operations): its
// batch record, its largest value record, and all its records with their
// headers.
func (db *DB) checkBounds(batchSize, maxVal, size, nops int) error {
	if batchSize > db.maxRecord && nops == 1 {
		// Nothing to split: its value is kept in the batch record
		// (Options.ValueThreshold), or its key is that long.
		return fmt.Errorf("%w: one operation whose batch record takes %d bytes (max %d, a quarter of Options.SegmentSize): a value over Options.ValueThreshold (%d) is kept apart, in a value record, a shorter one in the batch record", ErrInvalid, batchSize, db.maxRecord, db.opts.ValueThreshold)
	}
	if batchSize > db.maxRecord {
		return fmt.Errorf("%w: batch record of %d bytes (max %d): split the batch", ErrInvalid, batchSize, db.maxRecord)
	}
	if maxVal > db.maxRecord {
		return fmt.Errorf("%w: value record of %d bytes (max %d): split the batch", ErrInvalid, maxVal, db.maxRecord)
	}
	if size > db.maxGroup {
		return fmt.Errorf("%w: batch of %d bytes in all, its value records included (max %d, half of Options.SegmentSize; its batch record alone at most %d, MaxBatchSize): split the batch", ErrInvalid, size, db.maxGroup, db.maxRecord)
	}
	return nil
}

// fits is encode's check of ops' bounds, without encode's changes to
// them.
func (db *DB) fits(ops []op) error {
	batchSize := encodedBatchSize(ops)
	vals, maxVal, nvals := 0, 0, 0
	for i := range ops {
		o := &ops[i]
		if !db.inJournal(o) {
			continue
		}
		if o.kind == opPut { // encode makes it an opPutJournal: a reference
			batchSize += uvarintLen(uint64(nvals)) - len(o.value)
		}
		nvals++
		vals += len(o.value) + 64
		maxVal = max(maxVal, len(o.value))
	}
	return db.checkBounds(batchSize, maxVal, batchSize+64+vals, len(ops))
}

// danglingLink returns the deepest of dir and its parents that exists, if
// it is a symbolic link to nothing (MkdirAll cannot make the store's
// directory through it), or "".
func danglingLink(dir string) string {
	for p := dir; ; {
		st, err := os.Lstat(p)
		if err == nil {
			if st.Mode()&os.ModeSymlink != 0 {
				if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
					return p
				}
			}
			return ""
		}
		q := filepath.Dir(p)
		if q == p {
			return ""
		}
		p = q
	}
}
