package kdb

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// The write path's group commit (docs/DESIGN.md "The write path").
//
// There is no committer goroutine: the writer at the head of the queue
// becomes the leader. It takes the batches waiting (its own first) as one
// group, writes them as one journal batch, waits for the fdatasync that
// makes them durable, hands the leader role to the next writer waiting (if
// any), and then, without the role, applies its group to the mem tables
// once the groups written before it are applied, and answers its
// followers. So a lone writer writes, syncs and applies in its own
// goroutine, with no hand-off, and the next group is gathered, written and
// synced while the previous one is applied and answered. A group with a
// follower already waiting is applied by that follower while the leader
// syncs it, and published once the sync is done (applyJob): its writers
// are answered as soon as the sync ends.
//
// Writes do not overlap an fdatasync: measured, letting the next leader
// write while the previous fdatasync runs (Pebble's LogWriter) gave smaller
// groups, so more index updates and pwrites per fdatasync, and with 16
// producers on 2 cores (CPU-bound) half the throughput of this order.

// commitReq is one batch waiting for a leader.
type commitReq struct {
	ops  []op
	recs []journal.Record // the value records; seal appends the batch record
	size int
	// batchSize is the batch record's payload size; sealOnce builds it.
	batchSize int
	sealOnce  sync.Once
	// async: the writer does not wait for durability (AckAsync): its group
	// is synced only if another batch in it needs a sync.
	async bool
	// lead is set (under commitQueue.mu, before the token is sent) when the
	// request is made the leader rather than answered.
	lead bool
	// job is set (before a token is sent) when the request's writer is
	// asked to apply its group while the leader syncs it (applyJob); its
	// answer is a second token.
	job *applyJob
	// waiting: the writer is in wait (so a job given to it runs at once,
	// not whenever its Commit is waited for).
	waiting atomic.Bool
	// detached: a Submit's batch, waited for whenever its Commit is, if
	// ever: the leader role it is given while its owner is not in wait is
	// taken by a writer that waits (commitQueue.held), so that it holds up
	// nobody (a Submit, then a Put in the same goroutine, then Wait).
	// claim says who takes its leader token: its owner (claimWaiting,
	// set as it enters wait) or a writer taking the role (claimTaken).
	detached bool
	claim    atomic.Int32
	// proxy is set (under commitQueue.mu, before the token is sent) when
	// the request's writer is to lead the group at the head of the queue
	// on behalf of a detached request before it, not in wait.
	proxy bool
	// leadingFor: its writer leads for a detached request (leadFor), so
	// it is no follower to hand the apply to (handApply).
	leadingFor atomic.Bool
	err        error
	// gen, ovKeys and ovDrops: its entries in the in-flight overlay
	// (ordered.go).
	gen     uint64
	ovKeys  []string
	ovDrops []string
	// done receives one token: the request was answered (err) or made the
	// leader (lead).
	done chan struct{}
	// onDone: the done functions of the deferred transactions in the
	// batch (deferred.go), called by wait with its outcome; settle: their
	// counts for syncDeferred, settled by the leader once the batch is
	// applied (or failed), whether or not anyone waits.
	onDone []func(error)
	settle []*deferFin
	// Backing arrays for recs and ovKeys of a small batch.
	recBuf   [2]journal.Record
	ovKeyBuf [8]string
}

