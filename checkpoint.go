package kdb

import (
	"encoding/binary"
	"fmt"
	"sort"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/internal/invariants"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
)

// Checkpoint writes every change applied so far into db.data (through
// db.free and db.redo) and then removes the journal segments nobody needs.
// If the segments kept only for a few live values are mostly dead, it then
// copies those values forward (see Compact), so that the next checkpoint
// removes them. Reads and writes go on meanwhile. On return the checkpoint
// is durable.
func (db *DB) Checkpoint() error {
	db.mu.Lock()
	err := db.writableLocked()
	db.mu.Unlock()
	if err != nil {
		return err
	}
	// Deferred transactions are ordered before the checkpoint (inside a
	// transaction's function this does nothing).
	if err := db.syncDeferred(); err != nil {
		return err
	}
	if err := db.checkpoint(); err != nil {
		return err
	}
	if db.nested("Checkpoint") != nil {
		// Inside an Update's or a Submit's function the moves would wait
		// for it: the compactor runs them once it returns.
		db.kickCompactor()
		return nil
	}
	return db.compactAfterCheckpoint()
}

// checkpoint takes a checkpoint: see docs/DESIGN.md, "Checkpoints". The index's writer
// lock is held only while the dirty pages are handed over and the replay
// position is read; the I/O runs without it.
//
// INVARIANT: no page reaches db.data before the journal records it reflects
// are durable: the journal is synced before the page file's commit (under
// SyncAlways every applied record is durable already, except AckAsync's).
func (db *DB) checkpoint() error {
	db.ckMu.Lock()
	defer db.ckMu.Unlock()
	return db.checkpointLocked()
}

// checkpointIfDue is the background checkpointer's checkpoint: it decides
// whether one is due again once it holds ckMu, since a checkpoint that ran
// meanwhile (Checkpoint, Compact's) may have taken the one it saw due.
// It reports whether it ran one.
func (db *DB) checkpointIfDue(timer bool) (bool, error) {
	db.ckMu.Lock()
	defer db.ckMu.Unlock()
	if due := db.checkpointDue(timer); !due {
		return false, nil
	}
	return true, db.checkpointLocked()
}

// checkpointLocked is checkpoint; the caller holds ckMu.
func (db *DB) checkpointLocked() error {
	start := time.Now()
	db.mu.Lock()
	rate := db.mu.replayBps
	db.mu.Unlock()
	applied, err := db.flushMem()
	if err != nil {
		return db.fail(fmt.Errorf("checkpoint: %w", err))
	}
	pagesBefore := db.pf.DirtyCount()
	err = db.ix.CheckpointWith(func() pagefile.MetaUpdate {
		return pagefile.MetaUpdate{
			ReplaySegment: uint64(applied.Segment),
			ReplayOffset:  uint64(applied.Offset),
			App:           appMeta{replayBps: uint64(rate)}.encode(),
		}
	}, func() error {
		// Under SyncAlways only AckAsync's records can be applied and not
		// yet durable; Sync costs nothing when everything is.
		if err := db.j.Sync(); err != nil {
			return err
		}
		if invariants.Enabled {
			invariants.Assertf(!db.j.Tail().Less(applied), "checkpoint covers %s beyond the journal tail %s", applied, db.j.Tail())
		}
		return nil
	})
	if err != nil {
		return db.fail(fmt.Errorf("checkpoint: %w", err))
	}
	d := time.Since(start)
	jbytes := db.j.Stats().Bytes
	db.mu.Lock()
	db.mu.ckApplied = applied
	db.mu.ckBytes = jbytes
	db.mu.lastCk = time.Now()
	s := &db.mu.stats
	s.Checkpoints++
	s.CheckpointTime += d
	s.LastCheckpointTime = d
	s.CheckpointPages += uint64(pagesBefore)
	if db.mu.recoveryCk {
		db.mu.recoveryCk = false
		db.mu.recovery.Checkpointed, db.mu.recovery.CheckpointTime = true, d
	}
	db.mu.ckDone.Broadcast()
	db.mu.Unlock()
	return db.gc(applied)
}

