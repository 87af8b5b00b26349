package kdb

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdb-project/kdb/journal"
)

// Lifecycle: running Views, Close, journal GC and nested calls.
//
// Every View (Get, View, Update's reads, Export, the broker's reads)
// registers in views while it runs. The registry serves three purposes:
//
//   - Close marks it closing (new Views get ErrClosed), waits up to
//     Options.CloseWait for the running ones, then marks it gone: the Views
//     still running get ErrClosed from their next Snapshot or Iter call. The
//     page file stays open and mapped until the last of them returns (the
//     last View closes it), so a cursor step or a key slice in flight never
//     reads unmapped memory.
//   - Journal GC removes only segments below the floor of every running
//     View: a View registers the GC floor of its start (every segment below
//     it may be gone already, none at or above it is), and GC raises the
//     floor to its own limit before it removes anything. A View's snapshot
//     refers only to values in segments at or above the floor it registered
//     (see gc), so nothing it may read is removed while it runs, and GC never
//     waits for a View: what a View pins is removed by the first GC after it
//     ends.
//   - Stats and tests see how many Views run.
type viewRegistry struct {
	mu      sync.Mutex
	closing bool                      // Close began: new Views get ErrClosed
	floors  map[journal.SegmentID]int // the floor each running View registered -> Views
	n       int                       // running Views
	floor   journal.SegmentID         // GC may have removed every segment below it
	idle    chan struct{}             // closed when n drops to 0 while Close waits
	release func()                    // run by the last View after Close gave up waiting
	// postponed: the last GC kept segments for a running View; the View
	// holding the lowest floor wakes the checkpointer when it ends, which
	// runs GC again (gcPostponed).
	postponed bool
	wanted    journal.SegmentID // the limit that GC lowered for them
	gone      atomic.Bool       // Close stopped waiting: Snapshot calls return ErrClosed
	// seqs holds the mem tables' S of each running View (sorted, with
	// counts): versions a View may read are kept (mem.go, prune).
	seqs  []uint64
	seqsN map[uint64]int
	// marks counts the running Views by the mark (viewMark) of the
	// goroutine running each, where marks are cheap: Close refuses to run
	// inside one.
	marks map[uint64]int
}

// inView reports whether the calling goroutine runs a View's function.
func (r *viewRegistry) inView() bool {
	m := viewMark()
	if m == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.marks[m] > 0
}

// beginView registers a View reading the mem tables at seq, or returns
// ErrClosed once Close has begun.
func (db *DB) beginView(seq, mark uint64) (journal.SegmentID, error) {
	r := &db.views
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return 0, ErrClosed
	}
	if r.floors == nil {
		r.floors = make(map[journal.SegmentID]int)
		r.seqsN = make(map[uint64]int)
		r.marks = make(map[uint64]int)
	}
	if mark != 0 {
		r.marks[mark]++
	}
	r.floors[r.floor]++
	if r.seqsN[seq]++; r.seqsN[seq] == 1 {
		i := sort.Search(len(r.seqs), func(i int) bool { return r.seqs[i] >= seq })
		r.seqs = slices.Insert(r.seqs, i, seq)
	}
	r.n++
	return r.floor, nil
}

// viewSeqs returns the mem tables' S of the running Views, sorted.
func (db *DB) viewSeqs(dst []uint64) []uint64 {
	r := &db.views
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(dst[:0], r.seqs...)
}

// endView unregisters a View that registered floor, seq and mark.
func (db *DB) endView(floor journal.SegmentID, seq, mark uint64) {
	r := &db.views
	r.mu.Lock()
	kick := false
	if mark != 0 {
		if r.marks[mark]--; r.marks[mark] == 0 {
			delete(r.marks, mark)
		}
	}
	if r.seqsN[seq]--; r.seqsN[seq] == 0 {
		delete(r.seqsN, seq)
		if i, ok := slices.BinarySearch(r.seqs, seq); ok {
			r.seqs = slices.Delete(r.seqs, i, i+1)
		}
	}
	if r.floors[floor]--; r.floors[floor] == 0 {
		delete(r.floors, floor)
		kick = r.postponed
	}
	r.n--
	var release func()
	if r.n == 0 {
		if r.idle != nil {
			close(r.idle)
			r.idle = nil
		}
		release, r.release = r.release, nil
	}
	r.mu.Unlock()
	if release != nil {
		release()
	}
	if kick {
		db.kickCheckpoint()
	}
}

