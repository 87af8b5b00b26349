package kdb

import (
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// Get returns a copy of the value of key in the named index, or ErrNotFound.
func (db *DB) Get(index string, key []byte) ([]byte, error) {
	var v []byte
	err := db.View(func(s *Snapshot) error {
		var err error
		v, err = s.Get(index, key)
		return err
	})
	return v, err
}

// View runs fn with a consistent snapshot of the store: every write
// acknowledged before View began, and none after. Views run concurrently
// with each other, with writes and with checkpoints.
func (db *DB) View(fn func(s *Snapshot) error) error {
	db.mu.Lock()
	closed := db.mu.closed
	db.mu.Unlock()
	if closed {
		return ErrClosed
	}
	db.gcMu.RLock()
	defer db.gcMu.RUnlock()
	return db.staleOr(wrapErr(db.ix.View(func(tx *index.Tx) error {
		return fn(&Snapshot{db: db, tx: tx})
	})))
}

// Snapshot is a consistent read-only view of the store, valid during the
// View that made it. It must be used by one goroutine.
type Snapshot struct {
	db *DB
	tx *index.Tx
}

// Get returns a copy of the value of key in the named index, or ErrNotFound.
func (s *Snapshot) Get(index string, key []byte) ([]byte, error) {
	t, err := s.tx.OpenTree(userTree(index))
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("%w: index %q", ErrNotFound, index)
	}
	v, ok, err := t.Get(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNotFound
	}
	return s.db.resolve(v)
}

// Len returns the number of keys in the named index, without a scan.
func (s *Snapshot) Len(index string) (uint64, error) {
	t, err := s.tx.OpenTree(userTree(index))
	if err != nil || t == nil {
		return 0, err
	}
	return t.Len(), nil
}

// Indexes returns the names of the indexes, in order.
func (s *Snapshot) Indexes() ([]string, error) {
	names, err := s.tx.Trees()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if len(n) > len(userTreePrefix) && string(n[:len(userTreePrefix)]) == userTreePrefix {
			out = append(out, string(n[len(userTreePrefix):]))
		}
	}
	return out, nil
}

// Iter returns an iterator over the named index in key order (empty if the
// index does not exist).
func (s *Snapshot) Iter(index string) *Iter {
	it := &Iter{s: s}
	t, err := s.tx.OpenTree(userTree(index))
	switch {
	case err != nil:
		it.err = err
	case t != nil:
		it.c = t.Cursor()
	}
	return it
}

// Iter walks an index in key order, forward or backward. Key and Value are
// valid until the next move or the end of the View.
type Iter struct {
	s        *Snapshot
	c        *index.Cursor
	key, raw []byte
	ok       bool
	err      error
}

func (it *Iter) set(k, v []byte, ok bool) bool {
	it.key, it.raw, it.ok = k, v, ok
	if !ok && it.c != nil && it.err == nil {
		it.err = it.c.Err()
	}
	return ok
}

// First moves to the smallest key.
func (it *Iter) First() bool {
	if it.c == nil {
		return false
	}
	return it.set(it.c.First())
}

// Last moves to the largest key.
func (it *Iter) Last() bool {
	if it.c == nil {
		return false
	}
	return it.set(it.c.Last())
}

// Seek moves to the smallest key >= key.
func (it *Iter) Seek(key []byte) bool {
	if it.c == nil {
		return false
	}
	return it.set(it.c.Seek(key))
}

// Next moves to the next key.
func (it *Iter) Next() bool {
	if it.c == nil || !it.ok {
		return false
	}
	return it.set(it.c.Next())
}

// Prev moves to the previous key.
func (it *Iter) Prev() bool {
	if it.c == nil || !it.ok {
		return false
	}
	return it.set(it.c.Prev())
}

// Key returns the current key.
func (it *Iter) Key() []byte { return it.key }

// Value returns the current value (a copy if it was kept in the journal). On
// error it returns nil and Err reports it.
func (it *Iter) Value() []byte {
	if !it.ok {
		return nil
	}
	if len(it.raw) > 0 && it.raw[0] == valInline {
		return it.raw[1:]
	}
	v, err := it.s.db.resolve(it.raw)
	if err != nil && it.err == nil {
		it.err = err
	}
	return v
}

// Err returns the first error met while iterating.
func (it *Iter) Err() error { return wrapErr(it.err) }

// resolve returns a copy of the value that the index value v stands for.
// The caller must hold db.gcMu shared.
func (db *DB) resolve(v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: empty index value", ErrCorrupt)
	}
	switch v[0] {
	case valInline:
		return clone(v[1:]), nil
	case valJournal:
		if len(v) != valRefSize {
			return nil, fmt.Errorf("%w: journal reference of %d bytes", ErrCorrupt, len(v))
		}
		loc := journal.Location{
			Segment: journal.SegmentID(binary.LittleEndian.Uint32(v[1:])),
			Offset:  int64(binary.LittleEndian.Uint64(v[5:])),
		}
		size := int(binary.LittleEndian.Uint32(v[13:]))
		rec, err := db.j.Read(loc)
		if err != nil {
			return nil, wrapErr(fmt.Errorf("kdb: value at %s: %w", loc, err))
		}
		if rec.Type != recValue || len(rec.Payload) != size {
			return nil, fmt.Errorf("%w: %s: record type %d of %d bytes, want a value of %d", ErrCorrupt, loc, rec.Type, len(rec.Payload), size)
		}
		return rec.Payload, nil
	}
	return nil, fmt.Errorf("%w: index value tag %d", ErrCorrupt, v[0])
}