// flushMem writes the changes applied so far into the index (docs/DESIGN.md
// "The mem tables"): it freezes the active mem table (the writers go on in
// a new one), writes the frozen table's last version of each key into the
// index in one Update, and then drops the frozen table from what new Views
// read. It returns the journal location of the last record it covers: the
// index now holds exactly the changes up to it. The caller holds ckMu.
func (db *DB) flushMem() (journal.Location, error) {
	st := db.mem.lockActive()
	if err := db.Err(); err != nil {
		// A failed sync may have left versions applied and never
		// published (applyJob): they must not reach the index.
		st.active.mu.Unlock()
		return db.applied, err
	}
	applied, upto := db.applied, db.mem.seq.Load()
	frozen := st.active
	if st.frozen != nil {
		// A flush that failed left it; the handle is failed.
		st.active.mu.Unlock()
		return applied, fmt.Errorf("%w: a failed flush left a frozen mem table", ErrFailed)
	}
	empty := frozen.empty()
	if !empty {
		db.mem.state.Store(&memState{active: newMemTable(), frozen: frozen, base: st.base})
	}
	st.active.mu.Unlock()
	if empty {
		return applied, nil
	}
	if err := db.ix.Update(func(tx *index.Tx) error { return flushTable(tx, frozen) }); err != nil {
		return applied, err
	}
	db.mem.flushes.Add(1)
	st = db.mem.lockActive()
	db.mem.state.Store(&memState{active: st.active, base: upto})
	st.active.mu.Unlock()
	return applied, nil
}

// flushTable writes t's last version of each key into the index, tree by
// tree in name order and key by key in key order: a tree dropped in t is
// dropped first, one that exists at t's end exists (even empty).
func flushTable(tx *index.Tx, t *memTable) error {
	seen := map[string]bool{}
	var names []string
	for _, n := range t.treeNames() {
		names, seen[n] = append(names, n), true
	}
	for n := t.head.next[0].Load(); n != nil; n = n.next[0].Load() {
		if !seen[n.tree] {
			names, seen[n.tree] = append(names, n.tree), true
		}
	}
	sort.Strings(names)
	for _, name := range names {
		lastDrop := t.lastDrop(name)
		exists := true
		var last *treeVer
		if mt := t.tree(name); mt != nil {
			if last = mt.vers.Load(); last != nil {
				exists = last.exists.Load()
			}
		}
		tb, err := tx.OpenTree([]byte(name))
		if err != nil {
			return err
		}
		if lastDrop > 0 && tb != nil {
			if err := tx.DropTree([]byte(name)); err != nil {
				return err
			}
			tb = nil
		}
		if !exists {
			continue
		}
		if tb == nil {
			if tb, err = tx.CreateTree([]byte(name)); err != nil {
				return err
			}
		}
		for n := t.seekGE(name, "", false); n != nil && n.tree == name; n = n.next[0].Load() {
			v := n.vers.Load()
			if v == nil || v.seq <= lastDrop {
				continue // gone with the tree
			}
			if v.val == nil {
				_, err = tb.Delete([]byte(n.key))
			} else {
				err = tb.Put([]byte(n.key), v.val)
			}
			if err != nil {
				return err
			}
		}
		if invariants.Enabled && last != nil {
			invariants.Assertf(tb.Len() == last.count.Load(), "flush: tree %q holds %d keys, the mem table says %d", name, tb.Len(), last.count.Load())
		}
	}
	return nil
}

// appMeta is the root's part of the meta slot (FORMAT.md §5.5).
type appMeta struct {
	// replayBps is the journal replay rate (bytes/s) measured by the last
	// recovery that replayed enough to tell; 0 if none has. It sizes
	// checkpoints for Options.RecoveryTimeTarget across restarts.
	replayBps uint64
}

