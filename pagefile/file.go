package pagefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/kdb-project/kdb/vfs"
)

// File is an open page file: db.data with its dirty-page cache and free
// list, and the db.redo and db.free written at each checkpoint.
//
// Invariants:
//   - Every page in [FirstDataPage, mu.pageCount) is exactly one of: free
//     (on mu.free), allocated and not yet written (in mu.unwritten),
//     written (in mu.dirty, or clean on disk), or quarantined (in
//     mu.quarantine: a loaded free page not yet proven after the loaded
//     list lied, free or in use on disk; proof.go).
//   - mu.unproven is a subset of mu.free: loaded pages are proven free on
//     disk before they are handed out, written or freed.
//   - A page that is free and not yet checkpointed as free has a free stamp
//     in mu.dirty, so that the next checkpoint writes it with PageFree.
//   - mu.dirty entries are never mutated: Write stores a fresh copy, so a
//     snapshot of the map's pointers is a consistent batch.
//   - A page in the batch of a running commit stays in mu.dirty until its
//     in-place write is synced, so no reader reads it from the mapping
//     while it is being written.
//   - mu.dirtyImages is the number of mu.dirty entries with a payload (not
//     free stamps); mu.pinned lists the entries with a payload that left
//     mu.dirty while a prepared checkpoint not yet committed still holds
//     them (dirtyPage.pinGen > mu.commitGen). Their sum is HeldPages: the
//     page images the checkpoints keep in memory.
//   - Once mu.err is set, every mutation returns it. A failed write or
//     sync is never retried.
//
// Lock order: commitMu -> mu.
type File struct {
	fs       vfs.FS
	opts     Options
	dataName string
	redoName string
	freeName string
	pageSize int
	storeID  [16]byte
	data     vfs.File
	redo     vfs.File // nil when ReadOnly

	commitMu sync.Mutex // serializes CommitCheckpoint and Close
	// ckBuf is writeCheckpoint's buffer of encoded page images, kept from
	// one checkpoint to the next (under commitMu): a fresh megabyte per
	// checkpoint made the collector run more often for every writer.
	ckBuf []byte

	// dataSize is the size of db.data. Written only under commitMu (and
	// at Open).
	dataSize int64
	// dataUnsynced: Open found db.data equal to a complete db.redo but did
	// not sync it; the next commit syncs db.data before it overwrites
	// db.redo. Accessed only under commitMu (and at Open).
	dataUnsynced bool
	// roState: a ReadOnly handle's State of the store, read before Open
	// read anything (roStateOK: it could be read); see Changed.
	roState   State
	roStateOK bool
	// roCache: a ReadOnly handle's verified page copies (readSnapshotLocked).
	roCache struct {
		sync.Mutex
		m map[PageID][]byte
	}

	mu struct {
		sync.RWMutex
		meta        Meta   // the last completed checkpoint
		pageCount   PageID // exclusive upper bound of page IDs
		free        *freeList
		dirty       map[PageID]*dirtyPage
		dirtyImages int          // entries of dirty with a payload
		pinned      []*dirtyPage // images out of dirty, held by an uncommitted checkpoint
		unwritten   map[PageID]struct{}
		view        *view
		oldViews    []*view           // replaced mappings, unmapped at Close
		overlay     map[PageID][]byte // ReadOnly: redo page images not applied on disk
		err         error
		closed      bool
		prepGen     uint64 // generation of the last PrepareCheckpoint
		commitGen   uint64 // generation of the last committed Checkpoint
		redoDirSync bool   // db.redo was created and its directory entry is not yet synced

		// The proof of a free list loaded from db.free (proof.go):
		// unproven is the part of free loaded at Open and not yet proven
		// free on disk (nil: none); quarantine holds loaded pages out of
		// allocation after a lie, until the background proof gives them
		// back (nil: none). unproven is a subset of free; quarantine is
		// disjoint from free.
		unproven   *freeList
		quarantine *freeList
		proof      FreeListProof
		lieLog     []lieEvent // failed proofs to log once mu is released
	}

	proving   bool           // the background proof runs; guarded by mu
	proofDone sync.Cond      // broadcast when proving becomes false; L is &mu.RWMutex
	proofErr  error          // the read error that stopped the background proof; guarded by mu
	proofWG   sync.WaitGroup // the background proof
	proofStop atomic.Bool    // Close: stop the background proof
}

