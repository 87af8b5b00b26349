package kdb

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// The write path's group commit (docs/DESIGN.md "The write path").
//
// There is no committer goroutine: the writer at the head of the queue
// becomes the leader. It takes the batches waiting (its own first) as one
// group, writes them as one journal batch, hands the leader role to the
// next writer waiting (if any), and then, without the role, waits for the
// fdatasync that covers its group (journal.SyncTo), applies the group to
// the index once the groups written before it are applied, and answers its
// followers. So a lone writer writes, syncs and applies in its own
// goroutine, with no hand-off, and the next group is gathered and written
// while the previous one's fdatasync runs: a writer arriving during a sync
// waits for at most one more.

// commitReq is one batch waiting for a leader.
type commitReq struct {
	ops  []op
	recs []journal.Record
	size int
	// async: the writer does not wait for durability (AckAsync): its group
	// is synced only if another batch in it needs a sync.
	async bool
	// lead is set (under commitQueue.mu, before the token is sent) when the
	// request is made the leader rather than answered.
	lead bool
	err  error
	// done receives one token: the request was answered (err) or made the
	// leader (lead).
	done chan struct{}
}

// commitQueue holds the batches submitted and not yet taken by a leader,
// and orders the groups' index updates.
//
// Invariants:
//   - mu.leading: some writer holds the leader role (it was made leader and
//     has not yet handed the role on); at most one does. Groups are taken
//     from the head of mu.queue and written by the leader in that order,
//     so journal order is submission order.
//   - Group n (numbered from 1 in write order, mu.written) is applied only
//     after group n-1: ap.done == n-1.
type commitQueue struct {
	mu struct {
		sync.Mutex
		queue   []*commitReq
		leading bool
		written uint64 // groups written to the journal
		// unsynced counts the writers whose batches were written and
		// wait for an fdatasync not yet begun; lastCover is how many the
		// last fdatasync began with; target is how many the next one may
		// expect (syncGroup's linger).
		unsynced, lastCover, target int
		linger                      time.Duration
		written1                    chan struct{} // buffered(1): a group was written (lingering syncer)
		// syncing: a syncGroup is lingering or in its fdatasync;
		// syncDone is broadcast when it ends.
		syncing  bool
		syncDone *sync.Cond
	}

	ap struct {
		sync.Mutex
		cond *sync.Cond
		done uint64 // groups applied (or skipped after a failure)
	}
	// async: a timer that syncs the journal within SyncInterval of an
	// unsynced AckAsync group.
	async struct {
		sync.Mutex
		timer  *time.Timer
		armed  bool
		closed bool
	}
}

// commit journals ops, waits until they are durable and applied, and
// returns. The caller must hold db.writeMu (shared or exclusive).
func (db *DB) commit(ops []op) error {
	req, err := db.submit(ops, false)
	if err != nil {
		return err
	}
	return db.wait(req)
}

// submit encodes ops and queues them without waiting: the caller must then
// call wait(req), which leads the commit if req is made the leader, and
// returns its outcome. Batches are journaled and applied in the order they
// were submitted, so a caller that serializes its submissions (the broker)
// knows the order they take effect in. async: see commitReq.
// The caller must hold db.writeMu (shared or exclusive) until wait returns.
func (db *DB) submit(ops []op, async bool) (*commitReq, error) {
	req, err := db.encode(ops)
	if err != nil {
		return nil, err
	}
	req.async = async
	if err := db.waitForRoom(); err != nil {
		return nil, err
	}
	q := &db.cq
	q.mu.Lock()
	q.mu.queue = append(q.mu.queue, req)
	if !q.mu.leading {
		q.mu.leading = true
		req.lead = true
		req.done <- struct{}{}
	}
	q.mu.Unlock()
	return req, nil
}

// wait waits for req's outcome, leading the commit of its group if req is
// made the leader.
func (db *DB) wait(req *commitReq) error {
	<-req.done
	if req.lead {
		db.lead()
	}
	return req.err
}

