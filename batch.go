package kdb

import (
	"fmt"
	"sync"
)

// Batch is a set of writes applied atomically by DB.Write: after a crash all
// of them are there or none. A Batch is not safe for concurrent use; it may
// be reused after Reset. Its size is bounded by Options.SegmentSize (see
// DB.Write): a batch over half of it, or whose keys and short values take
// more than MaxBatchSize, is ErrInvalid at Write.
type Batch struct {
	ops    []op
	size   int
	err    error
	prefix string // tree-name prefix of its index names: "" (user indexes) or a namespace's
	names  treeNames
	// pooled: ops comes from opArrays (a transaction's batch, whose ops
	// are given to the commit and recycled once applied).
	pooled bool
	// arena holds the copies of small keys and values, several to an
	// allocation. Never reused once handed out (Reset drops it): a
	// committed batch's values stay referenced until it is applied.
	arena []byte
}

// Copies of at most arenaSmall bytes share chunks of the batch's arena,
// which grow from arenaMin to arenaMax bytes; larger ones are allocated
// alone.
const (
	arenaSmall = 256
	arenaMin   = 256
	arenaMax   = 8 << 10
)

// alloc returns n bytes of fresh memory for the batch's copies.
func (b *Batch) alloc(n int) []byte {
	if n > arenaSmall {
		return make([]byte, n)
	}
	if cap(b.arena)-len(b.arena) < n {
		c := min(max(2*cap(b.arena), arenaMin), arenaMax)
		b.arena = make([]byte, 0, c)
	}
	s := b.arena[len(b.arena) : len(b.arena)+n : len(b.arena)+n]
	b.arena = b.arena[:len(b.arena)+n]
	return s
}

// tree returns the tree name of index under the batch's prefix.
func (b *Batch) tree(index string) []byte { return b.names.get(b.prefix, index) }

// treeNames caches the tree names of the indexes named last (a batch or a
// snapshot names few; the ops and reads share a name, which is never
// changed).
type treeNames struct {
	e    [4]treeNameEntry
	next int
}

type treeNameEntry struct {
	index, prefix string
	tree          []byte
	str           string // tree as a string, once getBoth made it
}

func (c *treeNames) get(prefix, index string) []byte { return c.entry(prefix, index).tree }

// getBoth returns get's tree name, and the same as a string.
func (c *treeNames) getBoth(prefix, index string) ([]byte, string) {
	e := c.entry(prefix, index)
	if e.str == "" {
		e.str = string(e.tree)
	}
	return e.tree, e.str
}

func (c *treeNames) entry(prefix, index string) *treeNameEntry {
	for i := range c.e {
		if e := &c.e[i]; e.tree != nil && e.index == index && e.prefix == prefix {
			return e
		}
	}
	e := &c.e[c.next]
	c.next = (c.next + 1) % len(c.e)
	*e = treeNameEntry{index: index, prefix: prefix, tree: treeName(prefix, index)}
	return e
}

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{} }

// Put sets key to value in the named index, creating the index if needed.
// key and value are copied.
func (b *Batch) Put(index string, key, value []byte) {
	if b.checkPut(index, key, len(value)); b.err != nil {
		return // failed: no copy of a value that may be huge
	}
	// One allocation holds the copies of both.
	kv := b.alloc(len(key) + len(value))
	copy(kv, key)
	copy(kv[len(key):], value)
	b.add(op{kind: opPut, tree: b.tree(index), key: kv[:len(key):len(key)], value: kv[len(key):]})
}

// putOwned is Put keeping value rather than a copy (Txn.PutOwned).
func (b *Batch) putOwned(index string, key, value []byte) {
	if b.checkPut(index, key, len(value)); b.err != nil {
		return
	}
	k := b.alloc(len(key))
	copy(k, key)
	b.add(op{kind: opPut, tree: b.tree(index), key: k, value: value})
}

func (b *Batch) checkPut(index string, key []byte, n int) {
	if b.check(index, key) && n > MaxValueSize {
		b.err = fmt.Errorf("%w: value of %d bytes (max %d)", ErrInvalid, n, MaxValueSize)
	}
}

// Delete removes key from the named index. Deleting a missing key is not an
// error.
func (b *Batch) Delete(index string, key []byte) {
	b.check(index, key)
	k := b.alloc(len(key))
	copy(k, key)
	b.add(op{kind: opDelete, tree: b.tree(index), key: k})
}

