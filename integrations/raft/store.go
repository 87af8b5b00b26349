package raftkdb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

// ErrKeyNotFound is returned by Get and GetUint64 for a key never set. Its
// text is "not found": hashicorp/raft recognises a missing stable key by
// that text (as it does for raft-boltdb's error of the same name).
var ErrKeyNotFound = errors.New("not found")

// Default names.
const (
	DefaultNamespace = "raft"
	logIndex         = "log"
	stableIndex      = "stable"
)

// stableVersion prefixes every stable key and value (see doc.go, FORMAT):
// it makes the empty key and the empty value storable.
const stableVersion = 1

// MaxStableKeySize bounds a StableStore key.
const MaxStableKeySize = kdb.MaxKeySize - 1

// Store is a raft.LogStore and raft.StableStore on one kdb store. It is safe
// for concurrent use.
type Store struct {
	db    *kdb.DB
	ns    *kdb.Namespace
	name  string // the namespace's name
	tree  string // the log tree's name in the kdb store ("ns/log")
	owned bool

	// closed is set by Close, under mu: from then on every method returns
	// kdb.ErrClosed (a Store made by New leaves its kdb store open, so the
	// kdb store cannot say so itself).
	closed atomic.Bool

	// mu serialises the log's writers (StoreLogs, DeleteRange) and guards
	// the cached bounds, which always match the durable log: they change
	// only after a write is acknowledged. Set holds it shared, so that
	// Close (which takes it) waits for every write in progress.
	mu          sync.RWMutex
	empty       bool
	first, last uint64
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens (or creates) the kdb store in dir and returns a Store on it in
// DefaultNamespace. Close closes the kdb store. opts may be nil (kdb's
// defaults: SyncAlways, so every acknowledged write is on disk).
func Open(dir string, opts *kdb.Options) (*Store, error) {
	db, err := kdb.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	s, err := New(db, DefaultNamespace)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New returns a Store in namespace ns of an open kdb store, which the caller
// keeps using for its own data (an FSM's, say) and closes itself. A nil db
// is an error wrapping kdb.ErrInvalid. One Store
// at a time per namespace: a second New for a namespace whose Store is not
// closed returns an error wrapping kdb.ErrInvalid (each Store keeps the
// log's bounds in memory, and would not see the other's writes).
func New(db *kdb.DB, ns string) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("raftkdb: New: nil *kdb.DB (open the kdb store first, or use Open): %w", kdb.ErrInvalid)
	}
	n, err := db.Namespace(ns)
	if err != nil {
		return nil, err
	}
	c := claim{db, ns}
	claims.Lock()
	defer claims.Unlock()
	if claims.m[c] {
		return nil, fmt.Errorf("raftkdb: New: namespace %q of this kdb store has a Store already (close it first): %w", ns, kdb.ErrInvalid)
	}
	s := &Store{db: db, ns: n, name: ns, tree: ns + "/" + logIndex}
	if err := s.loadBounds(); err != nil {
		return nil, err
	}
	if claims.m == nil {
		claims.m = map[claim]bool{}
	}
	claims.m[c] = true
	return s, nil
}

// claims holds the namespaces that have an open Store, per kdb store
// (New's check; Close releases). A Store never closed keeps its entry, and
// so its kdb.DB, for the life of the process.
var claims struct {
	sync.Mutex
	m map[claim]bool
}

type claim struct {
	db *kdb.DB
	ns string
}

// DB returns the kdb store.
func (s *Store) DB() *kdb.DB { return s.db }

// Close closes the kdb store if Open opened it; a Store made by New leaves
// it open. It waits for a StoreLogs, DeleteRange or Set in progress. From then
// on every method of the Store returns an error wrapping kdb.ErrClosed (a
// second Close too).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return fmt.Errorf("raftkdb: Close: %w", kdb.ErrClosed)
	}
	claims.Lock()
	delete(claims.m, claim{s.db, s.name})
	claims.Unlock()
	if s.owned {
		return s.db.Close()
	}
	return nil
}

// errClosed is the error of a call on a closed Store.
func errClosed(call string) error { return fmt.Errorf("raftkdb: %s: store %w", call, kdb.ErrClosed) }

func logKey(i uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), i) }

// loadBounds reads the first and last index from the tree.
func (s *Store) loadBounds() error {
	return s.ns.View(func(sn *kdb.Snapshot) error {
		it := sn.Iter(logIndex)
		if !it.First() {
			s.empty, s.first, s.last = true, 0, 0
			return it.Err()
		}
		first, err := keyIndex(it.Key())
		if err != nil {
			return err
		}
		if !it.Last() {
			if it.Err() != nil {
				return it.Err()
			}
			return fmt.Errorf("%w: log tree has a first key and no last", ErrCorrupt)
		}
		last, err := keyIndex(it.Key())
		if err != nil {
			return err
		}
		s.empty, s.first, s.last = false, first, last
		return nil
	})
}