// Meta application bytes, FORMAT.md §5.5.
const (
	appMetaVersion = 2
	appMetaSize    = 1 + 8 // version u8, replayBps u64
	// Version 1 was written by early builds in two layouts: version u8,
	// replay segment u32, replay offset u64 (a copy of the meta's own
	// replay position); and version u8, replayBps u64.
	appMetaV1Size     = 1 + 4 + 8
	appMetaV1RateSize = 1 + 8
)

func (m appMeta) encode() []byte {
	b := []byte{appMetaVersion}
	return binary.LittleEndian.AppendUint64(b, m.replayBps)
}

// decodeAppMeta decodes the root's meta bytes. Empty bytes (a new store) are
// the zero appMeta; version 1 carries no replay rate.
func decodeAppMeta(b []byte) (appMeta, error) {
	switch {
	case len(b) == 0:
		return appMeta{}, nil
	case b[0] == appMetaVersion && len(b) == appMetaSize:
		return appMeta{replayBps: binary.LittleEndian.Uint64(b[1:])}, nil
	case b[0] == 1 && len(b) == appMetaV1Size:
		return appMeta{}, nil
	case b[0] == 1 && len(b) == appMetaV1RateSize:
		return appMeta{replayBps: binary.LittleEndian.Uint64(b[1:])}, nil
	case b[0] != 1 && b[0] != appMetaVersion:
		return appMeta{}, fmt.Errorf("%w: db.data meta: root bytes version %d", ErrVersionMismatch, b[0])
	}
	return appMeta{}, fmt.Errorf("%w: db.data meta: root bytes of length %d, version %d", ErrCorrupt, len(b), b[0])
}

// gc removes (or archives) the journal segments that lie wholly before the
// checkpoint's replay position, hold no value the index still refers to,
// and lie below the floor of every running View (lifecycle.go). It never
// waits for a View: the segments a running View may read are left to a
// later GC.
//
// Why a View's floor is enough: a View registers the floor F of its start,
// the limit of the last GC that updated it, whose index state is older than
// the View's snapshot. Every value reference in that state is in a segment
// >= F (that is how the limit was computed), and every reference added
// since points to a record appended since, in a segment >= the replay
// segment that bounded the limit. So the View's snapshot refers only to
// segments >= F, and GC removes nothing at or above the lowest registered
// floor. gcLimit raises the floor under the registry's lock before anything
// is removed, so a View that begins during the removal registers a floor no
// lower than what is being removed.
func (db *DB) gc(applied journal.Location) error {
	limit := applied.Segment
	if limit <= 1 {
		return nil
	}
	err := db.latestView(func(s *Snapshot) error {
		t, err := s.openTree([]byte(segRefsTree))
		if err != nil || t == nil {
			return err
		}
		c := t.cursor()
		k, _, ok := c.first()
		if c.err != nil {
			return c.err
		}
		if ok {
			if len(k) != 4 {
				return fmt.Errorf("%w: segment refs key of %d bytes", ErrCorrupt, len(k))
			}
			if seg := journal.SegmentID(binary.BigEndian.Uint32(k)); seg < limit {
				limit = seg
			}
		}
		return nil
	})
	if err != nil {
		return wrapErr(err)
	}
	want := limit
	limit = db.gcLimit(limit)
	segs := db.j.Segments()
	if limit < want && len(segs) > 1 {
		// A segment in [limit, want) that GC would remove is kept for a
		// View (RemoveBefore never removes the last segment).
		for _, s := range segs[:len(segs)-1] {
			if s.ID >= limit && s.ID < want {
				db.mu.Lock()
				db.mu.stats.GCPostponed++
				db.mu.Unlock()
				break
			}
		}
	}
	if len(segs) == 0 || segs[0].ID >= limit {
		return nil
	}
	// The segment refs read are those of everything applied, and some of
	// it may not be durable yet: compaction's moves, AckAsync and NoSync
	// batches are applied without an fsync of their own (under SyncAlways;
	// under the other policies any batch). Were a segment removed for a
	// move that a power loss then took away, the index would point into
	// it after recovery. Everything applied was written before it was
	// applied, so one sync now makes the state judged durable (and costs
	// nothing when it is already).
	if serr := db.j.Sync(); serr != nil {
		if db.j.Err() != nil {
			return db.fail(serr)
		}
		return wrapErr(serr)
	}
	removed, err := db.j.RemoveBefore(journal.Location{Segment: limit})
	db.mu.Lock()
	db.mu.stats.SegmentsRemoved += uint64(len(removed))
	db.mu.Unlock()
	if err != nil {
		if db.j.Err() != nil {
			return db.fail(err)
		}
		return wrapErr(err)
	}
	return nil
}