// dirtyPage is a page waiting for the next checkpoint. typ and payload are
// immutable.
type dirtyPage struct {
	typ     PageType
	payload []byte
	// pinGen is the generation of the last checkpoint prepared with this
	// page in its batch (0: none). Guarded by File.mu.
	pinGen uint64
}

// view is one read mapping of db.data (mm == nil: read with ReadAt).
//
// The mapping reaches past the end of the file (see mapSize), so that the
// file can grow under it without a new mapping (and without faulting every
// page in again); valid is how many of its bytes the file holds, and only
// those are ever read (reading past the end of the file would fault).
//
// verified is a bitmap of the pages of mm whose checksum passed, in chunks
// allocated on first use, so that mapping a large file costs O(1) here.
type view struct {
	mm       []byte
	valid    atomic.Int64
	verified []atomic.Pointer[verifyChunk]
}

// verifyChunkPages is the number of pages one bitmap chunk covers.
const verifyChunkPages = 1 << 15

type verifyChunk [verifyChunkPages / 64]atomic.Uint64

func newView(mm []byte, pageSize int) *view {
	n := len(mm) / pageSize
	return &view{mm: mm, verified: make([]atomic.Pointer[verifyChunk], (n+verifyChunkPages-1)/verifyChunkPages)}
}

func (v *view) chunk(id PageID, create bool) *verifyChunk {
	i := int(id / verifyChunkPages)
	if i >= len(v.verified) {
		return nil
	}
	c := v.verified[i].Load()
	if c == nil && create {
		if v.verified[i].CompareAndSwap(nil, new(verifyChunk)) {
			return v.verified[i].Load()
		}
		c = v.verified[i].Load()
	}
	return c
}

func (v *view) isVerified(id PageID) bool {
	c := v.chunk(id, false)
	return c != nil && c[id%verifyChunkPages/64].Load()&(1<<(id%64)) != 0
}

func (v *view) setVerified(id PageID) {
	if c := v.chunk(id, true); c != nil {
		c[id%verifyChunkPages/64].Or(1 << (id % 64))
	}
}

func (v *view) clearVerified(id PageID) {
	if c := v.chunk(id, false); c != nil {
		c[id%verifyChunkPages/64].And(^uint64(1 << (id % 64)))
	}
}

// Open opens the store in dir, creating it if dir holds no db.data (unless
// ReadOnly), and recovers the newest whole checkpoint: the newest intact
// meta slot, completed by a complete db.redo at least as new; the free list
// from db.free when it is intact and its store ID, checkpoint ID and page
// count match the meta, else from a scan of every page header. The Report
// says which path was taken and why. Open does not checkpoint; when it
// applies db.redo, db.data is synced before Open returns.
func Open(dir string, opts Options) (*File, *Report, error) {
	return open(dir, opts, false)
}

// open is Open; noFreeList (read-only tools) skips loading the free list.
func open(dir string, opts Options, noFreeList bool) (*File, *Report, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, nil, err
	}
	o := opener{
		f: &File{
			fs:       opts.FS,
			opts:     opts,
			dataName: filepath.Join(dir, dataFileName),
			redoName: filepath.Join(dir, redoFileName),
			freeName: filepath.Join(dir, freeFileName),
		},
		dir:        dir,
		rep:        &Report{},
		noFreeList: noFreeList,
	}
	o.f.proofDone.L = &o.f.mu.RWMutex
	if err := o.open(); err != nil {
		o.f.closeFiles()
		if opts.ReadOnly {
			err = o.f.staleOr(err)
		}
		return nil, nil, err
	}
	return o.f, o.rep, nil
}

// PageSize returns the page size in bytes.
func (f *File) PageSize() int { return f.pageSize }

// StoreID returns the store's random ID (db.data's header): db.free and
// db.redo carry it, and so does every journal segment (journal.Options.StoreID).
func (f *File) StoreID() [16]byte { return f.storeID }

// PayloadSize returns the largest payload a page holds.
func (f *File) PayloadSize() int { return f.pageSize - pageHeaderSize }