// commitReq.claim: who takes a detached request's leader token.
const (
	claimNone = iota
	claimWaiting
	claimTaken
)

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
//   - held, if set, is a detached request at the head of mu.queue whose
//     token was sent while its owner was not in wait; the role is taken
//     from it by the first writer in wait (or drain) whose claim on it
//     succeeds, or used by its owner.
type commitQueue struct {
	mu struct {
		sync.Mutex
		queue   []*commitReq
		leading bool
		written uint64 // groups written to the journal
		// target is how many batches the next group may expect (the last
		// group, whose writers are on their way back, and those that
		// waited for it); linger is how long gather waits for them.
		target  int
		linger  time.Duration
		arrived chan struct{} // buffered(1): a batch was queued (lingering leader)
		// procs is GOMAXPROCS, read once every procsEvery gathers (it
		// takes the scheduler's lock; a program may change it).
		procs   int
		gathers uint64
		// noYieldUntil: a yield ran another goroutine for a time slice;
		// until then a leader on one P does not yield.
		noYieldUntil time.Time
	}
	ap struct {
		sync.Mutex
		cond *sync.Cond
		done uint64 // groups applied (or skipped after a failure)
	}
	// jobsApplied counts the groups applied by an applyJob before their
	// sync ended (tests check the path runs).
	jobsApplied atomic.Uint64
	// jobsHanded counts the groups handed to a follower (tests).
	jobsHanded atomic.Uint64
	// held is the detached request holding the leader role (its token
	// sent, lead set) while its owner is not in wait; set and cleared
	// under mu, read without it by every writer entering wait.
	held atomic.Pointer[commitReq]
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
func (db *DB) commit(ops []op) error { return db.commitAsync(ops, false, false) }

// commitAsync is commit; with async, it waits until ops are applied, not
// until they are durable (see commitReq.async). With own, ops are the
// caller's to give away (a transaction's, compaction's), not a Batch's the
// caller may reuse.
func (db *DB) commitAsync(ops []op, async, own bool) error {
	return db.commitHost(ops, async, own, false)
}

// commitHost is commitAsync; with deferred, the deferred transactions
// queued (deferred.go) are queued first, each as a batch of its own,
// ordered before ops.
func (db *DB) commitHost(ops []op, async, own, deferred bool) error {
	if err := db.waitForRoom(); err != nil {
		return err
	}
	if err := db.lockTx("a write"); err != nil {
		return err
	}
	var pre []*commitReq
	req, err := func() (*commitReq, error) {
		defer db.txMu.Unlock() // deferred: see runDeferred
		if deferred {
			pre = db.runDeferred(db.takeDeferred(), true)
		}
		return db.submit(ops, async, own)
	}()
	// The deferred transactions' outcomes go to their done functions; a
	// failed commit fails the handle, and so this write too.
	_ = db.waitAll(pre)
	if err != nil {
		return err
	}
	return db.wait(req)
}

// submit encodes ops and queues them without waiting: the caller must then
// call wait(req), which leads the commit if req is made the leader, and
// returns its outcome. Batches are journaled and applied in the order they
// were submitted, so a caller that serializes its submissions (the broker)
// knows the order they take effect in. async: see commitReq; own: see
// commitAsync.
// The caller must hold db.writeMu (shared or exclusive) and txMu.
func (db *DB) submit(ops []op, async, own bool) (*commitReq, error) {
	// Set before it is queued: a leader reads them once it is.
	settle := db.settleNext
	db.settleNext = nil
	req, err := db.encode(ops, own)
	if err != nil {
		return nil, err
	}
	req.settle = settle
	req.async = async
	req.detached = db.detaching
	// The caller waited for room before it took txMu (waitForRoom): a
	// writer waits there, not while the writers behind it wait for txMu.
	db.register(req)
	q := &db.cq
	q.mu.Lock()
	q.mu.queue = append(q.mu.queue, req)
	if !q.mu.leading {
		q.mu.leading = true
		db.giveLeadLocked()
	} else if q.mu.arrived != nil {
		select {
		case q.mu.arrived <- struct{}{}:
		default:
		}
	}
	q.mu.Unlock()
	return req, nil
}

// seal builds req's batch record (once: by its writer on the way to
// waiting, or by the leader that takes it first), so that the copying is
// done outside txMu and in parallel with other writers.
func (req *commitReq) seal() {
	req.sealOnce.Do(func() {
		// Allocated at its exact size: the payload stays alive until the
		// batch is committed, and append's doubling would waste up to
		// half of it.
		payload := encodeBatch(make([]byte, 0, req.batchSize), req.ops)
		req.recs = append(req.recs, journal.Record{Type: recBatch, Payload: payload})
	})
}

// giveLeadLocked gives the leader role to the head of the queue, or, if
// that is a detached request whose owner is not in wait, to the first
// writer waiting behind it (a proxy, leading from the head); with none, to
// the head, marked held for the next writer that waits, or for drain (an
// Update's, Close's), which it wakes. The caller holds q.mu and the role;
// the queue is not empty.
func (db *DB) giveLeadLocked() {
	q := &db.cq
	next := q.mu.queue[0]
	if next.detached && next.claim.Load() == claimNone {
		// held is stored before the writers' waiting flags are read: a
		// writer that sets its flag after the read below then reads held
		// (wait sets the flag, then reads held), so none blocks unseen.
		q.held.Store(next)
		for _, r := range q.mu.queue[1:] {
			if r.waiting.Load() {
				q.held.Store(nil)
				r.proxy = true
				r.done <- struct{}{}
				return
			}
		}
		if testHookHeldMarked != nil {
			testHookHeldMarked()
		}
		// Likewise drainUntil counts itself in drainers before it reads
		// held.
		if f := &db.fl; f.drainers.Load() > 0 {
			f.mu.Lock() // a leaf lock
			f.cond.Broadcast()
			f.mu.Unlock()
		}
		if dq := &db.dq; dq.waiters.Load() > 0 {
			dq.Lock() // a leaf lock here
			dq.idle.Broadcast()
			dq.Unlock()
		}
	}
	next.lead = true
	next.done <- struct{}{}
}

// leadHeld commits the group of h, a detached request marked held, if the
// leader role can still be taken from it: for the waits that are no
// writer's (an Update's or Close's drain, Sync's wait for the deferred
// transactions).
func (db *DB) leadHeld(h *commitReq) {
	if db.cq.takeHeld(h) {
		db.lead()
	}
}

// testHookHeldMarked and testHookDrainChecked, if set (by tests only), run
// where giveLeadLocked found no writer waiting behind a detached head it
// marks held, and where drainUntil found no held head and is about to
// sleep: a test stalls them there, as the OS descheduling the thread would.
var testHookHeldMarked, testHookDrainChecked func()

// testHookWait, if set (by tests only), runs in wait before req's waiting
// flag is set (read false) and after each read of held (read true).
var testHookWait func(req *commitReq, read bool)

// takeHeld takes the leader role from h, a detached request holding it
// while its owner is not in wait, for a writer in wait (or drain): it
// then leads the group at the head of the queue (h's) in h's stead. It
// reports whether it did (h's owner may have come to wait meanwhile, or a
// writer taken it).
func (q *commitQueue) takeHeld(h *commitReq) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held.Load() != h {
		return false
	}
	q.held.Store(nil)
	if !h.claim.CompareAndSwap(claimNone, claimTaken) {
		return false // its owner is in wait: the token is its
	}
	// Its owner, in wait, takes the token out of its channel unread and
	// then waits for its answer.
	h.lead = false
	return true
}

