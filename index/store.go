package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/kdb-project/kdb/pagefile"
)

// Options configures a Store. The zero value is valid.
type Options struct {
	// Logger receives events that have no caller to report to.
	// Default: a logger that discards everything.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

func (o Options) validate() error { return nil }

// snapshot is a committed state of the index: what a View sees.
type snapshot struct {
	catalog pagefile.PageID // catalog tree root (0 = no trees)
	version uint64          // number of state-changing Updates committed since Open
}

// pendingFree lists pages that a committed Update replaced or dropped. They
// are visible to Views of versions below version and are given back to the
// page file once no such View is running.
type pendingFree struct {
	version uint64
	ids     []pagefile.PageID
}

// Store is the set of named B-trees of one page file.
//
// Invariants:
//   - Every page ID below the page file's PageCount is exactly one of: free
//     in the page file; reachable from mu.cur (catalog, trees, overflow
//     chains); the root page w.rootPage or a page of w.chain; or listed in
//     w.pending.
//   - A page listed in w.pending with version v is never written or freed
//     while a View with a version below v runs.
//   - Pages are modified only by the writer (holding wmu), and only pages
//     allocated by the running Update (copy-on-write), so a View's pages
//     never change under it.
//
// Lock order: ckMu -> wmu -> mu. A Store is safe for concurrent use.
type Store struct {
	pf   pager
	opts Options
	lim  limits

	ckMu sync.Mutex // serializes Checkpoint
	wmu  sync.Mutex // the writer lock: Update, Checkpoint's prepare, Check

	// w is guarded by wmu.
	w struct {
		rootPage pagefile.PageID   // the index root page; 0 until the first checkpoint
		chain    []pagefile.PageID // pages of the pending-free chain of the last checkpoint
		pending  []pendingFree     // ordered by version
		buf      []byte            // scratch of payload size for encoding pages
		commits  uint64
		rollback uint64
		splits   uint64 // node splits (committed or not)
		lmerges  uint64 // leaf merges
		bmerges  uint64 // branch merges
	}

	mu struct {
		sync.Mutex
		cur     snapshot
		readers map[uint64]int // snapshot version -> running Views
	}

	// cat caches the catalog entries Views looked up, for one snapshot
	// version: see Tx.lookupTree.
	cat atomic.Pointer[catalogCache]
}

// catalogCache holds the catalog entries of one snapshot version: a tree
// name's root and key count, or absent. (Not keyed by the catalog's root
// page: a page freed can come back as a later catalog's root.)
type catalogCache struct {
	version uint64
	mu      sync.RWMutex
	m       map[string]catalogEntry
}

type catalogEntry struct {
	root   pagefile.PageID
	count  uint64
	absent bool
}

// Open opens the index stored in pf, whose metadata Root names the index
// root page (0 for a new, empty index). Open neither writes nor frees pages:
// pages that were pending free at the last checkpoint are given back by the
// first Update or Checkpoint.
func Open(pf *pagefile.File, opts Options) (*Store, error) {
	return open(filePager{pf}, opts)
}

func open(p pager, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	payload := p.PayloadSize()
	if payload < minPayload || payload > math.MaxUint16 {
		return nil, fmt.Errorf("%w: payload of %d bytes (need %d..%d)", ErrPageSize, payload, minPayload, math.MaxUint16)
	}
	s := &Store{pf: p, opts: opts, lim: newLimits(payload)}
	s.w.buf = make([]byte, payload)
	s.mu.readers = make(map[uint64]int)
	root := p.Meta().Root
	if root == 0 {
		return s, nil
	}
	typ, b, err := p.Read(root)
	if err != nil {
		return nil, pageErr(root, err)
	}
	if typ != pageRoot {
		return nil, corruptf(root, "page type %d is not the index root page", typ)
	}
	if len(b) < rootSize {
		return nil, corruptf(root, "root page payload of %d bytes too short", len(b))
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[offRootMagic:]); m != rootMagic {
		return nil, corruptf(root, "root page magic %#x", m)
	}
	if v := le.Uint16(b[offRootVersion:]); v != FormatVersion {
		return nil, fmt.Errorf("%w: %s: index format version %d, want %d", ErrVersionMismatch, root, v, FormatVersion)
	}
	catalog := pagefile.PageID(le.Uint64(b[offRootCatalog:]))
	head := pagefile.PageID(le.Uint64(b[offRootPendingHead:]))
	cnt := le.Uint64(b[offRootPendingCount:])
	pc := uint64(p.PageCount())
	badID := func(id pagefile.PageID) bool { return id != 0 && (id < pagefile.FirstDataPage || uint64(id) >= pc) }
	if badID(catalog) || badID(head) || cnt > pc {
		return nil, corruptf(root, "root page fields (catalog %d, pending %d x %d) beyond page count %d", catalog, head, cnt, pc)
	}
	// Page IDs may straddle chain pages: gather the bytes, then decode.
	var list []byte
	err = s.walkChain(head, pagePending, cnt*8, func(id pagefile.PageID, data []byte) error {
		s.w.chain = append(s.w.chain, id)
		list = append(list, data...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	ids := make([]pagefile.PageID, 0, cnt)
	for off := 0; off+8 <= len(list); off += 8 {
		pid := pagefile.PageID(le.Uint64(list[off:]))
		if pid < pagefile.FirstDataPage || uint64(pid) >= pc {
			return nil, corruptf(head, "pending-free list entry %d: %s beyond page count %d", off/8, pid, pc)
		}
		ids = append(ids, pid)
	}
	s.w.rootPage = root
	if len(ids) > 0 {
		s.w.pending = []pendingFree{{version: 0, ids: ids}}
	}
	s.mu.cur = snapshot{catalog: catalog}
	return s, nil
}

// MaxKeySize returns the largest key (and tree name) the store accepts.
// It depends on the page size: 998 bytes for 4 KiB pages.
func (s *Store) MaxKeySize() int { return s.lim.maxKey }

// View runs fn in a read-only transaction. fn sees the state of the last
// Update committed before View began, for its whole duration, concurrently
// with other Views, with an Update and with a checkpoint's I/O. Values and
// keys returned inside fn are valid only until fn returns. If fn returns nil
// but an operation inside it failed (I/O, corruption; see Tx.Err), View
// returns that failure.
// Pin returns a read-only Tx of the current state, like a View's, valid
// until release is called (once); Version says which state it is, so that
// a caller can keep one across calls while nothing committed since (the
// root package's applier does, between checkpoints). The pages it can see
// are not freed until release.
func (s *Store) Pin() (tx *Tx, release func()) {
	s.mu.Lock()
	snap := s.mu.cur
	s.mu.readers[snap.version]++
	s.mu.Unlock()
	tx = &Tx{s: s, catalog: snap.catalog, version: snap.version}
	var once sync.Once
	return tx, func() {
		// Once: a second call would unpin another reader of the same
		// version, whose pages could then be freed under it.
		once.Do(func() {
			tx.closed = true
			s.mu.Lock()
			if s.mu.readers[snap.version]--; s.mu.readers[snap.version] == 0 {
				delete(s.mu.readers, snap.version)
			}
			s.mu.Unlock()
		})
	}
}

// Version returns the number of the state tx sees.
func (tx *Tx) Version() uint64 { return tx.version }

// Current returns the number of the state a View begun now would see.
func (s *Store) Current() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.cur.version
}

func (s *Store) View(fn func(tx *Tx) error) error {
	s.mu.Lock()
	snap := s.mu.cur
	s.mu.readers[snap.version]++
	s.mu.Unlock()
	tx := &Tx{s: s, catalog: snap.catalog, version: snap.version}
	defer func() {
		tx.closed = true
		s.mu.Lock()
		if s.mu.readers[snap.version]--; s.mu.readers[snap.version] == 0 {
			delete(s.mu.readers, snap.version)
		}
		s.mu.Unlock()
	}()
	err := fn(tx)
	if tx.err != nil {
		// A failed read (I/O, corruption) comes first: fn's own error may
		// only be its consequence (a tree that looked missing).
		return tx.err
	}
	return err
}

// Update runs fn in the one read-write transaction. If fn returns nil, its
// changes are committed: later Views see all of them. If fn returns an error
// (or panics), nothing of it is applied and Update returns that error.
// If an operation inside fn failed (I/O, corruption, allocation; see
// Tx.Err), the Update is rolled back and returns that failure even if fn
// returns nil, since the failed operation may be half done. Validation
// errors (ErrKeyTooLarge, ErrExists, ...) change nothing and do not fail it.
// Committed changes are in memory (the page file's dirty pages); they reach
// the disk at the next Checkpoint. Update, Checkpoint, Check and Stats must
// not be called from inside an Update's fn (they wait for the writer lock).
func (s *Store) Update(fn func(tx *Tx) error) (err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.releaseLocked(); err != nil {
		return err
	}
	tx := &Tx{
		s:        s,
		writable: true,
		catalog:  s.mu.cur.catalog,
		version:  s.mu.cur.version,
		dirty:    make(map[pagefile.PageID]*node),
		alloc:    make(map[pagefile.PageID]struct{}),
	}
	committed := false
	defer func() {
		if !committed {
			s.w.rollback++
			if rerr := tx.rollback(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		tx.closed = true
	}()
	ferr := fn(tx)
	if tx.err != nil {
		// An operation failed: its changes may be half done, and fn's own
		// error may only be its consequence.
		return tx.err
	}
	if ferr != nil {
		return ferr
	}
	if err := tx.commitLocked(); err != nil {
		return err
	}
	committed = true
	s.w.commits++
	return nil
}

// releaseLocked gives the page file back the pending pages that no running
// View can see.
//
// The caller must hold s.wmu.
func (s *Store) releaseLocked() error {
	if len(s.w.pending) == 0 {
		return nil
	}
	oldest := uint64(math.MaxUint64)
	s.mu.Lock()
	for v := range s.mu.readers {
		oldest = min(oldest, v)
	}
	s.mu.Unlock()
	for len(s.w.pending) > 0 && s.w.pending[0].version <= oldest {
		p := &s.w.pending[0]
		for len(p.ids) > 0 {
			if err := s.pf.Free(p.ids[0]); err != nil {
				return fmt.Errorf("index: free %s: %w", p.ids[0], err)
			}
			p.ids = p.ids[1:]
		}
		s.w.pending = s.w.pending[1:]
	}
	return nil
}

// Checkpoint writes the index root page (catalog root and the pages still
// pending free) and hands the page file's dirty pages to a checkpoint with
// u.Root set to that root page. It holds the writer lock only for
// pagefile.PrepareCheckpoint; the I/O of CommitCheckpoint runs without it.
// Checkpoints are serialized. On return the checkpoint is durable.
func (s *Store) Checkpoint(u pagefile.MetaUpdate) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	s.wmu.Lock()
	commit, err := s.prepareLocked(u)
	s.wmu.Unlock()
	if err != nil {
		return err
	}
	return commit()
}

// prepareLocked writes the root page and pending-free chain and prepares the
// page file's checkpoint.
//
// The caller must hold s.ckMu and s.wmu.
func (s *Store) prepareLocked(u pagefile.MetaUpdate) (func() error, error) {
	if err := s.releaseLocked(); err != nil {
		return nil, err
	}
	// The previous checkpoint's chain is durable and read by nobody: the new
	// checkpoint replaces it.
	for _, id := range s.w.chain {
		if err := s.pf.Free(id); err != nil {
			return nil, fmt.Errorf("index: free %s: %w", id, err)
		}
	}
	s.w.chain = nil
	var ids []byte
	for _, p := range s.w.pending {
		for _, id := range p.ids {
			ids = binary.LittleEndian.AppendUint64(ids, uint64(id))
		}
	}
	head, chain, err := s.writeChainLocked(pagePending, ids, s.pf.Allocate)
	s.w.chain = chain
	if err != nil {
		return nil, err
	}
	if s.w.rootPage == 0 {
		id, err := s.pf.Allocate()
		if err != nil {
			return nil, fmt.Errorf("index: allocate root page: %w", err)
		}
		s.w.rootPage = id
	}
	b := s.w.buf[:rootSize]
	clear(b)
	le := binary.LittleEndian
	le.PutUint32(b[offRootMagic:], rootMagic)
	le.PutUint16(b[offRootVersion:], FormatVersion)
	le.PutUint64(b[offRootCatalog:], uint64(s.mu.cur.catalog))
	le.PutUint64(b[offRootPendingHead:], uint64(head))
	le.PutUint64(b[offRootPendingCount:], uint64(len(ids)/8))
	if err := s.pf.Write(s.w.rootPage, pageRoot, b); err != nil {
		return nil, fmt.Errorf("index: write root page: %w", err)
	}
	u.Root = s.w.rootPage
	return s.pf.prepare(u)
}

// Stats are counters of a Store.
type Stats struct {
	Version      uint64 // committed state-changing Updates since Open
	Commits      uint64 // Updates committed
	Rollbacks    uint64 // Updates rolled back
	Readers      int    // Views running
	PendingPages int    // pages waiting for old Views before they are freed
	Splits       uint64 // node splits since Open (in committed and rolled back Updates)
	LeafMerges   uint64 // leaf merges since Open
	BranchMerges uint64 // branch merges since Open
}

// Stats returns the store's counters. It waits for a running Update.
func (s *Store) Stats() Stats {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	st := Stats{Commits: s.w.commits, Rollbacks: s.w.rollback, Splits: s.w.splits, LeafMerges: s.w.lmerges, BranchMerges: s.w.bmerges}
	for _, p := range s.w.pending {
		st.PendingPages += len(p.ids)
	}
	s.mu.Lock()
	st.Version = s.mu.cur.version
	for _, n := range s.mu.readers {
		st.Readers += n
	}
	s.mu.Unlock()
	return st
}

// pageErr wraps an error of pf.Read. A page that fails its checksum, or a
// page ID read from disk that lies outside the page file, is corruption.
func pageErr(id pagefile.PageID, err error) error {
	if errors.Is(err, pagefile.ErrCorrupt) || errors.Is(err, pagefile.ErrOutOfRange) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return fmt.Errorf("index: read %s: %w", id, err)
}