func keyIndex(k []byte) (uint64, error) {
	if len(k) != 8 {
		return 0, fmt.Errorf("%w: log key of %d bytes, not 8", ErrCorrupt, len(k))
	}
	return binary.BigEndian.Uint64(k), nil
}

// dbUsable returns why the kdb store cannot be read: failed, or closed by
// its owner (a Store made by New shares it), which the bounds cached here
// would not show. An empty View says so (ErrClosed) at the cost of a View.
func (s *Store) dbUsable() error {
	if err := s.db.Err(); err != nil {
		return err
	}
	return s.db.View(func(*kdb.Snapshot) error { return nil })
}

// FirstIndex returns the first index written, 0 for none.
func (s *Store) FirstIndex() (uint64, error) {
	if err := s.dbUsable(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, errClosed("FirstIndex")
	}
	return s.first, nil
}

// LastIndex returns the last index written, 0 for none.
func (s *Store) LastIndex() (uint64, error) {
	if err := s.dbUsable(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, errClosed("LastIndex")
	}
	return s.last, nil
}

// GetLog reads the entry at index into log; raft.ErrLogNotFound if absent.
// A nil log is an error wrapping kdb.ErrInvalid.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	if s.closed.Load() {
		return errClosed("GetLog")
	}
	if log == nil {
		return fmt.Errorf("raftkdb: GetLog(%d): nil *raft.Log to read into: %w", index, kdb.ErrInvalid)
	}
	v, err := s.ns.Get(logIndex, logKey(index))
	if errors.Is(err, kdb.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if errors.Is(err, kdb.ErrCorrupt) {
		// Damage under the entry (its journal record, say): name the index,
		// and keep kdb's error (where on disk) for errors.Is and the text.
		return fmt.Errorf("%w: index %d: %w", ErrCorrupt, index, err)
	}
	if err != nil {
		return err
	}
	return decodeLog(v, index, log)
}

// MaxEntrySize returns the largest encoded log entry the store takes: kdb's
// MaxValueSize, or if smaller (a small Options.SegmentSize) db.MaxBatchSize
// less the bytes that name the entry in a kdb batch record (an entry is
// one kdb value record, or is inside the batch record when kdb keeps it
// inline, Options.ValueThreshold). The encoding adds at most 43 bytes to
// Data and Extensions (see doc.go, FORMAT).
func (s *Store) MaxEntrySize() int {
	// One put in a batch record: op kind, tree name and key with their
	// lengths, the value's length (see kdb's record format); 32 covers
	// the fixed part and every length's varint.
	return min(kdb.MaxValueSize, s.db.MaxBatchSize()-(32+len(s.tree)+8))
}