// lead takes the batches at the head of the queue (the leader's own first)
// as one group, and commits and answers it: see the comment at the top of
// this file. The caller holds the leader role; lead hands it on.
func (db *DB) lead() {
	group := db.gather()
	recs := group[0].recs
	if len(group) > 1 {
		recs = nil
		for _, r := range group {
			recs = append(recs, r.recs...)
		}
	}
	// Writers that passed waitForRoom together could otherwise overshoot
	// the limit on held pages by their whole batches.
	err := db.waitForRoom()
	start := time.Now()
	var locs []journal.Location
	var end journal.Location
	if err == nil {
		locs, end, err = db.j.Write(recs...)
		if err != nil && !errors.Is(err, journal.ErrRecordTooLarge) && !errors.Is(err, journal.ErrBatchTooLarge) {
			err = db.fail(err)
		} else if err != nil {
			err = wrapErr(err) // refused before anything was written
		}
	}
	q := &db.cq
	q.mu.Lock()
	var seq uint64
	if err == nil {
		q.mu.written++
		seq = q.mu.written
		for _, r := range group {
			if !r.async {
				q.mu.unsynced++
			}
		}
		if q.mu.written1 != nil {
			select {
			case q.mu.written1 <- struct{}{}:
			default:
			}
		}
	}
	if len(q.mu.queue) > 0 {
		next := q.mu.queue[0]
		next.lead = true
		next.done <- struct{}{}
	} else {
		q.mu.leading = false
	}
	q.mu.Unlock()

	if err == nil {
		sync := false
		for _, r := range group {
			sync = sync || !r.async
		}
		if db.opts.Sync == SyncAlways {
			if sync {
				if serr := db.syncGroup(end); serr != nil {
					err = db.fail(serr)
				}
			} else {
				db.syncAsyncWithin()
			}
		}
		err = db.applyInTurn(seq, group, locs, err)
		q.mu.Lock()
		q.mu.linger = min(time.Since(start)/2, maxLinger)
		q.mu.Unlock()
	}
	for _, r := range group {
		r.err = err
		if !r.lead {
			r.done <- struct{}{}
		}
	}
}

// gather takes the group the leader commits from the head of the queue: at
// least one batch, at most db.maxGroup bytes and CommitGroupOps operations
// (a batch larger than either goes alone).
//
// The caller holds the leader role.
func (db *DB) gather() []*commitReq {
	q := &db.cq
	q.mu.Lock()
	defer q.mu.Unlock()
	n, size, nops := 1, q.mu.queue[0].size, len(q.mu.queue[0].ops)
	for ; n < len(q.mu.queue); n++ {
		r := q.mu.queue[n]
		if size+r.size > db.maxGroup || nops+len(r.ops) > db.opts.CommitGroupOps {
			break
		}
		size += r.size
		nops += len(r.ops)
	}
	group := make([]*commitReq, n)
	copy(group, q.mu.queue)
	clear(q.mu.queue[:n]) // drop the references: their records hold values
	q.mu.queue = q.mu.queue[n:]
	if len(q.mu.queue) == 0 {
		q.mu.queue = q.mu.queue[:0:0]
	}
	return group
}

// syncGroup makes the journal durable up to end, the end of a group just
// written.
//
// If an fdatasync is needed, it first lingers briefly while fewer writers
// wait for it than the last one covered plus those written while it ran:
// the writers the last fdatasync answered are usually on their way back, and without the wait they form
// a second cohort that alternates with the first, each fdatasync carrying
// half of them (TestDB_GroupCommitGathersAllWriters). The linger is a
// half of the last group's commit time, at most maxLinger; a lone
// writer never waits (the count it waits for is its own).
func (db *DB) syncGroup(end journal.Location) error {
	q := &db.cq
	q.mu.Lock()
	if q.mu.syncDone == nil {
		q.mu.syncDone = sync.NewCond(&q.mu.Mutex)
	}
	for {
		if db.j.Durable(end) {
			q.mu.Unlock()
			return nil
		}
		if !q.mu.syncing {
			break
		}
		q.mu.syncDone.Wait()
	}
	q.mu.syncing = true
	if q.mu.unsynced < q.mu.target && q.mu.linger > 0 {
		if q.mu.written1 == nil {
			q.mu.written1 = make(chan struct{}, 1)
		}
		timer := time.NewTimer(q.mu.linger)
		for q.mu.unsynced < q.mu.target {
			ch := q.mu.written1
			q.mu.Unlock()
			fired := false
			select {
			case <-ch:
			case <-timer.C:
				fired = true
			}
			q.mu.Lock()
			if fired {
				break
			}
		}
		timer.Stop()
	}
	q.mu.lastCover, q.mu.unsynced = q.mu.unsynced, 0
	q.mu.Unlock()
	err := db.j.SyncTo(end)
	// The writers it covered come back, and those written meanwhile wait.
	q.mu.Lock()
	q.mu.target = q.mu.lastCover + q.mu.unsynced
	q.mu.syncing = false
	q.mu.syncDone.Broadcast()
	q.mu.Unlock()
	return err
}

