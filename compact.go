package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/kdb-project/kdb/journal"
)

// Journal compaction (docs/DESIGN.md "Space: compaction and the factor").
//
// A value kept in the journal pins its segment: journal GC removes only a
// prefix of the journal, up to the oldest segment a live value is in. One
// value written once and never rewritten would keep every later segment
// forever. Compaction copies the live values of sparsely used segments
// forward: each gets a new value record in the active segment and the index
// is pointed at it; the next checkpoint's GC removes the old segments.
//
// Which segments: those journal GC keeps before the last checkpoint's
// replay position ("pinned"). When the live values in them take less than
// 1/compactFactor of their size, a pass moves all of those values forward,
// and the next checkpoint removes every pinned segment. A pass runs after
// every checkpoint that finds the pinned segments sparse (values deleted
// since the last pass count, even within one segment: a Raft log truncated
// after a snapshot), unless a pass found exactly the same candidates before
// and moved nothing; a pass that moved values takes a second checkpoint at
// once, whose GC removes the segments they left. Values written since the
// pass (at most one
// checkpoint interval of journal) stay pinned until the next pass, after
// the next checkpoint. So, right after a checkpoint:
//
//	pinned  <= compactFactor × live + CheckpointBytes + 2 × SegmentSize
//	journal <= compactFactor × live + 3 × CheckpointBytes + 3 × SegmentSize
//
// (the journal written since the last checkpoint is about CheckpointBytes,
// more while a checkpoint runs: writes go on meanwhile, hence the third;
// CheckpointBytes stands for the journal between two checkpoints, which
// grows if checkpoints lag behind the writers), where live is the bytes of
// the live values kept in the journal. With much live data the journal
// stays within compactFactor (4) times it; with little, within a constant
// of about three checkpoint intervals. The space tests measure both
// (compact_test.go; broker/broker_space_test.go for the broker's shape).
//
// Every tree is compacted (user indexes, namespaces such as the broker's),
// and no writer is held up: a pass reads the values to move in a View,
// then commits them as ordinary batches of opMoveJournal operations, which
// queue with everyone's writes. A move names the journal reference it
// replaces and takes effect only if the key still has it when the batch is
// applied (in journal order, the same on the live path and in replay): a
// key written, deleted or dropped since the pass read it keeps its new
// state, and the copy is dead on arrival. A move changes no value's bytes,
// so it is not entered in the in-flight overlay (ordered.go): a Submit reads
// the same bytes before and after it. Moves are journaled without an fsync
// of their own (as AckAsync's acks are): a crash that loses one loses
// nothing, since the value it copied is still where the index points, and
// the checkpoint that lets GC remove that segment syncs the journal first.
const compactFactor = 4

// compaction is the state of journal compaction.
type compaction struct {
	compactions atomic.Uint64 // passes that moved values
	movedValues atomic.Uint64 // values copied forward (a stale copy included)
	// mu serializes passes.
	mu sync.Mutex
	// idle is what the candidates were when a pass last moved nothing:
	// the same again is not scanned again.
	idle candidates
	kick chan struct{} // buffered(1): a checkpoint finished
}

// compactMoveBytes bounds the value bytes of one batch of moves, so that a
// writer whose batch shares its group waits little for it.
const compactMoveBytes = 1 << 20

// compactor runs a compaction pass after each checkpoint if one is due.
func (db *DB) compactor() {
	defer db.wg.Done()
	for {
		select {
		case <-db.quit:
			return
		case <-db.compaction.kick:
		}
		if err := db.compactAfterCheckpoint(); err != nil && db.Err() == nil {
			db.opts.Logger.Error("kdb: journal compaction failed", "err", err)
		}
	}
}

// kickCompactor wakes the compactor without waiting.
func (db *DB) kickCompactor() {
	select {
	case db.compaction.kick <- struct{}{}:
	default:
	}
}

// compactAfterCheckpoint runs a pass after a checkpoint if one is due.
func (db *DB) compactAfterCheckpoint() error {
	db.compaction.mu.Lock()
	defer db.compaction.mu.Unlock()
	n, err := db.compact()
	if errors.Is(err, ErrClosed) {
		return nil
	}
	if err != nil || n == 0 {
		return err
	}
	// The moved values' old segments go now rather than a checkpoint
	// interval later: this checkpoint is small (the moves touched only
	// their keys' leaves) and keeps the journal within the bound with the
	// live data of now, not that of the last pass.
	return db.checkpoint()
}