// wait waits for req's outcome, leading the commit of its group if req is
// made the leader, and of the group of a detached request before it whose
// owner is not in wait (takeHeld, proxy).
func (db *DB) wait(req *commitReq) error {
	req.seal()
	q := &db.cq
	if req.detached {
		if req.claim.CompareAndSwap(claimNone, claimWaiting) {
			q.held.CompareAndSwap(req, nil)
		} else {
			// A writer took the role from it (takeHeld): the token
			// sent before is not this writer's to use.
			<-req.done
		}
	}
	if testHookWait != nil {
		testHookWait(req, false)
	}
	req.waiting.Store(true)
	for {
		h := q.held.Load()
		if testHookWait != nil {
			testHookWait(req, true)
		}
		if h != nil && h != req && q.takeHeld(h) {
			db.leadFor(req)
		}
		<-req.done
		if req.proxy {
			req.proxy = false
			db.leadFor(req)
			continue
		}
		if req.lead {
			db.lead()
		} else if j := req.job; j != nil {
			req.job = nil
			db.runApplyJob(j)
			<-req.done
		}
		break
	}
	for _, f := range req.onDone {
		f(req.err)
	}
	return req.err
}

// leadFor leads the group at the head of the queue for a detached request
// whose owner is not in wait, from req's writer, which is: req may be in
// the group, answered as a follower, but is not one to hand the apply to
// (handApply), since its writer is the leader.
func (db *DB) leadFor(req *commitReq) {
	req.leadingFor.Store(true)
	db.lead()
	req.leadingFor.Store(false)
}

