package kdb

import (
	"fmt"
)

// Batch is a set of writes applied atomically by DB.Write: after a crash all
// of them are there or none. A Batch is not safe for concurrent use; it may
// be reused after Reset.
type Batch struct {
	ops    []op
	size   int
	err    error
	prefix string // tree-name prefix of its index names: "" (user indexes) or a namespace's
}

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{} }

// Put sets key to value in the named index, creating the index if needed.
// key and value are copied.
func (b *Batch) Put(index string, key, value []byte) {
	if b.check(index, key) && len(value) > MaxValueSize {
		b.err = fmt.Errorf("%w: value of %d bytes (max %d)", ErrInvalid, len(value), MaxValueSize)
	}
	b.add(op{kind: opPut, tree: treeName(b.prefix, index), key: clone(key), value: clone(value)})
}

// Delete removes key from the named index. Deleting a missing key is not an
// error.
func (b *Batch) Delete(index string, key []byte) {
	b.check(index, key)
	b.add(op{kind: opDelete, tree: treeName(b.prefix, index), key: clone(key)})
}

// DropIndex removes the named index and all its keys.
func (b *Batch) DropIndex(index string) {
	b.checkIndex(index)
	b.add(op{kind: opDropTree, tree: treeName(b.prefix, index)})
}

// Len returns the number of operations in the batch.
func (b *Batch) Len() int { return len(b.ops) }

// Reset empties the batch.
func (b *Batch) Reset() { *b = Batch{ops: b.ops[:0], prefix: b.prefix} }

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
	if max := maxIndexName(b.prefix); len(index) == 0 || len(index) > max {
		b.err = fmt.Errorf("%w: index name of %d bytes (want 1..%d)", ErrInvalid, len(index), max)
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

// userTree returns the tree of user index index.
func userTree(index string) []byte { return treeName(userTreePrefix, index) }

// treeName returns the tree of index index under prefix ("" means the user
// indexes').
func treeName(prefix, index string) []byte {
	if prefix == "" {
		prefix = userTreePrefix
	}
	t := make([]byte, 0, len(prefix)+len(index))
	return append(append(t, prefix...), index...)
}

// maxIndexName is the longest index name under prefix: a tree name is at
// most len(userTreePrefix)+MaxIndexNameSize bytes.
func maxIndexName(prefix string) int {
	if prefix == "" {
		return MaxIndexNameSize
	}
	return MaxIndexNameSize + len(userTreePrefix) - len(prefix)
}

func clone(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return append(make([]byte, 0, len(b)), b...)
}