// gcAgain runs journal GC for the last checkpoint again (serialized with
// checkpoints): the segments it kept for Views that have ended since.
func (db *DB) gcAgain() error {
	db.ckMu.Lock()
	defer db.ckMu.Unlock()
	db.mu.Lock()
	applied := db.mu.ckApplied
	db.mu.Unlock()
	return db.gc(applied)
}

// kickCheckpoint wakes the checkpointer without waiting.
func (db *DB) kickCheckpoint() {
	select {
	case db.ckKick <- struct{}{}:
	default:
	}
}

// maybeKickCheckpoint wakes the checkpointer when the journal written or the
// dirty pages since the last checkpoint pass their thresholds.
func (db *DB) maybeKickCheckpoint() {
	if db.checkpointDue(false) {
		db.kickCheckpoint()
	}
}

// checkpointDue reports whether a checkpoint should start now.
func (db *DB) checkpointDue(timer bool) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.mu.recoveryCk {
		return true
	}
	if db.mu.applied == db.mu.ckApplied {
		return false // nothing new
	}
	// The mem tables and page images cost memory; free stamps (pages
	// freed since the last checkpoint) only a map entry each, so they count
	// half.
	if db.memOver(1) || db.pf.HeldPages() >= db.opts.CheckpointDirtyPages || db.pf.DirtyCount() >= 2*db.opts.CheckpointDirtyPages {
		return true
	}
	since := db.j.Stats().Bytes - db.mu.ckBytes
	if since >= db.opts.CheckpointBytes {
		return true
	}
	if t := db.opts.RecoveryTimeTarget; t > 0 {
		rate := db.mu.replayBps
		if rate == 0 {
			rate = defaultReplayRate
		}
		if float64(since) >= rate*t.Seconds() {
			return true
		}
	}
	return timer && db.opts.CheckpointInterval > 0 && time.Since(db.mu.lastCk) >= db.opts.CheckpointInterval
}

// defaultReplayRate is the replay rate assumed for RecoveryTimeTarget until
// a recovery on this machine has measured one (bytes per second).
const defaultReplayRate = 100 << 20

// testHookCheckpointerDue, when set, runs in the background checkpointer
// once it has seen a checkpoint due, before it takes ckMu.
var testHookCheckpointerDue func()

// checkpointer runs checkpoints in the background when they are due.
func (db *DB) checkpointer() {
	defer db.wg.Done()
	tick := time.Second
	if iv := db.opts.CheckpointInterval; iv > 0 && iv < tick {
		tick = max(iv, time.Millisecond)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		timer := false
		select {
		case <-db.quit:
			return
		case <-db.ckKick:
		case <-t.C:
			timer = true
		}
		if db.Err() != nil {
			continue
		}
		if !db.checkpointDue(timer) {
			if db.gcPostponed() {
				// The View that a GC kept segments for has ended: remove
				// them now rather than at the next checkpoint.
				if err := db.gcAgain(); err != nil {
					db.opts.Logger.Error("kdb: journal GC failed", "err", err)
				}
			}
			continue
		}
		if testHookCheckpointerDue != nil {
			testHookCheckpointerDue()
		}
		ran, err := db.checkpointIfDue(timer)
		if err != nil {
			db.opts.Logger.Error("kdb: background checkpoint failed", "err", err)
			continue
		}
		if ran {
			db.kickCompactor()
		}
	}
}