// lead takes the batches at the head of the queue (the leader's own first)
// as one group, and commits and answers it: see the comment at the top of
// this file. The caller holds the leader role; lead hands it on once the
// group is durable.
func (db *DB) lead() {
	group := db.gather()
	for _, r := range group {
		r.seal()
	}
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
	}
	oneP := q.mu.procs == 1 && !time.Now().Before(q.mu.noYieldUntil)
	q.mu.Unlock()
	var job *applyJob
	if err == nil && db.opts.Sync == SyncAlways {
		sync := false
		for _, r := range group {
			sync = sync || !r.async
		}
		if !sync {
			db.syncAsyncWithin()
		} else {
			job = handApply(seq, group, locs)
			if job != nil {
				q.jobsHanded.Add(1)
			}
			if job != nil && oneP {
				// One P: the follower could not apply while the sync
				// holds the P. It applies now, while the device writes
				// the group (journal.Write started its write-back).
				q.yield()
			}
			if serr := db.j.SyncTo(end); serr != nil {
				err = db.fail(serr)
			}
		}
	}
	// Hand the lead on: the next group is gathered, written and synced
	// while this one is applied.
	q.mu.Lock()
	q.mu.linger = min(time.Since(start)/2, maxLinger)
	q.mu.target = len(group) + len(q.mu.queue)
	if len(q.mu.queue) > 0 {
		db.giveLeadLocked()
	} else {
		q.mu.leading = false
	}
	q.mu.Unlock()
	if job != nil {
		job.synced <- err
		<-job.done
		err = job.err
	} else if seq != 0 {
		err = db.inTurn(seq, err, func() error { return db.applyGroup(group, locs) })
	}
	db.settled(group)
	for _, r := range group {
		// Applied (or failed): nothing reads the operations again (the
		// overlay and the mem tables hold the keys and values, not the
		// ops), and their writers took them from opArrays or gave them
		// away (own).
		recycleOps(r.ops)
		r.ops = nil
		r.err = err
		for _, f := range r.settle {
			f.settle()
		}
		if !r.lead {
			r.done <- struct{}{}
		}
	}
}