// Compact moves the live values out of sparsely used journal segments (see
// docs/DESIGN.md, "Space: compaction and the factor") and returns how many
// it copied. A pass also runs by itself after each checkpoint; Compact is
// for a caller that wants one now. Writes go on meanwhile. On return (nil)
// the moves are applied and durable; the next checkpoint removes the
// segments.
func (db *DB) Compact() (int, error) {
	if err := db.inDone("Compact"); err != nil {
		return 0, err
	}
	db.mu.Lock()
	err := db.writableLocked()
	db.mu.Unlock()
	if err != nil {
		return 0, err
	}
	db.compaction.mu.Lock()
	defer db.compaction.mu.Unlock()
	n, err := db.compact()
	if err == nil && n > 0 {
		err = wrapErr(db.j.Sync())
	}
	return n, err
}

// compactCandidates returns the segments journal GC keeps before the last
// checkpoint's replay position, and how many live values are in them, when
// those values take less than 1/compactFactor of the segments' size; else
// none.
// candidates sums up a set of candidate segments: their ends, sizes and
// live values.
type candidates struct {
	limit       journal.SegmentID
	total, live int64
	count       int64
}

func (db *DB) compactCandidates() (map[journal.SegmentID]bool, candidates, error) {
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
		return nil, candidates{}, nil
	}
	var live, count int64
	err := db.latestView(func(s *Snapshot) error {
		t, err := s.openTree([]byte(segRefsTree))
		if err != nil || t == nil {
			return err
		}
		refs, err := readSegRefs(t)
		if err != nil {
			return err
		}
		for seg, r := range refs {
			if cands[seg] {
				live += int64(r.bytes)
				count += int64(r.count)
			}
		}
		return nil
	})
	if err != nil || count == 0 || live*compactFactor >= total {
		return nil, candidates{}, wrapErr(err)
	}
	return cands, candidates{limit: limit, total: total, live: live, count: count}, nil
}

// compact runs one pass: it scans every tree (the engine's own excepted)
// in Views of at most compactMoveBytes of values to move each, and commits
// each chunk as one batch of moves. The caller holds compaction.mu.
func (db *DB) compact() (int, error) {
	cands, sum, err := db.compactCandidates()
	if err != nil || len(cands) == 0 || sum == db.compaction.idle {
		return 0, err
	}
	want := sum.count
	budget := min(compactMoveBytes, db.maxGroup/4)
	recBudget := db.maxRecord / 2
	var (
		moved, found int64
		tree, from   []byte // where the next chunk resumes: key `from` of tree
		done         bool
	)
	for !done && found < want {
		var ops []op
		err := db.view(userTreePrefix, func(s *Snapshot) error {
			names, err := s.trees()
			if err != nil {
				return err
			}
			size, rec := 0, 0
			for _, name := range names {
				if bytes.HasPrefix(name, []byte(engineTreePrefix)) || bytes.Compare(name, tree) < 0 {
					continue
				}
				t, err := s.openTree(name)
				if err != nil {
					return err
				}
				if t == nil {
					continue
				}
				c := t.cursor()
				k, v, ok := c.first()
				if bytes.Equal(name, tree) {
					k, v, ok = c.seek(from)
				}
				for ; ok; k, v, ok = c.next() {
					seg, n, isRef := decodeRefHeader(v)
					if !isRef || !cands[seg] {
						continue
					}
					if n > db.maxRecord {
						// Written with larger segments than this open's: it
						// cannot be journaled again here (it would fail the
						// batch, and every checkpoint with it). It stays,
						// and so does its segment.
						continue
					}
					opSize := len(name) + len(k) + 32
					if size > 0 && (size+n > budget || rec+opSize > recBudget) {
						tree, from = bytes.Clone(name), bytes.Clone(k)
						return nil
					}
					val, err := db.resolve(v)
					if err != nil {
						return err
					}
					ops = append(ops, op{kind: opMoveJournal, tree: bytes.Clone(name), key: bytes.Clone(k), value: val,
						from: journal.Location{Segment: seg, Offset: int64(binary.LittleEndian.Uint64(v[5:]))}})
					size += n + 64
					rec += opSize
					found++
				}
				if c.err != nil {
					return c.err
				}
			}
			done = true
			return nil
		})
		if err != nil {
			return int(moved), err
		}
		if len(ops) == 0 {
			break
		}
		if err := db.commitMoves(ops); err != nil {
			return int(moved), err
		}
		moved += int64(len(ops))
		db.compaction.movedValues.Add(uint64(len(ops)))
	}
	if moved > 0 {
		db.compaction.compactions.Add(1)
		db.compaction.idle = candidates{}
	} else {
		db.compaction.idle = sum
	}
	return int(moved), nil
}

// commitMoves journals a batch of moves without an fsync of its own and
// waits until it is applied.
func (db *DB) commitMoves(ops []op) error {
	if err := db.rlockWrite("Compact"); err != nil {
		return err
	}
	defer db.writeMu.RUnlock()
	return db.commitAsync(ops, true, true)
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