// maxLinger bounds how long a leader waits for more writers (the linger is
// also at most half a commit); it matters only when a commit is slow (a
// slow disk, the race detector).
const maxLinger = 3 * time.Millisecond

// applyInTurn waits until the groups written before group seq are applied,
// then applies group (whose records lie at locs) to the index unless err
// or the handle failed, and returns the group's outcome.
func (db *DB) applyInTurn(seq uint64, group []*commitReq, locs []journal.Location, err error) error {
	ap := &db.cq.ap
	ap.Lock()
	defer ap.Unlock()
	if ap.cond == nil {
		ap.cond = sync.NewCond(&ap.Mutex)
	}
	for ap.done != seq-1 {
		ap.cond.Wait()
	}
	if err == nil {
		err = db.Err()
	}
	if err == nil {
		err = db.applyGroup(group, locs)
	}
	ap.done = seq
	ap.cond.Broadcast()
	return err
}

// applyGroup applies the batches of group, journaled at locs, to the index
// in one Update.
func (db *DB) applyGroup(group []*commitReq, locs []journal.Location) error {
	err := db.ix.Update(func(tx *index.Tx) error {
		a := applier{tx: tx}
		i := 0
		for _, r := range group {
			n := len(r.recs)
			if err := a.apply(r.ops, locs[i:i+n-1]); err != nil {
				return err
			}
			i += n
		}
		if err := a.flushRefs(); err != nil {
			return err
		}
		db.applied = locs[len(locs)-1]
		return nil
	})
	if err != nil {
		// The batch is durable but could not be applied: the index and the
		// journal disagree until a reopen replays it.
		return db.fail(fmt.Errorf("apply to the index: %w", err))
	}
	db.mu.Lock()
	db.mu.applied = locs[len(locs)-1]
	db.mu.stats.Commits++
	db.mu.stats.Batches += uint64(len(group))
	db.mu.Unlock()
	db.maybeKickCheckpoint()
	return nil
}

// syncAsyncWithin makes sure the journal is synced within SyncInterval: an
// AckAsync group was just written without a sync.
func (db *DB) syncAsyncWithin() {
	a := &db.cq.async
	a.Lock()
	defer a.Unlock()
	if a.armed || a.closed {
		return
	}
	a.armed = true
	if a.timer == nil {
		a.timer = time.AfterFunc(db.opts.SyncInterval, db.syncAsync)
	} else {
		a.timer.Reset(db.opts.SyncInterval)
	}
}

// syncAsync runs on the timer syncAsyncWithin arms: it syncs the journal. A
// failure fails the handle (there is no caller to return it to).
func (db *DB) syncAsync() {
	a := &db.cq.async
	a.Lock()
	a.armed = false
	closed := a.closed
	a.Unlock()
	if closed {
		return
	}
	if err := db.j.Sync(); err != nil && !errors.Is(err, journal.ErrClosed) && db.Err() == nil {
		_ = db.fail(err)
	}
}

// stopAsync stops the AckAsync sync timer (Close: the journal's own Close
// syncs what is left).
func (db *DB) stopAsync() {
	a := &db.cq.async
	a.Lock()
	defer a.Unlock()
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
	}
}

// waitForRoom blocks while the page file holds twice
// Options.CheckpointDirtyPages page images for checkpoints (dirty pages, and
// old images a running checkpoint still writes), until a checkpoint has
// written them.
//
// INVARIANT: when no checkpoint is running, the images held are dirty pages
// (pagefile.File.HeldPages), so DirtyCount >= CheckpointDirtyPages and the
// kicked checkpointer finds a checkpoint due; when one is running, its end
// broadcasts ckDone and releases the images it held.
func (db *DB) waitForRoom() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	for {
		if err := db.writableLocked(); err != nil {
			return err
		}
		if db.pf.HeldPages() < 2*db.opts.CheckpointDirtyPages {
			return nil
		}
		db.kickCheckpoint()
		db.mu.stats.WriteStalls++
		db.mu.ckDone.Wait()
	}
}