// gcLimit lowers limit to the floor of every running View and raises the
// registry's floor to the result: Views that begin from now on need nothing
// below it.
func (db *DB) gcLimit(limit journal.SegmentID) journal.SegmentID {
	r := &db.views
	r.mu.Lock()
	defer r.mu.Unlock()
	want := limit
	for f := range r.floors {
		limit = min(limit, f)
	}
	r.floor = max(r.floor, limit)
	r.postponed, r.wanted = limit < want, want
	return limit
}

// gcPostponed reports whether the last GC kept segments for a View that
// has ended since (no running View holds a floor as low as it did).
func (db *DB) gcPostponed() bool {
	r := &db.views
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.postponed {
		return false
	}
	for f := range r.floors {
		if f < r.wanted {
			return false // still held
		}
	}
	return true
}

// closeViews stops new Views and waits until deadline for the running ones.
// It returns whether some still run: then they own the page file's close,
// which the last of them runs through closePF.
func (db *DB) closeViews(deadline time.Time, closePF func()) (lingering bool) {
	r := &db.views
	r.mu.Lock()
	r.closing = true
	var idle chan struct{}
	if r.n > 0 {
		if r.idle == nil {
			r.idle = make(chan struct{})
		}
		idle = r.idle
	}
	r.mu.Unlock()
	if idle != nil {
		if d := time.Until(deadline); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-idle:
			case <-t.C:
			}
			t.Stop()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone.Store(true)
	if r.n == 0 {
		return false
	}
	r.release = closePF
	return true
}

// stopViews marks the registry closing without waiting (Close uses it at
// once, so that Views beginning during its checkpoint get ErrClosed).
func (db *DB) stopViews() {
	db.views.mu.Lock()
	db.views.closing = true
	db.views.mu.Unlock()
}

// runningViews returns how many Views run.
func (db *DB) runningViews() int {
	db.views.mu.Lock()
	defer db.views.mu.Unlock()
	return db.views.n
}

// Nested calls. Update holds writeMu exclusively while its function runs,
// and a Submit holds txMu; Write, Put, Delete, Submit, Update and Close need
// them too. From another goroutine they simply wait, which is ordinary
// concurrency. From the goroutine running the function they would wait for
// themselves: that is refused at once with ErrInvalid. Go has no
// goroutine-local state, so the function's runner leaves a mark of its
// goroutine (enterFn) and a caller that finds the lock taken compares its
// own (nested), never on the uncontended path of a write.
//
// A deferred transaction's done function may run holding writeMu (shared) or
// txMu, and Sync waits for it: every call that takes those locks is refused
// in it at once, contended or not (inDone, a load of a counter when no done
// runs), so that a done that writes fails every time, not only when its
// lock happens to be held.
//
// A function that hands the DB to another goroutine and waits for it to
// write still deadlocks; that cannot be told apart from ordinary waiting.

// lockWrite takes writeMu exclusively, or returns ErrInvalid if the caller
// is inside an Update's function or a deferred transaction's done.
func (db *DB) lockWrite(call string) error {
	if err := db.inDone(call); err != nil {
		return err
	}
	if db.writeMu.TryLock() {
		return nil
	}
	if err := db.nested(call); err != nil {
		return err
	}
	db.writeMu.Lock()
	return nil
}

// rlockWrite takes writeMu shared, or returns ErrInvalid if the caller is
// inside an Update's function or a deferred transaction's done.
func (db *DB) rlockWrite(call string) error {
	if err := db.inDone(call); err != nil {
		return err
	}
	if db.writeMu.TryRLock() {
		return nil
	}
	if err := db.nested(call); err != nil {
		return err
	}
	db.writeMu.RLock()
	return nil
}