// gather takes the group the leader commits from the head of the queue: at
// least one batch, at most db.maxGroup bytes and CommitGroupOps operations
// (a batch larger than either goes alone).
//
// It lingers briefly while fewer batches wait than the last group held
// plus those that waited for it: the writers of the last group are on
// their way back (answered once it is applied), and without the wait they
// form a second cohort that alternates with the first, each fdatasync
// carrying half of them (TestDB_GroupCommitGathersAllWriters). The linger
// is half of the last group's write and sync time, at most maxLinger; a
// lone writer never waits (its group is complete as soon as it arrives).
//
// The caller holds the leader role.
func (db *DB) gather() []*commitReq {
	q := &db.cq
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.gathers++; q.mu.gathers%procsEvery == 1 {
		q.mu.procs = runtime.GOMAXPROCS(0)
	}
	if q.mu.procs == 1 && !time.Now().Before(q.mu.noYieldUntil) {
		// One P: a journal fdatasync holds it (the runtime hands a P in a
		// system call to another thread only when its monitor notices,
		// which for a short sync it mostly does not), so the writers
		// answered last could not run during the sync and are all
		// runnable now; a linger timer would take the first few and
		// leave the rest to another sync, and the next target would
		// shrink with the group. Yield to them until a round brings no
		// new batch (two rounds when the last group had company: one can
		// miss a writer on its way). A lone writer yields once, to
		// nobody. A round, and the one yield after it, that take longer
		// than yieldSlow each ran some other goroutine of the program for
		// a whole time slice (a CPU-bound one is preempted only after
		// 10 ms; see yield): the leader then stops yielding for
		// noYieldFor, and lingers as with more Ps.
		rounds := 1
		if q.mu.target > 1 {
			rounds = 2
		}
		deadline := time.Now().Add(maxLinger)
		for idle := 0; idle < rounds && time.Now().Before(deadline); {
			n := len(q.mu.queue)
			q.mu.Unlock()
			slow := !q.yield()
			q.mu.Lock()
			if slow {
				break
			}
			if len(q.mu.queue) == n {
				idle++
			} else {
				idle = 0
			}
		}
	} else if len(q.mu.queue) < q.mu.target && q.mu.linger > 0 {
		if q.mu.arrived == nil {
			q.mu.arrived = make(chan struct{}, 1)
		}
		timer := time.NewTimer(q.mu.linger)
		for len(q.mu.queue) < q.mu.target {
			ch := q.mu.arrived
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

// yield lets the other runnable goroutines run (a leader on one P) and
// reports whether that was quick. A round slower than yieldSlow either ran
// some goroutine of the program for a whole time slice (a CPU-bound one,
// which the runtime preempts only after 10 ms), or the OS took the thread
// away meanwhile (another process, a container's CPU quota), which no
// yield is to blame for. A second yield tells them apart: the CPU-bound
// goroutine takes another time slice, while after a round of writers
// nobody is left to run. Only then are the leaders' yields stopped for
// noYieldFor. The caller does not hold q.mu.
func (q *commitQueue) yield() bool {
	t0 := time.Now()
	gosched()
	if time.Since(t0) <= yieldSlow {
		return true
	}
	t1 := time.Now()
	gosched()
	if time.Since(t1) <= yieldSlow {
		return true
	}
	q.mu.Lock()
	q.mu.noYieldUntil = time.Now().Add(noYieldFor)
	q.mu.Unlock()
	return false
}

// gosched is runtime.Gosched, and then testHookYielded if a test set it.
func gosched() {
	runtime.Gosched()
	if testHookYielded != nil {
		testHookYielded()
	}
}

// testHookYielded, if set (by tests only), runs after each Gosched of a
// leader's yield: a test stalls it there, as the OS descheduling the
// thread would.
var testHookYielded func()

// procsEvery is how often (in groups) gather reads GOMAXPROCS.
const procsEvery = 64

// yieldSlow and noYieldFor: a yield round slower than yieldSlow, and the
// yield after it too (a round of writers building their transactions takes
// tens to hundreds of µs, a CPU-bound goroutine keeps the P for 10 ms),
// stops a leader on one P from yielding for noYieldFor, so that such a
// goroutine costs a writer two time slices a second rather than one per
// commit.
const (
	yieldSlow  = 5 * time.Millisecond
	noYieldFor = time.Second
)

// maxLinger bounds how long a leader waits for more writers (the linger is
// also at most half a commit); it matters only when a commit is slow (a
// slow disk, the race detector).
const maxLinger = 3 * time.Millisecond

// inTurn waits until the groups written before group seq are applied, then
// runs apply (which applies group seq to the index) unless err or the
// handle failed, marks group seq applied and returns its outcome.
func (db *DB) inTurn(seq uint64, err error, apply func() error) error {
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
		err = apply()
	}
	ap.done = seq
	ap.cond.Broadcast()
	return err
}

// applyJob is a group applied by one of its followers while the leader
// syncs it: with several writers a commit's index update is then off the
// path from one fdatasync to the next (the leader hands the lead on, and
// the group's writers are answered, as soon as the sync is done), and it
// runs on the other core while the leader's thread waits in fdatasync.
// The versions are applied unpublished (the active mem table's lock held,
// S unchanged: no reader sees them, no checkpoint freezes the table) and
// published only once the sync succeeded; after a failed sync the handle
// is failed and they never are.
type applyJob struct {
	seq    uint64
	group  []*commitReq
	locs   []journal.Location
	synced chan error // the leader's sync outcome
	done   chan struct{}
	err    error // the group's outcome, set before done is closed
}

// handApply gives group's apply to a follower already waiting (one whose
// Commit is not yet waited for would hold it up), waking it with the job,
// or returns nil: the leader applies the group itself after its sync.
func handApply(seq uint64, group []*commitReq, locs []journal.Location) *applyJob {
	for _, r := range group[1:] {
		if r.waiting.Load() && !r.leadingFor.Load() {
			// synced is buffered: the leader never waits to report.
			job := &applyJob{seq: seq, group: group, locs: locs, synced: make(chan error, 1), done: make(chan struct{})}
			r.job = job
			r.done <- struct{}{}
			return job
		}
	}
	return nil
}

// runApplyJob applies j's group once the groups written before it are
// applied, and publishes it once the leader's sync succeeded.
func (db *DB) runApplyJob(j *applyJob) {
	j.err = db.inTurn(j.seq, nil, func() error {
		p, err := db.applyPending(j.group, j.locs)
		if err == nil {
			db.cq.jobsApplied.Add(1)
		}
		serr := <-j.synced
		switch {
		case err != nil:
			return err
		case serr != nil:
			p.st.active.mu.Unlock()
			return serr
		}
		db.publish(p)
		return nil
	})
	close(j.done)
}

// applyGroup applies the batches of group, journaled at locs, to the mem
// tables (mem.go): one version per operation, visible to Views all at
// once.
func (db *DB) applyGroup(group []*commitReq, locs []journal.Location) error {
	p, err := db.applyPending(group, locs)
	if err != nil {
		return err
	}
	db.publish(p)
	return nil
}

// pendingApply is a group applied to the active mem table and not yet
// published: its table's lock is held.
type pendingApply struct {
	st      *memState
	seq     uint64
	applied journal.Location
	batches int
}

// applyPending applies group to the active mem table without publishing
// it: on success the table's lock is held, for publish (or, after a failed
// sync, an unlock that leaves the versions unseen).
func (db *DB) applyPending(group []*commitReq, locs []journal.Location) (pendingApply, error) {
	st := db.mem.lockActive()
	db.mem.viewMu.Lock()
	db.viewSeqsBuf = db.viewSeqs(db.viewSeqsBuf)
	start := db.mem.seq.Load()
	db.mem.viewMu.Unlock()
	var end uint64
	err := func() error {
		m := &memApply{st: st, ix: db.applyIx.get(db.ix), seq: start, start: start, views: db.viewSeqsBuf}
		m.pruneKept()
		a := applier{t: m}
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
		if err := m.ix.Err(); err != nil {
			return err
		}
		end = m.seq
		return nil
	}()
	if err != nil {
		st.active.mu.Unlock()
		// The batch is durable but could not be applied: the index and the
		// journal disagree until a reopen replays it.
		return pendingApply{}, db.fail(fmt.Errorf("apply to the index: %w", err))
	}
	return pendingApply{st: st, seq: end, applied: locs[len(locs)-1], batches: len(group)}, nil
}

// publish makes p's versions visible (S moves to its last seq) and
// releases the active mem table.
func (db *DB) publish(p pendingApply) {
	db.applied = p.applied
	db.mem.seq.Store(p.seq)
	p.st.active.mu.Unlock()
	db.mu.Lock()
	db.mu.applied = p.applied
	db.mu.stats.Commits++
	db.mu.stats.Batches += uint64(p.batches)
	db.mu.Unlock()
	db.maybeKickCheckpoint()
}

// pinnedIndex is an index snapshot kept pinned for as long as the index
// does not change (between checkpoints) and no read of it failed, so that
// the trees opened in it stay open: the applier's (DB.applyIx, under the
// active mem table's mu) and the transactions' (DB.txIx, under txMu or
// writeMu held exclusively).
type pinnedIndex struct {
	tx      *index.Tx
	release func()
}

// get returns the snapshot, pinning the current one of ix if it changed.
func (p *pinnedIndex) get(ix *index.Store) *index.Tx {
	if p.tx != nil && p.tx.Version() == ix.Current() && p.tx.Err() == nil {
		return p.tx
	}
	p.drop()
	p.tx, p.release = ix.Pin()
	return p.tx
}

// drop releases the snapshot, if any.
func (p *pinnedIndex) drop() {
	if p.release != nil {
		p.release()
	}
	p.tx, p.release = nil, nil
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

// memOver reports whether the mem tables hold more than times their
// limit: once over it, a checkpoint is due (times 1), and writers wait
// (times 2). The limit is Options.CheckpointDirtyPages versions (each key
// the flush writes may dirty a leaf page: so the page images a checkpoint
// holds stay bounded as before the mem tables), or as many bytes as that
// many pages.
func (db *DB) memOver(times int) bool {
	n := int64(times) * int64(db.opts.CheckpointDirtyPages)
	return int64(db.mem.versions()) >= n || db.mem.bytes() >= n*int64(db.pf.PageSize())
}

// waitForRoom blocks while the mem tables hold twice their limit
// (memOver), or the page file twice Options.CheckpointDirtyPages page
// images for checkpoints (dirty pages, and old images a running checkpoint
// still writes), until a checkpoint has written them.
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
		if db.pf.HeldPages() < 2*db.opts.CheckpointDirtyPages && !db.memOver(2) {
			return nil
		}
		db.kickCheckpoint()
		db.mu.stats.WriteStalls++
		db.mu.ckDone.Wait()
	}
}