// PageCount returns the current exclusive upper bound of page IDs; it grows
// with allocation.
func (f *File) PageCount() PageID {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.pageCount
}

// Meta returns the meta of the last completed checkpoint (or of the one
// opened).
func (f *File) Meta() Meta {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m := f.mu.meta
	m.App = bytes.Clone(m.App)
	return m
}

// FreeCount returns the number of free pages.
func (f *File) FreeCount() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.free.count()
}

// FreeRanges returns the free list as coalesced ranges sorted by Start.
func (f *File) FreeRanges() []Range {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.free.ranges()
}

// DirtyCount returns the number of pages waiting for the next checkpoint
// (written or freed since the last one).
func (f *File) DirtyCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.mu.dirty)
}

// HeldPages returns the number of page images the page file holds in
// memory for checkpoints: the dirty pages (written since the last
// checkpoint; free stamps carry no image and are not counted) plus the
// images a prepared, not yet committed checkpoint still holds after they
// were rewritten or freed. Its memory is about HeldPages()*PageSize bytes.
func (f *File) HeldPages() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.dirtyImages + len(f.mu.pinned)
}

// setDirtyLocked makes d the dirty entry of id and keeps the counts of held
// images.
//
// The caller must hold f.mu.
func (f *File) setDirtyLocked(id PageID, d *dirtyPage) {
	f.dropDirtyLocked(id)
	f.mu.dirty[id] = d
	if d.payload != nil {
		f.mu.dirtyImages++
	}
}

// dropDirtyLocked removes the dirty entry of id, if any; an image that an
// uncommitted checkpoint still holds moves to mu.pinned.
//
// The caller must hold f.mu.
func (f *File) dropDirtyLocked(id PageID) {
	old := f.mu.dirty[id]
	if old == nil {
		return
	}
	delete(f.mu.dirty, id)
	if old.payload != nil {
		f.mu.dirtyImages--
		if old.pinGen > f.mu.commitGen {
			f.mu.pinned = append(f.mu.pinned, old)
		}
	}
}

// Err returns the sticky failure of the handle, wrapping ErrFailed, or nil.
func (f *File) Err() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.mu.err
}

// Read returns the type and payload of page id. It is safe for concurrent
// use with other reads, with mutations and with a running commit.
//
// The payload is read-only. It stays valid and unchanged until the caller
// itself writes or frees id (or closes the File): Write never mutates a
// returned slice. A clean page is returned as a slice of the mapping, with
// no copy; its checksum is verified on the first read after each
// (re)mapping or rewrite. A damaged page gives ErrCorrupt naming the page
// and its offset. A page freed since the last checkpoint reads as PageFree
// with no payload.
func (f *File) Read(id PageID) (PageType, []byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.mu.closed {
		return 0, nil, ErrClosed
	}
	if id < FirstDataPage || id >= f.mu.pageCount {
		return 0, nil, fmt.Errorf("%w: read %v: outside [%d, %d)", ErrOutOfRange, id, FirstDataPage, f.mu.pageCount)
	}
	if _, ok := f.mu.unwritten[id]; ok {
		return 0, nil, fmt.Errorf("%w: read %v: allocated but never written", ErrOutOfRange, id)
	}
	if d := f.mu.dirty[id]; d != nil {
		return d.typ, d.payload, nil
	}
	if img := f.mu.overlay[id]; img != nil {
		plen := int(binary.LittleEndian.Uint32(img[pgPayloadLen:]))
		return PageType(img[pgType]), img[pageHeaderSize : pageHeaderSize+plen : pageHeaderSize+plen], nil
	}
	if f.opts.ReadOnly {
		return f.readSnapshotLocked(id)
	}
	ps := int64(f.pageSize)
	off := int64(id) * ps
	v := f.mu.view
	if off+ps <= v.valid.Load() {
		b := v.mm[off : off+ps : off+ps]
		if !v.isVerified(id) {
			if _, err := decodePage(b, id, f.dataName, off); err != nil {
				return 0, nil, err
			}
			v.setVerified(id)
		}
		plen := int(binary.LittleEndian.Uint32(b[pgPayloadLen:]))
		return PageType(b[pgType]), b[pageHeaderSize : pageHeaderSize+plen : pageHeaderSize+plen], nil
	}
	b := make([]byte, ps)
	if err := readFull(f.data, b, off); err != nil {
		return 0, nil, fmt.Errorf("%w: %s@%d: %v: %w", ErrCorrupt, f.dataName, off, id, err)
	}
	h, err := decodePage(b, id, f.dataName, off)
	if err != nil {
		return 0, nil, err
	}
	return h.typ, b[pageHeaderSize : pageHeaderSize+h.payloadLen : pageHeaderSize+h.payloadLen], nil
}