// RefuseNested returns ErrInvalid, naming call, if the calling goroutine
// runs the function of an Update, a Submit or a deferred transaction of
// db, or a deferred transaction's done function: there a call that waits
// for writes to commit may wait for itself, since they commit only once
// that function returns. Elsewhere, inside a View's function too, it
// returns nil. A package built on db (the broker) calls it first in its
// own calls that wait so, to refuse them at once as db's writes are.
func (db *DB) RefuseNested(call string) error { return db.nested(call) }

// nested returns ErrInvalid if the calling goroutine runs an Update's or a
// Submit's function, or a deferred transaction's done.
func (db *DB) nested(call string) error {
	if err := db.inDone(call); err != nil {
		return err
	}
	return db.inFn(call)
}

// inFn returns ErrInvalid if the calling goroutine runs an Update's or a
// Submit's function.
func (db *DB) inFn(call string) error {
	if u := db.updater.Load(); u != 0 && u == currentMark() {
		why := "would wait for it forever"
		if call == "Defer" {
			// Defer itself waits for nothing, but the transaction it
			// queues would run inside this one's (a full queue is
			// committed by the Defer that fills it).
			why = "would queue a transaction that runs inside this one"
		}
		return fmt.Errorf("%w: %s called inside an Update's, a Submit's or a deferred transaction's function %s: use the Txn, or call it after that function returns", ErrInvalid, call, why)
	}
	return nil
}

// inDone returns ErrInvalid if the calling goroutine runs a deferred
// transaction's done function (doneMarks).
func (db *DB) inDone(call string) error {
	if db.doners.has(currentMark) {
		return fmt.Errorf("%w: %s called inside a deferred transaction's done function could wait for itself (done may run holding the DB's write locks, and Sync waits for every done): call it after done returns, from another goroutine", ErrInvalid, call)
	}
	return nil
}

// doneMarks holds the marks (enterMark) of the goroutines running a
// deferred transaction's done function. A done runs on the goroutine that
// waited for the commit, which may hold writeMu or txMu, and Sync and
// Checkpoint wait for every deferred transaction of their epoch to settle
// (applied, or done called): a done that calls them, or a write, would
// wait for itself. nested refuses those calls (found
// 2026-12-07: Sync, Checkpoint, Update and Close called in a done hung
// for good, TestDefer_DoneCallingTheDB). Slots, not a map: a done costs two
// atomic operations when none is running beside it; a done that finds
// every slot taken runs unmarked (its calls are not refused).
type doneMarks struct {
	_       [64]byte // running, read by every write, on a line of its own
	running atomic.Int32
	_       [60]byte
	slots   [64]atomic.Uint64
}

// enter marks the calling goroutine, returning its slot (-1: unmarked).
func (d *doneMarks) enter() int {
	m := enterMark()
	d.running.Add(1)
	for i := range d.slots {
		if d.slots[i].CompareAndSwap(0, m) {
			return i
		}
	}
	return -1
}

// leave clears the slot enter returned.
func (d *doneMarks) leave(i int) {
	if i >= 0 {
		d.slots[i].Store(0)
	}
	leaveMark()
	d.running.Add(-1)
}

// has reports whether the goroutine whose mark is mark() runs a done.
func (d *doneMarks) has(mark func() uint64) bool {
	if d.running.Load() == 0 {
		return false
	}
	m := mark()
	for i := range d.slots {
		if d.slots[i].Load() == m {
			return true
		}
	}
	return false
}

// enterFn marks the calling goroutine as the one running a transaction's
// function (an Update's or a Submit's), until leaveFn; nested recognizes
// it. The mark costs a few nanoseconds (fnmark.go), so every Submit can set
// it.
func (db *DB) enterFn() { db.updater.Store(enterMark()) }

// leaveFn clears the mark of enterFn.
func (db *DB) leaveFn() {
	db.updater.Store(0)
	leaveMark()
}

// goid returns the calling goroutine's ID, from the header of its stack
// trace ("goroutine 18 [running]:"), or 0 if that cannot be read.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if !ok {
		return 0
	}
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return id
}
