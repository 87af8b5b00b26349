package kdb

import (
	"fmt"
)

// Batch is a set of writes applied atomically by DB.Write: after a crash all
// of them are there or none. A Batch is not safe for concurrent use; it may
// be reused after Reset.
type Batch struct {
	ops  []op
	size int
	err  error
}

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{} }

// Put sets key to value in the named index, creating the index if needed.
// key and value are copied.
func (b *Batch) Put(index string, key, value []byte) {
	if b.check(index, key) && len(value) > MaxValueSize {
		b.err = fmt.Errorf("%w: value of %d bytes (max %d)", ErrInvalid, len(value), MaxValueSize)
	}
	b.add(op{kind: opPut, tree: userTree(index), key: clone(key), value: clone(value)})
}

// Delete removes key from the named index. Deleting a missing key is not an
// error.
func (b *Batch) Delete(index string, key []byte) {
	b.check(index, key)
	b.add(op{kind: opDelete, tree: userTree(index), key: clone(key)})
}

// DropIndex removes the named index and all its keys.
func (b *Batch) DropIndex(index string) {
	b.checkIndex(index)
	b.add(op{kind: opDropTree, tree: userTree(index)})
}

// Len returns the number of operations in the batch.
func (b *Batch) Len() int { return len(b.ops) }

// Reset empties the batch.
func (b *Batch) Reset() { *b = Batch{ops: b.ops[:0]} }

// Err returns the first invalid argument given to the batch; DB.Write
// returns it without writing anything.
func (b *Batch) Err() error { return b.err }

func (b *Batch) add(o op) {
	b.ops = append(b.ops, o)
	b.size += len(o.tree) + len(o.key) + len(o.value) + 16
}

func (b *Batch) checkIndex(index string) bool {
	if b.err != nil {
		return false
	}
	if len(index) == 0 || len(index) > MaxIndexNameSize {
		b.err = fmt.Errorf("%w: index name of %d bytes (want 1..%d)", ErrInvalid, len(index), MaxIndexNameSize)
		return false
	}
	return true
}

func (b *Batch) check(index string, key []byte) bool {
	if !b.checkIndex(index) {
		return false
	}
	if len(key) == 0 || len(key) > MaxKeySize {
		b.err = fmt.Errorf("%w: key of %d bytes (want 1..%d)", ErrInvalid, len(key), MaxKeySize)
		return false
	}
	return true
}

func userTree(index string) []byte {
	t := make([]byte, 0, len(userTreePrefix)+len(index))
	return append(append(t, userTreePrefix...), index...)
}

func clone(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return append(make([]byte, 0, len(b)), b...)
}