// readFull reads len(b) bytes at off; a short read is io.ErrUnexpectedEOF.
func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// mutableLocked returns why the handle refuses changes to pages in memory
// (Write, Allocate, Free), or nil. A ReadOnly handle takes them: they stay
// in memory, since it refuses checkpoints.
//
// The caller must hold f.mu.
func (f *File) mutableLocked() error {
	switch {
	case f.mu.closed:
		return ErrClosed
	case f.mu.err != nil:
		return f.mu.err
	}
	return nil
}

// writableLocked returns why the handle refuses to write to its files
// (checkpoints), or nil.
//
// The caller must hold f.mu.
func (f *File) writableLocked() error {
	switch {
	case f.mu.closed:
		return ErrClosed
	case f.mu.err != nil:
		return f.mu.err
	case f.opts.ReadOnly:
		return ErrReadOnly
	}
	return nil
}

// Write sets page id's type and payload in the dirty cache (a copy). The
// page must be allocated (not free). typ must be neither 0 nor PageFree and
// len(payload) <= PayloadSize. Nothing reaches disk before the next
// checkpoint.
func (f *File) Write(id PageID, typ PageType, payload []byte) error {
	if typ == 0 || typ == PageFree {
		return fmt.Errorf("pagefile: write %v: invalid page type %d", id, typ)
	}
	if len(payload) > f.PayloadSize() {
		return fmt.Errorf("%w: write %v: payload %d bytes > %d", ErrOutOfRange, id, len(payload), f.PayloadSize())
	}
	// A fresh copy, capacity capped so that an append by a reader cannot
	// reach shared bytes.
	p := make([]byte, len(payload))
	copy(p, payload)
	d := &dirtyPage{typ: typ, payload: p[:len(p):len(p)]}
	f.mu.Lock()
	defer f.unlockAndLog()
	if err := f.mutableLocked(); err != nil {
		return err
	}
	if id < FirstDataPage || id >= f.mu.pageCount {
		return fmt.Errorf("%w: write %v: outside [%d, %d)", ErrOutOfRange, id, FirstDataPage, f.mu.pageCount)
	}
	if err := f.claimLocked(id); err != nil {
		return err
	}
	if f.mu.free.contains(id) {
		return fmt.Errorf("pagefile: write %v: the page is free", id)
	}
	f.setDirtyLocked(id, d)
	delete(f.mu.unwritten, id)
	return nil
}

// Allocate returns a page for the caller to Write before the next
// checkpoint: the lowest free page, else a new page at the end.
//
// A page of a free list loaded from db.free is proven free on disk first
// (proof.go); one that is not is never handed out.
func (f *File) Allocate() (PageID, error) {
	f.mu.Lock()
	defer f.unlockAndLog()
	if err := f.mutableLocked(); err != nil {
		return 0, err
	}
	var id PageID
	for {
		r, ok := f.mu.free.t.Min()
		if !ok {
			if err := f.growLocked(1); err != nil {
				return 0, err
			}
			id = f.mu.pageCount
			f.mu.pageCount++
			break
		}
		ok, err := f.proveLocked(Range{Start: r.Start, Len: 1})
		if err != nil {
			return 0, err
		}
		if ok {
			id, _ = f.mu.free.allocate() // r.Start
			break
		}
	}
	f.mu.unwritten[id] = struct{}{}
	return id, nil
}

