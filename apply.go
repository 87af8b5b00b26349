package kdb

import (
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// applyTarget is the state the applier changes: the page file's index in
// recovery's replay (ixTarget), the mem tables on the live write path
// (memApply, mem.go). Values are as the page file's trees keep them: index
// values (FORMAT.md §5.3), and bare counts in the segment-refs tree (§5.4).
type applyTarget interface {
	// current returns key's value in tree as the last applied batch left
	// it.
	current(tree, key []byte) (val []byte, ok bool, err error)
	// put sets key to val, creating the tree if needed; existed says
	// whether the key has a value now (current's ok).
	put(tree, key, val []byte, existed bool) error
	// del deletes key, which has a value now.
	del(tree, key []byte) error
	// drop calls each for every value of the tree, then drops it; a
	// missing tree is nothing.
	drop(tree []byte, each func(val []byte)) error
}

// applier applies batches, the same way on the live write path and in
// recovery's replay, and keeps the per-segment counts of values that live
// in the journal.
type applier struct {
	t applyTarget
	// refs holds the count changes per segment, in the order first
	// changed (a group changes few: refBuf holds them without an
	// allocation); refIdx indexes them once there are many (replay).
	refs    []segRef
	refIdx  map[journal.SegmentID]int
	refBuf  [2]segRef
	scratch []byte
	// moved and stale count the compaction moves that took effect and
	// those that found the key changed (nothing done).
	moved, stale int
}

type refDelta struct{ count, bytes int64 }

type segRef struct {
	seg journal.SegmentID
	refDelta
}

// maxRefScan is how many segments addRef finds by a scan of refs before it
// indexes them in refIdx.
const maxRefScan = 8

// apply applies ops. vals are the locations of the batch's value records, in
// order.
func (a *applier) apply(ops []op, vals []journal.Location) error {
	for i := range ops {
		o := &ops[i]
		switch o.kind {
		case opPut, opPutJournal:
			old, existed, err := a.t.current(o.tree, o.key)
			if err != nil {
				return err
			}
			a.unref(old, existed)
			var v []byte
			if o.kind == opPut {
				v = make([]byte, 0, 1+len(o.value))
				v = append(append(v, valInline), o.value...)
			} else {
				if o.ref >= len(vals) {
					return fmt.Errorf("%w: batch refers to value record %d of %d", ErrCorrupt, o.ref, len(vals))
				}
				loc := vals[o.ref]
				v = appendRef(make([]byte, 0, valRefSize), loc, o.size)
				a.addRef(loc.Segment, 1, int64(o.size))
			}
			if err := a.t.put(o.tree, o.key, v, existed); err != nil {
				return err
			}
		case opMoveJournal:
			if o.ref >= len(vals) {
				return fmt.Errorf("%w: batch refers to value record %d of %d", ErrCorrupt, o.ref, len(vals))
			}
			ok, err := a.move(o, vals[o.ref])
			if err != nil {
				return err
			}
			if ok {
				a.moved++
			} else {
				a.stale++
			}
		case opDelete:
			old, existed, err := a.t.current(o.tree, o.key)
			if err != nil || !existed {
				if err != nil {
					return err
				}
				continue
			}
			a.unref(old, true)
			if err := a.t.del(o.tree, o.key); err != nil {
				return err
			}
		case opDropTree:
			if err := a.t.drop(o.tree, func(v []byte) {
				if seg, size, isRef := decodeRefHeader(v); isRef {
					a.addRef(seg, -1, -int64(size))
				}
			}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unknown op kind %d", ErrCorrupt, o.kind)
		}
	}
	return nil
}

// move applies a compaction move: if the key's value is still the journal
// reference o.from (o.size bytes), it becomes a reference to the copy at
// loc; otherwise (the key was overwritten, deleted or its tree dropped
// since the compaction read it) nothing changes and the copy is dead on
// arrival. The same rule runs in replay, on the same state, so a recovery
// reproduces the outcome exactly.
func (a *applier) move(o *op, loc journal.Location) (bool, error) {
	cur, ok, err := a.t.current(o.tree, o.key)
	if err != nil || !ok {
		return false, err
	}
	seg, size, isRef := decodeRefHeader(cur)
	if !isRef || seg != o.from.Segment || size != o.size || int64(binary.LittleEndian.Uint64(cur[5:])) != o.from.Offset {
		return false, nil
	}
	a.addRef(seg, -1, -int64(size))
	a.addRef(loc.Segment, 1, int64(o.size))
	return true, a.t.put(o.tree, o.key, appendRef(make([]byte, 0, valRefSize), loc, o.size), true)
}

// unref drops the journal reference of a key's current value, if it has
// one.
func (a *applier) unref(old []byte, existed bool) {
	if !existed {
		return
	}
	if seg, size, isRef := decodeRefHeader(old); isRef {
		a.addRef(seg, -1, -int64(size))
	}
}

func (a *applier) addRef(seg journal.SegmentID, n, bytes int64) {
	i := -1
	if a.refIdx != nil {
		if j, ok := a.refIdx[seg]; ok {
			i = j
		}
	} else {
		for j := range a.refs {
			if a.refs[j].seg == seg {
				i = j
				break
			}
		}
	}
	if i < 0 {
		if a.refs == nil {
			a.refs = a.refBuf[:0]
		}
		i = len(a.refs)
		a.refs = append(a.refs, segRef{seg: seg})
		if a.refIdx != nil {
			a.refIdx[seg] = i
		} else if len(a.refs) > maxRefScan {
			a.refIdx = make(map[journal.SegmentID]int, len(a.refs))
			for j, r := range a.refs {
				a.refIdx[r.seg] = j
			}
		}
	}
	a.refs[i].count += n
	a.refs[i].bytes += bytes
}

// flushRefs writes the reference count changes into the segment-refs tree.
func (a *applier) flushRefs() error {
	if len(a.refs) == 0 {
		return nil
	}
	tree := []byte(segRefsTree)
	for _, d := range a.refs {
		if d.count == 0 && d.bytes == 0 {
			continue
		}
		var k [4]byte
		binary.BigEndian.PutUint32(k[:], uint32(d.seg))
		var count, bytes int64
		v, ok, err := a.t.current(tree, k[:])
		if err != nil {
			return err
		}
		if ok {
			if len(v) != 16 {
				return fmt.Errorf("%w: segment refs of %s: %d bytes", ErrCorrupt, d.seg, len(v))
			}
			count, bytes = int64(binary.LittleEndian.Uint64(v)), int64(binary.LittleEndian.Uint64(v[8:]))
		}
		count += d.count
		bytes += d.bytes
		if count < 0 || bytes < 0 {
			return fmt.Errorf("%w: segment refs of %s went negative (%d values, %d bytes)", ErrCorrupt, d.seg, count, bytes)
		}
		if count == 0 {
			if ok {
				if err := a.t.del(tree, k[:]); err != nil {
					return err
				}
			}
			continue
		}
		nv := make([]byte, 0, 16)
		nv = binary.LittleEndian.AppendUint64(nv, uint64(count))
		nv = binary.LittleEndian.AppendUint64(nv, uint64(bytes))
		if err := a.t.put(tree, append([]byte(nil), k[:]...), nv, ok); err != nil {
			return err
		}
	}
	a.refs = a.refs[:0]
	a.refIdx = nil
	return nil
}

// ixTarget is the page file's index as the applier's target (recovery's
// replay runs inside one index Update per chunk).
type ixTarget struct{ tx *index.Tx }

func (x ixTarget) current(tree, key []byte) ([]byte, bool, error) {
	t, err := x.tx.OpenTree(tree)
	if err != nil || t == nil {
		return nil, false, err
	}
	v, ok, err := t.Get(key)
	if !ok || err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (x ixTarget) put(tree, key, val []byte, _ bool) error {
	t, err := x.tx.OpenTree(tree)
	if err != nil {
		return err
	}
	if t == nil {
		if t, err = x.tx.CreateTree(tree); err != nil {
			return err
		}
	}
	return t.Put(key, val)
}

func (x ixTarget) del(tree, key []byte) error {
	t, err := x.tx.OpenTree(tree)
	if err != nil || t == nil {
		return err
	}
	_, err = t.Delete(key)
	return err
}

func (x ixTarget) drop(tree []byte, each func(val []byte)) error {
	t, err := x.tx.OpenTree(tree)
	if err != nil || t == nil {
		return err
	}
	c := t.Cursor()
	for _, v, ok := c.First(); ok; _, v, ok = c.Next() {
		each(v)
	}
	if err := c.Err(); err != nil {
		return err
	}
	return x.tx.DropTree(tree)
}

// appendRef appends the index value that points at a journal value record.
func appendRef(dst []byte, loc journal.Location, size int) []byte {
	dst = append(dst, valJournal)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(loc.Segment))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(loc.Offset))
	return binary.LittleEndian.AppendUint32(dst, uint32(size))
}

// decodeRefHeader reports whether the index value v points into the journal,
// and where. A malformed value reports false; resolve reports it.
func decodeRefHeader(v []byte) (journal.SegmentID, int, bool) {
	if len(v) != valRefSize || v[0] != valJournal {
		return 0, 0, false
	}
	return journal.SegmentID(binary.LittleEndian.Uint32(v[1:])), int(binary.LittleEndian.Uint32(v[13:])), true
}

// replayer applies journal records during recovery. Value records are
// remembered until the batch record that follows them; end refuses value
// records that no batch record followed.
type replayer struct {
	db   *DB
	vals []journal.Location
	lens []int
}

func newReplayer(db *DB) *replayer { return &replayer{db: db} }

func (r *replayer) apply(tx *index.Tx, loc journal.Location, rec journal.Record) error {
	switch rec.Type {
	case recValue:
		r.vals = append(r.vals, loc)
		r.lens = append(r.lens, len(rec.Payload))
		return nil
	case recBatch:
		ops, err := decodeBatch(rec.Payload, len(r.vals))
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCorrupt, loc, err)
		}
		for _, o := range ops {
			if (o.kind == opPutJournal || o.kind == opMoveJournal) && r.lens[o.ref] != o.size {
				return fmt.Errorf("%w: %s: value record %s holds %d bytes, batch says %d", ErrCorrupt, loc, r.vals[o.ref], r.lens[o.ref], o.size)
			}
		}
		a := applier{t: ixTarget{tx}}
		if err := a.apply(ops, r.vals); err != nil {
			return err
		}
		r.vals, r.lens = r.vals[:0], r.lens[:0]
		return a.flushRefs()
	default:
		return fmt.Errorf("%w: %s: unknown record type %d", ErrCorrupt, loc, rec.Type)
	}
}

// end is called once the replay is over: value records left over (no batch
// record followed them) are ErrCorrupt naming the first of them. A batch's
// value records and its batch record are written as one journal batch
// (DB.encode, commitReq.seal, journal.Write), and the journal delivers a
// batch only once its end frame verified (a torn tail cuts an unfinished
// batch whole), so no crash leaves them: they are damage, or records of a
// writer that is not kdb. A batch record earlier in the journal could not
// have consumed them either: it must refer to exactly the value records
// before it (decodeBatch), so only the journal's last ones reach here.
func (r *replayer) end() error {
	if len(r.vals) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: value record that no batch record refers to (%d at the end of the journal)", ErrCorrupt, r.vals[0], len(r.vals))
}
