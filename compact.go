package kdb

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// Journal compaction for the broker trees.
//
// A message body kept in the journal pins its segment: journal GC removes
// only segments that no live value refers to. When a few messages are never
// acked, each would keep a whole segment alive. Compaction rewrites the live
// values of sparsely used segments forward: the same key is put again with
// the same bytes, so the value gets a new record in the active segment and
// the applier drops the old reference; the next checkpoint's GC removes the
// segment.
//
// Journal GC removes a prefix of the journal: the segments before both the
// last checkpoint's replay position and the oldest segment holding a live
// value. The segments it keeps before the replay position are "pinned". When
// the live values in them take less than 1/compactFactor of their size, a
// compaction pass moves all of those values forward, and the next checkpoint
// removes every pinned segment. Values written since the compaction pass
// (at most one checkpoint interval of journal) stay pinned until the next
// pass, after the next checkpoint. So:
//
//	pinned  <= compactFactor × live + CheckpointBytes + 2 × SegmentSize
//	journal <= compactFactor × live + 3 × CheckpointBytes + 3 × SegmentSize
//
// (the journal written since the last checkpoint is about CheckpointBytes,
// more while a checkpoint runs: writes go on meanwhile, hence the third;
// CheckpointBytes stands for the journal between two checkpoints, which
// grows if checkpoints lag behind the writers),
// where live is the bytes of the live values kept in the journal. With
// much live data the journal stays within compactFactor (4) times it; with
// little, within a constant of two checkpoint intervals. The space test
// (broker/broker_space_test.go) measures both.
//
// Only the broker's trees ("b/") are compacted: their writers are
// serialized by the broker lock, which compaction takes (draining the
// batches in flight), so a value it rewrites cannot be changed under it.
// Values of user indexes (Write, Update) are not moved.
const compactFactor = 4

// compactPrefix: the trees compaction moves values of (the broker
// package's namespace).
const compactPrefix = "b/"

// compaction is the state of journal compaction.
type compaction struct {
	commits     atomic.Uint64
	compactions atomic.Uint64
	movedValues atomic.Uint64
	compactMu   sync.Mutex
	compactedAt atomic.Int64 // journal segment of the replay position at the last compaction pass
}

// compactEvery is how many broker writes pass between two looks at whether
// compaction is due; a pass runs at most once per checkpoint (per replay
// segment).
const compactEvery = 16

// maybeCompact runs a compaction pass if one is due. The caller must hold
// no lock of the DB.
func (db *DB) maybeCompact() {
	b := &db.compaction
	if b.commits.Add(1)%compactEvery != 0 {
		return
	}
	db.mu.Lock()
	ck := int64(db.mu.ckApplied.Segment)
	db.mu.Unlock()
	if b.compactedAt.Load() == ck || !b.compactMu.TryLock() {
		return
	}
	defer b.compactMu.Unlock()
	b.compactedAt.Store(ck)
	if _, err := db.compact(); err != nil && db.Err() == nil {
		db.opts.Logger.Error("kdb: broker compaction failed", "err", err)
	}
}

// Compact moves the live broker values out of sparsely used journal
// segments (see compactFactor) and returns how many it moved. Writes go on
// meanwhile, except broker writes during each of its batches. On return
// (nil) the moves are durable; the segments are removed by the next
// checkpoint.
func (db *DB) Compact() (int, error) {
	db.compaction.compactMu.Lock()
	defer db.compaction.compactMu.Unlock()
	return db.compact()
}

// compactCandidates returns the segments journal GC keeps (those wholly
// before the last checkpoint's replay position: GC removes a prefix of the
// journal, up to the oldest segment a live value is in) when the live values
// in them take less than 1/compactFactor of their size; else none.
func (db *DB) compactCandidates() (map[journal.SegmentID]bool, error) {
	db.mu.Lock()
	limit := db.mu.ckApplied.Segment
	db.mu.Unlock()
	cands := map[journal.SegmentID]bool{}
	var total int64
	for _, s := range db.j.Segments() {
		if s.ID < limit {
			cands[s.ID] = true
			total += s.Size
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	var live int64
	err := db.ix.View(func(tx *index.Tx) error {
		t := tx.Tree([]byte(segRefsTree))
		if t == nil {
			return nil
		}
		refs, err := readSegRefs(t)
		if err != nil {
			return err
		}
		for seg, r := range refs {
			if cands[seg] {
				live += int64(r.bytes)
			}
		}
		return nil
	})
	if err != nil || live*compactFactor >= total {
		return nil, wrapErr(err)
	}
	return cands, nil
}

func (db *DB) compact() (int, error) {
	cands, err := db.compactCandidates()
	if err != nil || len(cands) == 0 {
		return 0, err
	}
	moved := 0
	budget := db.maxGroup / 4
	for more := true; more; {
		more = false
		err := db.update(compactPrefix, func(w *Txn) error {
			names, err := w.s.tx.Trees()
			if err != nil {
				return err
			}
			size := 0
			for _, name := range names {
				if !bytes.HasPrefix(name, []byte(compactPrefix)) {
					continue
				}
				c := w.s.tx.Tree(name).Cursor()
				for k, v, ok := c.First(); ok; k, v, ok = c.Next() {
					seg, n, isRef := decodeRefHeader(v)
					if !isRef || !cands[seg] {
						continue
					}
					if size+n > budget && size > 0 {
						more = true
						return nil
					}
					val, err := db.resolve(v)
					if err != nil {
						return err
					}
					if err := w.Put(string(name[len(compactPrefix):]), k, val); err != nil {
						return err
					}
					size += n + len(k) + 64
					moved++
				}
				if err := c.Err(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return moved, err
		}
	}
	if moved > 0 {
		db.compaction.compactions.Add(1)
		db.compaction.movedValues.Add(uint64(moved))
		db.kickCheckpoint()
	}
	return moved, nil
}

// pinned returns the journal segments wholly before the last checkpoint's
// replay position, which are kept only because live values are in them or
// in an older segment (GC removes a prefix of the journal), and their size.
func (db *DB) pinned() (int, int64) {
	db.mu.Lock()
	limit := db.mu.ckApplied.Segment
	db.mu.Unlock()
	var n int
	var size int64
	for _, s := range db.j.Segments() {
		if s.ID < limit {
			n++
			size += s.Size
		}
	}
	return n, size
}