// AllocateRun returns the first of n contiguous pages, all to be written
// before the next checkpoint: the lowest free run of n pages, else a run at
// the end of the file (absorbing a free range that ends there).
func (f *File) AllocateRun(n int) (PageID, error) {
	if n < 1 {
		return 0, fmt.Errorf("pagefile: allocate run of %d pages", n)
	}
	f.mu.Lock()
	defer f.unlockAndLog()
	if err := f.mutableLocked(); err != nil {
		return 0, err
	}
	var first PageID
	for {
		if r, ok := f.mu.free.findRun(uint64(n)); ok {
			if ok, err := f.proveLocked(Range{Start: r.Start, Len: uint64(n)}); err != nil {
				return 0, err
			} else if !ok {
				continue
			}
			first, _ = f.mu.free.allocateRun(uint64(n)) // r.Start
			break
		}
		if err := f.growLocked(uint64(n)); err != nil {
			return 0, err
		}
		first = f.mu.pageCount
		if tail, ok := f.mu.free.tail(f.mu.pageCount); ok {
			if ok, err := f.proveLocked(tail); err != nil {
				return 0, err
			} else if !ok {
				continue
			}
			f.mu.free.remove(tail)
			first = tail.Start
		}
		f.mu.pageCount = first + PageID(n)
		break
	}
	for id := first; id < first+PageID(n); id++ {
		f.mu.unwritten[id] = struct{}{}
	}
	return first, nil
}

// growLocked checks that n more pages fit the largest page count.
//
// The caller must hold f.mu.
func (f *File) growLocked(n uint64) error {
	if uint64(f.mu.pageCount)+n > maxPageCount(f.pageSize) {
		return fmt.Errorf("pagefile: page count %d + %d exceeds the maximum", uint64(f.mu.pageCount), n)
	}
	return nil
}

// Free returns page id to the free list; the next checkpoint stamps it
// PageFree. Freeing a free page is ErrDoubleFree.
func (f *File) Free(id PageID) error {
	f.mu.Lock()
	defer f.unlockAndLog()
	if err := f.mutableLocked(); err != nil {
		return err
	}
	if id < FirstDataPage || id >= f.mu.pageCount {
		return fmt.Errorf("%w: free %v: outside [%d, %d)", ErrOutOfRange, id, FirstDataPage, f.mu.pageCount)
	}
	// A loaded page that is not free on disk was a lie.
	if err := f.claimLocked(id); err != nil {
		return err
	}
	if err := f.mu.free.free(id); err != nil {
		return err
	}
	f.setDirtyLocked(id, &dirtyPage{typ: PageFree})
	delete(f.mu.unwritten, id)
	return nil
}

// ScanPages calls fn for every page in [FirstDataPage, PageCount) in order,
// with its type as Read sees it (dirty pages included) or the error reading
// or verifying it. It stops at the first error fn returns and returns it.
func (f *File) ScanPages(fn func(id PageID, typ PageType, err error) error) error {
	n := f.PageCount()
	for id := FirstDataPage; id < n; id++ {
		typ, _, err := f.Read(id)
		if errors.Is(err, ErrClosed) {
			return err
		}
		if err := fn(id, typ, err); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the files and mappings. It does not checkpoint: pages
// dirtied since the last checkpoint are dropped. It waits for a running
// commit. Slices returned by Read become invalid.
func (f *File) Close() error {
	f.stopProof()
	f.commitMu.Lock()
	defer f.commitMu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return ErrClosed
	}
	f.mu.closed = true
	var errs []error
	for _, v := range append(f.mu.oldViews, f.mu.view) {
		if v != nil && v.mm != nil {
			errs = append(errs, f.data.Munmap(v.mm))
		}
	}
	f.mu.oldViews, f.mu.view = nil, nil
	errs = append(errs, f.closeFiles())
	return errors.Join(errs...)
}

// closeFiles closes db.data and db.redo.
func (f *File) closeFiles() error {
	var errs []error
	if f.data != nil {
		errs = append(errs, f.data.Close())
		f.data = nil
	}
	if f.redo != nil {
		errs = append(errs, f.redo.Close())
		f.redo = nil
	}
	return errors.Join(errs...)
}

// failLocked makes err the sticky failure of the handle.
//
// The caller must hold f.mu.
func (f *File) failLocked(err error) error {
	if f.mu.err == nil {
		f.mu.err = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return f.mu.err
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
