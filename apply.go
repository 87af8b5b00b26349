package kdb

import (
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// applier applies batches to the index inside one Update, the same way on
// the live write path and in recovery's replay, and keeps the per-segment
// counts of values that live in the journal.
type applier struct {
	tx      *index.Tx
	refs    map[journal.SegmentID]refDelta
	scratch []byte
	// moved and stale count the compaction moves that took effect and
	// those that found the key changed (nothing done).
	moved, stale int
}

type refDelta struct{ count, bytes int64 }

// apply applies ops. vals are the locations of the batch's value records, in
// order.
func (a *applier) apply(ops []op, vals []journal.Location) error {
	for i := range ops {
		o := &ops[i]
		t, err := a.tx.OpenTree(o.tree)
		if err != nil {
			return err
		}
		switch o.kind {
		case opPut, opPutJournal:
			if t == nil {
				var err error
				if t, err = a.tx.CreateTree(o.tree); err != nil {
					return err
				}
			}
			if err := a.unref(t, o.key); err != nil {
				return err
			}
			v := a.scratch[:0]
			if o.kind == opPut {
				v = append(append(v, valInline), o.value...)
			} else {
				if o.ref >= len(vals) {
					return fmt.Errorf("%w: batch refers to value record %d of %d", ErrCorrupt, o.ref, len(vals))
				}
				loc := vals[o.ref]
				v = appendRef(v, loc, o.size)
				a.addRef(loc.Segment, 1, int64(o.size))
			}
			a.scratch = v
			if err := t.Put(o.key, v); err != nil {
				return err
			}
		case opMoveJournal:
			if o.ref >= len(vals) {
				return fmt.Errorf("%w: batch refers to value record %d of %d", ErrCorrupt, o.ref, len(vals))
			}
			ok, err := a.move(t, o, vals[o.ref])
			if err != nil {
				return err
			}
			if ok {
				a.moved++
			} else {
				a.stale++
			}
		case opDelete:
			if t == nil {
				continue
			}
			if err := a.unref(t, o.key); err != nil {
				return err
			}
			if _, err := t.Delete(o.key); err != nil {
				return err
			}
		case opDropTree:
			if t == nil {
				continue
			}
			c := t.Cursor()
			for _, v, ok := c.First(); ok; _, v, ok = c.Next() {
				if seg, size, isRef := decodeRefHeader(v); isRef {
					a.addRef(seg, -1, -int64(size))
				}
			}
			if err := c.Err(); err != nil {
				return err
			}
			if err := a.tx.DropTree(o.tree); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unknown op kind %d", ErrCorrupt, o.kind)
		}
	}
	return nil
}

// move applies a compaction move: if key's value in t is still the
// journal reference o.from (o.size bytes), it becomes a reference to the
// copy at loc; otherwise (the key was overwritten, deleted or its tree
// dropped since the compaction read it) nothing changes and the copy is
// dead on arrival. The same rule runs in replay, on the same state, so a
// recovery reproduces the outcome exactly.
func (a *applier) move(t *index.Tree, o *op, loc journal.Location) (bool, error) {
	if t == nil {
		return false, nil
	}
	cur, ok, err := t.Get(o.key)
	if err != nil || !ok {
		return false, err
	}
	seg, size, isRef := decodeRefHeader(cur)
	if !isRef || seg != o.from.Segment || size != o.size || int64(binary.LittleEndian.Uint64(cur[5:])) != o.from.Offset {
		return false, nil
	}
	a.addRef(seg, -1, -int64(size))
	v := appendRef(a.scratch[:0], loc, o.size)
	a.addRef(loc.Segment, 1, int64(o.size))
	a.scratch = v
	return true, t.Put(o.key, v)
}

// unref drops the journal reference of key's current value, if it has one.
func (a *applier) unref(t *index.Tree, key []byte) error {
	old, ok, err := t.Get(key)
	if err != nil || !ok {
		return err
	}
	if seg, size, isRef := decodeRefHeader(old); isRef {
		a.addRef(seg, -1, -int64(size))
	}
	return nil
}

func (a *applier) addRef(seg journal.SegmentID, n, bytes int64) {
	if a.refs == nil {
		a.refs = make(map[journal.SegmentID]refDelta)
	}
	d := a.refs[seg]
	d.count += n
	d.bytes += bytes
	a.refs[seg] = d
}

// flushRefs writes the reference count changes into the segment-refs tree.
func (a *applier) flushRefs() error {
	if len(a.refs) == 0 {
		return nil
	}
	t, err := a.tx.OpenTree([]byte(segRefsTree))
	if err != nil {
		return err
	}
	if t == nil {
		if t, err = a.tx.CreateTree([]byte(segRefsTree)); err != nil {
			return err
		}
	}
	for seg, d := range a.refs {
		if d.count == 0 && d.bytes == 0 {
			continue
		}
		var k [4]byte
		binary.BigEndian.PutUint32(k[:], uint32(seg))
		var count, bytes int64
		if v, ok, err := t.Get(k[:]); err != nil {
			return err
		} else if ok {
			if len(v) != 16 {
				return fmt.Errorf("%w: segment refs of %s: %d bytes", ErrCorrupt, seg, len(v))
			}
			count, bytes = int64(binary.LittleEndian.Uint64(v)), int64(binary.LittleEndian.Uint64(v[8:]))
		}
		count += d.count
		bytes += d.bytes
		if count < 0 || bytes < 0 {
			return fmt.Errorf("%w: segment refs of %s went negative (%d values, %d bytes)", ErrCorrupt, seg, count, bytes)
		}
		if count == 0 {
			if _, err := t.Delete(k[:]); err != nil {
				return err
			}
			continue
		}
		var v [16]byte
		binary.LittleEndian.PutUint64(v[:], uint64(count))
		binary.LittleEndian.PutUint64(v[8:], uint64(bytes))
		if err := t.Put(k[:], v[:]); err != nil {
			return err
		}
	}
	clear(a.refs)
	return nil
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
// remembered until the batch record that follows them.
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
		a := applier{tx: tx}
		if err := a.apply(ops, r.vals); err != nil {
			return err
		}
		r.vals, r.lens = r.vals[:0], r.lens[:0]
		return a.flushRefs()
	default:
		return fmt.Errorf("%w: %s: unknown record type %d", ErrCorrupt, loc, rec.Type)
	}
}