// DropIndex removes the named index and all its keys.
func (b *Batch) DropIndex(index string) {
	b.checkIndex(index)
	b.add(op{kind: opDropTree, tree: b.tree(index)})
}

// Len returns the number of operations in the batch.
func (b *Batch) Len() int { return len(b.ops) }

// Reset empties the batch.
func (b *Batch) Reset() { *b = Batch{ops: b.ops[:0], prefix: b.prefix} }

// Err returns the first invalid argument given to the batch; DB.Write
// returns it without writing anything.
func (b *Batch) Err() error { return b.err }

func (b *Batch) add(o op) {
	if b.ops == nil {
		if b.pooled {
			b.ops = newOps()
		} else {
			b.ops = make([]op, 0, 8)
		}
	}
	b.ops = append(b.ops, o)
	b.size += len(o.tree) + len(o.key) + len(o.value) + 16
}

func (b *Batch) checkIndex(index string) bool {
	if b.err != nil {
		return false
	}
	if err := checkIndexName(b.prefix, index); err != nil {
		b.err = err
		return false
	}
	return true
}

func (b *Batch) check(index string, key []byte) bool {
	if !b.checkIndex(index) {
		return false
	}
	if err := checkKey(key); err != nil {
		b.err = err
		return false
	}
	return true
}

// checkIndexName refuses an index name no write can make (ErrInvalid), in
// the indexes under prefix. Reads refuse it too: a read of a key or index
// no write can have stored is the caller's bug, not a miss (ErrNotFound).
func checkIndexName(prefix, index string) error {
	if max := maxIndexName(prefix); len(index) == 0 || len(index) > max {
		return fmt.Errorf("%w: index name of %d bytes (want 1..%d)", ErrInvalid, len(index), max)
	}
	return nil
}

// checkKey refuses a key no write can store (ErrInvalid): see
// checkIndexName.
func checkKey(key []byte) error {
	if len(key) == 0 || len(key) > MaxKeySize {
		return fmt.Errorf("%w: key of %d bytes (want 1..%d)", ErrInvalid, len(key), MaxKeySize)
	}
	return nil
}

// userTree returns the tree of user index index.
func userTree(index string) []byte { return treeName(userTreePrefix, index) }

// treeName returns the tree of index index under prefix ("" means the user
// indexes').
func treeName(prefix, index string) []byte {
	if prefix == "" {
		prefix = userTreePrefix
	}
	var buf [96]byte
	k := append(append(buf[:0], prefix...), index...)
	names.RLock()
	t, ok := names.m[string(k)]
	names.RUnlock()
	if ok {
		return t
	}
	t = append([]byte(nil), k...)
	t = t[:len(t):len(t)] // shared: an append must copy
	names.Lock()
	if len(names.m) < 1<<14 {
		names.m[string(t)] = t
	}
	names.Unlock()
	return t
}

// names holds the tree names made so far (process-wide, up to a bound): a
// writer names the same few trees over and over, and a tree name is never
// changed once made.
var names = struct {
	sync.RWMutex
	m map[string][]byte
}{m: map[string][]byte{}}

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

// opArrays recycles the operation arrays of the batches the commit path
// owns (transactions', the copies of Write's batches, Put's and Delete's):
// the leader returns each group's once the group is applied, as it answers
// the group's writers (recycleOps). At ~9 operations of 120 bytes, a broker transaction's
// slice was the largest of its allocations, and growing it from 8 to 16
// operations made it twice.
var opArrays = sync.Pool{New: func() any { return new([pooledOps]op) }}

// pooledOps is the length of opArrays' arrays.
const pooledOps = 16

// newOps returns an empty slice of an array from opArrays.
func newOps() []op { return opArrays.Get().(*[pooledOps]op)[:0] }

// recycleOps returns ops's array to opArrays if it is one of theirs (a
// batch that outgrew it has another, left to the collector). The caller
// owns ops: nothing reads or writes it after this.
func recycleOps(ops []op) {
	if cap(ops) != pooledOps {
		return
	}
	a := (*[pooledOps]op)(ops[:pooledOps])
	clear(a[:]) // drop the references to keys, values and names
	opArrays.Put(a)
}
