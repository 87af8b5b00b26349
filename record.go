package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/kdb-project/kdb/journal"
)

// op is one operation of a batch, as journaled.
type op struct {
	kind  byte
	tree  []byte // full tree name (prefix included)
	key   []byte
	value []byte // opPut: the value; opPutJournal, opMoveJournal: the value, before journaling only
	ref   int    // opPutJournal, opMoveJournal: index of its value record among the batch's
	size  int    // opPutJournal, opMoveJournal: the value's length, checked against its record
	// from: opMoveJournal: the value record the key's value must still be
	// (with the same size) for the move to take effect.
	from journal.Location
	// ovk is ovKey(tree, key) if a Txn computed it already (register
	// reuses it); not journaled.
	ovk string
}

// encodedBatchSize returns the size of the batch record payload for ops:
// encodeBatch's output, so that it can be allocated once at its size.
func encodedBatchSize(ops []op) int {
	n := 1 + uvarintLen(uint64(len(ops)))
	for _, o := range ops {
		n += 1 + uvarintLen(uint64(len(o.tree))) + len(o.tree)
		if o.kind == opDropTree {
			continue
		}
		n += uvarintLen(uint64(len(o.key))) + len(o.key)
		switch o.kind {
		case opPut:
			n += uvarintLen(uint64(len(o.value))) + len(o.value)
		case opPutJournal:
			n += uvarintLen(uint64(o.ref)) + uvarintLen(uint64(o.size))
		case opMoveJournal:
			n += uvarintLen(uint64(o.ref)) + uvarintLen(uint64(o.size)) +
				uvarintLen(uint64(o.from.Segment)) + uvarintLen(uint64(o.from.Offset))
		}
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// encodeBatch appends the batch record payload for ops (FORMAT.md §5.2).
// Values of opPutJournal ops are not in it; they travel as their own recValue
// records, in op order, just before it.
func encodeBatch(dst []byte, ops []op) []byte {
	dst = append(dst, batchVersion)
	dst = binary.AppendUvarint(dst, uint64(len(ops)))
	for _, o := range ops {
		dst = append(dst, o.kind)
		dst = binary.AppendUvarint(dst, uint64(len(o.tree)))
		dst = append(dst, o.tree...)
		if o.kind == opDropTree {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(len(o.key)))
		dst = append(dst, o.key...)
		switch o.kind {
		case opPut:
			dst = binary.AppendUvarint(dst, uint64(len(o.value)))
			dst = append(dst, o.value...)
		case opPutJournal, opMoveJournal:
			dst = binary.AppendUvarint(dst, uint64(o.ref))
			dst = binary.AppendUvarint(dst, uint64(o.size))
			if o.kind == opMoveJournal {
				dst = binary.AppendUvarint(dst, uint64(o.from.Segment))
				dst = binary.AppendUvarint(dst, uint64(o.from.Offset))
			}
		}
	}
	return dst
}

// decodeBatch decodes a batch record payload. Slices in the result alias b.
// nvalues is the number of value records that preceded it in its batch; a
// reference beyond them is corruption. It never panics and never allocates
// more than a bounded multiple of len(b).
func decodeBatch(b []byte, nvalues int) ([]op, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != batchVersion {
		return nil, fmt.Errorf("batch record: version %d, want %d", v, batchVersion)
	}
	n := d.uvarint()
	// Each op takes at least 3 bytes, which bounds the slice we allocate.
	if d.err == nil && n > uint64(len(b))/3 {
		return nil, fmt.Errorf("batch record: %d ops cannot fit in %d bytes", n, len(b))
	}
	ops := make([]op, 0, n)
	nextRef := 0
	for i := uint64(0); i < n && d.err == nil; i++ {
		var o op
		o.kind = d.byte()
		o.tree = d.bytes(d.uvarint())
		switch o.kind {
		case opDropTree:
		case opPut:
			o.key = d.bytes(d.uvarint())
			o.value = d.bytes(d.uvarint())
		case opDelete:
			o.key = d.bytes(d.uvarint())
		case opPutJournal, opMoveJournal:
			o.key = d.bytes(d.uvarint())
			ref := d.uvarint()
			size := d.uvarint()
			if o.kind == opMoveJournal {
				seg, off := d.uvarint(), d.uvarint()
				if d.err == nil && (seg == 0 || seg > math.MaxUint32 || off > math.MaxInt64) {
					return nil, fmt.Errorf("batch record: op %d: moves from segment %d offset %d", i, seg, off)
				}
				o.from = journal.Location{Segment: journal.SegmentID(seg), Offset: int64(off)}
			}
			if d.err == nil && (ref != uint64(nextRef) || ref >= uint64(nvalues)) {
				return nil, fmt.Errorf("batch record: op %d refers to value record %d, want %d of %d", i, ref, nextRef, nvalues)
			}
			if d.err == nil && size > MaxValueSize {
				return nil, fmt.Errorf("batch record: op %d: value size %d", i, size)
			}
			o.ref, o.size = int(ref), int(size)
			nextRef++
		default:
			if d.err == nil {
				return nil, fmt.Errorf("batch record: op %d: unknown kind %d", i, o.kind)
			}
		}
		if d.err == nil {
			if err := checkOp(&o); err != nil {
				return nil, fmt.Errorf("batch record: op %d: %w", i, err)
			}
		}
		ops = append(ops, o)
	}
	if d.err != nil {
		return nil, fmt.Errorf("batch record: %w", d.err)
	}
	if d.off != len(b) {
		return nil, fmt.Errorf("batch record: %d trailing bytes", len(b)-d.off)
	}
	if nextRef != nvalues {
		return nil, fmt.Errorf("batch record: %d value records, %d referenced", nvalues, nextRef)
	}
	return ops, nil
}

// checkOp refuses an op that the writer never journals (FORMAT.md §5.2,
// §5.4), however well it decodes. The writer names only the trees of user
// indexes and of namespaces (Batch and Txn check the names, keys and
// values they take; compaction moves values of those trees; Import writes
// the trees an Export read from a store), and never journals an op on the
// engine's own trees ("k/"): the segment-refs tree is changed by the
// applier alone, from the ops it applies. Replay must refuse such an op
// rather than apply it: a drop of "k/segrefs", say, would let journal GC
// remove segments whose values the index still needs.
func checkOp(o *op) error {
	if err := checkTreeName(o.tree); err != nil {
		return err
	}
	if o.kind == opDropTree {
		return nil
	}
	if len(o.key) == 0 || len(o.key) > MaxKeySize {
		return fmt.Errorf("key of %d bytes (want 1..%d)", len(o.key), MaxKeySize)
	}
	if o.kind == opPut && len(o.value) > MaxValueSize {
		return fmt.Errorf("value of %d bytes (max %d)", len(o.value), MaxValueSize)
	}
	return nil
}

// checkTreeName refuses a tree name that no batch the writer builds
// carries (FORMAT.md §5.4): it must be "u/" or a namespace's "<ns>/",
// then an index name of at least one byte, at most maxTreeName bytes in
// all.
func checkTreeName(tree []byte) error {
	ns, index, ok := bytes.Cut(tree, []byte("/"))
	prefix := tree[:len(tree)-len(index)] // ns and its "/", if ok
	switch {
	case len(tree) == 0:
		return errors.New("empty tree name")
	case len(tree) > maxTreeName:
		return fmt.Errorf("tree name of %d bytes (max %d)", len(tree), maxTreeName)
	case !ok || len(index) == 0:
		return fmt.Errorf("tree %q: not a namespace's index", tree)
	case string(prefix) == userTreePrefix:
		return nil
	case string(prefix) == engineTreePrefix:
		return fmt.Errorf("tree %q: the engine's own trees are never written by a batch", tree)
	case !validNamespace(string(ns)):
		return fmt.Errorf("tree %q: unknown namespace", tree)
	}
	return nil
}

// decoder reads bounds-checked fields; after the first error every read
// returns zero values and err stays set.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated %s at offset %d", what, d.off)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || d.off >= len(d.b) {
		d.fail("byte")
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("bytes")
		return nil
	}
	s := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return s
}