// StoreLog stores one entry; a nil one is an error wrapping kdb.ErrInvalid
// (see StoreLogs).
func (s *Store) StoreLog(log *raft.Log) error {
	return s.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores the entries atomically when they fit in one kdb batch
// (half of db.MaxBatchSize), else in transactions committed in order
// (Submit), so that a crash leaves a prefix of them. On return they are
// durable under the store's sync mode (SyncAlways: on disk).
//
// Every entry is checked against the store's limits before anything is
// written (MaxEntrySize): a call with an entry too large, or a nil entry,
// stores nothing and returns an error wrapping kdb.ErrInvalid. A call split in transactions
// that fails for another reason (the store failed or closed) may leave a
// prefix of its entries stored, which FirstIndex and LastIndex show (once
// the store is reopened, if it failed).
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		if s.closed.Load() {
			return errClosed("StoreLogs")
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return errClosed("StoreLogs")
	}
	limit := s.db.MaxBatchSize() / 2
	maxEntry := s.MaxEntrySize()
	for k, l := range logs {
		if l == nil {
			return fmt.Errorf("raftkdb: StoreLogs: entry %d of %d is nil: nothing stored: %w", k, len(logs), kdb.ErrInvalid)
		}
		if n := encodedSize(l); n > maxEntry {
			return fmt.Errorf("raftkdb: log entry %d encodes to %d bytes, over the store's MaxEntrySize %d: nothing stored: %w",
				l.Index, n, maxEntry, kdb.ErrInvalid)
		}
	}
	type kv struct{ k, v []byte }
	var chunks [][]kv
	var cur []kv
	size := 0
	lo, hi := logs[0].Index, logs[0].Index
	for _, l := range logs {
		n := encodedSize(l)
		if len(cur) > 0 && size+n+32 > limit {
			chunks, cur, size = append(chunks, cur), nil, 0
		}
		cur = append(cur, kv{logKey(l.Index), appendLog(make([]byte, 0, n), l)})
		size += n + 32
		lo, hi = min(lo, l.Index), max(hi, l.Index)
	}
	chunks = append(chunks, cur)
	if len(chunks) == 1 {
		// The common case: one atomic batch.
		b := s.ns.NewBatch()
		for _, e := range cur {
			b.Put(logIndex, e.k, e.v)
		}
		if err := s.db.Write(b); err != nil {
			return err
		}
	} else {
		var commits []*kdb.Commit
		var first error
		for _, ch := range chunks {
			c, err := s.ns.Submit(func(tx *kdb.Txn) error {
				for _, e := range ch {
					if err := tx.Put(logIndex, e.k, e.v); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				first = err
				break
			}
			commits = append(commits, c)
		}
		for _, c := range commits {
			if err := c.Wait(); err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			// A prefix may be stored: reread the bounds.
			if err := s.loadBounds(); err != nil {
				return errors.Join(first, err)
			}
			return first
		}
	}
	if s.empty {
		s.empty, s.first, s.last = false, lo, hi
	} else {
		s.first, s.last = min(s.first, lo), max(s.last, hi)
	}
	return nil
}

// DeleteRange removes the entries from min to max inclusive. Removing the
// whole log is one atomic drop of its tree; otherwise the keys in the range
// are deleted in batches of at most db.MaxBatchSize, ordered so that a crash
// part-way leaves the log contiguous: from the top down when the range
// reaches the last entry (a follower truncating a conflicting suffix), from
// the bottom up otherwise (compaction after a snapshot).
func (s *Store) DeleteRange(min, max uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return errClosed("DeleteRange")
	}
	if min > max {
		return nil
	}
	if s.empty || max < s.first || min > s.last {
		return nil
	}
	if min <= s.first && max >= s.last {
		b := s.ns.NewBatch()
		b.DropIndex(logIndex)
		if err := s.db.Write(b); err != nil {
			return err
		}
		s.empty, s.first, s.last = true, 0, 0
		return nil
	}
	// The indexes in the range, as runs of consecutive ones: one run for a
	// contiguous log, so what is held is a run per gap, not a key per entry.
	type run struct{ lo, hi uint64 }
	var runs []run
	err := s.ns.View(func(sn *kdb.Snapshot) error {
		it := sn.Iter(logIndex)
		for ok := it.Seek(logKey(min)); ok; ok = it.Next() {
			i, err := keyIndex(it.Key())
			if err != nil {
				return err
			}
			if i > max {
				break
			}
			if n := len(runs); n > 0 && runs[n-1].hi+1 == i {
				runs[n-1].hi = i
			} else {
				runs = append(runs, run{i, i})
			}
		}
		return it.Err()
	})
	if err != nil {
		return err
	}
	topDown := max >= s.last
	if topDown {
		slices.Reverse(runs)
	}
	per := s.db.MaxBatchSize() / (2 * (len(logIndex) + 8 + 32))
	for len(runs) > 0 {
		b := s.ns.NewBatch()
		for n := 0; n < per && len(runs) > 0; n++ {
			r := &runs[0]
			if topDown {
				b.Delete(logIndex, logKey(r.hi))
			} else {
				b.Delete(logIndex, logKey(r.lo))
			}
			if r.lo == r.hi {
				runs = runs[1:]
			} else if topDown {
				r.hi--
			} else {
				r.lo++
			}
		}
		if err := s.db.Write(b); err != nil {
			if lerr := s.loadBounds(); lerr != nil {
				return errors.Join(err, lerr)
			}
			return err
		}
	}
	return s.loadBounds()
}

func stableKey(k []byte) []byte { return append([]byte{stableVersion}, k...) }

// Set stores a stable key; durable on return under the sync mode.
func (s *Store) Set(key, val []byte) error {
	// Held across the write so that Close waits for it: a Set that passed
	// the closed check must not write after Close returned (a new Store on
	// the namespace may have set the term since).
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return errClosed("Set")
	}
	if len(key) > MaxStableKeySize {
		return fmt.Errorf("raftkdb: stable key of %d bytes, over %d: %w", len(key), MaxStableKeySize, kdb.ErrInvalid)
	}
	b := s.ns.NewBatch()
	b.Put(stableIndex, stableKey(key), append([]byte{stableVersion}, val...))
	return s.db.Write(b)
}

// Get returns the value of a stable key, or ErrKeyNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	if s.closed.Load() {
		return nil, errClosed("Get")
	}
	if len(key) > MaxStableKeySize {
		return nil, ErrKeyNotFound
	}
	v, err := s.ns.Get(stableIndex, stableKey(key))
	if errors.Is(err, kdb.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	if len(v) == 0 || v[0] != stableVersion {
		return nil, fmt.Errorf("%w: stable key %q: value of %d bytes without version byte %d", ErrCorrupt, key, len(v), stableVersion)
	}
	return v[1:], nil
}

// SetUint64 stores val as 8 big-endian bytes.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 reads a value SetUint64 stored, or ErrKeyNotFound.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: stable key %q holds %d bytes, not a uint64", ErrCorrupt, key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
